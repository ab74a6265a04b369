"""Requests written to the socket by the caller's thread keep the connection's order.

A blocking request skips the hand-off to the I/O thread when nothing is queued before
it (``Connection._try_direct_send``). These tests check that publishes and requests from
one thread still reach the server in call order, across threads nothing is corrupted,
partial sends (a tiny socket buffer) are completed in order, and a reconnect falls back
to the queue.
"""

from __future__ import annotations

import socket
import threading

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, echo, needs_fast_paths, wait_answered, wait_for

pytestmark = [pytest.mark.timeout(120), needs_fast_paths]


def test_request_goes_direct_and_replies(nats_server):
    with jssync.connect(nats_server.url) as srv, jssync.connect(nats_server.url) as nc:
        echo(srv, "ds.echo")
        assert nc.request("ds.echo", b"warm-up", timeout=5).data == b"warm-up"
        assert nc._sockpath.sock is not None, "plain TCP connection: the direct path is installed"
        sent: list[bool] = []
        orig = nc._req.direct  # the request's own write (Outbound.try_direct_send)

        def spy(*a):
            r = orig(*a)
            sent.append(r)
            return r

        nc._req.direct = spy
        for i in range(50):
            assert nc.request("ds.echo", str(i).encode(), timeout=5).data == str(i).encode()
        assert any(sent), "at least some requests were written by the caller's thread"


def test_publish_then_request_keeps_order(nats_server):
    """Publishes queued before a request reach the server before it (same thread)."""
    with jssync.connect(nats_server.url) as srv, jssync.connect(nats_server.url) as nc:
        seen: list[bytes] = []
        lock = threading.Lock()

        def on_msg(msg: jssync.Msg) -> None:
            with lock:
                seen.append(msg.data)
            if msg.reply:
                with lock:
                    msg.respond(str(len(seen)).encode())

        srv.subscribe("ds.order", callback=on_msg)
        srv.flush()
        expected = 0
        for round_ in range(30):
            for i in range(40):
                nc.publish("ds.order", f"{round_}-{i}".encode())
            expected += 41
            reply = nc.request("ds.order", f"{round_}-req".encode(), timeout=5)
            # the responder had seen every publish of this round before the request
            assert int(reply.data) == expected, (round_, reply.data, expected)
        with lock:
            assert seen == [
                f"{r}-{i}".encode() if i < 40 else f"{r}-req".encode() for r in range(30) for i in range(41)
            ]


def test_many_threads_mixing_requests_and_publishes(nats_server):
    threads_n, per = 8, 150
    with jssync.connect(nats_server.url) as srv, jssync.connect(nats_server.url) as nc:
        echo(srv, "ds.mix.req")
        got: dict[int, list[int]] = {t: [] for t in range(threads_n)}
        glock = threading.Lock()

        def on_pub(msg: jssync.Msg) -> None:
            t, i = map(int, msg.data.split(b":"))
            with glock:
                got[t].append(i)

        srv.subscribe("ds.mix.pub", callback=on_pub)
        srv.flush()
        errors: list[BaseException] = []

        def worker(t: int) -> None:
            try:
                for i in range(per):
                    nc.publish("ds.mix.pub", f"{t}:{i}".encode())
                    body = f"{t}/{i}".encode() * (1 + i % 50)
                    assert nc.request("ds.mix.req", body, timeout=10).data == body
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(60 * FACTOR)
        assert not errors, errors[:3]
        wait_for(lambda: all(len(v) == per for v in got.values()), 10, what="every publish")
        for t, seq in got.items():
            assert seq == list(range(per)), f"thread {t} out of order"


def test_partial_sends_are_completed_in_order(nats_server):
    """A tiny socket send buffer forces partial sends; the rest goes out first, intact."""
    with jssync.connect(nats_server.url) as srv, jssync.connect(nats_server.url) as nc:
        echo(srv, "ds.big")
        nc.request("ds.big", b"x", timeout=5)
        assert nc._sockpath.sock is not None
        nc._sockpath.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        partial = []
        orig_flush = nc._sockpath.flush_rest

        def flush_spy() -> None:
            partial.append(1)
            orig_flush()

        nc._sockpath.flush_rest = flush_spy
        errors: list[BaseException] = []

        def worker(t: int) -> None:
            try:
                for i in range(40):
                    body = bytes([65 + t]) * (20000 + i * 997)
                    assert nc.request("ds.big", body, timeout=10).data == body
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        ts = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(60 * FACTOR)
        assert not errors, errors[:3]
        assert partial, "the small buffer made at least one send partial"
        assert nc.is_connected


def test_requests_work_across_a_reconnect():
    with NatsServer() as server:
        with jssync.connect(server.url, reconnect_time_wait=0.1) as srv, \
                jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
            echo(srv, "ds.rc")
            assert nc.request("ds.rc", b"1", timeout=5).data == b"1"
            old = nc._sockpath.transport
            server.restart()
            wait_for(lambda: nc.is_connected and srv.is_connected, 20, what="both reconnected")
            srv.flush()
            wait_answered(nc, "ds.rc")
            for i in range(20):
                assert nc.request("ds.rc", str(i).encode(), timeout=5).data == str(i).encode()
            assert nc._sockpath.transport is not old
