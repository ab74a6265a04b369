"""Pull consumers (ADR-37): fetch, fetch_bytes, fetch_no_wait, next, consume, acks (real server)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import jssync
from jssync.base.status import PullRequestError, message_size
from jssync.jetstream.pull import ConsumeContext, FetchResult
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def publish(js, stream, n, start=0, size=None):
    for i in range(start, start + n):
        js.publish_async(f"{stream.name}.m", b"x" * size if size else b"%d" % i)
    js.publish_async_completed(10)


def durable(stream, name="D", **cfg):
    cfg.setdefault("ack_policy", "explicit")
    return stream.create_consumer(durable_name=name, **cfg)


def raw_consumer(js, stream, name, **server_cfg):
    """Create a consumer with server fields nats-py's ConsumerConfig does not know (max_batch, ...)."""
    cfg = {"durable_name": name, "ack_policy": "explicit", **server_cfg}
    js._api(f"CONSUMER.CREATE.{stream.name}.{name}", {"stream_name": stream.name, "config": cfg})
    return js.consumer(stream.name, name)


# -- fetch ------------------------------------------------------------------------------------


def test_fetch_yields_messages_as_they_arrive(js, stream):
    c = durable(stream)
    res = c.fetch(3, expires=10)
    assert isinstance(res, FetchResult)
    it = iter(res)
    js.publish(f"{stream.name}.a", b"first")
    t0 = time.monotonic()
    m = next(it)
    assert m.data == b"first" and time.monotonic() - t0 < 2 * FACTOR  # not after the batch or expiry
    m.ack()
    publish(js, stream, 2)
    rest = [m.data for m in it]
    assert rest == [b"0", b"1"]
    assert time.monotonic() - t0 < 5 * FACTOR
    assert res.error is None and res.received == 3


def test_fetch_ends_on_expiry_with_fewer_messages(js, stream):
    publish(js, stream, 2)
    c = durable(stream)
    t0 = time.monotonic()
    res = c.fetch(10, expires=1.0)
    got = [m.data for m in res]
    dt = time.monotonic() - t0
    assert got == [b"0", b"1"]
    assert 0.8 < dt < 3 * FACTOR
    assert res.error is None


def test_fetch_metadata_and_ack(js, stream):
    publish(js, stream, 3)
    c = durable(stream)
    msgs = list(c.fetch(3, expires=2))
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3]
    assert [m.metadata.sequence.consumer for m in msgs] == [1, 2, 3]
    assert msgs[0].metadata.stream == stream.name and msgs[0].metadata.consumer == "D"
    assert msgs[0].metadata.num_delivered == 1 and msgs[0].metadata.num_pending == 2
    for m in msgs:
        m.ack()
    wait_for(lambda: c.info().num_ack_pending == 0, what="acks applied")


def test_fetch_bytes_ends_cleanly_on_size_exceeded(js, stream):
    publish(js, stream, 5, size=100)
    c = durable(stream)
    probe = list(c.fetch(1, expires=2))[0]
    size = message_size(probe.subject, probe.reply, probe.headers, probe.data)
    probe.ack()
    t0 = time.monotonic()
    res = c.fetch_bytes(2 * size + size // 2, expires=10)
    got = list(res)
    assert len(got) == 2
    assert res.error is None  # 409 Message Size Exceeds MaxBytes is a normal end
    assert time.monotonic() - t0 < 3 * FACTOR  # well before expiry


def test_fetch_no_wait(js, stream):
    c = durable(stream)
    t0 = time.monotonic()
    res = c.fetch_no_wait(10)
    assert list(res) == [] and res.error is None
    assert time.monotonic() - t0 < 1 * FACTOR
    publish(js, stream, 3)
    # no_wait answers from what the consumer knows now: the stream stored the messages (PubAck),
    # the consumer learns of them asynchronously (seen answering 404 in between under load)
    wait_for(lambda: c.info().num_pending == 3, what="the consumer seeing the 3 messages")
    t0 = time.monotonic()
    assert [m.data for m in c.fetch_no_wait(10)] == [b"0", b"1", b"2"]
    assert time.monotonic() - t0 < 1 * FACTOR


def test_next(js, stream):
    c = durable(stream)
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=0.5)
    assert 0.4 < time.monotonic() - t0 < 2 * FACTOR
    publish(js, stream, 1)
    m = c.next(timeout=2)
    assert m.data == b"0"
    m.ack()


