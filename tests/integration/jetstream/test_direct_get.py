"""Direct Get (ADR-31) against a real nats-server: single reads, batches, multi_last."""

from __future__ import annotations

import datetime as dt
import gc
import json
import threading

import pytest
from nats.js import api

import jssync
from jssync.jetstream.direct import (
    BadRequestError,
    DirectBatch,
    TooManySubjectsError,
    format_time,
    parse_timestamp,
)
from jssync.jetstream.streams import Stream
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)

UTC = dt.UTC


@pytest.fixture
def stream(js, unique):
    """A stream ``D<unique>`` on ``d<unique>.>`` with allow_direct and 10 messages on 3 subjects."""
    name = f"D{unique}"
    s = js.create_stream(name=name, subjects=[f"d{unique}.>"], allow_direct=True, storage="memory")
    for i in range(10):
        js.publish(f"d{unique}.{i % 3}", f"m{i}".encode(), headers={"X-I": str(i)} if i == 4 else None)
    try:
        yield s
    finally:
        js.delete_stream(name)


def subj(stream: Stream, tok: str) -> str:
    return f"d{stream.name[1:]}.{tok}"


# -- pure helpers -----------------------------------------------------------------------------


def test_parse_timestamp_forms():
    t = parse_timestamp("2024-11-04T23:45:02.060192123Z")
    assert t == dt.datetime(2024, 11, 4, 23, 45, 2, 60192, tzinfo=UTC)
    old = parse_timestamp("2022-08-06 00:29:27.587861324 +0000 UTC")
    assert old == dt.datetime(2022, 8, 6, 0, 29, 27, 587861, tzinfo=UTC)
    assert parse_timestamp("2024-01-01T01:00:00+01:00") == dt.datetime(2024, 1, 1, 0, 0, tzinfo=UTC)
    assert parse_timestamp("2024-01-01T00:00:00Z").microsecond == 0
    assert parse_timestamp(None) is None
    assert parse_timestamp("garbage") is None


def test_format_time():
    t = dt.datetime(2024, 11, 4, 23, 45, 2, 60192, tzinfo=UTC)
    assert format_time(t) == "2024-11-04T23:45:02.060192Z"
    # naive datetimes are taken as UTC, like nats-py does
    assert format_time(t.replace(tzinfo=None)) == "2024-11-04T23:45:02.060192Z"
    other = t.astimezone(dt.timezone(dt.timedelta(hours=2)))
    assert format_time(other) == "2024-11-04T23:45:02.060192Z"
    with pytest.raises(TypeError, match="start_time"):
        format_time("2024-01-01", "start_time")  # type: ignore[arg-type]


# -- single reads ---------------------------------------------------------------------------


def test_direct_get_by_seq(stream):
    m = stream.direct_get(1)
    assert (m.seq, m.subject, m.data) == (1, subj(stream, "0"), b"m0")
    assert m.headers is None  # the reply's Nats-* headers are not part of the stored message
    assert m.time is not None and m.time.tzinfo is not None
    assert abs((dt.datetime.now(UTC) - m.time).total_seconds()) < 60 * FACTOR
    m5 = stream.direct_get(seq=5)
    assert m5.data == b"m4" and m5.headers == {"X-I": "4"}
    # same answer as the leader's STREAM.MSG.GET
    g = stream.get_msg(5)
    assert (g.subject, g.seq, g.data, g.headers) == (m5.subject, m5.seq, m5.data, m5.headers)


def test_direct_get_last_by_subject_uses_subject_appended_form(stream, nc):
    seen: list[str] = []
    ev = threading.Event()

    def spy(msg):
        seen.append(msg.subject + "|" + msg.data.decode())
        ev.set()

    mon = nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}.>", callback=spy)
    try:
        nc.flush()
        m = stream.direct_get(last_by_subject=subj(stream, "1"))
        assert (m.seq, m.data) == (8, b"m7")
        assert ev.wait(5)
        assert seen[0] == f"$JS.API.DIRECT.GET.{stream.name}.{subj(stream, '1')}|"  # no payload
    finally:
        mon.unsubscribe()
    # a wildcard subject goes in the JSON body instead
    m = stream.direct_get(last_by_subject=subj(stream, "*"))
    assert (m.seq, m.data) == (10, b"m9")


