"""Thread safety and lifecycle (real server): publish_async futures and their callbacks, drains
called from a callback, watchers and batches dropped mid-use, fork, dead loops, servers that
fail to start.

Each test failed before its fix; the docstring says what went wrong.
"""

from __future__ import annotations

import concurrent.futures
import gc
import os
import sys
import threading
import time

import pytest

import jssync
from jssync.core.loop import IOLoop
from jssync.server import NatsServer, ServerError
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)


# -- publish_async: the PubAck table shared by user threads and the I/O thread ----------------


def test_publish_async_sweep_survives_a_thread_switch_during_its_scan(nc, js, unique):
    """The timeout sweep (I/O thread) iterated the table of outstanding PubAcks while user
    threads add to it. A thread switch in the middle of that scan (the garbage collector
    running a finalizer is enough) raised "dictionary changed size during iteration" on
    the I/O thread; the sweep then never ran again, so overdue publishes were never failed.

    A gc callback stands in for the finalizer: when the collector runs inside the sweep, it
    lets the test thread publish before the scan goes on.
    """
    subject = f"RV{unique}.silent"
    # a responder that never answers: the PubAcks never come
    silent = nc.subscribe(subject, callback=lambda m: None)
    nc.flush()
    in_sweep = threading.Event()
    published = threading.Event()
    armed = [True]
    seen: dict[int, int] = {}
    io_ident = nc._loop.thread.ident

    def on_gc(phase: str, info: dict) -> None:
        if phase != "start" or not armed[0] or threading.get_ident() != io_ident:
            return
        f = sys._getframe(1)
        while f is not None and f.f_code.co_name != "_sweep":
            f = f.f_back
        if f is None:
            return
        # the first collections come from making the view and its iterator; a later one
        # runs while the scan is under way
        n = seen[id(f)] = seen.get(id(f), 0) + 1
        if n < 3:
            return
        armed[0] = False
        in_sweep.set()
        published.wait(0.5)  # the test thread adds to the table now

    # enough entries that the scan outlives the interpreter's free list of small tuples and
    # allocates (so the collector runs in the middle of it)
    first = [js.publish_async(subject, b"x", timeout=30) for _ in range(3000)]
    old = gc.get_threshold()
    gc.callbacks.append(on_gc)
    gc.set_threshold(1)
    try:
        assert in_sweep.wait(5 * FACTOR), "the sweep did not run"
        late = js.publish_async(subject, b"y", timeout=0.3)
        published.set()
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(on_gc)
    # the sweep must still be alive: the short publish times out
    with pytest.raises(jssync.TimeoutError):
        late.result(timeout=5 * FACTOR)
    assert not any(f.done() for f in first)
    silent.unsubscribe()


def test_publish_async_done_callbacks_do_not_run_on_the_io_thread(nats_server, nc, js, stream, unique):
    """Done-callbacks of publish_async Futures ran on the I/O thread (where the PubAck is
    handled): a callback that blocks stalled every message of the connection, and one that
    made a blocking call (e.g. js.publish) raised RuntimeError."""
    subject = f"HELD{unique}.x"  # no stream captures it
    go = threading.Event()

    def answer(m: jssync.Msg) -> None:  # a stand-in stream that answers when told to
        go.wait(10)
        m.respond(b'{"stream":"X","seq":7}')

    with jssync.connect(nats_server.url) as other:
        other.subscribe(subject, callback=answer)
        other.flush()
        ran: list[str] = []
        results: list[object] = []
        done = threading.Event()

        def cb(fut: concurrent.futures.Future) -> None:
            try:
                ran.append(threading.current_thread().name)
                # a blocking call in the callback must work
                results.append(js.publish(f"{stream.name}.b", b"from-cb", timeout=5).seq)
            except BaseException as exc:  # noqa: BLE001
                results.append(exc)
            finally:
                done.set()

        fut = js.publish_async(subject, b"x")
        fut.add_done_callback(cb)  # before the PubAck can arrive
        go.set()
        assert done.wait(10 * FACTOR)
        assert fut.result().seq == 7
        assert not ran[0].startswith("jssync-io-"), ran
        assert results == [1]


def test_publish_async_done_callback_added_after_completion_runs_at_once(js, stream):
    fut = js.publish_async(f"{stream.name}.a", b"x")
    fut.result(timeout=5)
    me = threading.current_thread().name
    seen: list[str] = []
    fut.add_done_callback(lambda f: seen.append(threading.current_thread().name))
    assert seen == [me]


