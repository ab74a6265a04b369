"""consume through server faults: a paused server (missed heartbeats) and a restart (real servers)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

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


def _in_thread(fn):
    """Run ``fn`` in a thread; the list gets its result or what it raised."""
    box: list = []

    def run():
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001
            box.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, box


@pytest.mark.parametrize("how", ["restart", "crash"])
@pytest.mark.parametrize("call", ["next", "ack_next"])
def test_timeout_none_pulls_again_after_a_restart_lost_the_pull(server, call, how):
    """timeout=None: the pull waiting on the server is lost in a restart (409 Server Shutdown)
    or a crash (nothing); the call pulls again and returns the message published after it
    (no error, no endless wait)."""
    with connect(server) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="NL", subjects=["nl.>"], storage="file")
        c = st.create_consumer(durable_name="D", ack_policy="explicit")
        if call == "next":
            t, box = _in_thread(lambda: [c.next(timeout=None)])
        else:
            js.publish("nl.x", b"first")
            first = c.next(timeout=5)
            t, box = _in_thread(lambda: first.ack_next(timeout=None))
        try:
            wait_for(lambda: c.info().num_waiting == 1, what="the pull waiting")
            if how == "restart":
                server.restart()
            else:
                server.kill()
                server.start()
            wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
            js.publish("nl.x", b"after", timeout=10)
            wait_for(lambda: box, timeout=15, what="the call returned")
        finally:
            nc.close()
            t.join(10 * FACTOR)
        assert not isinstance(box[0], BaseException), box[0]
        assert [m.data for m in box[0]] == [b"after"]
