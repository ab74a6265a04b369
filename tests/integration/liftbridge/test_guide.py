"""The Liftbridge client against the guide's letter, on a real nats-server."""

from __future__ import annotations

import threading
import time
import zlib

import pytest

import jssync
from jssync.liftbridge import (
    AckPolicy,
    Client,
    Message,
    NoSuchPartitionError,
    PartitionByKey,
    PartitionByRoundRobin,
    StartPosition,
    new_message,
    unmarshal_ack,
    unmarshal_message,
)
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client(nc):
    c = Client(connection=nc, timeout=5.0 * FACTOR)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def lb(client, unique):
    """A fresh 3-partition memory stream: (client, subject, name); deleted afterwards."""
    subject, name = f"ls{unique}", f"LS{unique}"
    client.create_stream(subject, name, partitions=3, storage="memory")
    try:
        yield client, subject, name
    finally:
        try:
            client.delete_stream(name)
        except NoSuchPartitionError:
            pass


def _drain(sub, n, timeout=5.0):
    return [sub.next(timeout * FACTOR) for _ in range(n)]


# -- 1. the user's Nats-Msg-Id is JetStream's dedup key ------------------------------------------


def test_publish_keeps_the_users_msg_id(lb):
    c, subject, name = lb
    a1 = c.publish(subject, b"v", headers={"Nats-Msg-Id": "order-1"}, to_partition=1)
    a2 = c.publish(subject, b"v", headers={"Nats-Msg-Id": "order-1"}, to_partition=1)
    assert a1 is not None and a2 is not None
    assert not a1.duplicate and a2.duplicate and a2.offset == a1.offset == 0
    assert c.fetch_metadata().get_stream(name).get_partition(1).messages == 1
    with c.subscribe(name, partition=1, start_at=StartPosition.EARLIEST) as sub:
        (m,) = _drain(sub, 1)
    assert m.headers == {"Nats-Msg-Id": b"order-1"}
    # without a user id each publish gets its own
    b1 = c.publish(subject, b"v", to_partition=2)
    b2 = c.publish(subject, b"v", to_partition=2)
    assert (b1.offset, b2.offset, b2.duplicate) == (0, 1, False)
    with pytest.raises(jssync.BadHeaderError, match="Nats-Msg-Id"):
        c.publish(subject, b"v", headers={"Nats-Msg-Id": b"\xff"})


def test_a_users_msg_id_like_the_clients_own_is_read_back(lb, js):
    c, subject, name = lb
    own_like = "lift-" + "0" * 32
    c.publish(subject, b"a", headers={"Nats-Msg-Id": "lift-order-7"}, to_partition=1)
    c.publish(subject, b"b", headers={"Nats-Msg-Id": own_like}, to_partition=1)
    c.publish(subject, b"c", to_partition=1)  # the client's own id: not a user header
    # a message as clients before the marker header wrote it: the old id form is still dropped
    js.publish(f"{subject}.1", b"d", headers={"Lift-Ack-Policy": "LEADER", "Nats-Msg-Id": "lift-" + "a" * 32})
    with c.subscribe(name, partition=1, start_at=StartPosition.EARLIEST) as sub:
        ms = _drain(sub, 4)
    assert [m.headers for m in ms] == [{"Nats-Msg-Id": b"lift-order-7"}, {"Nats-Msg-Id": own_like.encode()},
                                       {}, {}]


# -- 2. the ack goes to exactly the ack inbox, the correlation id in its body ----------------------


def test_ack_inbox_gets_the_ack_on_exactly_that_subject(nc, lb):
    c, subject, name = lb
    inbox = f"acks{subject}.in"
    acks = nc.subscribe(inbox)
    try:
        for cid in ("a.b c", "line\r\nbreak", " padded ", "", "é*>"):
            ack = c.publish(subject, b"v", ack_inbox=inbox, correlation_id=cid, to_partition=2)
            msg = acks.next_msg(2 * FACTOR)
            assert msg.subject == inbox
            got = unmarshal_ack(msg.data)
            assert got == ack and got.correlation_id == cid and got.ack_inbox == inbox
        with c.subscribe(name, partition=2, start_at=StartPosition.EARLIEST) as sub:
            stored = [m.correlation_id for m in _drain(sub, 5)]
        assert stored == ["a.b c", "line\r\nbreak", " padded ", "", "é*>"]
    finally:
        acks.unsubscribe()


