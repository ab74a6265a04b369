"""What is published while disconnected waits in jssync's own queue and goes out after the reconnect.

Through the TCP proxy (tests/proxy.py): the proxy refuses new connections and drops the
open one, so the client keeps trying to reconnect and fails; meanwhile the test publishes,
then lets the reconnect through.

- nothing is dropped past nats-py's 2 MiB reconnect buffer: 5,000 x 1 KB core publishes
  and 5,000 x 1 KB ``publish_async`` (with msg ids) all arrive, in order;
- ``reconnect_buffer_size`` bounds what may wait: past it a publish raises and a
  ``publish_async`` Future fails at once, reported once per outage to ``error_cb``;
- ``close()`` while disconnected does not wait for the reconnect and fails the queued
  ``publish_async`` Futures at once;
- ``flush()`` while disconnected waits for the reconnect within its timeout;
- a ``publish_async`` whose Future already failed (timeout) is not sent after the reconnect.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import jssync
from tests.conftest import FACTOR, wait_for
from tests.proxy import LinkEvents, connect_through, go_down

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

N = 5000
KB = 1024


def _connect(url: str, ev: LinkEvents, **kw: Any) -> jssync.Connection:
    return connect_through(url, ev, "offline-client", 2.0, **kw)



def _payload(i: int) -> bytes:
    head = f"{i:08d}".encode()
    return head + b"x" * (KB - len(head))


def test_core_publishes_past_2_mib_while_disconnected_all_arrive_in_order(proxy, nats_server, unique):
    ev = LinkEvents()
    subject = f"offline.{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        sub = direct.subscribe(subject, pending_msgs_limit=2 * N)
        direct.flush()
        go_down(proxy, ev, nc)
        for i in range(N):
            nc.publish(subject, _payload(i))
        time.sleep(0.3 * FACTOR)  # behaviour: a few refused reconnect attempts while the messages wait
        assert not nc.is_connected
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)
        nc.flush(timeout=10 * FACTOR)
        got: list[int] = []
        try:
            while len(got) < N:
                msg = sub.next_msg(3 * FACTOR)
                assert len(msg.data) == KB
                got.append(int(msg.data[:8]))
        except jssync.TimeoutError:
            pass
        assert len(got) == N, f"{len(got)} of {N} arrived"
        assert got == list(range(N))
        assert not [e for e in ev.errors if "buffer" in str(e).lower()], ev.errors[:3]


def test_publish_async_past_2_mib_while_disconnected_all_stored_in_order(proxy, nats_server, unique):
    ev = LinkEvents()
    name = f"OFF{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        djs = direct.jetstream()
        djs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            js = nc.jetstream(timeout=30, max_pending=2 * N)
            js.publish(f"{name}.x", b"warm-up", msg_id="warm-up")  # the reply inbox exists
            go_down(proxy, ev, nc)
            futs = [js.publish_async(f"{name}.x", _payload(i), msg_id=f"m-{i}") for i in range(N)]
            time.sleep(0.3 * FACTOR)  # nothing happens: no publish is acked while the link is down
            assert not nc.is_connected
            assert not any(f.done() for f in futs)
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            acks = [f.result(timeout=20 * FACTOR) for f in futs]
            assert [a.seq for a in acks] == list(range(2, N + 2))
            assert not any(a.duplicate for a in acks)
            info = djs.stream(name).info()
            assert info.state.messages == N + 1
            last = djs.stream(name).get_msg(N + 1)
            assert int(last.data[:8]) == N - 1
            assert not [e for e in ev.errors if "buffer" in str(e).lower()], ev.errors[:3]
        finally:
            djs.delete_stream(name)


def test_reconnect_buffer_size_refuses_at_once_and_reports_once(proxy, nats_server, unique):
    ev = LinkEvents()
    name = f"OFF{unique}"
    limit = 100 * KB
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev, reconnect_buffer_size=limit) as nc:
        djs = direct.jetstream()
        djs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            js = nc.jetstream(timeout=30)
            js.publish(f"{name}.x", b"warm-up")
            go_down(proxy, ev, nc)
            t0 = time.monotonic()
            futs = [js.publish_async(f"{name}.x", _payload(i), msg_id=f"m-{i}") for i in range(200)]
            refused = [f for f in futs if f.done()]
            # every Future past the limit failed at once, not after its 30 s timeout
            assert time.monotonic() - t0 < 2 * FACTOR
            kept = futs[:len(futs) - len(refused)]
            assert refused == futs[len(kept):], "the refused ones are exactly those past the limit"
            assert 90 <= len(kept) <= 100
            for f in refused:
                exc = f.exception(0)
                assert isinstance(exc, jssync.ReconnectBufferExceededError), exc
                assert "reconnect_buffer_size" in str(exc)
            with pytest.raises(jssync.ReconnectBufferExceededError):
                nc.publish(f"{name}.core", _payload(0))
            wait_for(lambda: any(isinstance(e, jssync.ReconnectBufferExceededError) for e in ev.errors), 3,
                     what="the report to error_cb")
            time.sleep(0.2 * FACTOR)  # nothing happens: no second report in this outage
            reports = [e for e in ev.errors if isinstance(e, jssync.ReconnectBufferExceededError)]
            assert len(reports) == 1, "one report per outage, not one per message"
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            acks = [f.result(timeout=20 * FACTOR) for f in kept]
            assert [a.seq for a in acks] == list(range(2, len(kept) + 2))
            # connected again: no limit
            nc.publish(f"{name}.core", _payload(0))
            nc.flush(timeout=5)
        finally:
            djs.delete_stream(name)


def test_close_while_disconnected_fails_queued_futures_at_once(proxy, nats_server, unique):
    ev = LinkEvents()
    name = f"OFF{unique}"
    with jssync.connect(nats_server.url) as direct:
        djs = direct.jetstream()
        djs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            nc = _connect(proxy.url, ev)
            js = nc.jetstream(timeout=30)
            js.publish(f"{name}.x", b"warm-up")
            go_down(proxy, ev, nc)
            futs = [js.publish_async(f"{name}.x", _payload(i)) for i in range(3000)]
            for i in range(3000):
                nc.publish(f"{name}.core", _payload(i))
            t0 = time.monotonic()
            nc.close(timeout=5)
            assert time.monotonic() - t0 < 1.5 * FACTOR, "close waited for a reconnect"
            for f in futs:
                assert f.done()
                assert isinstance(f.exception(0), jssync.ConnectionClosedError)
            proxy.forward()
        finally:
            djs.delete_stream(name)


def test_flush_while_disconnected_waits_for_the_reconnect_within_its_timeout(proxy, nats_server, unique):
    ev = LinkEvents()
    subject = f"offline.{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        sub = direct.subscribe(subject, pending_msgs_limit=2 * N)
        direct.flush()
        go_down(proxy, ev, nc)
        for i in range(N):
            nc.publish(subject, _payload(i))
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError):
            nc.flush(timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + 0.35 * FACTOR
        # subscribe does not wait for the queued publishes while disconnected
        t0 = time.monotonic()
        nc.subscribe(f"late.{unique}")
        assert time.monotonic() - t0 < 0.5 * FACTOR
        threading.Timer(0.3, proxy.forward).start()
        nc.flush(timeout=10 * FACTOR)  # returns once the server has every one of them
        direct.flush()
        wait_for(lambda: sub.pending_msgs == N, 5, what=f"{N} messages at the subscriber")


def test_publish_async_that_timed_out_while_disconnected_is_not_sent_later(proxy, nats_server, unique):
    ev = LinkEvents()
    name = f"OFF{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        djs = direct.jetstream()
        djs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            js = nc.jetstream(timeout=30)
            js.publish(f"{name}.x", b"warm-up")
            go_down(proxy, ev, nc)
            late = [js.publish_async(f"{name}.x", b"late", timeout=0.3) for _ in range(10)]
            with pytest.raises(jssync.TimeoutError):
                js.publish(f"{name}.x", b"sync late", timeout=0.3)
            for f in late:
                assert isinstance(f.exception(3 * FACTOR), jssync.TimeoutError)
            ok = js.publish_async(f"{name}.x", b"in time", timeout=30)
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            assert ok.result(10 * FACTOR).seq == 2
            nc.flush(timeout=5)
            assert djs.stream(name).info().state.messages == 2, "a message whose Future failed was stored"
        finally:
            djs.delete_stream(name)


def test_queue_dropped_and_reported_once_nats_py_gives_up_reconnecting(proxy, nats_server, unique):
    ev = LinkEvents()
    with _connect(proxy.url, ev, max_reconnect_attempts=2) as nc:
        go_down(proxy, ev, nc)
        for i in range(100):
            nc.publish(f"offline.{unique}", _payload(i))
        wait_for(lambda: nc.client.is_closed, 10, what="nats-py to give up reconnecting")

        def dropped() -> list[BaseException]:
            return [e for e in ev.errors if isinstance(e, jssync.ConnectionClosedError) and "dropped" in str(e)]

        wait_for(dropped, 3, what="the report of the dropped queue")
        assert len(dropped()) == 1
        assert "100 queued message(s) dropped" in str(dropped()[0])
        wait_for(lambda: not nc._pubq, 3, what="an empty queue")
        proxy.forward()


def test_request_right_after_the_reconnect_does_not_overtake_the_queue(proxy, nats_server, unique):
    """A request may be written straight to the socket by its caller: not ahead of what waits."""
    ev = LinkEvents()
    base = f"ord.{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        seen = direct.subscribe(f"{base}.>", pending_msgs_limit=2 * N)
        direct.subscribe(f"{base}.svc", callback=lambda m: m.respond(b"ok"))
        direct.flush()
        assert nc.request(f"{base}.svc", b"before", timeout=2).data == b"ok"
        assert seen.next_msg(2).data == b"before"
        go_down(proxy, ev, nc)
        for i in range(N):
            nc.publish(f"{base}.data", _payload(i))
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)
        assert nc.request(f"{base}.svc", b"after", timeout=10 * FACTOR).data == b"ok"
        order = [seen.next_msg(3 * FACTOR).data for _ in range(N + 1)]
        assert order[-1] == b"after", "the request overtook messages queued before it"
        assert [int(d[:8]) for d in order[:-1]] == list(range(N))