def test_direct_get_next_by_subject(stream):
    assert stream.direct_get(next_by_subject=subj(stream, "2")).seq == 3
    assert stream.direct_get(4, next_by_subject=subj(stream, "2")).seq == 6
    assert stream.direct_get(seq=6, next_by_subject=subj(stream, "2")).seq == 6
    with pytest.raises(jssync.MessageNotFoundError):
        stream.direct_get(10, next_by_subject=subj(stream, "2"))


def test_direct_get_start_time(stream, js):
    first = stream.direct_get(1)
    assert first.time is not None
    assert stream.direct_get(start_time=first.time - dt.timedelta(seconds=10)).seq == 1
    later = dt.datetime.now(UTC)
    js.publish(subj(stream, "late"), b"late")
    m = stream.direct_get(start_time=later)
    assert (m.seq, m.data) == (11, b"late")
    m = stream.direct_get(start_time=first.time - dt.timedelta(seconds=1), next_by_subject=subj(stream, "late"))
    assert m.seq == 11


def test_direct_get_not_found(stream):
    with pytest.raises(jssync.MessageNotFoundError) as ei:
        stream.direct_get(999)
    assert ei.value.code == 404
    assert isinstance(ei.value, jssync.NotFoundError)
    with pytest.raises(jssync.MessageNotFoundError):
        stream.direct_get(last_by_subject=subj(stream, "nothing"))


def test_direct_get_bad_arguments_raise_before_sending(stream):
    with pytest.raises(ValueError, match="needs"):
        stream.direct_get()
    with pytest.raises(ValueError, match="last_by_subject"):
        stream.direct_get(1, last_by_subject="x")
    with pytest.raises(ValueError, match="seq and start_time"):
        stream.direct_get(1, start_time=dt.datetime.now(UTC))
    with pytest.raises(ValueError, match=r"seq must be an int from 1 to \d+, got 0"):
        stream.direct_get(0)
    with pytest.raises(ValueError, match="True"):
        stream.direct_get(True)
    with pytest.raises(jssync.BadSubjectError, match="a b"):
        stream.direct_get(last_by_subject="a b")
    with pytest.raises(TypeError, match="datetime"):
        stream.direct_get(start_time="yesterday")
    with pytest.raises(ValueError, match="timeout"):
        stream.direct_get(1, timeout=-1)
    with pytest.raises(jssync.TimeoutError, match="timeout=0"):  # no wait: nothing is sent
        stream.direct_get(1, timeout=0)


def test_direct_get_not_allowed_fails_at_once(js, unique):
    s = js.create_stream(name=f"N{unique}", subjects=[f"n{unique}"], storage="memory")
    try:
        js.publish(f"n{unique}", b"x")
        import time

        t0 = time.monotonic()
        with pytest.raises(jssync.DirectGetNotAllowedError, match=f"N{unique}"):
            s.direct_get(1, timeout=5)
        # a batch sends its request and learns it while iterating (no stream info first)
        with pytest.raises(jssync.DirectGetNotAllowedError):
            list(s.direct_get_batch(f"n{unique}", 5, timeout=5))
        with pytest.raises(jssync.DirectGetNotAllowedError):
            list(s.direct_get_last_for([f"n{unique}"], timeout=5))
        assert time.monotonic() - t0 < 2 * FACTOR
        # turning allow_direct on later is picked up (the cached info is refreshed)
        js.update_stream(name=f"N{unique}", subjects=[f"n{unique}"], storage="memory", allow_direct=True)
        wait_for(lambda: _gets(s), 5, what="direct get after enabling allow_direct")
    finally:
        js.delete_stream(f"N{unique}")


def _gets(s: Stream) -> bool:
    try:
        return s.direct_get(1, timeout=1).data == b"x"
    except (jssync.NoRespondersError, jssync.TimeoutError):
        return False