def test_fetch_reuses_inbox_and_many_fetches(js, stream):
    publish(js, stream, 50)
    c = durable(stream)
    seen = []
    for _ in range(10):
        for m in c.fetch(5, expires=2):
            seen.append(m.data)
            m.ack()
    assert seen == [b"%d" % i for i in range(50)]


def test_fetch_abandoned_iterator_is_released(js, stream):
    publish(js, stream, 10)
    c = durable(stream)
    res = c.fetch(10, expires=2)
    assert next(iter(res)).data == b"0"
    res.stop()
    assert list(res) == []
    del res
    # the next fetch starts after the messages the abandoned one took
    got = [m.data for m in c.fetch(10, expires=0.5)]
    assert b"0" not in got


def test_fetch_stop_from_another_thread_wakes_the_reader(js, stream):
    c = durable(stream)
    res = c.fetch(1, expires=10)
    stopped = threading.Timer(0.3, res.stop)
    stopped.start()
    t0 = time.monotonic()
    try:
        assert list(res) == []  # ends cleanly: nothing raised
    finally:
        stopped.join()
    assert time.monotonic() - t0 < 0.3 + 1 * FACTOR
    assert res.error is None


def test_ctrl_c_during_next_hands_the_message_on_at_once(nats_server, js, stream, sigint):
    """Ctrl-C in ``next``: the cancelled pull is still open on the server and takes the next
    message (here while the I/O thread is held, so it arrives before the UNSUB can go out);
    it is nak'ed at once and the next call gets it, not AckWait later."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread for SIGINT")  # pragma: no cover
    c = durable(stream, ack_wait=30)
    io_free = threading.Event()
    io_held = threading.Event()
    failed: list[BaseException] = []

    def hold_io() -> None:
        io_held.set()
        io_free.wait(10 * FACTOR)

    def interrupt() -> None:
        try:
            with jssync.connect(nats_server.url) as other:
                oc = other.jetstream().consumer(stream.name, "D")
                wait_for(lambda: oc.info().num_waiting == 1, what="the pull waiting")
                js.conn.internal.loop.call_soon(hold_io)
                assert io_held.wait(5 * FACTOR)
                other.jetstream().publish(f"{stream.name}.m", b"late")
                # the server delivered it to the pull the call is waiting on
                wait_for(lambda: oc.info().num_ack_pending == 1, what="the message delivered")
        except BaseException as exc:  # noqa: BLE001
            failed.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            c.next(timeout=60)
    finally:
        io_free.set()
        t.join()
    assert not failed, failed
    t0 = time.monotonic()
    msg = c.next(timeout=10 * FACTOR)
    assert msg.data == b"late"
    assert msg.metadata.num_delivered == 2  # nak'ed at once, redelivered
    assert time.monotonic() - t0 < 5 * FACTOR
    msg.ack()


def test_fetch_validation(js, stream):
    c = durable(stream)
    with pytest.raises(ValueError, match="max_messages"):
        c.fetch()
    with pytest.raises(ValueError, match="max_messages"):
        c.fetch(0)
    with pytest.raises(ValueError, match="expires"):
        c.fetch(1, expires=0)
    with pytest.raises(ValueError, match="idle_heartbeat"):
        c.fetch(1, expires=10, idle_heartbeat=0.001)  # (0.1 is fine: the server takes it)
    with pytest.raises(ValueError, match="half of expires"):
        c.fetch(1, expires=2, idle_heartbeat=1.5)
    with pytest.raises(ValueError, match="max_bytes"):
        c.fetch_bytes(0)
    with pytest.raises(ValueError, match="timeout"):
        c.next(timeout=-1)


def test_fetch_with_heartbeat(js, stream):
    c = durable(stream)
    res = c.fetch(1, expires=2, idle_heartbeat=0.5)
    assert list(res) == [] and res.error is None


# -- statuses forced for real -----------------------------------------------------------------


def test_pull_on_push_consumer_raises(js, stream, unique):
    c = stream.create_consumer(durable_name="PUSH", deliver_subject=f"dlv.{unique}", ack_policy="explicit")
    res = c.fetch(1, expires=1)
    with pytest.raises(jssync.ConsumerIsPushBasedError):
        list(res)
    assert isinstance(res.error, jssync.ConsumerIsPushBasedError)
    with pytest.raises(jssync.ConsumerIsPushBasedError):
        c.next(timeout=1)
    with c.consume(expires=2) as it, pytest.raises(jssync.ConsumerIsPushBasedError):
        for _ in it:
            pass
    assert it.closed


def test_pull_on_missing_consumer(js, stream):
    c = durable(stream)
    c.delete()
    with pytest.raises(jssync.ConsumerDeletedError):
        list(c.fetch(1, expires=1))


def test_fetch_exceeded_limits_are_on_error(js, stream):
    c = raw_consumer(js, stream, "LIM", max_batch=5, max_expires=2_000_000_000, max_bytes=1000)
    # the limits are in the handle's cached info: a batch or bytes over them is refused before sending
    with pytest.raises(jssync.ValidationError, match="max_batch 5"):
        c.fetch(10, expires=1)
    with pytest.raises(jssync.ValidationError, match="max_bytes 1000"):
        c.fetch(1, max_bytes=5000, expires=1)
    # a handle made before another tool set the limits sends the pull: the server's 409 is on .error
    c = durable(stream, "OLD")
    raw_consumer(js, stream, "OLD", max_batch=5, max_expires=2_000_000_000, max_bytes=1000)
    res = c.fetch(10, expires=1)
    assert list(res) == []
    assert isinstance(res.error, PullRequestError) and "MaxRequestBatch" in res.error.description
    res = c.fetch(1, expires=5)
    assert list(res) == [] and "MaxRequestExpires" in res.error.description
    res = c.fetch(1, max_bytes=5000, expires=1)
    assert list(res) == [] and "MaxRequestMaxBytes" in res.error.description


def test_fetch_exceeded_max_waiting(js, stream):
    c = raw_consumer(js, stream, "W", max_waiting=1)
    first = c.fetch(1, expires=1.5)
    second = c.fetch(1, expires=1.5)
    assert list(second) == [] and "MaxWaiting" in second.error.description
    assert list(first) == [] and first.error is None


def test_consume_warns_on_exceeded_limits(js, stream):
    # a handle made before another tool set the limit (one that knows it refuses the consume)
    c = durable(stream, "LIM")
    raw_consumer(js, stream, "LIM", max_batch=5)
    errors = []
    with c.consume(max_messages=10, expires=1, idle_heartbeat=0.5, error_cb=errors.append):
        wait_for(lambda: any(isinstance(e, PullRequestError) for e in errors), what="409 warning")
    assert "MaxRequestBatch" in next(e for e in errors if isinstance(e, PullRequestError)).description


# -- consume --------------------------------------------------------------------------------


def test_consume_iterator(js, stream):
    publish(js, stream, 30)
    c = durable(stream)
    got = []
    with c.consume(max_messages=10, expires=2) as it:
        assert isinstance(it, ConsumeContext)
        for m in it:
            got.append(m.data)
            m.ack()
            if len(got) == 30:
                it.stop()
    assert got == [b"%d" % i for i in range(30)]
    assert it.closed
    wait_for(lambda: c.info().num_ack_pending == 0, what="all acked")


def test_consume_callback(js, stream):
    publish(js, stream, 40)
    c = durable(stream)
    got = []
    done = threading.Event()
    threads = set()

    def handle(m):
        threads.add(threading.current_thread().name)
        got.append(m.data)
        m.ack()
        if len(got) == 50:
            done.set()

    cc = c.consume(handle, max_messages=7, expires=2)
    try:
        publish(js, stream, 10, start=40)
        assert done.wait(10 * FACTOR)
    finally:
        cc.stop()
    cc.wait(5)
    assert cc.closed
    assert got == [b"%d" % i for i in range(50)]
    assert all(n.startswith("jssync-") and "-cb-" in n for n in threads)
    with pytest.raises(TypeError):
        iter(cc)


def test_consume_callback_many_messages_in_order(nc, js, stream, unique):
    publish(js, stream, 1500)
    c = durable(stream)
    got = []
    other = []
    sub = nc.subscribe(f"other.{unique}", callback=other.append)
    cc = c.consume(lambda m: (got.append(int(m.data)), m.ack()), max_messages=300)
    try:
        for _ in range(50):
            nc.publish(f"other.{unique}", b"x")
        wait_for(lambda: len(got) == 1500 and len(other) == 50, what="all messages")
    finally:
        cc.stop()
        sub.unsubscribe()
    assert got == list(range(1500))


def test_consume_max_messages_1(js, stream):
    publish(js, stream, 20)
    c = durable(stream)
    got = []
    with c.consume(max_messages=1, expires=2) as it:
        for m in it:
            assert it.pending_messages <= 1
            got.append(m.data)
            m.ack()
            if len(got) == 20:
                break
    assert len(got) == 20


def test_consume_thresholds_trigger_pulls(js, stream):
    publish(js, stream, 100)
    c = durable(stream)
    got = 0
    with c.consume(max_messages=10, threshold_messages=5, expires=2) as it:
        for m in it:
            assert it.pending_messages <= 10
            m.ack()
            got += 1
            if got == 100:
                break
        pulls = it.pull_requests
    # one initial pull of 10, then one of 5 each time 5 were taken
    assert 18 <= pulls <= 22


def test_consume_max_bytes(js, stream):
    publish(js, stream, 40, size=200)
    c = durable(stream)
    got = 0
    with c.consume(max_bytes=2000, expires=2) as it:
        for m in it:
            assert it.pending_bytes <= 2000
            m.ack()
            got += 1
            if got == 40:
                break
        assert it.pull_requests > 3


def test_consume_max_bytes_high_threshold_does_not_stall(js, stream):
    """A top-up pull may ask for fewer bytes than the next message needs: the server's 409
    Message Size Exceeds MaxBytes is not an error, and consuming goes on without a pause."""
    publish(js, stream, 300, size=100)
    c = durable(stream)
    errors: list[BaseException] = []
    t0 = time.monotonic()
    with c.consume(max_bytes=1000, threshold_bytes=900, error_cb=errors.append) as it:
        for _ in range(300):
            it.next(timeout=10 * FACTOR).ack()
            assert it.pending_bytes <= 1000
    assert time.monotonic() - t0 < 3 * FACTOR
    assert errors == []


def test_consume_max_bytes_message_too_big_is_reported_once(js, stream):
    publish(js, stream, 1, size=500)
    c = durable(stream)
    errors: list[BaseException] = []
    with c.consume(max_bytes=200, expires=2, error_cb=errors.append) as it:
        wait_for(lambda: errors, what="the too-big warning")
        time.sleep(1.5)  # nothing happens: the pulls retry every idle_heartbeat / 2, not in a loop
        assert it.pull_requests <= 6
    assert len(errors) == 1 and isinstance(errors[0], PullRequestError) and errors[0].code == 409


def test_consume_repulls_after_expiry(js, stream):
    c = durable(stream)
    with c.consume(max_messages=5, expires=1, idle_heartbeat=0.5) as it:
        wait_for(lambda: it.pull_requests >= 2, what="a pull after the first expired")
        publish(js, stream, 3)
        got = [it.next(timeout=5).data for _ in range(3)]
    assert got == [b"0", b"1", b"2"]


def test_consume_validation(js, stream):
    c = durable(stream)
    with pytest.raises(ValueError, match="exclusive"):
        c.consume(max_messages=10, max_bytes=1000)
    with pytest.raises(ValueError, match="expires"):
        c.consume(expires=0.5)
    with pytest.raises(ValueError, match="idle_heartbeat"):
        c.consume(idle_heartbeat=0.2)
    with pytest.raises(ValueError, match="idle_heartbeat"):
        c.consume(idle_heartbeat=40, expires=100)
    with pytest.raises(ValueError, match="half of expires"):
        c.consume(expires=2, idle_heartbeat=1.5)
    with pytest.raises(ValueError, match="threshold_messages"):
        c.consume(max_messages=10, threshold_messages=11)
    with pytest.raises(ValueError, match="threshold_bytes"):
        c.consume(max_messages=10, threshold_bytes=11)
    with pytest.raises(ValueError, match="max_messages"):
        c.consume(max_messages=0)
    with pytest.raises(TypeError):
        c.consume(callback=42)


def test_consume_consumer_deleted_raises(js, stream):
    publish(js, stream, 3)
    c = durable(stream)
    got = []
    with pytest.raises(jssync.ConsumerDeletedError), c.consume(max_messages=10, expires=5) as it:
        for m in it:
            got.append(m.data)
            m.ack()
            if len(got) == 3:
                js.delete_consumer(stream.name, "D")
    assert got == [b"0", b"1", b"2"]
    assert it.closed and isinstance(it.error, jssync.ConsumerDeletedError)


def test_consume_callback_consumer_deleted(js, stream):
    c = durable(stream)
    errors = []
    cc = c.consume(lambda m: None, error_cb=errors.append, expires=5)
    wait_for(lambda: c.info().num_waiting == 1, what="the pull request is waiting")
    c.delete()
    cc.wait(5 * FACTOR)
    assert cc.closed and isinstance(cc.error, jssync.ConsumerDeletedError)
    wait_for(lambda: any(isinstance(e, jssync.ConsumerDeletedError) for e in errors), what="error_cb")


def test_consume_callbacks_that_raise(js, stream):
    publish(js, stream, 10)
    c = durable(stream)
    errors = []
    seen = []

    def handle(m):
        seen.append(m.data)
        m.ack()
        if int(m.data) % 3 == 0:
            raise RuntimeError(f"bad {m.data!r}")

    cc = c.consume(handle, error_cb=errors.append, max_messages=4, expires=2)
    wait_for(lambda: len(seen) == 10, what="all messages despite raising callbacks")
    cc.stop()
    cc.wait(5)
    wait_for(lambda: len(errors) == 4, what="errors reported")
    assert all(isinstance(e, RuntimeError) for e in errors)


def test_stop_naks_buffered_messages(js, stream):
    publish(js, stream, 20)
    c = durable(stream)
    with c.consume(max_messages=20, expires=5) as it:
        wait_for(lambda: it._q.qsize() == 20, what="buffer filled")
        first = next(it)
        first.ack()
        it.stop()
        assert list(it) == []
    # the 19 buffered, never delivered messages come back at once (not after ack_wait)
    t0 = time.monotonic()
    again = list(c.fetch(19, expires=5))
    assert len(again) == 19 and time.monotonic() - t0 < 2 * FACTOR
    assert all(m.metadata.num_delivered == 2 for m in again)
    for m in again:
        m.ack()
    wait_for(lambda: c.info().num_ack_pending == 0, what="nothing left unacked")


def test_a_fetch_stopped_then_its_connection_closed_at_once_hands_back_every_message(nats_server, js, stream):
    """stop() promises the naks of what the pull still brings; a close right after it waits
    for them, so messages on the wire when the socket would have closed are not left for
    ack_wait (here 10 minutes): another client gets them all at once."""
    publish(js, stream, 1000, size=1000)
    c = durable(stream, ack_wait=600)
    nc = jssync.connect(nats_server.url)
    try:
        res = nc.jetstream().consumer(stream.name, "D").fetch(1000)
        next(res).ack()
        res.stop()
    finally:
        nc.close()
    got = 0
    for m in c.fetch(999, expires=5 * FACTOR):
        got += 1
        m.ack()
    assert got == 999
    wait_for(lambda: c.info().num_ack_pending == 0, what="nothing left unacked")


def test_drain_delivers_buffered_messages(js, stream):
    publish(js, stream, 20)
    c = durable(stream)
    got = []
    with c.consume(max_messages=20, expires=5) as it:
        wait_for(lambda: it._q.qsize() == 20, what="buffer filled")
        for m in it:
            got.append(m)
            m.ack()
            if len(got) == 1:
                it.drain()
    assert len(got) == 20 and it.closed
    wait_for(lambda: c.info().num_ack_pending == 0, what="nothing left unacked")
    assert c.info().num_pending == 0


def test_drain_callback_form(js, stream):
    publish(js, stream, 30)
    c = durable(stream)
    got = []
    gate = threading.Event()

    def handle(m):
        gate.wait(5)
        got.append(m)
        m.ack()

    cc = c.consume(handle, max_messages=10, expires=5)
    wait_for(lambda: cc._q.qsize() >= 9, what="buffer filled")
    cc.drain()
    gate.set()
    cc.wait(5 * FACTOR)
    assert cc.closed and 10 <= len(got) <= 30
    wait_for(lambda: c.info().num_ack_pending == 0, what="nothing left unacked")


def test_connection_close_ends_iteration(nats_server, js, stream):
    durable(stream)
    nc2 = jssync.connect(nats_server.url)
    c = nc2.jetstream().consumer(stream.name, "D")
    it = c.consume(expires=2)
    done = threading.Event()

    def reader():
        for _ in it:
            pass
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    nc2.close()
    assert done.wait(5 * FACTOR)
    t.join()
    assert it.closed and it.error is None


def test_connection_drain_drains_consume(nats_server, unique):
    nc = jssync.connect(nats_server.url)
    js = nc.jetstream()
    name = f"DR{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for i in range(10):
            js.publish(f"{name}.x", b"%d" % i)
        c = st.create_consumer(durable_name="D", ack_policy="explicit")
        got = []
        cc = c.consume(lambda m: (got.append(m), m.ack()), max_messages=5, expires=2)
        wait_for(lambda: len(got) == 10, what="consumed")
    finally:
        js.delete_stream(name)
        nc.drain(timeout=5)
    assert cc.closed


# -- acknowledgements -------------------------------------------------------------------------


def test_nak_with_delay_redelivers(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    m.nak(delay=0.5)
    t0 = time.monotonic()
    again = c.next(timeout=5)
    dt = time.monotonic() - t0
    assert again.data == m.data and again.metadata.num_delivered == 2
    assert 0.3 < dt < 3 * FACTOR
    again.ack()


def test_nak_redelivers_at_once(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    c.next(timeout=2).nak()
    again = c.next(timeout=2)
    assert again.metadata.num_delivered == 2
    again.ack()


def test_term_stops_redelivery(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=0.5)
    m = c.next(timeout=2)
    m.term(reason="bad payload")
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=1.2)


def test_unacked_is_redelivered_after_ack_wait(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=0.5)
    c.next(timeout=2)
    assert c.next(timeout=3).metadata.num_delivered == 2


def test_in_progress_extends_ack_wait(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=1.0)
    m = c.next(timeout=2)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        m.in_progress()
        assert list(c.fetch_no_wait(1)) == []  # not redelivered
        time.sleep(0.25)  # behaviour: in_progress keeps the message past its ack wait
    m.in_progress()
    m.ack()
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=1.5)


def test_ack_sync(js, stream):
    publish(js, stream, 2)
    c = durable(stream)
    a, b = list(c.fetch(2, expires=2))
    a.ack_sync(timeout=2)
    assert a.is_acked
    b.ack_sync()
    assert c.info().num_ack_pending == 0
    a.ack_sync()  # after a terminal ack: ignored


def test_acks_after_terminal_ack_are_ignored(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=0.5)
    m = c.next(timeout=2)
    m.ack()
    m.nak()  # ignored: the message is not redelivered
    m.term()
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=1.2)


def test_ack_policy_none_ignores_acks(nc, js, stream):
    publish(js, stream, 3)
    c = stream.create_consumer(durable_name="N", ack_policy="none")
    msgs = list(c.fetch(3, expires=2))
    assert len(msgs) == 3 and all(m._ack_none for m in msgs)
    out = nc.stats["out_msgs"]
    for m in msgs:
        m.ack()
        m.nak()
        m.ack_sync()
    nc.flush()
    assert nc.stats["out_msgs"] == out  # nothing was sent
    with c.consume(expires=2) as it:
        publish(js, stream, 1, start=3)
        m = it.next(timeout=5)
        assert m._ack_none


def test_malformed_reply_subject_metadata(nc, js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    m.ack()
    assert m.metadata.sequence.stream == 1
    m.reply = "$JS.ACK.bad"
    m._meta = None
    with pytest.raises(jssync.Error, match="JetStream"):
        _ = m.metadata