# -- 3. round robin: counters per subject per client, however the option is spelled ----------------


def test_round_robin_written_per_call_cycles(lb, nats_server, unique):
    c, subject, name = lb
    per_call = [c.publish(subject, b"x", partition_by=PartitionByRoundRobin()).partition for _ in range(4)]
    assert per_call == [0, 1, 2, 0]
    as_flag = [c.publish(subject, b"x", partition_by=PartitionByRoundRobin).partition for _ in range(2)]
    assert as_flag == [1, 2]
    shared = PartitionByRoundRobin()
    assert [c.publish(subject, b"x", partition_by=shared).partition for _ in range(3)] == [0, 1, 2]
    with Client(nats_server.url) as other:  # counters are per client
        assert other.publish(subject, b"x", partition_by=PartitionByRoundRobin()).partition == 0


# -- 4. PartitionByKey: unsigned CRC32 ---------------------------------------------------------------


def test_partition_by_key_uses_the_unsigned_crc(lb):
    c, subject, _ = lb
    crc = zlib.crc32(b"key-3")
    assert crc >= 1 << 31  # the guide's int32 cast makes it negative
    ack = c.publish(subject, b"x", key=b"key-3", partition_by=PartitionByKey())
    assert ack.partition == crc % 3 == 2


# -- 5. low-level helpers ------------------------------------------------------------------------------


def test_envelope_published_with_plain_nats_is_read_as_a_message(nc, js, lb):
    c, subject, name = lb
    data = new_message(b"hello", key=b"k1", headers={"bin": b"\xff\x00", "t": "x"}, correlation_id="1.2")
    assert data.startswith(b"LIFT")
    nc.publish(f"{subject}.1", data)
    nc.publish(f"{subject}.1", b"plain")
    with c.subscribe(name, partition=1, start_at=StartPosition.EARLIEST) as sub:
        m, plain = _drain(sub, 2)
    assert (m.offset, m.value, m.key, m.correlation_id) == (0, b"hello", b"k1", "1.2")
    assert m.headers == {"bin": b"\xff\x00", "t": b"x"} and m.ack_policy is AckPolicy.LEADER
    assert (plain.value, plain.key, plain.ack_policy) == (b"plain", None, None)
    cons = js.create_consumer(f"{name}-1", ack_policy="none")
    raw1, raw2 = cons.next(timeout=2 * FACTOR), cons.next(timeout=2 * FACTOR)
    got, ok = unmarshal_message(raw1)
    assert ok and isinstance(got, Message)
    assert (got.stream, got.partition, got.offset, got.value, got.key) == (name, 1, 0, b"hello", b"k1")
    assert unmarshal_message(raw2) == (None, False)  # a JetStream message that is not a Message


def test_unmarshal_message_says_no_for_a_plain_nats_message(nc, unique):
    sub = nc.subscribe(f"plain{unique}")
    try:
        nc.publish(f"plain{unique}", b"hello")
        assert unmarshal_message(sub.next_msg(2 * FACTOR)) == (None, False)
        nc.publish(f"plain{unique}", new_message(b"v", key=b"k"))
        m, ok = unmarshal_message(sub.next_msg(2 * FACTOR))
        assert ok and m is not None and (m.value, m.key) == (b"v", b"k")
    finally:
        sub.unsubscribe()


def test_binary_header_values_round_trip(lb):
    c, subject, name = lb
    hdrs = {"bin": b"\x00\xff\r\n", "pad": b" x ", "text": "plain", "empty": b""}
    c.publish(subject, b"v", headers=hdrs, to_partition=0)
    with c.subscribe(name, start_at=StartPosition.EARLIEST) as sub:
        (m,) = _drain(sub, 1)
    assert m.headers == {"bin": b"\x00\xff\r\n", "pad": b" x ", "text": b"plain", "empty": b""}


# -- 6. no timeout, or ack policy NONE: return once published -------------------------------------------


