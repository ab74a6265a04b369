"""What a connection says, and how its calls end, during and after an outage.

The server is made unreachable through the TCP proxy (tests/proxy.py: new connections
are refused, the open one is dropped), so the client keeps trying to reconnect:

- a ``js.publish`` made meanwhile raises a ``TimeoutError`` that says the connection is
  disconnected and reconnecting (to which server, which attempt), not a ``no_ack`` hint;
- when nats-py gives up reconnecting (``max_reconnect_attempts``) the connection is closed
  (``is_closed``, already when ``closed_cb`` runs) and every later call raises
  ``ConnectionClosedError`` naming why; every consume (plain, callback, ordered), fetch,
  ``next`` and subscription iterator that was waiting ends with that error;
- ``drain(timeout)`` during an outage closes the connection and then raises a
  ``TimeoutError`` saying what was left undrained;
- ``error_cb`` hears of an outage once when it starts (not once per reconnect attempt);
  its end is logged once; real errors still reach ``error_cb``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jssync
from jssync.testing.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.proxy import TcpProxy

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


class Events:
    def __init__(self) -> None:
        self.disconnected = threading.Event()
        self.reconnected = threading.Event()
        self.closed = threading.Event()
        self.errors: list[BaseException] = []

    def kwargs(self) -> dict[str, Any]:
        return dict(disconnected_cb=self.disconnected.set, reconnected_cb=self.reconnected.set,
                    closed_cb=self.closed.set, error_cb=self.errors.append)


@pytest.fixture
def proxy(nats_server) -> Iterator[TcpProxy]:
    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        yield p


def _go_down(proxy: TcpProxy, ev: Events, nc: jssync.Connection) -> None:
    """Refuse reconnects, cut the connection, wait until the client knows."""
    proxy.refuse()
    proxy.drop()
    assert ev.disconnected.wait(3 * FACTOR)
    wait_for(lambda: not nc.is_connected, 3, what="disconnected")


def _ends_with(fn: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException | str]]:
    """Run ``fn`` on a thread; the list gets what it raised (or "returned")."""
    out: list[BaseException | str] = []

    def run() -> None:
        try:
            fn()
            out.append("returned")
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_js_publish_while_reconnecting_says_the_connection_is_reconnecting(proxy, stream):
    ev = Events()
    with jssync.connect(proxy.url, reconnect_time_wait=0.1, **ev.kwargs()) as nc:
        js = nc.jetstream()
        assert js.publish(f"{stream.name}.a", b"before").seq == 1
        _go_down(proxy, ev, nc)
        with pytest.raises(jssync.TimeoutError) as info:
            js.publish(f"{stream.name}.a", b"during", timeout=0.5)
        err = info.value
        assert isinstance(err, TimeoutError)  # the builtin: `except TimeoutError` still works
        text = str(err)
        assert "no_ack" not in text and "ack=False" not in text, text
        assert "disconnected" in text and "reconnecting" in text, text
        assert f"127.0.0.1:{proxy.port}" in text, text
        assert "attempt" in text, text
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)


def test_connection_that_gave_up_reconnecting_is_closed_and_every_call_says_why(proxy, stream):
    ev = Events()
    seen_closed: list[bool] = []
    nc = jssync.connect(proxy.url, reconnect_time_wait=0.1, max_reconnect_attempts=2,
                        **{**ev.kwargs(), "closed_cb": lambda: (seen_closed.append(nc.is_closed), ev.closed.set())})
    try:
        js = nc.jetstream()
        _go_down(proxy, ev, nc)
        assert ev.closed.wait(10 * FACTOR), "closed_cb did not run"
        assert seen_closed == [True], "closed_cb ran while is_closed was still False"
        assert nc.is_closed and not nc.is_connected and not nc.is_reconnecting
        calls: dict[str, Callable[[], Any]] = {
            "publish": lambda: nc.publish("x.y", b"1"),
            "js.publish": lambda: js.publish(f"{stream.name}.a", b"1", timeout=0.5),
            "request": lambda: nc.request("x.y", timeout=0.5),
            "flush": lambda: nc.flush(0.5),
            "subscribe": lambda: nc.subscribe("x.y"),
            "js.stream": lambda: js.stream(stream.name, timeout=0.5),
        }
        for what, call in calls.items():
            for _ in range(3):  # the same every time, never a TimeoutError
                with pytest.raises(jssync.ConnectionClosedError) as info:
                    call()
                assert "reconnect" in str(info.value), f"{what}: {info.value}"
        closes = [e for e in ev.errors if isinstance(e, jssync.ConnectionClosedError)]
        assert len(closes) == 1, ev.errors
        assert "reconnect" in str(closes[0])
    finally:
        nc.close()
    assert nc.is_closed


def test_every_waiting_read_ends_with_the_error_when_the_connection_gives_up(proxy, js, stream, unique):
    name = stream.name
    for i in range(3):
        js.publish(f"{name}.a", str(i).encode())
    for d in ("IT", "CB", "FE", "NX"):
        stream.create_consumer(durable_name=d, ack_policy="explicit")
    ev = Events()
    nc = jssync.connect(proxy.url, reconnect_time_wait=0.1, max_reconnect_attempts=2, **ev.kwargs())
    try:
        pjs = nc.jetstream()
        st = pjs.stream(name)
        # each read is waiting for more when the connection goes away
        it = st.consumer("IT").consume(max_messages=10, expires=30)
        for _ in range(3):
            next(it).ack()
        cb_errors: list[BaseException] = []
        cb = st.consumer("CB").consume(lambda m: m.ack(), error_cb=cb_errors.append, expires=30)
        oc = st.ordered_consumer()
        ordered = oc.consume(expires=30)
        for _ in range(3):
            next(ordered)
        nx = st.consumer("NX")
        fe = st.consumer("FE").fetch(10, expires=60)
        fetched = [next(fe) for _ in range(3)]
        sub = nc.subscribe(f"core.{unique}")
        psub = pjs.subscribe(f"{name}.>", ordered=True)
        for _ in range(3):
            psub.next_msg(3 * FACTOR)
        nc.flush()
        waiting = {
            "consume iterator": _ends_with(lambda: list(it)),
            "ordered consume": _ends_with(lambda: list(ordered)),
            "fetch": _ends_with(lambda: list(fe)),
            "next": _ends_with(lambda: [nx.next(timeout=None).ack() for _ in range(4)]),
            "subscription iterator": _ends_with(lambda: list(sub)),
            "push subscription iterator": _ends_with(lambda: list(psub)),
        }
        assert len(fetched) == 3
        time.sleep(0.2 * FACTOR)  # behaviour: every read is waiting when the link goes (no event says so)
        _go_down(proxy, ev, nc)
        assert ev.closed.wait(10 * FACTOR), "nats-py did not give up"
        for what, (t, out) in waiting.items():
            t.join(5 * FACTOR)
            assert not t.is_alive(), f"{what} still waiting after the connection closed"
            assert len(out) == 1 and isinstance(out[0], jssync.ConnectionClosedError), f"{what}: {out}"
            assert "reconnect" in str(out[0]), f"{what}: {out[0]}"
        wait_for(lambda: cb.closed, 5, what="the callback consume to end")
        assert [type(e) for e in cb_errors] == [jssync.ConnectionClosedError], cb_errors
        wait_for(lambda: ordered.closed, 5, what="the ordered consume to end")
        resets = ordered.resets
        time.sleep(2.5 * FACTOR)  # nothing happens: the ended ordered consume recreates no consumer
        assert ordered.resets == resets, "the ordered consume kept recreating its consumer"
    finally:
        nc.close()


def test_drain_during_an_outage_closes_then_raises_what_was_left(proxy, stream, unique):
    ev = Events()
    nc = jssync.connect(proxy.url, reconnect_time_wait=0.1, **ev.kwargs())
    try:
        sub = nc.subscribe(f"core.{unique}")
        nc.flush()
        _go_down(proxy, ev, nc)
        for i in range(5):
            nc.publish(f"core.{unique}", str(i).encode())
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError) as info:
            nc.drain(timeout=1.0)
        took = time.monotonic() - t0
        assert took < 1.0 + 1.0 * FACTOR, took
        assert nc.is_closed, "drain raised before closing"
        text = str(info.value)
        assert f"core.{unique}" in text, text
        assert "5 queued message(s)" in text, text
        assert not [e for e in ev.errors if isinstance(e, jssync.TimeoutError)], \
            "the timeout went to error_cb as well as being raised"
        assert sub.is_closed
    finally:
        nc.close()


def test_an_outage_is_reported_once_when_it_starts_and_once_when_it_ends(proxy, nats_server, caplog):
    ev = Events()
    caplog.set_level(logging.DEBUG, logger="jssync")
    with jssync.connect(proxy.url, reconnect_time_wait=0.1, **ev.kwargs()) as nc:
        for _ in range(2):  # two outages: one report at each start, one log line at each end
            ev.disconnected.clear()
            ev.reconnected.clear()
            before = len(ev.errors)
            _go_down(proxy, ev, nc)
            time.sleep(1.5 * FACTOR)  # behaviour: the outage lasts ~15 failed reconnect attempts
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            time.sleep(0.2 * FACTOR)  # nothing happens: no second report of the outage
            reports = ev.errors[before:]
            assert len(reports) == 1, [f"{type(e).__name__}: {e}" for e in reports]
            assert "disconnected" in str(reports[0]) and "reconnecting" in str(reports[0]), reports[0]
        ends = [r for r in caplog.records if r.levelno >= logging.INFO and "reconnected" in r.getMessage()]
        assert len(ends) == 2, [r.getMessage() for r in ends]
        assert all("attempt" in r.getMessage() for r in ends), [r.getMessage() for r in ends]


def test_real_errors_still_reach_error_cb_during_and_after_an_outage(unique):
    config = ('authorization { users = [ { user: u, password: p, permissions: '
              '{ publish: { deny: ["forbidden.>"] } } } ] }')
    with NatsServer(jetstream=False, config=config) as srv, TcpProxy(("127.0.0.1", srv.port)) as proxy:
        ev = Events()
        with jssync.connect(proxy.url, user="u", password="p", reconnect_time_wait=0.1, **ev.kwargs()) as nc:
            _go_down(proxy, ev, nc)
            time.sleep(0.5 * FACTOR)  # behaviour: the outage lasts a few reconnect attempts
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            before = len(ev.errors)
            nc.publish(f"forbidden.{unique}", b"x")
            nc.flush()
            wait_for(lambda: any(isinstance(e, jssync.PermissionDeniedError) for e in ev.errors[before:]), 3,
                     what="the permissions error in error_cb")