def test_direct_get_deleted_stream(js, unique):
    s = js.create_stream(name=f"G{unique}", subjects=[f"g{unique}"], storage="memory", allow_direct=True)
    js.publish(f"g{unique}", b"x")
    assert s.direct_get(1).data == b"x"
    js.delete_stream(f"G{unique}")
    with pytest.raises(jssync.StreamNotFoundError):
        s.direct_get(1, timeout=2)


def test_direct_get_with_domain(unique):
    from jssync.server import NatsServer

    with NatsServer(domain="hub") as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream(domain="hub")
        assert js.prefix == "$JS.hub.API"
        s = js.create_stream(name="DOM", subjects=["dom.>"], allow_direct=True, storage="memory")
        js.publish("dom.a", b"1")
        js.publish("dom.b", b"2")
        assert s.direct_get(1).data == b"1"
        assert s.direct_get(last_by_subject="dom.b").data == b"2"
        assert [m.seq for m in s.direct_get_batch("dom.>", 5)] == [1, 2]


# -- batches --------------------------------------------------------------------------------


def test_batch_from_seq(stream):
    b = stream.direct_get_batch(subj(stream, ">"), 4, seq=2)
    assert isinstance(b, DirectBatch)
    msgs = list(b)
    assert [m.seq for m in msgs] == [2, 3, 4, 5]
    assert msgs[3].headers == {"X-I": "4"}
    assert (b.num_pending, b.last_sequence, b.received, b.done) == (5, 5, 4, True)
    assert list(b) == []  # stays ended


def test_batch_default_start_and_subject_filter(stream):
    b = stream.direct_get_batch(subj(stream, "1"), 100)
    assert [m.seq for m in b] == [2, 5, 8]
    assert b.num_pending == 0 and b.last_sequence == 8


def test_batch_from_start_time(stream, js):
    t = dt.datetime.now(UTC)
    js.publish(subj(stream, "late"), b"a")
    js.publish(subj(stream, "late"), b"b")
    b = stream.direct_get_batch(subj(stream, ">"), 10, start_time=t)
    assert [m.data for m in b] == [b"a", b"b"]


def test_batch_max_bytes(stream, js):
    for _ in range(5):
        js.publish(subj(stream, "big"), b"x" * 1000)
    b = stream.direct_get_batch(subj(stream, "big"), 5, max_bytes=2500)
    got = list(b)
    # the server stops after the message that crosses max_bytes
    assert 1 <= len(got) < 5
    assert b.num_pending == 5 - len(got)


def test_batch_nothing_matches_is_empty(stream):
    b = stream.direct_get_batch(subj(stream, "none"), 5)
    assert list(b) == []
    assert b.num_pending == 0
    assert b.next_batch() is None
    b = stream.direct_get_batch(subj(stream, ">"), 5, seq=500)
    assert list(b) == []


def test_batch_next_batch_and_all(stream):
    b = stream.direct_get_batch(subj(stream, ">"), 3)
    with pytest.raises(RuntimeError):
        b.next_batch()
    assert [m.seq for m in b] == [1, 2, 3]
    b2 = b.next_batch()
    assert b2 is not None and [m.seq for m in b2] == [4, 5, 6]
    assert [m.seq for m in stream.direct_get_batch(subj(stream, ">"), 3).all()] == list(range(1, 11))
    assert [m.seq for m in stream.direct_get_batch(subj(stream, "0"), 2, seq=2).all()] == [4, 7, 10]


def test_batch_bad_arguments(stream):
    with pytest.raises(ValueError, match=r"batch must be an int from 1 to \d+, got 0"):
        stream.direct_get_batch(">", 0)
    with pytest.raises(ValueError, match="seq and start_time"):
        stream.direct_get_batch(">", 1, seq=1, start_time=dt.datetime.now(UTC))
    with pytest.raises(ValueError, match="max_bytes"):
        stream.direct_get_batch(">", 1, max_bytes=-1)
    with pytest.raises(jssync.BadSubjectError):
        stream.direct_get_batch("a..b", 1)


