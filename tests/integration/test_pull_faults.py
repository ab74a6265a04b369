"""consume through server faults: a paused server (missed heartbeats) and a restart (real servers)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.fault]


@pytest.fixture
def server(tmp_path):
    with NatsServer(store_dir=tmp_path / "js") as srv:
        yield srv


def connect(srv):
    return jssync.connect(srv.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)


def test_heartbeat_warning_when_server_paused(server):
    errors: list[BaseException] = []
    with connect(server) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="HB", subjects=["hb.>"], storage="file")
        c = st.create_consumer(durable_name="D", ack_policy="explicit")
        got: list[bytes] = []
        cc = c.consume(lambda m: (got.append(m.data), m.ack()), error_cb=errors.append,
                       expires=2, idle_heartbeat=0.5)
        try:
            js.publish("hb.x", b"before")
            wait_for(lambda: got == [b"before"], what="first message")
            pulls = cc.pull_requests
            os.kill(server.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: sum(isinstance(e, jssync.NoHeartbeatError) for e in errors) >= 2,
                         timeout=8, what="missed heartbeat warnings")
                # each warning is followed by one fresh pull (ADR-37: not terminal), no more
                warned = sum(isinstance(e, jssync.NoHeartbeatError) for e in errors)
                assert 1 <= cc.pull_requests - pulls <= warned + 1
            finally:
                os.kill(server.pid, signal.SIGCONT)
            js.publish("hb.x", b"after", timeout=10)
            wait_for(lambda: got == [b"before", b"after"], timeout=10, what="consume recovered")
        finally:
            cc.stop()
        assert not cc.error


def test_restart_mid_consume_nothing_lost(server):
    """Explicit acks, server restarted mid-consume: every message arrives; repeats only as redeliveries."""
    seen: dict[int, list[int]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    disconnected = threading.Event()
    with jssync.connect(server.url, reconnect_time_wait=0.1, disconnected_cb=disconnected.set) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="RS", subjects=["rs.>"], storage="file")
        c = st.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=2.0)
        for i in range(200):
            js.publish_async("rs.x", b"%d" % i)
        js.publish_async_completed(10)
        gate = threading.Event()

        def handle(m):
            if len(seen) >= 100:
                gate.wait(10)
            md = m.metadata
            with lock:
                seen.setdefault(md.sequence.stream, []).append(md.num_delivered)
            m.ack()

        cc = c.consume(handle, error_cb=errors.append, max_messages=20, expires=2, idle_heartbeat=0.5)
        try:
            wait_for(lambda: len(seen) >= 100, what="half consumed")
            server.restart()
            gate.set()
            wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
            assert disconnected.is_set()
            for i in range(200, 300):
                js.publish_async("rs.x", b"%d" % i)
            js.publish_async_completed(15)
            wait_for(lambda: len(seen) == 300, timeout=30, what="all 300 stream messages")
            wait_for(lambda: c.info().num_ack_pending == 0 and c.info().num_pending == 0, timeout=15,
                     what="nothing left")
        finally:
            cc.stop()
    assert sorted(seen) == list(range(1, 301))
    for seq, deliveries in seen.items():
        # a message seen twice was redelivered (its delivery count went up)
        assert deliveries == sorted(deliveries) and len(set(deliveries)) == len(deliveries), (seq, deliveries)
    assert not isinstance(cc.error, jssync.ConsumerDeletedError)