def test_publish_without_timeout_returns_once_published(nc, lb, unique):
    c, subject, name = lb
    hang = nc.subscribe(f"hang{unique}")  # takes the message, never answers
    try:
        t0 = time.monotonic()
        assert c.publish(f"hang{unique}", b"x", timeout=None) is None
        assert c.publish(f"hang{unique}", b"x", ack_policy=AckPolicy.NONE) is None
        assert time.monotonic() - t0 < 0.5 * FACTOR
        assert hang.next_msg(2 * FACTOR).data == b"x"
    finally:
        hang.unsubscribe()
    inbox = f"acks{unique}"
    acks = nc.subscribe(inbox)
    try:
        assert c.publish(subject, b"stored", timeout=None, to_partition=1) is None
        assert c.publish(subject, b"acked", timeout=None, to_partition=1, ack_inbox=inbox,
                         correlation_id="c-1") is None
        ack = unmarshal_ack(acks.next_msg(5 * FACTOR).data)  # the ack inbox still gets the ack
        assert (ack.correlation_id, ack.partition, ack.offset, ack.stream) == ("c-1", 1, 1, name)
    finally:
        acks.unsubscribe()
    with c.subscribe(name, partition=1, start_at=StartPosition.EARLIEST) as sub:
        assert [m.value for m in _drain(sub, 2)] == [b"stored", b"acked"]


# -- 7. a subject missing from the cache refreshes it before partitioning -----------------------------------


def test_partitioner_refreshes_metadata_for_a_missing_subject(nats_server, nc, unique):
    with Client(nats_server.url) as a, Client(connection=nc) as b:
        a.fetch_metadata()  # a fresh cache without the stream
        b.create_stream(f"mr{unique}", f"MR{unique}", partitions=4, storage="memory")
        try:
            expected = zlib.crc32(b"abc") % 4
            assert expected != 0
            ack = a.publish(f"mr{unique}", b"v", key=b"abc", partition_by=PartitionByKey())
            assert ack is not None and ack.partition == expected
        finally:
            b.delete_stream(f"MR{unique}")


# -- 8. a deleted partition stream ends its subscription promptly ------------------------------------------


def test_deleted_stream_ends_the_subscription_promptly(client, unique):
    subject, name = f"dl{unique}", f"DL{unique}"
    client.create_stream(subject, name, storage="memory")
    errors: list[BaseException] = []
    ended = threading.Event()

    def handler(msg, err):
        if err is not None:
            errors.append(err)
            ended.set()

    sub = client.subscribe(name, handler)  # default idle heartbeat: 5 s
    try:
        client.delete_stream(name)
        t0 = time.monotonic()
        assert ended.wait(3 * FACTOR), "the subscription did not end within 3 s of the deletion"
        assert time.monotonic() - t0 < 3 * FACTOR
        assert len(errors) == 1 and isinstance(errors[0], NoSuchPartitionError)
        assert sub.wait(2) and isinstance(sub.error, NoSuchPartitionError)
    finally:
        sub.close()


def test_deleted_stream_ends_the_iterator_promptly(client, unique):
    subject, name = f"di{unique}", f"DI{unique}"
    client.create_stream(subject, name, storage="memory")
    sub = client.subscribe(name)
    try:
        client.delete_stream(name)
        t0 = time.monotonic()
        with pytest.raises(NoSuchPartitionError):
            sub.next(10 * FACTOR)
        assert time.monotonic() - t0 < 3 * FACTOR
    finally:
        sub.close()


def test_a_deleted_consumer_still_resubscribes(js, lb):
    c, subject, name = lb
    with c.subscribe(name, partition=0, start_at=StartPosition.EARLIEST) as sub:
        c.publish(subject, b"0")
        assert _drain(sub, 1)[0].value == b"0"
        for cname in list(js.consumer_names(f"{name}-0")):
            js.delete_consumer(f"{name}-0", cname)
        wait_for(lambda: sub.resubscribes >= 1 or _poke(sub), 3, interval=0.05, what="a resubscribe")
        c.publish(subject, b"1")
        assert _drain(sub, 1)[0].value == b"1" and not sub.closed


def _poke(sub) -> bool:
    """Let the iterator's reader run for a moment (it resubscribes while it waits)."""
    try:
        sub.next(0.05)
    except jssync.TimeoutError:
        pass
    return sub.resubscribes >= 1
