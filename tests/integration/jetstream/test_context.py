"""JetStream context: streams, consumers, publishing, errors, validation (real server)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


# -- streams ---------------------------------------------------------------------------------


def test_stream_crud(js, unique):
    name = f"CRUD{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", max_msgs=10)
    try:
        assert st.name == name and st.cached_info.config.max_msgs == 10
        # same config again: returns the stream
        js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", max_msgs=10)
        with pytest.raises(jssync.StreamNameInUseError) as ei:
            js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", max_msgs=11)
        assert ei.value.err_code == 10058 and ei.value.code == 400 and ei.value.description
        st2 = js.update_stream(name=name, subjects=[f"{name}.*"], storage="memory", max_msgs=20)
        assert st2.cached_info.config.max_msgs == 20
        cfg = st2.cached_info.config.evolve(max_msgs=30)
        assert js.create_or_update_stream(cfg).cached_info.config.max_msgs == 30
        assert js.stream(name).info().config.max_msgs == 30
        assert name in list(js.stream_names())
        assert name in list(js.stream_names(subject=f"{name}.x"))
        assert name not in list(js.stream_names(subject="nothing.here.at.all"))
        assert any(i.config.name == name for i in js.streams())
    finally:
        assert js.delete_stream(name) is True
    with pytest.raises(jssync.StreamNotFoundError) as ei:
        js.stream(name)
    assert ei.value.err_code == 10059 and ei.value.code == 404
    with pytest.raises(jssync.StreamNotFoundError):
        js.delete_stream(name)
    with pytest.raises(jssync.StreamNotFoundError):
        js.update_stream(name=name, subjects=[f"{name}.*"])


def test_create_or_update_creates(js, unique):
    name = f"COU{unique}"
    st = js.create_or_update_stream(jssync.StreamConfig(name=name, subjects=[f"{name}.a"], storage="memory"))
    assert st.name == name
    js.delete_stream(name)


def test_stream_listing_pages(js, unique):
    names = [f"P{unique}_{i}" for i in range(260)]  # more than one page of 256 names
    try:
        for n in names:
            js.create_stream(name=n, subjects=[f"{n}.x"], storage="memory")
        listed = set(js.stream_names())
        assert set(names) <= listed
        infos = {i.config.name for i in js.streams()}
        assert set(names) <= infos
    finally:
        for n in names:
            try:
                js.delete_stream(n)
            except jssync.StreamNotFoundError:
                pass


def test_info_subjects_filter_and_deleted_details(js, stream):
    for i in range(5):
        js.publish(f"{stream.name}.a.{i}", b"x")
    js.publish(f"{stream.name}.b", b"x")
    stream.delete_msg(2)
    info = stream.info(subjects_filter=f"{stream.name}.a.>", deleted_details=True)
    assert info.state.subjects == {f"{stream.name}.a.{i}": 1 for i in (0, 2, 3, 4)}  # seq 2 was a.1
    assert info.state.deleted == [2]
    assert stream.cached_info is info


def test_bad_subject_filters_are_refused_before_sending(js, nc, stream):
    # '>' must be the last token: the subject is refused as nats.go does (ErrInvalidSubject),
    # and no API request goes out
    seen = []
    spy = nc.subscribe("$JS.API.>", callback=seen.append)
    nc.flush()
    bad = f"{stream.name}.>.123"
    calls = [
        lambda: js.find_stream_name_by_subject(bad),
        lambda: js.streams(subject=bad),
        lambda: js.stream_names(subject=bad),
        lambda: js.streams(subject="a..b"),
        lambda: stream.get_msg(last_by_subject=bad),
        lambda: stream.get_msg(next_by_subject=bad),
        lambda: stream.info(subjects_filter=bad),
    ]
    for call in calls:
        with pytest.raises(jssync.BadSubjectError):
            call()
    nc.flush()
    spy.unsubscribe()
    assert seen == []


def test_purge_variants(js, stream):
    s = stream.name
    for i in range(10):
        js.publish(f"{s}.a" if i % 2 else f"{s}.b", b"%d" % i)
    assert stream.purge(subject=f"{s}.a") == 5
    assert stream.info().state.messages == 5
    assert stream.purge(keep=2) == 3
    assert stream.info().state.messages == 2
    assert stream.purge(seq=9) == 1  # removes everything below seq 9 (seq 7)
    assert stream.purge() == 1
    with pytest.raises(ValueError, match="seq or keep"):
        stream.purge(seq=1, keep=1)


def test_get_msg_and_delete_msg(js, stream):
    s = stream.name
    js.publish(f"{s}.a", b"one", headers={"H": "1"})
    js.publish(f"{s}.b", b"two")
    js.publish(f"{s}.a", b"three")
    m = stream.get_msg(1)
    assert (m.seq, m.subject, m.data, m.headers) == (1, f"{s}.a", b"one", {"H": "1"})
    assert m.time is not None and m.time.tzinfo is not None
    assert stream.get_msg(last_by_subject=f"{s}.a").data == b"three"
    assert stream.get_msg(next_by_subject=f"{s}.b").seq == 2
    assert stream.get_msg(2, next_by_subject=f"{s}.a").seq == 3
    assert stream.delete_msg(1) is True
    with pytest.raises(jssync.MessageNotFoundError) as ei:
        stream.get_msg(1)
    assert ei.value.err_code == 10037
    assert stream.delete_msg(2, erase=True) is True
    with pytest.raises(jssync.APIError):
        stream.delete_msg(2)
    with pytest.raises(ValueError):
        stream.get_msg()


def test_account_info(js, stream):
    info = js.account_info()
    assert info.streams >= 1
    assert info.limits is not None


# -- consumers -------------------------------------------------------------------------------


def test_consumer_create_update_semantics(js, stream):
    s = stream.name
    c = js.create_consumer(s, durable_name="D", ack_policy="explicit", description="one")
    assert c.name == "D" and c.stream == s and c.cached_info.config.description == "one"
    # create with the same config is fine; with another config it fails
    js.create_consumer(s, durable_name="D", ack_policy="explicit", description="one")
    with pytest.raises(jssync.ConsumerExistsError) as ei:
        js.create_consumer(s, durable_name="D", ack_policy="explicit", description="two")
    assert ei.value.err_code in (10013, 10148)
    c2 = js.update_consumer(s, durable_name="D", ack_policy="explicit", description="two")
    assert c2.cached_info.config.description == "two"
    with pytest.raises(jssync.ConsumerNotFoundError):
        js.update_consumer(s, durable_name="NOPE", ack_policy="explicit")
    c3 = js.create_or_update_consumer(s, durable_name="D", ack_policy="explicit", description="three")
    assert c3.info().config.description == "three"
    js.create_or_update_consumer(s, name="NEW", ack_policy="explicit")
    assert set(js.consumer_names(s)) == {"D", "NEW"}
    assert {i.name for i in stream.consumers()} == {"D", "NEW"}
    assert stream.consumer("D").name == "D"
    assert c.delete() is True
    with pytest.raises(jssync.ConsumerNotFoundError) as ei:
        js.consumer(s, "D")
    assert ei.value.err_code == 10014
    with pytest.raises(jssync.ConsumerNotFoundError):
        stream.delete_consumer("D")


def test_ephemeral_and_named_ephemeral(js, stream):
    eph = stream.create_consumer(ack_policy="explicit", inactive_threshold=10.0)
    assert eph.name and eph.cached_info.config.durable_name is None
    named = stream.create_consumer(name="eph-named", ack_policy="none", inactive_threshold=10.0)
    assert named.name == "eph-named" and named.cached_info.config.durable_name is None
    assert {eph.name, "eph-named"} <= set(stream.consumer_names())


def test_multiple_filter_subjects(js, stream):
    s = stream.name
    c = stream.create_consumer(durable_name="F", filter_subjects=[f"{s}.a", f"{s}.b"])
    assert c.cached_info.config.filter_subjects == [f"{s}.a", f"{s}.b"]
    js.publish(f"{s}.a", b"1")
    js.publish(f"{s}.c", b"2")
    js.publish(f"{s}.b", b"3")
    # the server updates a consumer's pending count just after the PubAck: read until it has
    wait_for(lambda: c.info().num_pending == 2, 10, what="num_pending 2 (of 3 stored, 2 filtered)")
    assert c.info().num_pending == 2


def test_consumer_paging(js, stream):
    for i in range(260):
        stream.create_consumer(name=f"c{i}", ack_policy="none", inactive_threshold=30.0)
    assert len(set(stream.consumer_names())) == 260
    assert len({i.name for i in stream.consumers()}) == 260


def test_pause_resume(js, stream):
    c = stream.create_consumer(durable_name="PZ")
    until = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    resp = js.pause_consumer(stream.name, "PZ", until)
    assert resp.get("paused") is True
    resp = js.resume_consumer(stream.name, "PZ")
    assert resp.get("paused") is False
    assert c.info().name == "PZ"


# -- publishing ------------------------------------------------------------------------------


def test_publish_and_dedup(js, stream):
    s = stream.name
    a1 = js.publish(f"{s}.x", b"hello1", msg_id="1")
    a2 = js.publish(f"{s}.x", b"hello2", msg_id="1")
    assert (a1.stream, a1.seq, a1.duplicate) == (s, 1, False)
    assert (a2.seq, a2.duplicate) == (1, True)
    assert stream.info().state.messages == 1
    assert isinstance(a1, jssync.PubAck)


def test_expected_headers(js, stream):
    s = stream.name
    js.publish(f"{s}.a", b"1", msg_id="m1")
    js.publish(f"{s}.b", b"2")
    assert js.publish(f"{s}.a", b"3", expected_stream=s).seq == 3
    with pytest.raises(jssync.StreamNotMatchError) as ei:
        js.publish(f"{s}.a", b"x", expected_stream="OTHER")
    assert ei.value.err_code == 10060
    assert js.publish(f"{s}.a", b"4", expected_last_seq=3).seq == 4
    with pytest.raises(jssync.WrongLastSequenceError) as ei:
        js.publish(f"{s}.a", b"x", expected_last_seq=1)
    assert ei.value.err_code == 10071 and "sequence" in ei.value.description
    assert js.publish(f"{s}.b", b"5", expected_last_subject_seq=2).seq == 5
    with pytest.raises(jssync.WrongLastSequenceError):
        js.publish(f"{s}.b", b"x", expected_last_subject_seq=2)
    js.publish(f"{s}.c", b"6", msg_id="m6")
    assert js.publish(f"{s}.c", b"7", expected_last_msg_id="m6").seq == 7
    with pytest.raises(jssync.WrongLastMsgIdError) as ei:
        js.publish(f"{s}.c", b"x", expected_last_msg_id="m1")
    assert ei.value.err_code == 10070


def test_publish_no_stream(js):
    with pytest.raises(jssync.NoRespondersError, match="no stream"):
        js.publish("no.stream.listens.here", b"x", retry_attempts=1, retry_wait=0.05)


def test_publish_async_and_completed(js, stream):
    s = stream.name
    futs = [js.publish_async(f"{s}.a", b"%d" % i) for i in range(5000)]
    js.publish_async_completed(timeout=30)
    assert js.publish_async_pending() == 0
    seqs = [f.result(0).seq for f in futs]
    assert seqs == list(range(1, 5001))
    dup = js.publish_async(f"{s}.a", b"x", msg_id="once")
    dup2 = js.publish_async(f"{s}.a", b"x", msg_id="once")
    assert dup.result(5).seq == dup2.result(5).seq and dup2.result().duplicate
    bad = js.publish_async(f"{s}.a", b"x", expected_last_seq=1)
    with pytest.raises(jssync.WrongLastSequenceError):
        bad.result(5)


def test_publish_async_futures_work_with_concurrent_futures(js, stream):
    """The Futures share one Condition internally; the standard helpers still work."""
    import concurrent.futures as cf

    s = stream.name
    futs = [js.publish_async(f"{s}.f", b"%d" % i) for i in range(300)]
    assert not any(f.cancel() for f in futs), "a sent publish cannot be cancelled"
    done, not_done = cf.wait(futs, timeout=30)
    assert not not_done and len(done) == 300
    assert sorted(f.result().seq for f in cf.as_completed(futs, timeout=5)) == list(range(1, 301))
    # several threads blocked in result() on different Futures all wake with their own ack
    later = [js.publish_async(f"{s}.g", b"%d" % i) for i in range(8)]
    got: dict[int, int] = {}

    def wait_one(i: int) -> None:
        got[i] = later[i].result(10).seq

    ts = [threading.Thread(target=wait_one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(15)
    assert got == {i: 301 + i for i in range(8)}
    calls: list[int] = []
    ev = threading.Event()
    f = js.publish_async(f"{s}.h", b"x")
    f.add_done_callback(lambda fut: (calls.append(fut.result().seq), ev.set()))
    assert ev.wait(10) and calls == [309]
    assert f.exception(0) is None and f.done() and not f.cancelled() and not f.running()
    # result()/exception() wait for their own Future, not for the first notify of the
    # shared Condition (which other Futures completing also send)
    for _ in range(10):
        batch = [js.publish_async(f"{s}.r", b"x") for _ in range(200)]
        assert batch[-1].exception() is None
        batch = [js.publish_async(f"{s}.r", b"x") for _ in range(200)]
        assert batch[-1].result().seq > 0
    js.publish_async_completed(timeout=30)


@contextlib.contextmanager
def _sent_on(nc, prefix: str) -> Iterator[list[str]]:
    """The subjects of the messages the connection queues for sending, for ``prefix*``.

    Both doors into the outgoing queue: the requests' (core/requests.py) and ``conn.internal``'s
    (publish_async, its resends)."""
    sent: list[str] = []
    requests = nc._req
    orig = requests.enqueue
    internal = nc.internal
    orig_internal = internal.enqueue

    def spy(item, *rest):
        if item[0].startswith(prefix):
            sent.append(item[0])
        orig(item, *rest)

    requests.enqueue = spy
    internal.enqueue = spy
    try:
        yield sent
    finally:
        requests.enqueue = orig
        internal.enqueue = orig_internal


def test_publish_async_resends_while_no_stream_answers(nc, js, unique):
    """A 503 (no stream yet, or a leader election) is retried like js.publish, then fails."""
    name = f"RS{unique}"
    with _sent_on(nc, name) as sent:
        t0 = time.monotonic()
        fut = js.publish_async(f"{name}.x", b"x", retry_attempts=2, retry_wait=0.1)
        with pytest.raises(jssync.NoRespondersError):
            fut.result(10)
        assert len(sent) == 3, sent  # the first send and two resends
        assert time.monotonic() - t0 >= 0.3 - 0.05  # waited 0.1 s, then 0.2 s
        assert js.publish_async_pending() == 0

        no_retry = js.publish_async(f"{name}.x", b"x", retry_attempts=0)
        with pytest.raises(jssync.NoRespondersError):
            no_retry.result(10)
        assert len(sent) == 4

        # the stream appears between the first attempt and a resend: the Future succeeds
        sent.clear()
        fut = js.publish_async(f"{name}.y", b"late", retry_attempts=3, retry_wait=0.3)
        wait_for(lambda: sent, 5, what="the first send")
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            ack = fut.result(10)
            assert (ack.stream, ack.seq) == (name, 1)
            assert len(sent) >= 2, "it succeeded on a resend"
            assert js.stream(name).get_msg(1).data == b"late"
        finally:
            js.delete_stream(name)
    with pytest.raises(ValueError, match="retry_attempts"):
        js.publish_async(f"{name}.x", b"x", retry_attempts=-1)
    with pytest.raises(ValueError, match="retry_wait"):
        js.publish_async(f"{name}.x", b"x", retry_wait=-1)
    with pytest.raises(ValueError, match="retry_wait"):
        js.publish(f"{name}.x", b"x", retry_wait=float("nan"))


def test_publish_async_no_resend_after_its_future_timed_out(nats_server, nc, js, unique):
    """A resend that comes due after the sweep failed its Future is not sent."""
    name = f"RT{unique}"
    with _sent_on(nc, name) as sent:
        # 503 at once; a resend is due at +0.6 s, the deadline is +1.0 s
        fut = js.publish_async(f"{name}.x", b"x", timeout=1.0, retry_attempts=1, retry_wait=0.6)
        wait_for(lambda: 1 in js._async._retries.values(), 5, what="the resend to be scheduled")
        # a busy I/O thread: the sweep and the resend come due together, after the deadline
        blocked = threading.Event()
        nc._loop.loop.call_soon_threadsafe(
            lambda: (blocked.set(), time.sleep(1.3)))  # behaviour: the I/O thread is busy past the deadline
        assert blocked.wait(5)
        with jssync.connect(nats_server.url) as other:  # the stream appears meanwhile
            other.jetstream().create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            with pytest.raises(jssync.TimeoutError):
                fut.result(10)
            nc.flush(timeout=5)  # a resend queued with the sweep would be on the server now
            assert len(sent) == 1, sent
            assert js.stream(name).info().state.messages == 0
        finally:
            js.delete_stream(name)
    with pytest.raises(concurrent.futures.TimeoutError):
        js.publish_async(f"{name}.y", b"x", timeout=5).result(-1)


def test_publish_async_backpressure_blocks_never_drops(nc, unique):
    js = nc.jetstream(max_pending=10)
    name = f"BP{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        futs = []
        seen_max = [0]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen_max[0] = max(seen_max[0], js.publish_async_pending())

        t = threading.Thread(target=watch)
        t.start()
        for i in range(2000):
            futs.append(js.publish_async(f"{name}.x", b"%d" % i))
        js.publish_async_completed(timeout=30)
        stop.set()
        t.join()
        assert seen_max[0] <= 10
        assert sorted(f.result().seq for f in futs) == list(range(1, 2001))
    finally:
        js.delete_stream(name)


def test_publish_async_times_out_without_stream(nc):
    js = nc.jetstream(timeout=0.5)
    nc.subscribe("js.silent.subject")  # a listener that never answers: no "no responders"
    fut = js.publish_async("js.silent.subject", b"x")
    with pytest.raises(jssync.TimeoutError):
        fut.result(5)
    js.publish_async_completed(timeout=2)


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "a.b", "a*", "a>", "a b", "a/b", "a\\b", "tab\t"])
def test_bad_stream_names_rejected_before_sending(js, bad):
    with pytest.raises(ValueError, match="stream name"):
        js.create_stream(name=bad, subjects=["x"])
    with pytest.raises(ValueError, match="stream name"):
        js.stream(bad)
    with pytest.raises(ValueError, match="consumer name|durable name"):
        js.create_consumer("OK", durable_name=bad or None, name=bad or "x.y")


def test_bad_options_and_subjects(js, stream):
    with pytest.raises(TypeError, match="unknown option .no_such_option. for create_stream"):
        js.create_stream(name="X", subjects=["x"], no_such_option=1)
    with pytest.raises(TypeError, match="list of subjects"):
        js.create_stream(name="X", subjects="x.y")
    with pytest.raises(jssync.BadSubjectError, match="stream subject"):
        js.create_stream(name="X", subjects=["bad subject"])
    with pytest.raises(jssync.BadSubjectError, match="filter subject"):
        stream.create_consumer(durable_name="Q", filter_subject="a..b")
    with pytest.raises(jssync.BadSubjectError):
        js.publish("a.*", b"x")
    with pytest.raises(jssync.BadHeaderError, match="CR or LF"):
        js.publish(f"{stream.name}.a", b"x", headers={"X": "a\nb"})
    with pytest.raises(jssync.BadHeaderError, match="CR or LF"):
        js.publish_async(f"{stream.name}.a", b"x", headers={"X": "a\rb"})
    with pytest.raises(jssync.MaxPayloadError, match="max_payload"):
        js.publish(f"{stream.name}.a", b"x" * (js.conn.max_payload + 1))
    with pytest.raises(jssync.MaxPayloadError):
        js.publish_async(f"{stream.name}.a", b"x" * (js.conn.max_payload + 1))
    with pytest.raises(ValueError, match="expected_last_seq"):
        js.publish(f"{stream.name}.a", b"x", expected_last_seq=-1)
    assert js.publish_async_pending() == 0
    assert stream.info().state.messages == 0  # nothing was sent


def test_jetstream_not_enabled():
    with NatsServer(jetstream=False) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream(timeout=1)
        with pytest.raises(jssync.ServiceUnavailableError, match="not available"):
            js.account_info()


def test_domain_and_api_prefix():
    with NatsServer(domain="hub") as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream(domain="hub")
        assert js.prefix == "$JS.hub.API"
        st = js.create_stream(name="D", subjects=["d.>"], storage="memory")
        ack = js.publish("d.x", b"1")
        assert ack.domain == "hub" and ack.stream == "D"
        js2 = nc.jetstream(api_prefix="$JS.hub.API.")
        assert js2.stream("D").name == st.name
        with pytest.raises(ValueError):
            nc.jetstream(domain="a.b")
        with pytest.raises(ValueError):
            nc.jetstream(domain="hub", api_prefix="$JS.API")
        js.delete_stream("D")


def test_api_error_hierarchy():
    from jssync.base.errors import api_error

    e = api_error(404, 10059, "stream not found")
    assert isinstance(e, jssync.StreamNotFoundError) and isinstance(e, jssync.NotFoundError)
    assert isinstance(e, jssync.APIError) and isinstance(e, jssync.JetStreamError) and isinstance(e, jssync.Error)
    unknown = api_error(400, 99999, "strange")
    assert type(unknown) is jssync.APIError and unknown.err_code == 99999
    assert jssync.JetStreamAPIError is jssync.APIError
