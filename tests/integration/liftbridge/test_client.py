"""Partitioned streams (the Liftbridge client interface) against a real single nats-server."""

from __future__ import annotations

import datetime as dt
import threading
import time
import zlib

import pytest

import jssync
from jssync.liftbridge import (
    HDR_KEY,
    Ack,
    AckPolicy,
    Client,
    InvalidAckError,
    Message,
    Metadata,
    NoSuchPartitionError,
    NotSupportedError,
    OutgoingMessage,
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
    StartPosition,
    StreamExistsError,
    new_nats_message,
    partition_stream_name,
    partition_subject,
    unmarshal_ack,
    unmarshal_message,
)
from jssync.server import NatsServer
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
    subject, name = f"lb{unique}", f"LB{unique}"
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


# -- pure helpers (no server) -------------------------------------------------------------------


def test_partition_naming_and_subjects():
    assert partition_subject("foo", 0) == "foo"
    assert partition_subject("foo", 3) == "foo.3"
    assert partition_stream_name("foo-stream", 2) == "foo-stream-2"
    from jssync.liftbridge.codec import parse_partition_stream_name

    assert parse_partition_stream_name("foo-stream-12") == ("foo-stream", 12)
    assert parse_partition_stream_name("a-1-0") == ("a-1", 0)
    assert parse_partition_stream_name("ORDERS") is None
    assert parse_partition_stream_name("x-01") is None


def test_partitioners_follow_the_guide():
    class _Meta:
        def __init__(self, counts):
            self.counts = counts

        def partition_counts_for_subject(self, subject):
            return self.counts.get(subject, {})

    meta = _Meta({"foo": {"s": 5}})
    by_key = PartitionByKey()
    for key in (b"a", b"bb", b"\xff\x00", b"", None):
        m = OutgoingMessage(subject="foo", value=b"", key=key)
        assert by_key.partition(m, meta) == (zlib.crc32(key or b"") & 0xFFFFFFFF) % 5
    # no stream on the subject: partition 0
    assert by_key.partition(OutgoingMessage(subject="bar", value=b"", key=b"x"), meta) == 0
    rr = PartitionByRoundRobin()
    assert [rr.partition(OutgoingMessage("foo", b""), meta) for _ in range(7)] == [0, 1, 2, 3, 4, 0, 1]
    assert rr.partition(OutgoingMessage("bar", b""), meta) == 0
    assert isinstance(rr, Partitioner)


def test_round_robin_is_thread_safe():
    class _Meta:
        def partition_counts_for_subject(self, subject):
            return {"s": 4}

    rr = PartitionByRoundRobin()
    out: list[int] = []
    lock = threading.Lock()

    def work():
        mine = [rr.partition(OutgoingMessage("foo", b""), _Meta()) for _ in range(500)]
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(out.count(p) for p in range(4)) == [500, 500, 500, 500]


