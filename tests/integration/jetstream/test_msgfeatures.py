"""Per-message TTL (ADR-43), counters (ADR-49), atomic batches (ADR-50) and message schedules
(ADR-51) against a real nats-server 2.12+."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from nats.js.api import StreamSource, SubjectTransform

import jssync
from jssync.jetstream.msgfeatures import MAX_BATCH_MESSAGES
from tests.conftest import wait_for


@contextmanager
def _stream(js: Any, name: str, **cfg: Any) -> Iterator[Any]:
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", **cfg)
    try:
        yield st
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def _count(st: Any, subject: str) -> int:
    return st.info(subjects_filter=subject).state.subjects.get(subject, 0)


# -- per-message TTL (ADR-43) ----------------------------------------------------------------


def test_ttl_message_expires(js, unique):
    name = f"TTL{unique}"
    with _stream(js, name, allow_msg_ttl=True) as st:
        ack = js.publish(f"{name}.a", b"short", ttl=1)
        js.publish(f"{name}.b", b"kept")
        stored = st.get_msg(ack.seq)
        assert stored.headers == {"Nats-TTL": "1s"}
        fut = js.publish_async(f"{name}.c", b"async", ttl=1.5)
        assert st.get_msg(fut.result(5).seq).headers == {"Nats-TTL": "1500ms"}
        wait_for(lambda: st.info().state.messages == 1, 10, 0.1, "the TTL'd messages to expire")
        assert st.get_msg(last_by_subject=f"{name}.b").data == b"kept"


def test_ttl_never_and_timedelta(js, unique):
    name = f"TTL{unique}"
    with _stream(js, name, allow_msg_ttl=True) as st:
        a = js.publish(f"{name}.a", ttl="never")
        b = js.publish(f"{name}.b", ttl=dt.timedelta(minutes=1))
        assert st.get_msg(a.seq).headers == {"Nats-TTL": "never"}
        assert st.get_msg(b.seq).headers == {"Nats-TTL": "60s"}


def test_ttl_refused_by_stream_without_allow_msg_ttl(js, stream):
    with pytest.raises(jssync.APIError) as info:
        js.publish(f"{stream.name}.a", b"x", ttl=5)
    assert info.value.err_code == 10166
    assert "per-message TTL is disabled" in str(info.value)
    with pytest.raises(jssync.APIError) as info:
        js.publish_async(f"{stream.name}.a", b"x", ttl=5).result(5)
    assert info.value.err_code == 10166
    assert stream.info().state.messages == 0


@pytest.mark.parametrize("bad", [0, -1, 0.5, "500ms", "5 s", "abc", b"5", float("nan"), float("inf"), True, [5]])
def test_ttl_bad_values_fail_before_sending(js, stream, bad):
    with pytest.raises(ValueError, match="ttl") as info:
        js.publish(f"{stream.name}.a", b"x", ttl=bad)
    assert repr(bad)[:10] in str(info.value)
    with pytest.raises(ValueError, match="ttl"):
        js.publish_async(f"{stream.name}.a", b"x", ttl=bad)
    assert stream.info().state.messages == 0


def test_subject_delete_marker_after_ttl(js, unique):
    name = f"TTL{unique}"
    with _stream(js, name, allow_msg_ttl=True, subject_delete_marker_ttl=2.0) as st:
        assert st.cached_info.config.subject_delete_marker_ttl == 2.0
        ack = js.publish(f"{name}.k", b"v", ttl=1)
        # below the marker TTL: the server raises it to that floor (ADR-43)
        assert st.get_msg(ack.seq).headers == {"Nats-TTL": "2"}

        def marker() -> bool:
            try:
                m = st.get_msg(last_by_subject=f"{name}.k")
            except jssync.MessageNotFoundError:
                return False
            return bool(m.headers and m.headers.get("Nats-Marker-Reason") == "MaxAge")

        wait_for(marker, 10, 0.1, "the subject delete marker")
        m = st.get_msg(last_by_subject=f"{name}.k")
        assert m.headers == {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "2s", "Nats-Rollup": "sub"}


@pytest.mark.parametrize("bad", [0.5, -2, "500ms", "1 s", float("nan")])
def test_subject_delete_marker_ttl_bad_values(js, unique, bad):
    with pytest.raises(ValueError, match="subject_delete_marker_ttl"):
        js.create_stream(name=f"TTL{unique}", subjects=[f"TTL{unique}.>"], allow_msg_ttl=True,
                         subject_delete_marker_ttl=bad)
    with pytest.raises(jssync.StreamNotFoundError):
        js.stream(f"TTL{unique}")


# -- counters (ADR-49) ------------------------------------------------------------------------


def test_counter_add_get_big_values(js, unique):
    name = f"CNT{unique}"
    with _stream(js, name, allow_msg_counter=True, allow_direct=True):
        c = js.counter(f"{name}.hits")
        with pytest.raises(jssync.MessageNotFoundError, match="no counter value"):
            c.get()
        assert c.add(5) == 5
        assert c.add() == 6
        assert c.add(-10) == -4
        big = 10**40
        assert c.add(big) == big - 4
        assert c.get() == big - 4
        e = c.entry()
        assert (e.subject, e.value, e.incr, e.sources) == (f"{name}.hits", big - 4, big, {})
        assert c.add(0) == big - 4  # 0 is a valid increment (a read through the PubAck)


def test_counter_refused_on_plain_stream(js, stream):
    c = js.counter(f"{stream.name}.x", stream=stream.name)
    with pytest.raises(jssync.APIError) as info:
        c.add(1)
    assert info.value.err_code == 10168


@pytest.mark.parametrize("bad", [1.5, "1", True, None])
def test_counter_bad_increment(js, stream, bad):
    with pytest.raises(ValueError, match="counter increment must be an int"):
        js.counter(f"{stream.name}.x").add(bad)
    assert stream.info().state.messages == 0


def test_counter_bad_subject(js):
    with pytest.raises(jssync.BadSubjectError):
        js.counter("a.*")


def test_sourced_counter_aggregates(js, unique):
    a, b, agg = f"CA{unique}", f"CB{unique}", f"CG{unique}"
    with _stream(js, a, allow_msg_counter=True), _stream(js, b, allow_msg_counter=True):
        js.counter(f"{a}.hits").add(3)
        js.counter(f"{b}.hits").add(4)
        sources = [StreamSource(name=n, subject_transforms=[SubjectTransform(src=f"{n}.hits", dest=f"{agg}.hits")])
                   for n in (a, b)]
        # the aggregate listens on no subject of its own: it only sums its sources
        js.create_stream(name=agg, subjects=[], storage="memory", allow_msg_counter=True, sources=sources)
        try:
            total = js.counter(f"{agg}.hits", stream=agg)  # it captures no subject: name it
            wait_for(lambda: _value(total) == 7, 10, 0.05, "the aggregate to reach 7")
            js.counter(f"{a}.hits").add(10)
            wait_for(lambda: _value(total) == 17, 10, 0.05, "the aggregate to reach 17")
            e = total.entry()
            assert e.sources == {a: {f"{a}.hits": 13}, b: {f"{b}.hits": 4}}
            assert e.incr == 10
        finally:
            js.delete_stream(agg)


def _value(c: Any) -> int | None:
    try:
        return int(c.get())
    except jssync.MessageNotFoundError:
        return None


# -- atomic batch publish (ADR-50) ------------------------------------------------------------


def test_batch_commits_all(js, unique):
    name = f"BAT{unique}"
    with _stream(js, name, allow_atomic=True) as st:
        with js.batch_publish() as batch:
            for i in range(5):
                batch.add(f"{name}.{i}", b"m%d" % i, headers={"X-I": str(i)})
            assert len(batch) == 5
            assert st.info().state.messages == 0  # nothing sent before the commit
        assert batch.ack is not None
        assert (batch.ack.batch_id, batch.ack.batch_size, batch.ack.seq) == (batch.batch_id, 5, 5)
        m = st.get_msg(5)
        assert m.data == b"m4"
        assert m.headers is not None and m.headers["Nats-Batch-Commit"] == "1" and m.headers["X-I"] == "4"


def test_batch_of_one_and_max_size(js, unique):
    name = f"BAT{unique}"
    with _stream(js, name, allow_atomic=True) as st:
        b1 = js.batch_publish(batch_id="one")
        b1.add(f"{name}.a", b"x")
        ack = b1.commit()
        assert (ack.batch_id, ack.batch_size) == ("one", 1)
        with js.batch_publish() as batch:
            for _ in range(MAX_BATCH_MESSAGES):
                batch.add(f"{name}.b")
            with pytest.raises(ValueError, match="at most 1000 messages"):
                batch.add(f"{name}.b")
        assert batch.ack is not None and batch.ack.batch_size == MAX_BATCH_MESSAGES
        assert st.info().state.messages == 1 + MAX_BATCH_MESSAGES


def test_batch_failed_expectation_in_the_middle_stores_nothing(js, unique):
    name = f"BAT{unique}"
    with _stream(js, name, allow_atomic=True) as st:
        js.publish(f"{name}.x", b"before")
        batch = js.batch_publish()
        batch.add(f"{name}.a", b"1", expected_last_seq=1)
        batch.add(f"{name}.b", b"2", expected_last_subject_seq=99)  # wrong: fails the batch
        batch.add(f"{name}.c", b"3")
        with pytest.raises(jssync.WrongLastSequenceError) as info:
            batch.commit()
        assert info.value.err_code == 10071
        assert st.info().state.messages == 1
        with pytest.raises(ValueError, match="committed"):
            batch.commit()


def test_batch_abandoned_by_exception_sends_nothing(js, unique):
    name = f"BAT{unique}"
    with _stream(js, name, allow_atomic=True) as st:
        seen: list[Any] = []
        sub = js.conn.subscribe(f"{name}.>", callback=seen.append)
        js.conn.flush()
        with pytest.raises(RuntimeError, match="boom"), js.batch_publish() as batch:
            batch.add(f"{name}.a", b"1")
            batch.add(f"{name}.b", b"2")
            raise RuntimeError("boom")
        assert batch.ack is None
        js.publish(f"{name}.z", b"after")  # everything sent before it has been seen
        wait_for(lambda: len(seen) == 1, 5, what="the marker publish")
        assert [m.subject for m in seen] == [f"{name}.z"]
        assert st.info().state.messages == 1
        sub.unsubscribe()
        with pytest.raises(ValueError, match="discarded"):
            batch.add(f"{name}.c")


def test_batch_refused_by_stream_without_allow_atomic(js, stream):
    batch = js.batch_publish()
    batch.add(f"{stream.name}.a", b"1")
    batch.add(f"{stream.name}.b", b"2")
    with pytest.raises(jssync.APIError) as info:
        batch.commit()
    assert info.value.err_code == 10174
    assert stream.info().state.messages == 0


def test_batch_no_stream(js, unique):
    batch = js.batch_publish()
    batch.add(f"NOSTREAM{unique}.a")
    batch.add(f"NOSTREAM{unique}.b")
    with pytest.raises(jssync.NoRespondersError, match="no stream responded"):
        batch.commit(timeout=2)


def test_batch_bad_input(js, stream):
    with pytest.raises(ValueError, match="batch_id"):
        js.batch_publish(batch_id="x" * 65)
    with pytest.raises(ValueError, match="batch_id"):
        js.batch_publish(batch_id="has space")
    batch = js.batch_publish()
    with pytest.raises(ValueError, match="empty"):
        batch.commit()
    with pytest.raises(jssync.BadSubjectError):
        batch.add("bad subject")
    with pytest.raises(ValueError, match="Expected-Last-Msg-Id"):
        batch.add(f"{stream.name}.a", headers={"Nats-Expected-Last-Msg-Id": "m"})
    with pytest.raises(ValueError, match="Nats-Batch"):
        batch.add(f"{stream.name}.a", headers={"Nats-Batch-Id": "m"})
    with pytest.raises(ValueError, match="ttl"):
        batch.add(f"{stream.name}.a", ttl=0)
    batch.add(f"{stream.name}.a", msg_id="m1", expected_last_seq=0)
    with pytest.raises(ValueError, match="first message"):
        batch.add(f"{stream.name}.b", expected_last_seq=0)
    with pytest.raises(ValueError, match="'m1' is already in this batch"):
        batch.add(f"{stream.name}.b", msg_id="m1")
    with pytest.raises(jssync.MaxPayloadError):
        batch.add(f"{stream.name}.b", b"x" * js.conn.max_payload)
    assert len(batch) == 1
    batch.discard()
    assert stream.info().state.messages == 0


# -- message schedules (ADR-51) ---------------------------------------------------------------


@contextmanager
def _sched_stream(js: Any, unique: str) -> Iterator[Any]:
    with _stream(js, f"SCH{unique}", allow_msg_schedules=True, allow_msg_ttl=True) as st:
        yield st


def test_schedule_at(js, unique):
    name = f"SCH{unique}"
    with _sched_stream(js, unique) as st:
        when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        js.publish_scheduled(f"{name}.sched.once", b"later", target=f"{name}.out", at=when, ttl=5,
                             headers={"X-App": "1"})
        assert _count(st, f"{name}.out") == 0

        def fired() -> bool:
            return _count(st, f"{name}.out") == 1

        wait_for(fired, 10, 0.1, "the @at schedule to fire")
        m = st.get_msg(last_by_subject=f"{name}.out")
        assert m.data == b"later"
        assert m.headers is not None
        assert (m.headers["Nats-Scheduler"], m.headers["Nats-Schedule-Next"], m.headers["Nats-TTL"],
                m.headers["X-App"]) == (f"{name}.sched.once", "purge", "5s", "1")
        assert m.time is not None and m.time >= when.replace(microsecond=0)
        wait_for(lambda: _count(st, f"{name}.sched.once") == 0, 5, 0.1, "the fired schedule to be removed")


def test_schedule_every_and_cron(js, unique):
    name = f"SCH{unique}"
    with _sched_stream(js, unique) as st:
        js.publish_scheduled(f"{name}.sched.tick", b"tick", target=f"{name}.ticks", every=1)
        js.publish_scheduled(f"{name}.sched.cron", b"cron", target=f"{name}.crons", cron="* * * * * *",
                             time_zone="Europe/Amsterdam")
        wait_for(lambda: _count(st, f"{name}.ticks") >= 2 and _count(st, f"{name}.crons") >= 2, 10, 0.1,
                 "two firings of each schedule")
        m = st.get_msg(last_by_subject=f"{name}.ticks")
        assert m.data == b"tick" and m.headers is not None and m.headers["Nats-Scheduler"] == f"{name}.sched.tick"
        assert _count(st, f"{name}.sched.tick") == 1  # the schedule stays (until purged)


def test_schedule_source_samples_the_last_message(js, unique):
    name = f"SCH{unique}"
    with _sched_stream(js, unique) as st:
        js.publish(f"{name}.sensor", b"21.5")
        js.publish_scheduled(f"{name}.sched.sample", b"fallback", target=f"{name}.sampled", every=1,
                             source=f"{name}.sensor")
        wait_for(lambda: _count(st, f"{name}.sampled") >= 1, 10, 0.1, "a sample")
        assert st.get_msg(last_by_subject=f"{name}.sampled").data == b"21.5"


def test_schedule_ttl_needs_allow_msg_ttl(js, unique):
    name = f"SCH{unique}"
    with _stream(js, name, allow_msg_schedules=True):
        with pytest.raises(jssync.APIError) as info:
            js.publish_scheduled(f"{name}.s", b"", target=f"{name}.t", every=60, ttl=5)
        assert info.value.err_code == 10166


def test_schedule_refused_by_plain_stream(js, stream):
    with pytest.raises(jssync.APIError) as info:
        js.publish_scheduled(f"{stream.name}.s", b"", target=f"{stream.name}.t", every=60)
    assert info.value.err_code == 10188


def test_schedule_target_outside_stream(js, unique):
    name = f"SCH{unique}"
    with _sched_stream(js, unique):
        with pytest.raises(jssync.APIError) as info:
            js.publish_scheduled(f"{name}.s", b"", target="elsewhere.t", every=60)
        assert info.value.err_code == 10190


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "exactly one of"),
    ({"every": 5, "cron": "@hourly"}, "exactly one of"),
    ({"at": dt.datetime(2030, 1, 1)}, r"naive datetime.datetime\(2030, 1, 1"),
    ({"at": "2030-01-01T00:00:00Z"}, "aware datetime"),
    ({"every": 0.5}, "every must be .* >= 1s?, got 0.5"),
    ({"every": "1 m"}, "every must be a duration .*, got '1 m'"),
    ({"cron": "* * * * *"}, "'\\* \\* \\* \\* \\*' has 5 fields; NATS schedules need 6"),
    ({"cron": "0 0 * * * * *"}, "has 7 fields"),
    ({"cron": "@every 1s"}, "use at= or every="),
    ({"cron": "* * * * * $"}, "characters"),
    ({"every": 5, "time_zone": "UTC"}, "time_zone applies to cron"),
    ({"cron": "@hourly", "time_zone": ""}, "time_zone must be"),
    ({"every": 5, "ttl": 0}, "ttl"),
    ({"every": 5, "source": "a.*"}, "wildcard|source"),
])
def test_schedule_bad_input(js, stream, kwargs, match):
    with pytest.raises((ValueError, jssync.BadSubjectError), match=match):
        js.publish_scheduled(f"{stream.name}.s", b"", target=f"{stream.name}.t", **kwargs)
    assert stream.info().state.messages == 0


def test_schedule_bad_target(js, stream):
    with pytest.raises(ValueError, match="must differ"):
        js.publish_scheduled(f"{stream.name}.s", target=f"{stream.name}.s", every=5)
    with pytest.raises(jssync.BadSubjectError):
        js.publish_scheduled(f"{stream.name}.s", target=f"{stream.name}.>", every=5)


# -- PubAck shapes of these features (no server needed) ---------------------------------------


class _Reply:
    headers = None

    def __init__(self, data: bytes) -> None:
        self.data = data


@pytest.mark.parametrize(("data", "want"), [
    (b'{"stream":"C","seq":1,"val":"5"}', ("C", 1, None, "5", None, None)),
    (b'{"stream":"C","domain":"hub","seq":22802063,"val":"-100000000000000000000000000002"}',
     ("C", 22802063, "hub", "-100000000000000000000000000002", None, None)),
    (b'{"stream":"B","seq":3,"batch":"b1","count":3}', ("B", 3, None, None, "b1", 3)),
    (b'{"stream":"B","seq":7,"duplicate":true}', ("B", 7, None, None, None, None)),
])
def test_pub_ack_with_val_and_batch_fields(data, want):
    """The server's replies as seen in the experiments: ``val`` and ``batch``/``count`` survive
    the fast path (they fall through to the JSON path)."""
    from jssync.jetstream.context import _parse_pub_ack

    ack = _parse_pub_ack(_Reply(data))  # type: ignore[arg-type]
    assert (ack.stream, ack.seq, ack.domain, ack.val, ack.batch_id, ack.batch_size) == want


@pytest.mark.parametrize(("data", "err_code"), [
    (b'{"error":{"code":400,"err_code":10166,"description":"per-message TTL is disabled"},"stream":"T","seq":0}',
     10166),
    (b'{"error":{"code":400,"err_code":10199,"description":"atomic publish batch is too large: 1000"},'
     b'"stream":"B","seq":0}', 10199),
])
def test_pub_ack_error_with_stream_and_seq(data, err_code):
    """Feature errors carry ``stream`` and ``seq: 0`` too: still an error, not a PubAck."""
    from jssync.jetstream.context import _parse_pub_ack

    with pytest.raises(jssync.APIError) as info:
        _parse_pub_ack(_Reply(data))  # type: ignore[arg-type]
    assert info.value.err_code == err_code