def test_close_fails_outstanding_publish_async_futures(nats_server, unique):
    """close() stopped the I/O loop before the timeout sweep could fail the publish_async
    Futures still waiting for their PubAck: they stayed pending forever, so
    ``fut.result()`` without a timeout hung."""
    subject = f"RV{unique}.silent"
    nc = jssync.connect(nats_server.url)
    try:
        nc.subscribe(subject, callback=lambda m: None)
        nc.flush()
        js = nc.jetstream()
        futs = [js.publish_async(subject, b"x", timeout=60) for _ in range(5)]
    finally:
        nc.close()
    for f in futs:
        with pytest.raises(jssync.ConnectionClosedError):
            f.result(timeout=2 * FACTOR)
    assert js.publish_async_pending() == 0


def test_drain_waits_for_outstanding_publish_async(nats_server, unique):
    """Connection.drain() flushes publish_async too: PubAcks that arrive within the
    drain timeout complete their Futures (they are not failed by the close)."""
    nc = jssync.connect(nats_server.url)
    js = nc.jetstream()
    name = f"RV{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        futs = [js.publish_async(f"{name}.x", b"x") for _ in range(200)]
        nc.drain(timeout=10)
        assert all(f.result(timeout=1).seq > 0 for f in futs)
    finally:
        with jssync.connect(nats_server.url) as c2:
            c2.jetstream().delete_stream(name)


# -- subscriptions ---------------------------------------------------------------------------


def test_subscription_drain_from_its_own_callback_does_not_wait_for_itself(nc, unique):
    """Subscription.drain() waits until the callback lane is idle; called from that
    subscription's callback, the lane is busy with the caller, so drain slept its whole
    timeout (30 s by default) and raised TimeoutError."""
    subject = f"RV{unique}.d"
    outcome: list[object] = []
    done = threading.Event()
    holder: list[jssync.Subscription] = []

    def cb(msg: jssync.Msg) -> None:
        t0 = time.monotonic()
        try:
            holder[0].drain(timeout=3)
            outcome.append(time.monotonic() - t0)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)
        done.set()

    holder.append(nc.subscribe(subject, callback=cb))
    nc.publish(subject, b"1")
    nc.flush()
    assert done.wait(10 * FACTOR)
    assert isinstance(outcome[0], float) and outcome[0] < 1.0, outcome
    assert holder[0].is_closed


def test_push_subscription_drain_from_its_own_callback(js, stream):
    """The same for a JetStream push subscription: drain() from its callback waited for
    its own lane; now it returns and the consumer it created is deleted after the callback."""
    js.publish(f"{stream.name}.a", b"x")
    outcome: list[object] = []
    done = threading.Event()
    holder: list[object] = []
    ready = threading.Event()

    def cb(msg: jssync.Msg) -> None:
        ready.wait(10)
        t0 = time.monotonic()
        try:
            holder[0].drain(timeout=3)
            outcome.append(time.monotonic() - t0)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)
        done.set()

    sub = js.subscribe(f"{stream.name}.a", callback=cb)
    holder.append(sub)
    ready.set()
    assert done.wait(10 * FACTOR)
    assert isinstance(outcome[0], float) and outcome[0] < 1.0, outcome
    wait_for(lambda: not list(js.consumer_names(stream.name)), what="the consumer deleted after the callback")


def _stall_io_thread(nc: jssync.Connection) -> threading.Event:
    """Block the connection's I/O thread until the returned event is set (at most 10 s)."""
    release = threading.Event()
    entered = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(10)

    nc._loop.call_soon(block)
    assert entered.wait(5)
    return release


def test_interrupted_drain_ends_the_subscription(nc, unique):
    """Ctrl-C during drain() (while it waits for the server to confirm the UNSUB) left the
    subscription half-done: out of the connection's list but not ended, and still
    registered with nats-py, so messages kept being queued for it and a thread iterating
    it was never woken, not even by close()."""
    import _thread

    sub = nc.subscribe(f"RV{unique}.d")
    sid = sub._nsub._id
    release = _stall_io_thread(nc)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sub.drain(timeout=5)
    finally:
        timer.cancel()
        release.set()
    assert sub.is_closed
    with pytest.raises(jssync.SubscriptionClosedError):
        sub.next_msg(timeout=1)
    wait_for(lambda: sid not in nc._nc._subs, 5, what="the nats-py subscription removed")


