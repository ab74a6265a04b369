"""close() and stop() of a consume (pull and push), against a real server: close ends a
callback or iterator consume at once, a push drain keeps its timeout, and no callback starts
after stop() returned."""

from __future__ import annotations

import threading

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def _publish(js, subject, n):
    for _ in range(n):
        js.publish_async(subject, b"x")
    js.publish_async_completed(20)


def test_close_ends_callback_consume_at_once(nats_server, js, stream):
    """docs/consuming.md "Ending a consume": nc.close() ends a consume at once, quietly: the
    messages still buffered are dropped, not handed to the callback after close returned."""
    _publish(js, f"{stream.name}.m", 200)
    stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=60)
    nc2 = jssync.connect(nats_server.url)
    try:
        c = nc2.jetstream().consumer(stream.name, "D")
        in_cb = threading.Event()
        release = threading.Event()
        calls = []

        def cb(msg):
            calls.append(msg)
            in_cb.set()
            release.wait(10)

        cc = c.consume(cb, max_messages=100)
        assert in_cb.wait(10)
        wait_for(lambda: cc.pending_messages >= 99 and cc._q.qsize() >= 50, what="messages buffered")
        threading.Timer(0.3, release.set).start()  # the running callback returns while close waits
        nc2.close()
        n = len(calls)
        assert cc.closed
    finally:
        release.set()
        nc2.close()
    assert n == 1, f"{n - 1} callbacks ran with buffered messages during/after close()"


def test_close_ends_iterator_at_once(nats_server, js, stream):
    """nc.close() ends an iterating consume at once: the buffered messages are dropped, the
    loop does not go on yielding messages whose acks can only fail."""
    _publish(js, f"{stream.name}.m", 50)
    stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=60)
    nc2 = jssync.connect(nats_server.url)
    try:
        c = nc2.jetstream().consumer(stream.name, "D")
        it = c.consume(max_messages=100)
        first = next(it)
        wait_for(lambda: it._q.qsize() >= 49, what="messages buffered")
        nc2.close()
        rest = list(it)
    finally:
        nc2.close()
    assert first is not None
    assert rest == [], f"{len(rest)} messages yielded after close()"


def test_push_drain_keeps_its_timeout_when_deleting_the_consumer(nats_server, stream):
    """Push ``drain(timeout)`` (iterator form, nothing buffered) deletes the consumer it created
    within the same ``timeout``: the connection stalls right after the UNSUB was confirmed, and
    drain still returns within its timeout (the delete failure goes to the error callback)."""
    import time

    from tests.proxy import TcpProxy

    errors = []
    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        nc2 = jssync.connect(p.url, ping_interval=30, reconnect_time_wait=0.1, timeout=2.0,
                             error_cb=errors.append)
        try:
            js2 = nc2.jetstream(timeout=5.0)
            sub = js2.subscribe(f"{stream.name}.m")
            assert sub.created_consumer
            unsubscribe = nc2._unsubscribe

            def unsubscribe_then_stall(*a, **kw):
                unsubscribe(*a, **kw)
                p.stall()

            nc2._unsubscribe = unsubscribe_then_stall
            t0 = time.monotonic()
            try:
                sub.drain(timeout=1.0)
            except jssync.TimeoutError:
                pass
            took = time.monotonic() - t0
        finally:
            p.forward()
            nc2.close()
    assert took < 1.5 * FACTOR, f"drain(timeout=1.0) took {took:.1f}s"


def test_no_callback_starts_after_stop_returned(js, stream):
    """Callback form: once ``stop()`` returned no further callback starts (docs: "no more
    messages or callbacks"; one already dispatched or running finishes). The lane read the
    state before it sent the next pull request and then called the callback: a stop() in
    between returned first and callbacks went on. Many short trials with a tiny GIL switch
    interval make the interleaving likely.

    The lane reads the state right before each call, so the one callback it had decided to
    call when stop() ran may still begin after stop() returned (Python has no way to observe
    "entered the callback"; holding a lock across it would make stop() wait for it): at most
    one late start per trial, never two (CI saw one of 60 trials with exactly one)."""
    import sys
    import time

    for _ in range(3000):
        js.publish_async(f"{stream.name}.m", b"x")
    js.publish_async_completed(20)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    late = 0
    try:
        for _trial in range(60):
            try:
                js.delete_consumer(stream.name, "D")
            except jssync.NotFoundError:
                pass
            c = stream.create_consumer(durable_name="D", ack_policy="none")
            starts: list[float] = []
            go = threading.Event()

            def cb(msg, starts=starts, go=go):
                starts.append(time.monotonic())
                if len(starts) >= 20:
                    go.set()

            cc = c.consume(cb, max_messages=50, threshold_messages=49)
            assert go.wait(10)
            cc.stop()
            t = time.monotonic()
            cc.wait(10)
            late = max(late, sum(s > t for s in starts))
    finally:
        sys.setswitchinterval(old)
    assert late <= 1, f"{late} callbacks started after stop() returned in one trial"
