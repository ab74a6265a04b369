"""A blocked I/O loop is reported once: the connection's timer thread (core/clock.py) does not run
on the loop, so it sees the loop not running for more than a second and says how long and what
it was running, to the ``jssync`` logger and the connection's ``error_cb``; the consumer whose
heartbeat alarms started the timer thread goes on afterwards."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import jssync
from jssync.testing.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def block_the_io_loop_for(seconds: float) -> None:
    time.sleep(seconds)  # behaviour: a callback scheduled on the I/O loop that blocks it


def test_a_callback_blocking_the_io_loop_is_reported_once_naming_it(
        nats_server: NatsServer, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="jssync")
    errors: list[Exception] = []
    with jssync.connect(nats_server.url, error_cb=errors.append) as nc:
        js = nc.jetstream()
        st = js.create_stream(name=f"S{unique}", subjects=[f"S{unique}.>"], storage="memory")
        try:
            got: list[bytes] = []
            c = st.create_consumer(durable_name="D")
            with c.consume(lambda m: (got.append(m.data), m.ack())):  # all defaults: heartbeats on
                wait_for(lambda: nc.internal.loop.clock.running, 5, what="the timer thread to start")
                done = threading.Event()
                nc.internal.loop.call_soon(block_the_io_loop_for, 1.5 * FACTOR)
                nc.internal.loop.call_soon(done.set)
                assert done.wait(10 * FACTOR)
                wait_for(lambda: errors, 5, what="the stall report on error_cb")
                # the loop runs again: the clock's probes answer, and nothing more is reported
                js.publish(f"S{unique}.a", b"after")
                wait_for(lambda: got == [b"after"], 10, what="the consumer to go on after the stall")
                time.sleep(0.75)  # nothing happens: three probe periods after the loop came back, no second report
            stalls = [e for e in errors if isinstance(e, jssync.LoopStalledError)]
            assert len(stalls) == 1 and len(errors) == 1, errors
            err = stalls[0]
            assert 1.0 < err.seconds < 1.5 * FACTOR + 1, err
            assert "block_the_io_loop_for" in err.running and "test_loop_stall.py:" in err.running
            assert f"jssync-io-{nc.internal.id}" in str(err)
            lines = [r for r in caplog.records if "has not run" in r.getMessage()]
            assert len(lines) == 1 and lines[0].name == "jssync"
            assert "block_the_io_loop_for" in lines[0].getMessage()
        finally:
            js.delete_stream(st.name)
    assert not nc.internal.loop.clock.running  # closed with the connection