# -- key-value watchers -------------------------------------------------------------------------


def test_watcher_next_honours_its_timeout_while_another_thread_reads(js, unique):
    """A watcher's reader holds its lock while it waits; a second thread calling
    ``next(timeout=0.5)`` blocked on that lock without a limit (until the first reader got
    something), ignoring its timeout and Ctrl-C slices."""
    kv = js.create_key_value(bucket=f"RV{unique}")
    w = kv.watch()
    first: list[object] = []
    try:
        assert w.next(timeout=5) is None  # empty bucket: the end of the initial values
        reader = threading.Thread(target=lambda: first.append(w.next(timeout=None)), name="reader")
        reader.start()

        def held_elsewhere() -> bool:
            if w._lock.acquire(blocking=False):
                w._lock.release()
                return False
            return True

        wait_for(held_elsewhere, what="the first reader waiting")
        release = threading.Timer(5.0, lambda: kv.put("k", b"v"))
        release.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(jssync.TimeoutError):
                w.next(timeout=0.5)
            took = time.monotonic() - t0
        finally:
            release.cancel()
        assert took < 2.0 * FACTOR, took
        kv.put("k", b"v")
        reader.join(10)
        assert not reader.is_alive()
        assert first and first[0].key == "k"
    finally:
        w.stop()
        js.delete_key_value(f"RV{unique}")


def test_watcher_dropped_without_stop_is_cleaned_up(nc, js, unique):
    """A watcher dropped without stop() (``for e in kv.watch(): ... break``) stayed alive
    for as long as the connection: the connection's reconnect listener held it, so its
    subscription (and the server-side consumer, which keeps interest) leaked with every
    such call."""
    bucket = f"RV{unique}"
    kv = js.create_key_value(bucket=bucket)
    try:
        kv.put("k", b"v")
        subs_before = len(nc._subs)
        listeners_before = len(nc._reconnect_listeners)

        def first_value() -> bytes:
            for e in kv.watch("k"):
                if e is not None:
                    return e.value
            raise AssertionError("no value")

        for _ in range(3):
            assert first_value() == b"v"
        gc.collect()
        wait_for(lambda: len(nc._subs) == subs_before, 5, what="the abandoned watchers' subscriptions gone")
        assert len(nc._reconnect_listeners) == listeners_before
        nc.flush()
        assert not any(not s._closed and s.subject.startswith("_INBOX") for s in list(nc._subs))
    finally:
        js.delete_key_value(bucket)


# -- direct get batches ---------------------------------------------------------------------------


def test_abandoned_batch_collected_while_the_subscription_lock_is_held(nc, js, unique):
    """An abandoned DirectBatch is cleaned up by a finalizer, which ran a blocking
    ``unsubscribe()`` taking the connection's subscription lock. Finalizers run wherever
    the garbage collector runs, e.g. while close() or subscribe() hold that (non-reentrant)
    lock and allocate: that thread deadlocked on itself."""
    name = f"RV{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", allow_direct=True)
    try:
        js.publish(f"{name}.a", b"1")
        js.publish(f"{name}.a", b"2")
        b = st.direct_get_batch(f"{name}.>", 2)
        assert next(b).seq == 1
        b.cycle = b  # only the cycle collector can free it now
        del b
        done = threading.Event()

        def collect_under_the_lock() -> None:
            with nc._subs_lock:  # as close(), drain() and subscribe() do while they allocate
                gc.collect()
            done.set()

        t = threading.Thread(target=collect_under_the_lock, name="collector", daemon=True)
        t.start()
        assert done.wait(5 * FACTOR), "the finalizer deadlocked on the subscription lock"
        wait_for(lambda: all(not s.subject.startswith("_INBOX") or s.is_closed for s in list(nc._subs)),
                 what="the batch's subscription gone")
        assert js.account_info() is not None  # the connection still works
    finally:
        js.delete_stream(name)


# -- the I/O loop ------------------------------------------------------------------------------


