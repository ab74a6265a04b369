"""The publish queue is bounded by bytes as well as by count; publish blocks, never drops."""

from __future__ import annotations

import threading
import time

import pytest

import jssync
import jssync.core.outbound as outmod
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(120)


def test_big_publishes_wait_for_room_and_nothing_is_lost(nats_server, monkeypatch):
    monkeypatch.setattr(outmod, "_PUB_HIGH_BYTES", 1 << 20)  # 1 MiB for the test
    size, count = 32 * 1024, 600
    with jssync.connect(nats_server.url) as rx, jssync.connect(nats_server.url) as nc:
        got = []
        done = threading.Event()

        def on_msg(msg: jssync.Msg) -> None:
            got.append(len(msg.data))
            if len(got) == count:
                done.set()

        rx.subscribe("pq.big", callback=on_msg)
        rx.flush()
        entered: list[int] = []
        orig = nc._out.wait_room

        def spy(sz: int, *rest: object) -> None:
            entered.append(len(nc._pubq) * sz)
            orig(sz, *rest)  # type: ignore[arg-type]

        monkeypatch.setattr(nc._out, "wait_room", spy)
        # stall the I/O thread for a moment so the queue must fill up
        stalled = threading.Event()

        def stall() -> None:
            stalled.set()
            time.sleep(0.5)  # behaviour: the I/O thread is busy, so the publish queue fills up

        nc._loop.loop.call_soon_threadsafe(stall)
        assert stalled.wait(5)
        payload = b"x" * size
        for _ in range(count):
            nc.publish("pq.big", payload)
            assert len(nc._pubq) * size <= (1 << 20) + size
        nc.flush(timeout=30)
        assert entered, "the publisher waited for room at least once"
        assert max(entered) <= (1 << 20) + size
        assert done.wait(30), f"received {len(got)} of {count}"
        assert set(got) == {size}


def test_small_publishes_are_bounded_by_count_only(nats_server, monkeypatch):
    monkeypatch.setattr(outmod, "_PUB_HIGH_BYTES", 1 << 20)
    with jssync.connect(nats_server.url) as nc:
        waited: list[int] = []
        monkeypatch.setattr(nc._out, "wait_room", lambda sz, *_: waited.append(sz))
        for _ in range(5000):
            nc.publish("pq.small", b"")  # empty payloads never count as bytes
        nc.flush(timeout=10)
        assert not waited
        wait_for(lambda: not nc._pubq, 5, what="an empty publish queue")