def test_new_nats_message_builds_headers_and_reply():
    m = new_nats_message("foo", b"v", key=b"\x00k", headers={"a": "1", "b": b"2"}, ack_inbox="acks",
                         correlation_id="c1", partition=2)
    assert m.subject == "foo.2" and m.data == b"v" and m.reply == "acks"
    assert m.headers["a"] == "1" and m.headers["b"] == "2"
    assert m.headers[HDR_KEY] == "AGs=" and m.headers["Lift-Ack-Inbox"] == "acks"
    assert m.headers["Lift-Correlation-Id"] == "c1" and m.headers["Lift-Ack-Policy"] == "LEADER"
    assert new_nats_message("foo", b"", ack_inbox="acks").reply == "acks"
    assert new_nats_message("foo", b"", ack_inbox="acks", ack_policy=AckPolicy.NONE).reply is None
    assert new_nats_message("foo", b"").reply is None
    assert new_nats_message("foo", b"", ack_inbox="acks", correlation_id="a.b").reply == "acks"
    with pytest.raises(jssync.BadHeaderError, match="reserved"):
        new_nats_message("foo", b"", headers={"Lift-Key": "x"})
    assert new_nats_message("foo", b"", headers={"h": b"\xff"}).headers["Lift-B64-h"] == "/w=="
    with pytest.raises(TypeError, match="value must be bytes"):
        new_nats_message("foo", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ack_policy"):
        new_nats_message("foo", b"", ack_policy="SOME")
    with pytest.raises(jssync.BadSubjectError):
        new_nats_message("foo.*", b"")


def test_unmarshal_ack_of_bytes():
    ack = unmarshal_ack(b'{"stream":"s-2","seq":7}')
    assert (ack.stream, ack.partition, ack.offset, ack.sequence, ack.jetstream_stream) == ("s", 2, 6, 7, "s-2")
    assert unmarshal_ack(b'{"stream":"ORDERS","seq":1,"duplicate":true}').duplicate
    with pytest.raises(InvalidAckError):
        unmarshal_ack(b"hello")
    with pytest.raises(InvalidAckError):
        unmarshal_ack(b'{"foo": 1}')
    with pytest.raises(jssync.APIError) as ei:
        unmarshal_ack(b'{"error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"}}')
    assert ei.value.err_code == 10071


def test_lean_ack_parse_agrees_with_the_full_parser():
    from jssync.base.jsack import parse_ack_subject
    from jssync.liftbridge.sub import _ack_numbers

    for reply in ("$JS.ACK.S-0.c1.1.42.7.1700000000123456789.3",
                  "$JS.ACK.dom.HASH.S-0.c1.1.42.7.1700000000123456789.3.rand",
                  "$JS.ACK._.HASH.S-0.c1.1.5.6.1700000000000000000.0"):
        meta = parse_ack_subject(reply)
        assert _ack_numbers(reply) == (meta.sequence.stream, meta.sequence.consumer, meta.timestamp)
    assert _ack_numbers("$JS.ACK.S.c.1.x.7.1.3") is None
    assert _ack_numbers("$JS.ACK.S.c.1.2.3.999999999999999999999999.0") == (2, 3, None)
    assert _ack_numbers("$JS.ACK.S.c.1") is None


def test_metadata_keeps_leaderless_partitions():
    from jssync.liftbridge.meta import build_streams, partition_from_info

    def item(p, leader):
        return {"config": {"name": f"S-{p}", "subjects": ["s" if p == 0 else f"s.{p}"], "num_replicas": 3,
                           "metadata": {"liftbridge.stream": "S", "liftbridge.subject": "s",
                                        "liftbridge.partition": str(p), "liftbridge.partitions": "3"}},
                "cluster": {"leader": leader, "replicas": [{"name": "b", "current": True},
                                                           {"name": "c", "current": False, "lag": 3}]},
                "state": {"messages": 2, "first_seq": 4, "last_seq": 5}}

    p1 = partition_from_info(item(1, "a"), None)
    assert p1 is not None and p1.replicas == ("a", "b", "c") and p1.isr == ("a", "b")
    assert (p1.first_offset, p1.newest_offset, p1.messages) == (3, 4, 2)
    streams = build_streams([item(0, "a"), item(2, "b")], None, [(p1, "s", 3)])
    s = streams["S"]
    assert sorted(s.partitions) == [0, 1, 2] and s.partition_count == 3 and s.replication_factor == 3
    assert partition_from_info({"config": {"name": "ORDERS"}}, None) is None


def test_resilient_retry(client):
    calls = []

    def flaky(deadline):
        calls.append(deadline.timeout)
        if len(calls) < 3:
            raise jssync.NoRespondersError("no responders")
        return "ok"

    from jssync.base.deadline import Deadline

    assert client._routing._retry("flaky", flaky, Deadline(5)) == "ok" and len(calls) == 3
    assert all(t <= client._routing._attempt_timeout for t in calls)

    def refused(deadline):
        calls.append(1)
        raise jssync.APIError(400, 10058, "bad request")

    calls.clear()
    with pytest.raises(jssync.APIError):
        client._routing._retry("refused", refused, Deadline(5))
    assert len(calls) == 1  # not retried

    def down(deadline):
        raise jssync.ServiceUnavailableError(503, None, "JetStream system temporarily unavailable")

    t = time.monotonic()
    with pytest.raises(jssync.TimeoutError, match="did not succeed within 0.3s"):
        client._routing._retry("down", down, Deadline(0.3))
    assert time.monotonic() - t < 1.0 * FACTOR


def test_start_position_validation(client, lb):
    c, _, name = lb
    with pytest.raises(ValueError, match="needs start_at_offset"):
        c.subscribe(name, start_at=StartPosition.OFFSET)
    with pytest.raises(ValueError, match="one start position"):
        c.subscribe(name, start_at_offset=1, start_at_time_delta=3)
    with pytest.raises(ValueError, match="conflicts"):
        c.subscribe(name, start_at=StartPosition.EARLIEST, start_at_offset=2)
    with pytest.raises(ValueError, match="timezone-aware"):
        c.subscribe(name, start_at_time=dt.datetime(2020, 1, 1))
    with pytest.raises(ValueError, match="start_at_offset"):
        c.subscribe(name, start_at_offset=-1)
    with pytest.raises(TypeError, match="start_at"):
        c.subscribe(name, start_at=1.5)
    with pytest.raises(ValueError, match="partition"):
        c.subscribe(name, partition=-1)
    with pytest.raises(TypeError, match="handler"):
        c.subscribe(name, "not callable")  # type: ignore[arg-type]


def test_start_positions_out_of_range_name_the_option(client, lb):
    c, _, name = lb
    for delta in (1e12, dt.timedelta(days=999_999_999), float("inf"), float("nan")):
        with pytest.raises(jssync.ValidationError, match="start_at_time_delta"):
            c.subscribe(name, start_at_time_delta=delta)
    with pytest.raises(jssync.ValidationError, match="start_at_offset"):
        c.subscribe(name, start_at_offset=2**64)


# -- CreateStream --------------------------------------------------------------------------------


def test_create_stream_makes_one_jetstream_stream_per_partition(client, js, unique):
    subject, name = f"cs{unique}", f"CS{unique}"
    info = client.create_stream(subject, name, partitions=3, storage="memory")
    try:
        assert info.name == name and info.subject == subject and info.partition_count == 3
        assert sorted(info.partitions) == [0, 1, 2]
        for p in range(3):
            s = js.stream(f"{name}-{p}").cached_info
            assert s.config.subjects == [subject if p == 0 else f"{subject}.{p}"]
            assert s.config.metadata["liftbridge.stream"] == name
            assert s.config.metadata["liftbridge.partition"] == str(p)
            assert s.config.metadata["liftbridge.partitions"] == "3"
            part = info.partitions[p]
            assert part.jetstream_stream == f"{name}-{p}" and part.subject == s.config.subjects[0]
            assert part.leader and part.replicas == (part.leader,) and part.isr == (part.leader,)
            assert part.newest_offset == -1 and part.messages == 0
    finally:
        client.delete_stream(name)
    assert not [n for n in js.stream_names() if n.startswith(name)]


def test_create_stream_exists(client, js, lb, unique):
    c, subject, name = lb
    with pytest.raises(StreamExistsError) as ei:
        c.create_stream(f"other{unique}", name)
    assert isinstance(ei.value, jssync.StreamNameInUseError) and ei.value.err_code == 10058
    # a JetStream stream holding one of the partitions' names counts too
    js.create_stream(name=f"X{unique}-1", subjects=[f"x{unique}"], storage="memory")
    try:
        with pytest.raises(StreamExistsError, match=f"X{unique}-1"):
            c.create_stream(f"y{unique}", f"X{unique}", partitions=2)
        assert not [n for n in js.stream_names() if n.startswith(f"X{unique}-0")]
    finally:
        js.delete_stream(f"X{unique}-1")


def test_create_stream_bad_input_sends_nothing(client, js, unique):
    before = set(js.stream_names())
    with pytest.raises(NotSupportedError, match="group='g'"):
        client.create_stream("s", f"G{unique}", group="g")
    with pytest.raises(ValueError, match="partitions"):
        client.create_stream("s", f"G{unique}", partitions=0)
    with pytest.raises(ValueError, match="replication_factor"):
        client.create_stream("s", f"G{unique}", replication_factor=6)
    with pytest.raises(ValueError, match="replication_factor"):
        client.create_stream("s", f"G{unique}", replication_factor=0)
    with pytest.raises(ValueError, match="'>'"):
        client.create_stream("s.>", f"G{unique}", partitions=2)
    with pytest.raises(ValueError, match="stream name"):
        client.create_stream("s", "bad.name")
    with pytest.raises(jssync.BadSubjectError):
        client.create_stream("bad subject", f"G{unique}")
    with pytest.raises(ValueError, match="storage"):
        client.create_stream("s", f"G{unique}", storage="tape")
    assert set(js.stream_names()) == before


def test_create_stream_on_a_captured_subject_rolls_back(client, js, lb, unique):
    c, subject, _ = lb
    # partition 2 of the new stream would capture lb's partition-0 subject... use lb's subject.1 instead
    with pytest.raises(jssync.APIError) as ei:
        c.create_stream(subject, f"Z{unique}", partitions=2, storage="memory")
    assert ei.value.err_code == 10065 and "already captured" in str(ei.value)
    assert not [n for n in js.stream_names() if n.startswith(f"Z{unique}")]


def test_max_replication_on_one_server(client, js, unique):
    info = client.create_stream(f"mr{unique}", f"MR{unique}", replication_factor=-1, storage="memory")
    try:
        assert info.replication_factor == 1
        assert js.stream(f"MR{unique}-0").cached_info.config.num_replicas == 1
    finally:
        client.delete_stream(f"MR{unique}")
    info = client.create_stream(f"mr{unique}", f"MR{unique}", max_replication=True, storage="memory")
    client.delete_stream(f"MR{unique}")
    assert info.replication_factor == 1


def test_create_stream_permanent_refusal_is_raised_at_once(client, js, unique):
    # JetStream answers code 500 for refusals that no retry can change: they are raised at
    # once (one request), not retried until the client's timeout
    before = set(js.stream_names())
    for opts, err_code in (({"replication_factor": 3}, 10074),
                           ({"retention_max_bytes": 10**15, "storage": "memory"}, 10028)):
        t = time.monotonic()
        with pytest.raises(jssync.APIError) as ei:
            client.create_stream(f"pr{unique}", f"PR{unique}", **opts)
        assert ei.value.err_code == err_code and not isinstance(ei.value, jssync.TimeoutError)
        assert time.monotonic() - t < 1.0 * FACTOR, opts
    assert set(js.stream_names()) == before


def test_delete_missing_stream(client, unique):
    with pytest.raises(NoSuchPartitionError, match="no such stream"):
        client.delete_stream(f"NOPE{unique}")


# -- Publish -----------------------------------------------------------------------------------


def test_publish_offsets_are_dense_per_partition(lb):
    c, subject, name = lb
    acks = [c.publish(subject, b"m%d" % i, to_partition=i % 3) for i in range(9)]
    assert [(a.partition, a.offset) for a in acks] == [(i % 3, i // 3) for i in range(9)]
    a = acks[4]
    assert isinstance(a, Ack) and a.stream == name and a.partition_subject == f"{subject}.1"
    assert a.msg_subject == subject and a.jetstream_stream == f"{name}-1" and a.sequence == 2
    assert a.ack_policy is AckPolicy.LEADER and a.commit_timestamp.tzinfo is not None and not a.duplicate
    meta = c.fetch_metadata()
    assert [meta.get_stream(name).partitions[p].newest_offset for p in range(3)] == [2, 2, 2]


def test_publish_partition_by_key(lb):
    c, subject, name = lb
    keys = [b"user-%d" % i for i in range(30)]
    acks = [c.publish(subject, b"v", key=k, partition_by=PartitionByKey()) for k in keys]
    for k, a in zip(keys, acks, strict=True):
        assert a.partition == (zlib.crc32(k) & 0xFFFFFFFF) % 3 and a.key == k
    assert len({a.partition for a in acks}) == 3
    again = c.publish(subject, b"v2", key=keys[0], partition_by=PartitionByKey())
    assert again.partition == acks[0].partition


def test_publish_round_robin_from_threads(lb):
    c, subject, _ = lb
    rr = PartitionByRoundRobin()
    acks: list[Ack] = []
    lock = threading.Lock()

    def work():
        for _ in range(20):
            a = c.publish(subject, b"x", partition_by=rr)
            with lock:
                acks.append(a)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per = [sorted(a.offset for a in acks if a.partition == p) for p in range(3)]
    assert per == [list(range(20))] * 3


def test_partition_rules(lb, unique):
    c, subject, _ = lb
    # explicit partition wins over the partitioner
    assert c.publish(subject, b"", key=b"a", partition_by=PartitionByKey(), to_partition=2).partition == 2
    # no partitioner, no partition: 0
    assert c.publish(subject, b"").partition == 0
    # any callable (message, metadata) -> int
    seen = []

    def custom(msg, meta):
        seen.append((msg.subject, msg.value, meta.partition_counts_for_subject(msg.subject)))
        return 1

    assert c.publish(subject, b"v", partition_by=custom).partition == 1
    assert seen[0][0] == subject and seen[0][1] == b"v" and list(seen[0][2].values()) == [3]
    with pytest.raises(ValueError, match="returned '7'"):
        c.publish(subject, b"", partition_by=lambda m, md: "7")
    with pytest.raises(TypeError, match="partition_by"):
        c.publish(subject, b"", partition_by=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="to_partition"):
        c.publish(subject, b"", to_partition=-1)
    # a partition that does not exist
    with pytest.raises(NoSuchPartitionError, match=f"{subject}.5"):
        c.publish(subject, b"", to_partition=5)
    # a subject with no stream: the partitioner gives 0, and there is no such partition
    with pytest.raises(NoSuchPartitionError):
        c.publish(f"none{unique}", b"", key=b"k", partition_by=PartitionByKey())


def test_publish_ack_policies(lb):
    c, subject, name = lb
    assert c.publish(subject, b"none", ack_policy=AckPolicy.NONE) is None
    a = c.publish(subject, b"all", ack_policy=AckPolicy.ALL)
    assert a.ack_policy is AckPolicy.ALL and a.offset == 1  # the NONE message was stored first
    assert c.publish(subject, b"lead", ack_policy="leader").offset == 2
    with c.subscribe(name, start_at=StartPosition.EARLIEST) as sub:
        msgs = _drain(sub, 3)
    assert [(m.value, m.ack_policy) for m in msgs] == [(b"none", AckPolicy.NONE), (b"all", AckPolicy.ALL),
                                                       (b"lead", AckPolicy.LEADER)]


def test_publish_deadline(client, nc, unique):
    # a core subscriber that takes the message but never acks it
    sub = nc.subscribe(f"slow{unique}.x")
    try:
        t = time.monotonic()
        with pytest.raises(jssync.TimeoutError, match="no ack"):
            client.publish(f"slow{unique}.x", b"v", timeout=0.5)
        assert time.monotonic() - t < 2.0 * FACTOR
        assert sub.pending_msgs >= 1  # it was published (and retried)
        ids = {m.headers["Nats-Msg-Id"] for m in [sub.next_msg(1) for _ in range(sub.pending_msgs)]}
        assert len(ids) == 1  # retries carry the same message id: JetStream would drop duplicates
    finally:
        sub.unsubscribe()
    with pytest.raises(ValueError, match="timeout"):
        client.publish(f"slow{unique}.x", b"v", timeout=-1)


def test_publish_bad_input(client):
    with pytest.raises(jssync.BadSubjectError):
        client.publish("foo.*", b"")
    with pytest.raises(TypeError, match="value"):
        client.publish("foo", "str")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key"):
        client.publish("foo", b"", key="str")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ack_policy"):
        client.publish("foo", b"", ack_policy=7)
    with pytest.raises(jssync.BadHeaderError):
        client.publish("foo", b"", headers={"bad name": "x"})
    with pytest.raises(jssync.BadHeaderError, match="reserved"):
        client.publish("foo", b"", headers={"lift-key": "x"})


def test_envelope_round_trip(lb):
    c, subject, name = lb
    c.publish(subject, b"v1", key=b"\x00\xffbin", headers={"h1": "a", "h2": b"b"}, ack_inbox=f"{subject}.acks",
              correlation_id="cid-1", to_partition=1)
    c.publish(subject, b"v2", key=b"", to_partition=1)
    c.publish(subject, b"v3", to_partition=1)
    with c.subscribe(name, partition=1, start_at=StartPosition.EARLIEST) as sub:
        m1, m2, m3 = _drain(sub, 3)
    assert isinstance(m1, Message)
    assert (m1.stream, m1.partition, m1.offset, m1.value, m1.key) == (name, 1, 0, b"v1", b"\x00\xffbin")
    assert m1.headers == {"h1": b"a", "h2": b"b"}  # no Lift-* and no client Nats-Msg-Id
    assert m1.ack_inbox == f"{subject}.acks" and m1.correlation_id == "cid-1"
    assert m1.subject == f"{subject}.1" and m1.sequence == 1
    assert isinstance(m1.timestamp, dt.datetime) and m1.timestamp.tzinfo is not None
    assert m2.key == b"" and m3.key is None and m3.headers == {} and m3.correlation_id is None


def test_ack_inbox_receives_the_ack(nc, lb):
    c, subject, name = lb
    acks = nc.subscribe(f"acks{subject}.>")
    try:
        ack = c.publish(subject, b"v", key=b"k", ack_inbox=f"acks{subject}.in", correlation_id="123",
                        to_partition=2, ack_policy=AckPolicy.ALL)
        msg = acks.next_msg(2 * FACTOR)
        assert msg.subject == f"acks{subject}.in"
        got = unmarshal_ack(msg)
        assert got == ack
        assert got.correlation_id == "123" and got.stream == name and got.partition == 2 and got.key == b"k"
        # no ack inbox with ack policy NONE
        c.publish(subject, b"v", ack_inbox=f"acks{subject}.in", ack_policy=AckPolicy.NONE)
        with pytest.raises(jssync.TimeoutError):
            acks.next_msg(0.3)
    finally:
        acks.unsubscribe()


def test_low_level_publish_helpers(nc, js, lb):
    """new_nats_message + a plain NATS publish, the PubAck on the ack inbox, UnmarshalMessage on the stored one."""
    _, subject, name = lb
    acks = nc.subscribe(f"la{subject}.inbox")
    try:
        m = new_nats_message(subject, b"hello", key=b"k1", ack_inbox=f"la{subject}.inbox", correlation_id="123",
                             partition=1, headers={"x": "y"})
        nc.publish(m.subject, m.data, **m.publish_kwargs())
        ackmsg = acks.next_msg(2 * FACTOR)
        ack = unmarshal_ack(ackmsg, ack_inbox=f"la{subject}.inbox")
        assert ack.correlation_id is None  # a bare PubAck has no room for it
        assert ack.ack_inbox == f"la{subject}.inbox" and ack.stream == name and ack.partition == 1
        assert ack.offset == 0
        with pytest.raises(InvalidAckError):
            unmarshal_ack(b"not json")
    finally:
        acks.unsubscribe()
    cons = js.create_consumer(f"{name}-1", ack_policy="none")
    raw = cons.next(timeout=2 * FACTOR)
    msg, ok = unmarshal_message(raw)
    assert ok and msg is not None
    assert (msg.stream, msg.partition, msg.offset, msg.value, msg.key) == (name, 1, 0, b"hello", b"k1")
    assert msg.headers == {"x": b"y"} and msg.correlation_id == "123" and msg.ack_policy is AckPolicy.LEADER


# -- Subscribe ---------------------------------------------------------------------------------


def test_subscribe_start_positions(lb):
    c, subject, name = lb
    for i in range(5):
        c.publish(subject, b"%d" % i)
    mid = c.fetch_metadata().get_stream(name).partitions[0]
    assert mid.newest_offset == 4
    with c.subscribe(name, start_at=StartPosition.LATEST) as sub:
        fourth = sub.next(5 * FACTOR)
    assert fourth.offset == 4
    t_after = fourth.timestamp + dt.timedelta(microseconds=1)
    for i in range(5, 7):
        c.publish(subject, b"%d" % i)

    def first(**kw):
        with c.subscribe(name, **kw) as sub:
            return sub.next(5 * FACTOR)

    assert first(start_at=StartPosition.EARLIEST).offset == 0
    assert first(start_at=StartPosition.LATEST).offset == 6
    assert first(start_at_offset=3).value == b"3"
    assert first(start_at=StartPosition.OFFSET, start_at_offset=4).offset == 4
    assert first(start_at=2).offset == 2
    assert first(start_at_time=t_after).offset == 5
    assert first(start_at=StartPosition.TIMESTAMP, start_at_time=t_after).offset == 5
    assert first(start_at=t_after).offset == 5
    assert first(start_at_time_delta=3600).offset == 0
    assert first(start_at=dt.timedelta(hours=1)).offset == 0
    assert first(start_at="earliest").offset == 0
    # default: only new messages
    with c.subscribe(name) as sub:
        with pytest.raises(jssync.TimeoutError):
            sub.next(0.3)
        c.publish(subject, b"new")
        m = sub.next(5 * FACTOR)
        assert (m.offset, m.value) == (7, b"new")
        assert sub.last_offset == 7


def test_subscribe_iterates_in_order_and_close_ends_iteration(lb):
    c, subject, name = lb
    for i in range(50):
        c.publish(subject, b"%d" % i, to_partition=2)
    sub = c.subscribe(name, partition=2, start_at=StartPosition.EARLIEST)
    got = []
    for m in sub:
        got.append(m.offset)
        if m.offset == 49:
            threading.Timer(0.1, sub.close).start()
    assert got == list(range(50))
    assert sub.closed and sub.error is None
    with pytest.raises(jssync.SubscriptionClosedError):
        sub.next(0.1)
    sub.close()  # idempotent


def test_subscribe_handler_form(lb):
    c, subject, name = lb
    got: list[tuple[int, str]] = []
    done = threading.Event()

    def handler(msg, err):
        assert err is None
        got.append((msg.offset, threading.current_thread().name))
        if msg.offset == 19:
            done.set()
        if msg.offset == 3:
            raise RuntimeError("handler failure is reported, the subscription goes on")

    sub = c.subscribe(name, handler, partition=1, start_at=StartPosition.EARLIEST)
    try:
        for i in range(20):
            c.publish(subject, b"%d" % i, to_partition=1)
        assert done.wait(5 * FACTOR)
        assert [o for o, _ in got] == list(range(20))
        assert all(t.startswith("jssync-") and "-cb-" in t for _, t in got)  # the worker pool
        with pytest.raises(RuntimeError, match="handler"):
            sub.next()
    finally:
        sub.close()
    assert sub.wait(1) and sub.closed


def test_subscribe_missing_stream_or_partition(client, lb, unique):
    c, _, name = lb
    with pytest.raises(NoSuchPartitionError, match="no such stream"):
        c.subscribe(f"NONE{unique}")
    with pytest.raises(NoSuchPartitionError, match="partition 3"):
        c.subscribe(name, partition=3)
    assert isinstance(NoSuchPartitionError(404, 10059, "x"), jssync.StreamNotFoundError)


def test_subscribe_resumes_after_its_consumer_is_deleted(js, lb):
    c, subject, name = lb
    sub = c.subscribe(name, partition=0, start_at=StartPosition.EARLIEST, idle_heartbeat=0.2)
    try:
        for i in range(10):
            c.publish(subject, b"%d" % i)
        assert [m.offset for m in _drain(sub, 5)] == list(range(5))
        for cname in list(js.consumer_names(f"{name}-0")):
            js.delete_consumer(f"{name}-0", cname)
        for i in range(10, 20):
            c.publish(subject, b"%d" % i)
        rest = _drain(sub, 15)
        assert [m.offset for m in rest] == list(range(5, 20))
        assert [m.value for m in rest] == [b"%d" % i for i in range(5, 20)]
        assert sub.resubscribes >= 1
    finally:
        sub.close()
    wait_for(lambda: not list(js.consumer_names(f"{name}-0")), 5, what="the consumer deleted on close")


def test_subscription_ends_when_the_stream_is_deleted(client, unique):
    subject, name = f"del{unique}", f"DEL{unique}"
    client.create_stream(subject, name, storage="memory")
    errors: list[BaseException] = []
    ended = threading.Event()

    def handler(msg, err):
        if err is not None:
            errors.append(err)
            ended.set()

    sub = client.subscribe(name, handler, idle_heartbeat=0.2, resubscribe_wait_time=5)
    try:
        client.delete_stream(name)
        assert ended.wait(10 * FACTOR)
        assert isinstance(errors[0], NoSuchPartitionError) and len(errors) == 1
        assert sub.wait(2) and isinstance(sub.error, NoSuchPartitionError)
    finally:
        sub.close()


def test_iterator_raises_the_terminal_error_once(client, unique):
    subject, name = f"it{unique}", f"IT{unique}"
    client.create_stream(subject, name, storage="memory")
    sub = client.subscribe(name, idle_heartbeat=0.2)
    try:
        client.delete_stream(name)
        with pytest.raises(NoSuchPartitionError):
            sub.next(10 * FACTOR)
        with pytest.raises(jssync.SubscriptionClosedError):
            sub.next(0.1)
        assert list(sub) == []
    finally:
        sub.close()


@pytest.mark.slow
def test_subscribe_resumes_over_a_server_restart(tmp_path, unique):
    with NatsServer(store_dir=tmp_path / "store") as srv:
        with Client(srv.url, reconnect_time_wait=0.1, timeout=5 * FACTOR) as c:
            c.create_stream("rs", "RS", partitions=2)
            got: list[Message] = []
            lock = threading.Lock()

            def handler(msg, err):
                with lock:
                    got.append(msg if err is None else err)

            sub = c.subscribe("RS", handler, partition=1, start_at=StartPosition.EARLIEST, idle_heartbeat=0.3)
            for i in range(10):
                c.publish("rs", b"%d" % i, to_partition=1)
            wait_for(lambda: len(got) >= 10, 10, what="first half")
            srv.restart()
            for i in range(10, 20):
                c.publish("rs", b"%d" % i, to_partition=1, timeout=10 * FACTOR)
            wait_for(lambda: len(got) >= 20, 20, what="second half")
            assert all(isinstance(m, Message) for m in got)
            assert [m.offset for m in got] == list(range(20))
            assert sub.resubscribes >= 1 and not sub.closed


@pytest.mark.slow
def test_resubscribe_gives_up_after_resubscribe_wait_time(unique):
    srv = NatsServer()
    srv.start()
    try:
        with Client(srv.url, timeout=2.0, max_reconnect_attempts=-1, reconnect_time_wait=0.2) as c:
            c.create_stream("gu", "GU", storage="memory")
            errors: list[BaseException] = []
            ended = threading.Event()

            def handler(msg, err):
                if err is not None:
                    errors.append(err)
                    ended.set()

            sub = c.subscribe("GU", handler, idle_heartbeat=0.2, resubscribe_wait_time=1.0)
            srv.stop()
            t = time.monotonic()
            assert ended.wait(15 * FACTOR)
            assert time.monotonic() - t < 10 * FACTOR
            assert isinstance(errors[0], jssync.Error) and "resubscribe" in str(errors[0])
            assert sub.closed
    finally:
        srv.stop()
        srv.cleanup()


def test_ctrl_c_reaches_blocked_calls(nc, lb, unique):
    import _thread

    c, subject, name = lb
    with c.subscribe(name, partition=1) as sub:
        threading.Timer(0.2, _thread.interrupt_main).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sub.next(timeout=None)
        assert time.monotonic() - t0 < 0.2 + 0.2 * FACTOR + 0.1
        c.publish(subject, b"after", to_partition=1)
        assert sub.next(5 * FACTOR).value == b"after"  # the subscription still works
    hang = nc.subscribe(f"hang{unique}")  # takes the message, never acks
    try:
        threading.Timer(0.2, _thread.interrupt_main).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            c.publish(f"hang{unique}", b"x", timeout=30)
        assert time.monotonic() - t0 < 0.2 + 0.2 * FACTOR + 0.1
    finally:
        hang.unsubscribe()
    assert c.publish(subject, b"still works").offset == 0


# -- FetchMetadata -----------------------------------------------------------------------------


def test_fetch_metadata(nats_server, nc, lb, unique):
    c, subject, name = lb
    meta = c.fetch_metadata()
    assert isinstance(meta, Metadata)
    assert meta.last_updated().tzinfo is not None
    (broker,) = meta.brokers()
    assert broker.name == nc.server_info["server_name"] and broker.id == broker.name
    assert broker.addr() == f"127.0.0.1:{nats_server.port}" and broker.server_id == nc.server_info["server_id"]
    assert meta.addrs() == [f"127.0.0.1:{nats_server.port}"]
    s = meta.get_stream(name)
    assert s is not None and s.subject == subject and s.partition_count == 3
    assert s.get_partition(2).leader == broker.id and s.get_partition(3) is None
    assert meta.get_streams(subject) == [s]
    assert meta.get_streams(subject + ".1") == [] and meta.get_streams(subject + ".*") == []
    assert meta.partition_counts_for_subject(subject) == {name: 3}
    assert meta.get_stream("nope") is None
    # always goes to the server
    c.create_stream(f"n{unique}", f"N{unique}", storage="memory")
    try:
        meta2 = c.fetch_metadata()
        assert meta2.get_stream(f"N{unique}") is not None and meta.get_stream(f"N{unique}") is None
        assert meta2.last_updated() >= meta.last_updated()
    finally:
        c.delete_stream(f"N{unique}")


def test_metadata_cache_refreshes_for_an_unknown_subject(nats_server, nc, unique):
    with Client(nats_server.url) as a, Client(connection=nc) as b:
        a.fetch_metadata()  # cache without the stream
        b.create_stream(f"cr{unique}", f"CR{unique}", partitions=4, storage="memory")
        try:
            # a cache without the subject is refreshed before partitioning
            expected = (zlib.crc32(b"abc") & 0xFFFFFFFF) % 4
            assert expected != 0
            assert a.publish(f"cr{unique}", b"v", key=b"abc", partition_by=PartitionByKey()).partition == expected
            assert a.fetch_metadata().partition_counts_for_subject(f"cr{unique}") == {f"CR{unique}": 4}
        finally:
            b.delete_stream(f"CR{unique}")


# -- Close -------------------------------------------------------------------------------------


def test_close(nats_server, nc, unique):
    c = Client(connection=nc)
    c.close()
    c.close()
    assert c.closed and not nc.is_closed  # a connection the client did not open stays open
    with pytest.raises(jssync.ConnectionClosedError):
        c.publish("x", b"")
    own = Client(nats_server.url)
    own.create_stream(f"cl{unique}", f"CL{unique}", storage="memory")
    sub = own.subscribe(f"CL{unique}")
    conn = own.connection
    own.close()
    nc.jetstream().delete_stream(f"CL{unique}-0")
    assert sub.closed and conn.is_closed
    own.close()