def test_work_handed_to_a_dead_loop_raises_connection_closed():
    """A call that passed the "is the loop running" check just before the loop stopped
    (close() on another thread) got a bare RuntimeError("Event loop is closed") from
    asyncio instead of jssync.ConnectionClosedError."""
    io = IOLoop("jssync-review-loop")
    try:
        # the loop stops behind the back of check(), as in a close() racing with a call
        io.loop.call_soon_threadsafe(io.loop.stop)
        io.thread.join(5)
        assert not io.thread.is_alive()

        async def noop() -> int:
            return 1

        with pytest.raises(jssync.ConnectionClosedError):
            io.run(noop(), 2.0)
        with pytest.raises(jssync.ConnectionClosedError):
            io.call_soon(lambda: None)
    finally:
        io.stop()


# -- acks after fork ----------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_ack_in_a_forked_child_raises_fork_error(nc, js, stream):
    """Acking, in a forked child, a message received by the parent was silently dropped
    (it went onto the parent's publish queue, which nothing drains in the child): the
    application believed it had acked. Now it raises ForkError like every other call."""
    js.publish(f"{stream.name}.a", b"x")
    c = stream.create_consumer(durable_name="C", ack_policy="explicit")
    msgs = list(c.fetch(1, expires=2.0))
    assert len(msgs) == 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = b"?"
        try:
            msgs[0].ack()
            code = b"none"
        except jssync.ForkError:
            code = b"fork"
        except BaseException:  # noqa: BLE001
            code = b"other"
        os.write(w, code)
        os._exit(0)
    os.close(w)
    try:
        got = os.read(r, 16)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert got == b"fork"
    msgs[0].ack()  # the parent can still ack it


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_waiting_on_a_subscription_in_a_forked_child_raises_fork_error(nc, unique):
    """In a forked child, next_msg() on the parent's subscription waited for messages that
    can never come (no I/O thread in the child): with timeout=None, forever."""
    sub = nc.subscribe(f"RV{unique}.f")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = b"?"
        try:
            sub.next_msg(timeout=2)
            code = b"msg"
        except jssync.ForkError:
            code = b"fork"
        except jssync.TimeoutError:
            code = b"timeout"
        except BaseException:  # noqa: BLE001
            code = b"other"
        os.write(w, code)
        os._exit(0)
    os.close(w)
    try:
        got = os.read(r, 16)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert got == b"fork"


# -- the test server ------------------------------------------------------------------------------


def test_server_that_fails_to_start_is_not_left_running():
    """NatsServer.start() raised when the server was not ready in time but left the
    nats-server process running (``with NatsServer()`` never reached __exit__)."""
    srv = NatsServer(jetstream=True, startup_timeout=0.0)
    try:
        with pytest.raises(ServerError):
            srv.start()
        assert not srv.running
    finally:
        srv.stop()
        srv.cleanup()


def test_cluster_that_fails_to_start_stops_every_node():
    from jssync.server import NatsCluster

    cl = NatsCluster(size=3, startup_timeout=0.0)
    try:
        with pytest.raises(ServerError):
            cl.start()
        assert not any(s.running for s in cl.servers)
    finally:
        cl.stop()
        for s in cl.servers:
            s.cleanup()


def test_consume_drain_and_wait_from_own_callback_do_not_hang(js, unique):
    """drain(timeout) from the consume's own callback returns at once; wait() raises instead of hanging."""
    import threading as _th
    import time as _time

    name = f"RV{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for i in range(3):
            js.publish(f"{name}.x", b"%d" % i)
        c = st.create_consumer(durable_name="D", ack_policy="explicit")
        seen = []
        errors = []
        done = _th.Event()
        ready = _th.Event()  # set once holder["cc"] is assigned (after consume() returned)
        holder = {}

        def cb(msg):
            msg.ack()
            seen.append(msg.data)
            if len(seen) == 1:
                assert ready.wait(5)
                t0 = _time.monotonic()
                holder["cc"].drain(timeout=5)
                seen.append(_time.monotonic() - t0)
                try:
                    holder["cc"].wait(timeout=5)
                except RuntimeError as exc:
                    errors.append(exc)
                done.set()

        holder["cc"] = cc = c.consume(cb)
        ready.set()
        assert done.wait(10)
        assert seen[1] < 1.0, "drain from the callback waited for itself"
        assert errors and "own callback" in str(errors[0])
        cc.wait(timeout=10)
        assert cc.closed
    finally:
        js.delete_stream(name)
