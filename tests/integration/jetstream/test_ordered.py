"""Ordered consumers: every stream message once, in order, recovering by themselves (real server)."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

import jssync
from jssync.jetstream.ordered import OrderedConsumeContext, OrderedConsumer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def publish(js, stream, n, start=0, subject="m"):
    for i in range(start, start + n):
        js.publish_async(f"{stream.name}.{subject}", b"%d" % i)
    js.publish_async_completed(10)


def seqs(msgs):
    return [m.metadata.sequence.stream for m in msgs]


def test_fetch_in_order_across_fetches(js, stream):
    publish(js, stream, 25)
    oc = stream.ordered_consumer()
    assert isinstance(oc, OrderedConsumer) and oc.name is None
    got = []
    for _ in range(5):
        got += list(oc.fetch(5, expires=1))
    assert seqs(got) == list(range(1, 26))
    assert all(m._ack_none for m in got)
    name = oc.name
    publish(js, stream, 3, start=25)
    assert [m.data for m in oc.fetch(10, expires=0.5)] == [b"25", b"26", b"27"]
    assert oc.name == name  # the consumer is reused while in step


def test_fetch_no_wait_and_bytes(js, stream):
    publish(js, stream, 6)
    oc = stream.ordered_consumer()
    assert seqs(oc.fetch_no_wait(2)) == [1, 2]
    assert seqs(oc.fetch_bytes(100_000, expires=0.5)) == [3, 4, 5, 6]
    assert list(oc.fetch_no_wait(5)) == []


def test_next_and_timeout(js, stream):
    oc = stream.ordered_consumer()
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        oc.next(timeout=0.5)
    assert time.monotonic() - t0 < 2 * FACTOR
    publish(js, stream, 3)
    assert [oc.next(timeout=2).data for _ in range(3)] == [b"0", b"1", b"2"]


def test_abandoned_fetch_is_read_again(js, stream):
    publish(js, stream, 10)
    oc = stream.ordered_consumer()
    res = oc.fetch(10, expires=1)
    it = iter(res)
    assert [next(it).data for _ in range(3)] == [b"0", b"1", b"2"]
    # a new fetch ends the previous one; what it did not hand out comes again
    assert [m.data for m in oc.fetch(10, expires=0.5)] == [b"%d" % i for i in range(3, 10)]


def test_ordered_never_acks(nc, js, stream):
    publish(js, stream, 2)
    oc = stream.ordered_consumer()
    msgs = list(oc.fetch(2, expires=0.5))
    out = nc.stats["out_msgs"]
    for m in msgs:
        m.ack()
        m.nak()
    nc.flush()
    assert nc.stats["out_msgs"] == out
    info = js.consumer(stream.name, oc.name).cached_info
    assert info.config.ack_policy == jssync.AckPolicy.NONE and info.config.mem_storage
    assert info.config.num_replicas in (0, 1) and info.config.durable_name is None


def test_filters_and_start_options(js, stream):
    for i in range(6):
        js.publish(f"{stream.name}.{'a' if i % 2 else 'b'}", b"%d" % i)
    assert [m.data for m in stream.ordered_consumer(filter_subjects=f"{stream.name}.a").fetch(10, expires=0.5)] \
        == [b"1", b"3", b"5"]
    both = stream.ordered_consumer(filter_subjects=[f"{stream.name}.a", f"{stream.name}.b"])
    assert len(list(both.fetch(10, expires=0.5))) == 6
    assert seqs(stream.ordered_consumer(opt_start_seq=4).fetch(10, expires=0.5)) == [4, 5, 6]
    assert seqs(stream.ordered_consumer(deliver_policy="last").fetch(10, expires=0.5)) == [6]
    new = stream.ordered_consumer(deliver_policy="new")
    assert list(new.fetch_no_wait(10)) == []
    js.publish(f"{stream.name}.a", b"later")
    assert [m.data for m in new.fetch(10, expires=0.5)] == [b"later"]
    start = stream.get_msg(3).time
    assert seqs(stream.ordered_consumer(opt_start_time=start).fetch(3, expires=0.5))[0] <= 3
    hdr = stream.ordered_consumer(headers_only=True)
    m = hdr.next(timeout=2)
    assert m.data == b"" and m.headers and "Nats-Msg-Size" in m.headers


def test_options_validation(stream):
    with pytest.raises(ValueError, match="deliver_policy"):
        stream.ordered_consumer(deliver_policy="sometimes")
    with pytest.raises(ValueError, match="opt_start_seq"):
        stream.ordered_consumer(opt_start_seq=0)
    with pytest.raises(ValueError):
        stream.ordered_consumer(deliver_policy="new", opt_start_seq=3)
    with pytest.raises(ValueError, match="opt_start_seq"):
        stream.ordered_consumer(deliver_policy="by_start_sequence")
    with pytest.raises(TypeError):
        stream.ordered_consumer(opt_start_time="yesterday")
    with pytest.raises(jssync.BadSubjectError):
        stream.ordered_consumer(filter_subjects=["a b"])
    with pytest.raises(TypeError):
        stream.ordered_consumer(durable_name="X")
    with pytest.raises(ValueError, match="replay_policy"):
        stream.ordered_consumer(replay_policy="fast")
    assert stream.ordered_consumer(opt_start_time=dt.datetime.now(dt.UTC))


def test_consume_in_order_while_publishing(js, stream):
    publish(js, stream, 50)
    oc = stream.ordered_consumer()
    t = threading.Thread(target=publish, args=(js, stream, 150, 50))
    got = []
    with oc.consume(max_messages=20) as it:
        assert isinstance(it, OrderedConsumeContext)
        t.start()
        for m in it:
            got.append(m)
            if len(got) == 200:
                break
    t.join()
    assert seqs(got) == list(range(1, 201))
    assert [int(m.data) for m in got] == list(range(200))


def test_consume_callback(js, stream):
    publish(js, stream, 30)
    oc = stream.ordered_consumer()
    got = []
    cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream), max_messages=8)
    try:
        wait_for(lambda: len(got) == 30, what="30 messages")
    finally:
        cc.stop()
    cc.wait(5)
    assert got == list(range(1, 31))


def test_consume_recovers_when_its_consumer_is_deleted(js, stream):
    publish(js, stream, 10)
    oc = stream.ordered_consumer()
    got = []
    with oc.consume(max_messages=5, expires=2) as it:
        for m in it:
            got.append(m)
            if len(got) == 3:
                first = oc.name
                js.delete_consumer(stream.name, first)
                publish(js, stream, 10, start=10)
            if len(got) == 20:
                break
    assert seqs(got) == list(range(1, 21))
    assert it.resets == 1 and oc.name != first


def test_consume_recovers_from_a_gap(js, stream):
    publish(js, stream, 10)
    oc = stream.ordered_consumer()
    got = []
    with oc.consume(max_messages=1, expires=2) as it:
        for m in it:
            got.append(m)
            if len(got) == 2:
                # someone else pulls from the ordered consumer's own consumer: a gap in its sequence
                thief = js.consumer(stream.name, oc.name)
                stolen = list(thief.fetch(2, expires=1))
                assert stolen
            if len(got) == 10:
                break
    assert seqs(got) == list(range(1, 11))
    assert it.resets == 1


def test_stop_then_consume_again_resumes(js, stream):
    publish(js, stream, 40)
    oc = stream.ordered_consumer()
    got = []
    with oc.consume(max_messages=20) as it:
        wait_for(lambda: it._q.qsize() >= 10, what="buffer filled")
        for m in it:
            got.append(m)
            if len(got) == 5:
                it.stop()
    assert seqs(got) == [1, 2, 3, 4, 5]
    with pytest.raises(jssync.JetStreamError):
        with oc.consume() as it2:
            oc.fetch(1)
    with oc.consume(max_messages=7) as it3:
        for m in it3:
            got.append(m)
            if len(got) == 40:
                break
    assert seqs(got) == list(range(1, 41))
    assert [m.data for m in oc.fetch(5, expires=0.5)] == []
    assert it2.closed


def test_drain_then_fetch_continues(js, stream):
    publish(js, stream, 30)
    oc = stream.ordered_consumer()
    got = []
    with oc.consume(max_messages=10) as it:
        for m in it:
            got.append(m)
            if len(got) == 2:
                it.drain()
    assert 2 <= len(got) <= 30
    got += list(oc.fetch(30, expires=0.5))
    assert seqs(got) == list(range(1, 31))


def test_stream_deleted_ends_consume(js, stream):
    oc = stream.ordered_consumer()
    with oc.consume(expires=2) as it:
        wait_for(lambda: js.consumer(stream.name, oc.name).info().num_waiting == 1, what="pull waiting")
        js.delete_stream(stream.name)
        with pytest.raises(jssync.StreamNotFoundError):
            it.next(timeout=10 * FACTOR)


def test_consume_max_bytes_counts_wire_header_size(nats_server, js, stream):
    """Ordered consume(max_bytes) counts a message's header block as it came over the wire.

    With a repeated header name (as other clients send) the parsed headers are shorter than
    the wire block: counted that way the pending bytes never fell to the threshold and
    consume waited for each pull request to expire (10 s) before it sent the next.
    """
    from tests.integration.jetstream.test_pull_accounting import raw_hpub

    hdr = b"NATS/1.0\r\nX-Dup: a\r\nX-Dup: bb\r\nX-Dup: ccc\r\n\r\n"
    raw_hpub(nats_server.port, f"{stream.name}.m", hdr, b"p" * 100, 300)
    oc = stream.ordered_consumer()
    with oc.consume(max_bytes=3000, expires=10) as it:
        got = [it.next(timeout=5 * FACTOR) for _ in range(300)]
        wait_for(lambda: it.pending_bytes <= 3000, what="pending bytes within max_bytes")
    assert seqs(got) == list(range(1, 301))


def test_stored_message_with_status_header_and_no_payload_is_delivered(js, stream):
    """A stored message with an empty payload and a ``Status`` header is a message, not a
    status: ordered fetch and ordered consume deliver it in its place, once, and the
    consume does not recreate its consumer over it (also when it is the last message)."""
    subj = f"{stream.name}.a"
    js.publish(subj, b"1")
    js.publish(subj, b"", headers={"Status": "100"})
    js.publish(subj, b"3")
    js.publish(subj, b"", headers={"Status": "408", "Description": "Request Timeout"})
    assert seqs(stream.ordered_consumer().fetch(10, expires=1)) == [1, 2, 3, 4]
    with stream.ordered_consumer().consume() as it:
        got = [it.next(timeout=5 * FACTOR) for _ in range(4)]
        assert it.resets == 0
    assert seqs(got) == [1, 2, 3, 4]
    assert got[1].data == b"" and got[1].headers["Status"] == "100"


def test_fetch_recreates_a_deleted_consumer_and_delivers_in_the_same_fetch(js, stream):
    """A fetch after the ordered consumer's server-side consumer was deleted recreates it and
    returns the next messages itself (not an empty, error-free batch that leaves them to the
    fetch after it)."""
    publish(js, stream, 5)
    oc = stream.ordered_consumer()
    assert seqs(oc.fetch(5, expires=10)) == [1, 2, 3, 4, 5]
    first = oc.name
    js.delete_consumer(stream.name, first)
    publish(js, stream, 5, start=5)
    t0 = time.monotonic()
    res = oc.fetch(5, expires=10)
    assert seqs(res) == [6, 7, 8, 9, 10]
    assert res.error is None
    assert time.monotonic() - t0 < 5 * FACTOR
    assert oc.name != first


def test_last_per_subject_without_a_filter_reads_every_subject(js, stream):
    """deliver_policy last_per_subject without filter_subjects filters on ``>`` (the server
    needs a filter for it): the latest message of each subject of the stream."""
    for subj, data in (("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"), ("b", b"b2")):
        js.publish(f"{stream.name}.{subj}", data)
    oc = stream.ordered_consumer(deliver_policy="last_per_subject")
    assert [m.data for m in oc.fetch(10, expires=1)] == [b"a2", b"c1", b"b2"]
    js.publish(f"{stream.name}.c", b"c2")
    assert oc.next(timeout=5).data == b"c2"
