"""consume: pull requests written off after a missed heartbeat that were alive after all.

A missed heartbeat (or a reconnect) makes consume write off its pull requests in flight and
send a new one. When the server was only paused, the old requests are still waiting there:
they may deliver messages and end later with a 408 whose Nats-Pending-Messages counts what
they did not deliver. Neither may be counted against the new request, or the buffer outgrows
max_messages. A server paused with SIGSTOP for longer than 2 x idle_heartbeat and
shorter than expires makes that happen for real.

On the wire (checked with a raw client): a pull consumer's messages arrive with the stream
subject, statuses and heartbeats with the request's reply subject; the subscription id tells
which inbox (and so which generation of pull requests) a message came for.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.fault]

MAX = 10
MAX_BYTES = 2000


@pytest.fixture
def server(tmp_path):
    with NatsServer(store_dir=tmp_path / "js") as srv:
        yield srv


class _Timeouts:
    """Watches every inbox of the connection for 408 Request Timeout statuses (another connection)."""

    def __init__(self, srv: NatsServer) -> None:
        self.nc = jssync.connect(srv.url)
        self.count = 0
        self._lock = threading.Lock()
        self.sub = self.nc.subscribe("_INBOX.>", callback=self._on)

    def _on(self, m: jssync.Msg) -> None:
        if m.headers and str(m.headers.get("Status", "")).startswith("408"):
            with self._lock:
                self.count += 1

    def close(self) -> None:
        self.nc.close()


def _pause_until_written_off(server: NatsServer, errors: list[BaseException], pulls_before: int,
                             cc: jssync.ConsumeContext) -> None:
    """Pause the server until consume missed a heartbeat and sent a replacement pull request."""
    os.kill(server.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: any(isinstance(e, jssync.NoHeartbeatError) for e in errors)
                 and cc.pull_requests > pulls_before, timeout=8, what="a missed heartbeat and a new pull")
    finally:
        os.kill(server.pid, signal.SIGCONT)


def _deliveries_settled(c: jssync.Consumer) -> int:
    """Wait until the server has no waiting pull request left; return the messages it delivered unacked."""
    holder: list[int] = []

    def settled() -> bool:
        info = c.info()
        holder[:] = [info.num_ack_pending]
        return info.num_waiting == 0

    wait_for(settled, timeout=10, what="every waiting pull request filled")
    return holder[0]


def _subscriptions(server: NatsServer, name: str) -> int:
    conns = server.varz("connz")["connections"]
    assert isinstance(conns, list)
    return sum(int(c["subscriptions"]) for c in conns if c.get("name") == name)


def _setup(nc: jssync.Connection, name: str):
    js = nc.jetstream()
    st = js.create_stream(name=name, subjects=[f"{name.lower()}.>"], storage="file")
    c = st.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=60)
    return js, st, c


@pytest.mark.parametrize("mode", ["messages", "bytes"])
def test_expired_written_off_request_not_subtracted_again(server, mode):
    """The 408 of a written-off request that was still alive must not lower the pending count again.

    Before the fix: the 408's pending count was subtracted a second time, consume sent a third
    pull request, and 2 x max_messages were delivered while the application took none.
    The inbox of the written-off request is unsubscribed once it expired. With max_bytes the
    same holds for the bytes (100-byte payloads: each message counts more than 150 bytes).
    """
    limit = {"max_messages": MAX} if mode == "messages" else {"max_bytes": MAX_BYTES}
    most = MAX if mode == "messages" else MAX_BYTES // 150
    errors: list[BaseException] = []
    watch = _Timeouts(server)
    try:
        with jssync.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, name="rst") as nc:
            js, st, c = _setup(nc, "RST")
            cc = c.consume(error_cb=errors.append, expires=4, idle_heartbeat=0.5, **limit)
            try:
                wait_for(lambda: c.info().num_waiting == 1, what="the first pull request waiting")
                subs = _subscriptions(server, "rst")
                _pause_until_written_off(server, errors, 1, cc)
                # the old request is alive on the server: it expires with a 408 (pending 10)
                wait_for(lambda: watch.count >= 1, timeout=10, what="the old request's 408")
                nc.flush()  # the 408 was handled ...
                nc.flush()  # ... and any pull request it caused reached the server
                for _ in range(3 * most):
                    js.publish_async("rst.x", b"p" * 100)
                js.publish_async_completed(10)
                delivered = _deliveries_settled(c)
                assert delivered <= most, f"{delivered} messages delivered for {limit}"
                assert cc.pending_messages == delivered
                wait_for(lambda: _subscriptions(server, "rst") == subs, timeout=10,
                         what="the old inbox unsubscribed")
            finally:
                cc.stop()
            js.delete_stream(st.name)
    finally:
        watch.close()


def test_messages_of_written_off_request_counted_once(server):
    """Messages a written-off request still delivers are counted as buffered, not against the new request.

    Old and new requests share 5 messages (the server serves waiting requests in turn); the
    old one expires with a 408 for the rest. Once the application took the 5, what is
    pending is exactly what the new request has left: no further pull request, and
    publishing 30 more delivers that and no more. Before the fix: 20 delivered.
    """
    errors: list[BaseException] = []
    watch = _Timeouts(server)
    try:
        with jssync.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1) as nc:
            js, st, c = _setup(nc, "RSM")
            cc = c.consume(error_cb=errors.append, max_messages=MAX, expires=4, idle_heartbeat=0.5)
            try:
                wait_for(lambda: c.info().num_waiting == 1, what="the first pull request waiting")
                _pause_until_written_off(server, errors, 1, cc)
                wait_for(lambda: c.info().num_waiting == 2, what="old and new pull requests waiting")
                for i in range(5):
                    js.publish("rsm.x", b"old %d" % i)  # the older request is served first
                for _ in range(5):
                    cc.next(timeout=5).ack()
                wait_for(lambda: watch.count >= 1, timeout=10, what="the old request's 408")
                nc.flush()
                nc.flush()
                assert cc.pending_messages <= MAX
                for i in range(3 * MAX):
                    js.publish_async("rsm.x", b"%d" % i)
                js.publish_async_completed(10)
                delivered = _deliveries_settled(c)
                assert delivered <= MAX, f"{delivered} messages delivered for max_messages={MAX}"
                assert cc.pending_messages == delivered
            finally:
                cc.stop()
            js.delete_stream(st.name)
    finally:
        watch.close()
