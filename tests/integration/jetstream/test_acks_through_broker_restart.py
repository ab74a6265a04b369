"""Acks written just before a broker restart are not lost: a stopping nats-server never reads
what is left in its socket, and the client notices the lost link only tens of milliseconds
later, so the acks written in that gap never reach it; the connection sends the terminal acks
of its last moments again once it is back. Without that, their messages stay ack-pending until
``ack_wait`` (120 s here, so a stranded one shows).

Real nats-server with file storage (the restart keeps the stream), restarted (SIGTERM, same
port and store) twice while a reader acks as fast as it can: a plain pull ``consume()`` with
default options, and a ``fetch()`` loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(180)]

COUNT = 6000
ACK_WAIT = 120.0


def _setup(url: str) -> None:
    with jssync.connect(url) as nc:
        js = nc.jetstream(max_pending=4000)
        js.create_stream(name="ACKS", subjects=["acks.>"], storage="file")
        for i in range(COUNT):
            js.publish_async("acks.x", b"%d" % i)
        js.publish_async_completed(60 * FACTOR)
        js.create_consumer("ACKS", durable_name="worker", ack_wait=ACK_WAIT)


def _ack_pending(url: str) -> int:
    with jssync.connect(url) as nc:
        return int(nc.jetstream().consumer("ACKS", "worker").info().num_ack_pending or 0)


def _restarter(server: NatsServer, got: set[int], errors: list[BaseException]) -> threading.Thread:
    """Restart the server twice, at a third and at two thirds of the messages received."""

    def run() -> None:
        try:
            for point in (COUNT // 3, COUNT * 2 // 3):
                wait_for(lambda point=point: len(got) >= point, 60, interval=0.002, what=f"{point} messages read")
                server.restart()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    return threading.Thread(target=run, name="restarter")


def _run(tmp_path: Path, read: Callable[[jssync.Consumer, set[int]], None]) -> None:
    with NatsServer(store_dir=tmp_path / "store") as server:
        _setup(server.url)
        got: set[int] = set()
        errors: list[BaseException] = []
        restarter = _restarter(server, got, errors)
        with jssync.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1) as nc:
            consumer = nc.jetstream().consumer("ACKS", "worker")
            restarter.start()
            try:
                read(consumer, got)
            finally:
                restarter.join(60 * FACTOR)
            assert not errors, errors
            assert len(got) == COUNT, sorted(set(range(COUNT)) - got)[:20]
            # every message was acked: after the reconnect nothing stays ack-pending (the acks
            # the stopping server never read are sent again), well before ack_wait
            wait_for(lambda: _ack_pending(server.url) == 0, 10, interval=0.1,
                     what="no acked message ack-pending after the run")


def test_a_consume_leaves_nothing_ack_pending_after_broker_restarts(tmp_path: Path) -> None:
    def read(consumer: jssync.Consumer, got: set[int]) -> None:
        end = time.monotonic() + 90 * FACTOR
        with consumer.consume() as messages:
            for msg in messages:
                got.add(int(msg.data))
                msg.ack()
                if len(got) == COUNT or time.monotonic() > end:
                    break

    _run(tmp_path, read)


def test_a_fetch_loop_leaves_nothing_ack_pending_after_broker_restarts(tmp_path: Path) -> None:
    def read(consumer: jssync.Consumer, got: set[int]) -> None:
        end = time.monotonic() + 90 * FACTOR
        while len(got) < COUNT and time.monotonic() < end:
            try:
                for msg in consumer.fetch(200, expires=2):
                    got.add(int(msg.data))
                    msg.ack()
            except jssync.Error:
                time.sleep(0.05)  # poll: the link is down (a restart); fetch again shortly

    _run(tmp_path, read)
