"""Network faults between the client and a real server, through the TCP proxy in tests/proxy.py.

- drop: every connection closed; the client reconnects and its subscriptions work again.
- stall: bytes stop moving but sockets stay open; the client's PINGs (ping_interval 0.5 s,
  max_outstanding_pings 2) find the stale connection and it reconnects.
- half-open: the server side is gone, the client's socket stays open and silent; found the
  same way.
- outage: the server is unreachable for a while; what was published meanwhile goes out
  after the reconnect.
- no blocking call (request, flush, subscribe, next_msg, js.publish, JetStream API calls,
  close) outlives its timeout while the connection is stalled or down.

Measured times are printed (``pytest -s``) and attached as junit properties.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jssync
from tests.conftest import FACTOR, wait_for
from tests.proxy import TcpProxy

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

PING = 0.5
MAX_PINGS = 2
#: A stalled connection is found after at most (MAX_PINGS + 1) unanswered PINGs, plus one interval.
STALE_WITHIN = (MAX_PINGS + 2) * PING
#: How late a blocking call may return after its timeout (thread hand-offs, 0.1 s slices).
SLACK = 0.35 * FACTOR


class Events:
    """disconnected/reconnected callbacks with timestamps."""

    def __init__(self) -> None:
        self.disconnected = threading.Event()
        self.reconnected = threading.Event()
        self.t_disconnected = 0.0
        self.t_reconnected = 0.0
        self.errors: list[BaseException] = []

    def on_disconnected(self) -> None:
        self.t_disconnected = time.monotonic()
        self.disconnected.set()

    def on_reconnected(self) -> None:
        self.t_reconnected = time.monotonic()
        self.reconnected.set()

    def reset(self) -> None:
        self.disconnected.clear()
        self.reconnected.clear()

    def kwargs(self) -> dict[str, Any]:
        return dict(disconnected_cb=self.on_disconnected, reconnected_cb=self.on_reconnected,
                    error_cb=self.errors.append)


@pytest.fixture
def proxy(nats_server) -> Iterator[TcpProxy]:
    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        yield p


def _connect(url: str, events: Events, **kw: Any) -> jssync.Connection:
    opts: dict[str, Any] = dict(ping_interval=PING, max_outstanding_pings=MAX_PINGS, reconnect_time_wait=0.1,
                                timeout=2.0, name="fault-client")
    opts.update(events.kwargs())
    opts.update(kw)
    return jssync.connect(url, **opts)


def _report(record_property, name: str, seconds: float) -> None:
    record_property(name, round(seconds, 3))
    print(f"\n[measure] {name}: {seconds:.3f}s")


def _roundtrip_ok(client: jssync.Connection, direct: jssync.Connection, subject: str) -> None:
    """A subscription made before the fault receives a message published after it."""
    sub = client.subscribe(subject)
    try:
        direct.publish(subject, b"probe")
        direct.flush()
        assert sub.next_msg(3 * FACTOR).data == b"probe"
    finally:
        sub.unsubscribe()


def test_reconnect_after_drop(proxy, nats_server, unique, record_property):
    ev = Events()
    with _connect(proxy.url, ev) as nc, jssync.connect(nats_server.url) as direct:
        sub = nc.subscribe(f"drop.{unique}")
        nc.flush()
        for _ in range(3):
            ev.reset()
            t0 = time.monotonic()
            proxy.drop()
            assert ev.reconnected.wait(5 * FACTOR), "no reconnect after the proxy dropped the connection"
            _report(record_property, "reconnect_after_drop", ev.t_reconnected - t0)
            # the subscription made before the drop was restored on the new connection
            direct.publish(f"drop.{unique}", b"after drop")
            direct.flush()
            assert sub.next_msg(3 * FACTOR).data == b"after drop"
        assert nc.stats["reconnects"] >= 3


def test_stall_is_detected_by_pings_and_client_reconnects(proxy, nats_server, unique, record_property):
    ev = Events()
    with _connect(proxy.url, ev) as nc, jssync.connect(nats_server.url) as direct:
        sub = nc.subscribe(f"stall.{unique}")
        nc.flush()
        t0 = time.monotonic()
        proxy.stall(new_connections=False)
        assert ev.disconnected.wait((STALE_WITHIN + 2) * FACTOR), "the stalled connection was never noticed"
        detected = ev.t_disconnected - t0
        _report(record_property, "stall_detected_after", detected)
        assert detected <= STALE_WITHIN * FACTOR + SLACK
        # only PINGs can find it: a quicker notice means the socket was closed, not stalled
        assert detected >= MAX_PINGS * PING - 0.1
        assert ev.reconnected.wait(5 * FACTOR)
        _report(record_property, "stall_reconnected_after", ev.t_reconnected - t0)
        direct.publish(f"stall.{unique}", b"after stall")
        direct.flush()
        assert sub.next_msg(3 * FACTOR).data == b"after stall"
        assert any(isinstance(e, jssync.Error) and "stale" in str(e).lower() for e in ev.errors) or \
            nc.stats["reconnects"] >= 1


def test_half_open_connection_is_detected(proxy, nats_server, unique, record_property):
    ev = Events()
    with _connect(proxy.url, ev) as nc, jssync.connect(nats_server.url) as direct:
        sub = nc.subscribe(f"half.{unique}")
        nc.flush()
        t0 = time.monotonic()
        proxy.half_open()
        assert ev.disconnected.wait((STALE_WITHIN + 2) * FACTOR), "the half-open connection was never noticed"
        detected = ev.t_disconnected - t0
        _report(record_property, "half_open_detected_after", detected)
        assert detected <= STALE_WITHIN * FACTOR + SLACK
        # only PINGs can find it: a quicker notice means the socket was closed, not stalled
        assert detected >= MAX_PINGS * PING - 0.1
        assert ev.reconnected.wait(5 * FACTOR)
        direct.publish(f"half.{unique}", b"after half-open")
        direct.flush()
        assert sub.next_msg(3 * FACTOR).data == b"after half-open"


def test_publishes_during_outage_go_out_after_reconnect(proxy, nats_server, unique, record_property):
    ev = Events()
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        sub = direct.subscribe(f"outage.{unique}", pending_msgs_limit=10_000)
        direct.flush()
        proxy.refuse()
        proxy.drop()
        assert ev.disconnected.wait(3 * FACTOR)
        for i in range(500):
            nc.publish(f"outage.{unique}", str(i).encode())
        time.sleep(0.3 * FACTOR)  # behaviour: stay down over a few reconnect attempts
        t0 = time.monotonic()
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)
        _report(record_property, "reconnect_after_outage", ev.t_reconnected - t0)
        got = [int(sub.next_msg(3 * FACTOR).data) for _ in range(500)]
        assert got == list(range(500))


def _timed(call: Callable[[], Any], timeout: float, raises: type[BaseException] | tuple = jssync.TimeoutError
           ) -> float:
    t0 = time.monotonic()
    with pytest.raises(raises):
        call()
    elapsed = time.monotonic() - t0
    assert elapsed <= timeout + SLACK, f"the call took {elapsed:.2f}s with a timeout of {timeout}s"
    return elapsed


def _blocking_calls(nc: jssync.Connection, js: Any, sub: jssync.Subscription, unique: str
                    ) -> list[tuple[str, Callable[[], Any], float]]:
    t = 0.6
    return [
        ("request", lambda: nc.request(f"svc.{unique}", b"?", timeout=t), t),
        ("flush", lambda: nc.flush(timeout=t), t),
        ("next_msg", lambda: sub.next_msg(timeout=t), t),
        ("js.publish", lambda: js.publish(f"js.{unique}", b"x", timeout=t), t),
        ("js.account_info", lambda: js.account_info(timeout=t), t),
        ("js.stream", lambda: js.stream(f"S{unique}", timeout=t), t),
    ]


def test_no_blocking_call_outlives_its_timeout_during_a_stall(proxy, nats_server, unique, record_property):
    ev = Events()
    # a long ping interval: the stall stays undetected for the whole test
    with _connect(proxy.url, ev, ping_interval=60) as nc, jssync.connect(nats_server.url) as direct:
        js = nc.jetstream(timeout=1.0)
        direct_js = direct.jetstream()
        direct_js.create_stream(name=f"S{unique}", subjects=[f"js.{unique}"], storage="memory")
        try:
            direct.subscribe(f"svc.{unique}", callback=lambda m: m.respond(b"!"))
            direct.flush()
            sub = nc.subscribe(f"idle.{unique}")
            assert nc.request(f"svc.{unique}", b"?", timeout=2).data == b"!"
            proxy.stall()
            worst = 0.0
            for name, call, timeout in _blocking_calls(nc, js, sub, unique):
                elapsed = _timed(call, timeout)
                worst = max(worst, elapsed - timeout)
                print(f"[measure] stalled {name}: {elapsed:.3f}s (timeout {timeout}s)")
            # publishes are buffered and return at once
            t0 = time.monotonic()
            for _ in range(100):
                nc.publish(f"idle.{unique}", b"x")
            assert time.monotonic() - t0 < 0.5 * FACTOR
            # subscribe has no timeout argument: it is bounded by the connection's timeout
            t0 = time.monotonic()
            nc.subscribe(f"late.{unique}")
            assert time.monotonic() - t0 <= 2.0 + SLACK
            _report(record_property, "stall_worst_overrun", worst)
            # the same calls from many threads at once
            errors: list[BaseException] = []

            def hammer(call: Callable[[], Any], timeout: float) -> None:
                try:
                    _timed(call, timeout)
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)

            threads = [threading.Thread(target=hammer, args=(c, t))
                       for _ in range(3) for _, c, t in _blocking_calls(nc, js, sub, unique)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(10)
            assert not errors, errors
            # close does not hang on a stalled socket either
            t0 = time.monotonic()
            nc.close(timeout=1.0)
            assert time.monotonic() - t0 <= 1.0 + SLACK
            proxy.forward()
        finally:
            direct_js.delete_stream(f"S{unique}")


def test_no_blocking_call_outlives_its_timeout_while_reconnecting(proxy, nats_server, unique):
    ev = Events()
    with _connect(proxy.url, ev) as nc:
        js = nc.jetstream(timeout=1.0)
        sub = nc.subscribe(f"idle.{unique}")
        nc.flush()
        proxy.refuse()
        proxy.drop()
        assert ev.disconnected.wait(3 * FACTOR)
        for name, call, timeout in _blocking_calls(nc, js, sub, unique):
            raises: tuple = (jssync.TimeoutError,)
            if name.startswith("js."):
                # JetStream may also report that no responder answered
                raises = (jssync.TimeoutError, jssync.NoRespondersError, jssync.ServiceUnavailableError)
            elapsed = _timed(lambda c=call: c(), timeout, raises)
            print(f"[measure] reconnecting {name}: {elapsed:.3f}s (timeout {timeout}s)")
        assert not nc.is_connected
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)
        nc.flush(timeout=2)


def test_connect_through_a_stalled_proxy_times_out(proxy):
    proxy.stall()
    t0 = time.monotonic()
    with pytest.raises(jssync.NoServersError):
        jssync.connect(proxy.url, timeout=1.0)
    assert time.monotonic() - t0 <= 1.0 + 1.0 + SLACK  # nats-py's connect timeout is whole seconds
    proxy.forward()


def test_repeated_faults_leave_a_working_connection(proxy, nats_server, unique):
    """Drops, stalls and half-opens in a row; afterwards request/reply and pub/sub still work."""
    ev = Events()
    with _connect(proxy.url, ev) as nc, jssync.connect(nats_server.url) as direct:
        direct.subscribe(f"echo.{unique}", callback=lambda m: m.respond(m.data))
        direct.flush()
        for fault in ("drop", "stall", "half_open", "drop"):
            ev.reset()
            if fault == "stall":
                proxy.stall(new_connections=False)
            else:
                getattr(proxy, fault)()
            assert ev.reconnected.wait((STALE_WITHIN + 5) * FACTOR), f"no reconnect after {fault}"
            wait_for(lambda: nc.is_connected, 5, what="connected")
            assert nc.request(f"echo.{unique}", fault.encode(), timeout=3).data == fault.encode()
        _roundtrip_ok(nc, direct, f"final.{unique}")
