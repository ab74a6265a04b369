"""The Liftbridge low-level helpers against the guide (pure: no server)."""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import math
import zlib

import pytest

from jssync.liftbridge import (
    Ack,
    AckPolicy,
    OutgoingMessage,
    PartitionByKey,
    new_message,
    new_nats_message,
    unmarshal_ack,
    unmarshal_message,
)


def test_new_message_is_the_lift_cookie_and_the_message_protobuf():
    # Message protobuf: key=2, value=3 (bytes), headers=7 (map entry: key=1, value=2), ackInbox=8,
    # correlationId=9 (strings), ackPolicy=10 (enum; LEADER=0 is the default and left out)
    assert new_message(b"v", key=b"k") == b"LIFT" + b"\x12\x01k" + b"\x1a\x01v"
    assert new_message(b"") == b"LIFT"
    data = new_message(b"hi", headers={"h": b"\xff"}, ack_inbox="in", correlation_id="c.1",
                       ack_policy=AckPolicy.ALL)
    assert data == (b"LIFT" + b"\x1a\x02hi" + b"\x3a\x06" + b"\x0a\x01h\x12\x01\xff" + b"\x42\x02in"
                    + b"\x4a\x03c.1" + b"\x50\x01")


def test_unmarshal_message_round_trips_and_says_what_is_not_a_message():
    data = new_message(b"hello", key=b"\x00k", headers={"bin": b"\x00\xff", "s": "text"}, ack_inbox="a.b",
                       correlation_id="any string\r\n", ack_policy="NONE")
    m, ok = unmarshal_message(data)
    assert ok and m is not None
    assert (m.value, m.key, m.ack_inbox, m.correlation_id, m.ack_policy) == (
        b"hello", b"\x00k", "a.b", "any string\r\n", AckPolicy.NONE)
    assert m.headers == {"bin": b"\x00\xff", "s": b"text"} and m.offset == 0 and m.timestamp is None
    for not_a_message in (b"", b"hello", b"LIF", b"LIFT\xff", b"LIFT\x12\x05ab", b'{"stream":"s","seq":1}'):
        assert unmarshal_message(not_a_message) == (None, False)


def test_new_message_refuses_the_old_subject_first_call():
    with pytest.raises(TypeError, match="new_nats_message"):
        new_message("foo", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="correlation_id"):
        new_message(b"v", correlation_id=5)  # type: ignore[arg-type]


def test_new_nats_message_replies_to_exactly_the_ack_inbox():
    m = new_nats_message("foo", b"v", ack_inbox="my.inbox", correlation_id="a.b", partition=2,
                         headers={"bin": b"\xff"})
    assert m.subject == "foo.2" and m.reply == "my.inbox"
    assert m.headers["Lift-Correlation-Id"] == "a.b" and m.headers["Lift-B64-bin"] == "/w=="
    assert new_nats_message("foo", b"", ack_inbox="i", ack_policy=AckPolicy.NONE).reply is None


def test_unmarshal_ack_carries_the_correlation_id():
    from jssync.liftbridge.codec import forwarded_ack

    ack = Ack(stream="s", partition=1, partition_subject="foo.1", msg_subject="foo", offset=4, key=b"k",
              ack_inbox="in", correlation_id="x.y z", ack_policy=AckPolicy.ALL,
              commit_timestamp=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), jetstream_stream="s-1", sequence=5)
    assert unmarshal_ack(forwarded_ack(ack)) == ack
    bare = unmarshal_ack(json.dumps({"stream": "s-1", "seq": 5}).encode(), ack_inbox="in")
    assert (bare.correlation_id, bare.ack_inbox, bare.partition, bare.offset) == (None, "in", 1, 4)


def test_partition_by_key_is_the_unsigned_crc_not_the_go_int32_cast():
    class _Meta:
        def partition_counts_for_subject(self, subject):
            return {"s": 3}

    crc = zlib.crc32(b"key-3")
    go = int(math.fmod(ctypes.c_int32(crc).value, 3))  # Go: int32(crc) % 3 (truncated remainder)
    assert go == -2  # negative: the guide's Publish would send it to partition 0
    assert PartitionByKey().partition(OutgoingMessage("foo", b"", key=b"key-3"), _Meta()) == crc % 3 == 2