def test_batch_close_and_abandon_drop_the_subscription(stream, nc):
    before = len(nc._subs)
    with stream.direct_get_batch(subj(stream, ">"), 10) as b:
        assert next(b).seq == 1
    assert b.done and len(nc._subs) == before
    with pytest.raises(StopIteration):
        next(b)
    b = stream.direct_get_batch(subj(stream, ">"), 10)
    assert next(b).seq == 1
    del b
    gc.collect()
    assert len(nc._subs) == before
    list(stream.direct_get_batch(subj(stream, ">"), 10))
    assert len(nc._subs) == before


def test_batch_shared_between_threads(stream, js):
    for i in range(200):
        js.publish_async(subj(stream, "t"), str(i).encode())
    js.publish_async_completed()
    b = stream.direct_get_batch(subj(stream, "t"), 500)
    got: list[int] = []
    lock = threading.Lock()

    def reader():
        for m in b:
            with lock:
                got.append(m.seq)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(got) == list(range(11, 211))


# -- multi_last -------------------------------------------------------------------------------


def test_last_for_subjects(stream):
    b = stream.direct_get_last_for([subj(stream, ">")])
    msgs = list(b)
    assert [(m.subject, m.seq) for m in msgs] == [(subj(stream, "1"), 8), (subj(stream, "2"), 9),
                                                  (subj(stream, "0"), 10)]
    assert (b.num_pending, b.last_sequence, b.up_to_sequence) == (0, 10, 10)
    b = stream.direct_get_last_for([subj(stream, "0"), subj(stream, "2")])
    assert [m.seq for m in b] == [9, 10]


def test_last_for_up_to_seq_and_time(stream, js):
    assert [m.seq for m in stream.direct_get_last_for([subj(stream, ">")], up_to_seq=5)] == [3, 4, 5]
    cut = stream.direct_get(6).time
    assert cut is not None
    t = cut + dt.timedelta(microseconds=1)
    got = [m.seq for m in stream.direct_get_last_for([subj(stream, ">")], up_to_time=t)]
    assert got == [4, 5, 6]


def test_last_for_up_to_seq_past_the_end_reads_the_stream_as_it_is(stream):
    """The server does not refuse an up_to_seq past the last sequence (no 404): it reads as of now."""
    last = [(subj(stream, "1"), 8), (subj(stream, "2"), 9), (subj(stream, "0"), 10)]
    for up in (11, 1_000_000):
        b = stream.direct_get_last_for([subj(stream, ">")], up_to_seq=up)
        assert [(m.subject, m.seq) for m in b] == last, up
        assert (b.num_pending, b.last_sequence) == (0, 10)
        b = stream.direct_get_last_for([subj(stream, "0"), subj(stream, "2")], up_to_seq=up, batch=1)
        assert [m.seq for m in b.all()] == [9, 10], up


def test_last_for_batches_stay_at_one_point_in_time(stream, js):
    b = stream.direct_get_last_for([subj(stream, ">")], batch=2)
    assert [m.seq for m in b] == [8, 9]
    assert (b.num_pending, b.up_to_sequence) == (1, 10)
    # writes after the first batch do not show in the following ones
    js.publish(subj(stream, "0"), b"newer")
    js.publish(subj(stream, "9"), b"new subject")
    b2 = b.next_batch()
    assert b2 is not None
    assert [(m.seq, m.data) for m in b2] == [(10, b"m9")]
    assert b2.request["up_to_seq"] == 10
    assert b2.next_batch() is None
    # all() walks every batch the same way
    b = stream.direct_get_last_for([subj(stream, ">")], batch=1, up_to_seq=10)
    assert [m.seq for m in b.all()] == [8, 9, 10]


def test_last_for_nothing_matches(stream):
    b = stream.direct_get_last_for([subj(stream, "none")])
    assert list(b) == []
    assert b.num_pending == 0


def test_last_for_too_many_subjects(js, unique):
    s = js.create_stream(name=f"T{unique}", subjects=[f"t{unique}.>"], allow_direct=True, storage="memory")
    try:
        for i in range(1100):
            js.publish_async(f"t{unique}.{i}", b"x")
        js.publish_async_completed()
        b = s.direct_get_last_for([f"t{unique}.>"])
        with pytest.raises(TooManySubjectsError) as ei:
            list(b)
        assert ei.value.code == 413 and isinstance(ei.value, jssync.APIError)
        assert b.done
    finally:
        js.delete_stream(f"T{unique}")


