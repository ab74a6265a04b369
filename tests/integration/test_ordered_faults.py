"""Ordered consumers through server faults: restart and a paused server (real servers)."""

from __future__ import annotations

import os
import signal

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.fault]


@pytest.fixture
def server(tmp_path):
    with NatsServer(store_dir=tmp_path / "js") as srv:
        yield srv


def test_ordered_consume_survives_server_restart(server):
    got: list[int] = []
    errors: list[BaseException] = []
    with jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORS", subjects=["ors.>"], storage="file")
        for i in range(100):
            js.publish_async("ors.x", b"%d" % i)
        js.publish_async_completed(10)
        oc = st.ordered_consumer()
        cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream), error_cb=errors.append,
                        max_messages=10, expires=2, idle_heartbeat=0.5)
        try:
            wait_for(lambda: len(got) >= 100, what="first 100")
            first = oc.name
            server.restart()
            wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
            for i in range(100, 200):
                js.publish_async("ors.x", b"%d" % i)
            js.publish_async_completed(15)
            wait_for(lambda: len(got) >= 200, timeout=30, what="all 200 after the restart")
        finally:
            cc.stop()
    assert got == list(range(1, 201))
    assert oc.name != first and cc.resets >= 1


def test_ordered_fetch_after_server_restart(server):
    with jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORF", subjects=["orf.>"], storage="file")
        for i in range(10):
            js.publish("orf.x", b"%d" % i)
        oc = st.ordered_consumer()
        got = [m.metadata.sequence.stream for m in oc.fetch(5, expires=1)]
        server.restart()
        wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
        # the in-memory consumer is gone: the next reads recreate it after sequence 5
        while len(got) < 10:
            try:
                got.append(oc.next(timeout=5).metadata.sequence.stream)
            except jssync.ServiceUnavailableError:
                continue
        assert got == list(range(1, 11))


def test_ordered_recovers_after_missed_heartbeats(server):
    got: list[int] = []
    errors: list[BaseException] = []
    with jssync.connect(server.url) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORH", subjects=["orh.>"], storage="file")
        js.publish("orh.x", b"0")
        oc = st.ordered_consumer()
        cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream), error_cb=errors.append,
                        expires=2, idle_heartbeat=0.5)
        try:
            wait_for(lambda: got == [1], what="first message")
            os.kill(server.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: any(isinstance(e, jssync.NoHeartbeatError) for e in errors), timeout=6,
                         what="missed heartbeats")
            finally:
                os.kill(server.pid, signal.SIGCONT)
            for i in range(1, 20):
                js.publish("orh.x", b"%d" % i, timeout=10)
            wait_for(lambda: len(got) >= 20, timeout=20, what="recovered")
        finally:
            cc.stop()
    assert got == list(range(1, 21))
