"""A kombu consumer through broker restarts: every message is delivered, and none is left held
(ack-pending) on the server until ``ack_wait`` (600 s here, so a stranded one shows): not one
whose delivery was lost, not one whose ack the stopping server never stored. Real nats-server
with file storage, restarted (SIGTERM, same port and store) twice mid-flow."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Consumer, Exchange, Producer, Queue

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR
from tests.integration.kombu.conftest import kombu_conn

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.timeout(300)]

COUNT = 1000


def _left(url: str, prefix: str) -> tuple[int, int]:
    """(messages still stored, messages ack-pending) of the queue's stream and consumer."""
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        stored = int(js.stream(f"{prefix}_work").info().state.messages)
        return stored, int(js.consumer(f"{prefix}_work", prefix).info().num_ack_pending or 0)


def test_a_consumer_gets_and_settles_every_message_through_two_broker_restarts(tmp_path: Path) -> None:
    prefix = "krestart"
    queue = Queue("work", Exchange("wx"), routing_key="work")
    with NatsServer(store_dir=tmp_path / "store") as server:
        with kombu_conn(server.url, prefix) as pconn:
            pch = pconn.channel()
            producer = Producer(pch)
            for i in range(COUNT):
                producer.publish(i, exchange=queue.exchange, routing_key="work", declare=[queue] if i == 0 else [])
            pch.close()
        got: set[int] = set()
        restarts: list[float] = []
        error: list[BaseException] = []

        def restarter() -> None:
            try:
                for point in (COUNT * 3 // 10, COUNT * 6 // 10):
                    end = time.monotonic() + 60 * FACTOR
                    while len(got) < point and time.monotonic() < end:
                        time.sleep(0.005)  # poll: for the consumer's progress, read from the main thread's set
                    t0 = time.monotonic()
                    server.restart()
                    restarts.append(time.monotonic() - t0)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                error.append(exc)

        def on_message(body: Any, message: Any) -> None:
            got.add(body)
            message.ack()

        conn = kombu_conn(server.url, prefix, ack_wait=600.0)
        thread = threading.Thread(target=restarter)
        try:
            ch = conn.channel()
            with Consumer(ch, [queue], callbacks=[on_message]) as consumer:
                consumer.qos(prefetch_count=50)
                thread.start()
                end = time.monotonic() + 60 * FACTOR
                while len(got) < COUNT and time.monotonic() < end:
                    try:
                        conn.drain_events(timeout=0.5)
                    except TimeoutError:
                        pass
                    except conn.connection_errors:
                        conn.ensure_connection(max_retries=50, interval_start=0.1, interval_step=0.1)
                        ch = conn.channel()
                        consumer.revive(ch)
                        consumer.consume()
                        consumer.qos(prefetch_count=50)
            thread.join(60 * FACTOR)
        finally:
            conn.release()
        assert not error, error
        assert len(restarts) == 2
        missing = sorted(set(range(COUNT)) - got)
        stored, ack_pending = _left(server.url, prefix)
        assert not missing, (missing[:30], stored, ack_pending)
        # every message was acked, so the work-queue stream empties: an ack the server never
        # stored (on the wire when it went down) is sent again after the reconnect
        end = time.monotonic() + 15 * FACTOR
        while stored and time.monotonic() < end:
            time.sleep(0.1)  # poll: the server's state, through another connection
            stored, ack_pending = _left(server.url, prefix)
        assert (stored, ack_pending) == (0, 0), f"restarts {restarts}"