def test_last_for_bad_arguments(stream):
    with pytest.raises(TypeError, match="list"):
        stream.direct_get_last_for("a.b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        stream.direct_get_last_for([])
    with pytest.raises(ValueError, match="up_to_seq and up_to_time"):
        stream.direct_get_last_for(["a"], up_to_seq=1, up_to_time=dt.datetime.now(UTC))
    with pytest.raises(ValueError, match="batch"):
        stream.direct_get_last_for(["a"], batch=0)


# -- status replies, old servers, timeouts (fake responders on a real server) --------------------


def _fake_stream(js, name: str) -> Stream:
    info = api.StreamInfo.from_response({
        "config": {"name": name, "subjects": [f"{name}.>"], "allow_direct": True},
        "state": {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0, "consumer_count": 0},
    })
    return Stream(js, info)


def _send_status(nc, reply: str, status: str) -> None:
    """Send a status-only reply exactly as the server writes it (``NATS/1.0 408 Bad Request``)."""
    hdr = f"NATS/1.0 {status}\r\n\r\n".encode()

    async def send() -> None:
        await nc.client._send_command(f"HPUB {reply} {len(hdr)} {len(hdr)}\r\n".encode() + hdr + b"\r\n")
        await nc.client._flush_pending()

    nc.run(send(), 2)


def test_status_replies_map_to_errors(js, nc, unique):
    name = f"F{unique}"
    status = {"code": "408 Bad Request"}

    def responder(msg):
        _send_status(nc, msg.reply, status["code"])

    sub = nc.subscribe(f"$JS.API.DIRECT.GET.{name}", callback=responder)
    try:
        nc.flush()
        s = _fake_stream(js, name)
        with pytest.raises(BadRequestError) as ei:
            s.direct_get(1, timeout=2)
        assert ei.value.code == 408 and "Bad Request" in str(ei.value)
        status["code"] = "413 Too Many Results"
        with pytest.raises(TooManySubjectsError):
            list(s.direct_get_last_for(["x"], timeout=2))
        status["code"] = "500 Oops"
        with pytest.raises(jssync.APIError) as ei2:
            s.direct_get(1, timeout=2)
        assert ei2.value.code == 500
    finally:
        sub.unsubscribe()


def test_old_server_batch_is_one_reply(js, nc, unique):
    """A server without batch support answers a batch request with one plain message."""
    name = f"O{unique}"
    requests: list[dict] = []

    def responder(msg):
        requests.append(json.loads(msg.data))
        nc.publish(msg.reply, b"only one", headers={
            "Nats-Stream": name, "Nats-Subject": f"{name}.a", "Nats-Sequence": "7",
            "Nats-Time-Stamp": "2022-08-06 00:29:27.587861324 +0000 UTC"})

    sub = nc.subscribe(f"$JS.API.DIRECT.GET.{name}", callback=responder)
    try:
        nc.flush()
        s = _fake_stream(js, name)
        b = s.direct_get_batch(">", 50, timeout=2)
        msgs = list(b)
        assert [(m.seq, m.data) for m in msgs] == [(7, b"only one")]
        assert msgs[0].time == dt.datetime(2022, 8, 6, 0, 29, 27, 587861, tzinfo=UTC)
        assert b.num_pending is None and b.done
        assert b.next_batch() is None
        assert requests == [{"batch": 50, "seq": 1, "next_by_subj": ">"}]
    finally:
        sub.unsubscribe()


def test_batch_times_out_without_end_marker(js, nc, unique):
    name = f"E{unique}"

    def responder(msg):
        nc.publish(msg.reply, b"1", headers={"Nats-Subject": "x", "Nats-Sequence": "1",
                                             "Nats-Num-Pending": "3", "Nats-Last-Sequence": "0"})

    sub = nc.subscribe(f"$JS.API.DIRECT.GET.{name}", callback=responder)
    try:
        nc.flush()
        b = _fake_stream(js, name).direct_get_batch(">", 5, timeout=0.3)
        assert next(b).seq == 1
        assert b.num_pending == 3
        with pytest.raises(jssync.TimeoutError, match="after 1 message"):
            next(b)
        assert b.done
    finally:
        sub.unsubscribe()


def test_no_responders(js, unique):
    s = _fake_stream(js, f"X{unique}")
    with pytest.raises((jssync.NoRespondersError, jssync.StreamNotFoundError)):
        s.direct_get(1, timeout=2)


def test_ctrl_c_reaches_a_caller_waiting_for_a_batch(js, nc, unique):
    import _thread
    import time

    name = f"K{unique}"
    sub = nc.subscribe(f"$JS.API.DIRECT.GET.{name}", callback=lambda m: None)  # never answers
    try:
        nc.flush()
        b = _fake_stream(js, name).direct_get_batch(">", 5, timeout=30)
        threading.Timer(0.2, _thread.interrupt_main).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            next(b)
        assert time.monotonic() - t0 < 1.0 * FACTOR
        b.close()
        assert js.account_info() is not None  # the connection still works
    finally:
        sub.unsubscribe()


def test_out_of_range_numbers_are_refused_before_sending(stream, nc):
    # sequences are uint64 (1 .. 2**64-1), batch and max_bytes int64 (1 .. 2**63-1): a number
    # outside is a ValidationError naming the option and its range, and nothing is sent
    seen = []
    spy = nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}.>", callback=seen.append)
    spy2 = nc.subscribe(f"$JS.API.DIRECT.GET.{stream.name}", callback=seen.append)
    nc.flush()
    s1 = subj(stream, "1")
    cases = [
        ("seq", lambda: stream.direct_get(2**64)),
        ("batch", lambda: stream.direct_get_batch(s1, 2**63)),
        ("max_bytes", lambda: stream.direct_get_batch(s1, 1, max_bytes=2**64)),
        ("max_bytes", lambda: stream.direct_get_batch(s1, 1, max_bytes=2**63)),
        ("seq", lambda: stream.direct_get_batch(s1, 1, seq=2**64)),
        ("up_to_seq", lambda: stream.direct_get_last_for([s1], up_to_seq=2**64)),
        ("batch", lambda: stream.direct_get_last_for([s1], batch=2**63)),
        ("seq", lambda: stream.get_msg(2**64)),
        ("seq", lambda: stream.delete_msg(2**64)),
    ]
    for what, call in cases:
        with pytest.raises(jssync.ValidationError, match=rf"{what} must be an int from [01] to \d+") as ei:
            list(call() or ())
        assert not isinstance(ei.value, jssync.APIError)
    nc.flush()
    assert seen == []
    spy.unsubscribe()
    spy2.unsubscribe()
    # the largest values are sent and answered
    with pytest.raises(jssync.MessageNotFoundError):
        stream.direct_get(2**64 - 1)
    assert [m.seq for m in stream.direct_get_batch(s1, 2**63 - 1, max_bytes=2**63 - 1)] == [2, 5, 8]
    assert [m.seq for m in stream.direct_get_last_for([s1], up_to_seq=2**64 - 1)] == [8]


def test_out_of_range_config_numbers_are_refused_before_sending(js, unique):
    before = set(js.stream_names())
    with pytest.raises(jssync.ValidationError, match=r"max_bytes must be an int from -\d+ to \d+, got \d+"):
        js.create_stream(name=f"R{unique}", subjects=[f"r{unique}"], max_bytes=2**64)
    with pytest.raises(jssync.ValidationError, match=r"max_msg_size must be an int from"):
        js.create_stream(name=f"R{unique}", subjects=[f"r{unique}"], max_msg_size=2**31)
    with pytest.raises(jssync.ValidationError, match=r"expected_last_seq must be an int from 0 to"):
        js.publish(f"r{unique}", b"x", expected_last_seq=2**64)
    assert set(js.stream_names()) == before
