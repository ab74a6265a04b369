"""fetch / fetch_bytes / next take an idle_heartbeat below consume's 0.5 s floor (the server
accepts any heartbeat up to half of the pull's expiry): the heartbeats come, no miss is
reported, the pull ends at its expiry or when it got its messages (real server)."""

from __future__ import annotations

import time

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)


def _durable(stream):
    return stream.create_consumer(durable_name="HB", ack_policy="explicit")


def test_fetch_with_a_tenth_of_a_second_heartbeat_waits_its_expiry_out_without_a_miss(js, stream):
    c = _durable(stream)
    t0 = time.monotonic()
    res = c.fetch(1, expires=1.5, idle_heartbeat=0.1)
    assert list(res) == []
    # heartbeats every 0.1 s kept it alive past 2 x 0.1 s: it ended at its expiry, no NoHeartbeatError
    assert res.error is None
    assert time.monotonic() - t0 >= 1.4


def test_fetch_and_fetch_bytes_with_a_short_heartbeat_deliver(js, stream):
    c = _durable(stream)
    for i in range(3):
        js.publish(f"{stream.name}.m", b"%d" % i)
    res = c.fetch(3, expires=2, idle_heartbeat=0.1)
    got = [m.data for m in res]
    assert got == [b"0", b"1", b"2"] and res.error is None
    for i in range(2):
        js.publish(f"{stream.name}.m", b"b%d" % i)
    resb = c.fetch_bytes(10_000, max_messages=2, expires=2, idle_heartbeat=0.1)
    assert [m.data for m in resb] == [b"b0", b"b1"] and resb.error is None


def test_next_with_a_short_heartbeat_times_out_cleanly_then_gets_a_message(js, stream):
    c = _durable(stream)
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=1, idle_heartbeat=0.1)
    assert time.monotonic() - t0 < 5 * FACTOR
    js.publish(f"{stream.name}.m", b"one")
    assert c.next(timeout=2, idle_heartbeat=0.1).data == b"one"


def test_fetch_heartbeat_bounds_are_still_checked(js, stream):
    c = _durable(stream)
    with pytest.raises(jssync.ValidationError, match="idle_heartbeat"):
        c.fetch(1, expires=1, idle_heartbeat=0)
    with pytest.raises(jssync.ValidationError, match="idle_heartbeat"):
        c.fetch(1, expires=1, idle_heartbeat=0.001)
    with pytest.raises(jssync.ValidationError, match="half of expires"):
        c.fetch(1, expires=1, idle_heartbeat=0.6)
    with pytest.raises(jssync.ValidationError, match="idle_heartbeat"):
        c.consume(idle_heartbeat=0.1)  # consume keeps its 0.5 s floor (its refill cadence)
