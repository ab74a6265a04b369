"""Behaviour kombu's own generic transport tests expect (kombu's t/integration/common.py:
BaseMessage's requeue tests, BaseEventLoop), written here against the jssync transport:
a requeued message is there for the very next ``get_nowait()``, and a kombu ``Hub`` event
loop delivers, and takes acks made through ``hub.call_soon`` from another thread."""

from __future__ import annotations

import threading
import time
from contextlib import closing
from typing import Any

import kombu
import pytest
from kombu.asynchronous import Hub

from jssync.server import NatsServer
from tests.conftest import FACTOR
from tests.integration.kombu.conftest import kombu_conn

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("how", ["requeue", "reject(requeue=True)"])
def test_a_requeued_message_is_there_for_the_next_get_nowait(nats_server: NatsServer, prefix: str,
                                                              how: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn, closing(conn.SimpleQueue("again")) as queue:
        for i in range(20):  # the race it had lost about one time in two
            queue.put({"n": i}, headers={"k1": "v1"})
            message = queue.get_nowait()
            if how == "requeue":
                message.requeue()
            else:
                message.reject(requeue=True)
            message2 = queue.get_nowait()
            assert message2.body == message.body
            assert message2.delivery_info.get("redelivered") is True
            message2.ack()


def test_acks_through_hub_call_soon_from_a_timer_thread(nats_server: NatsServer, prefix: str, unique: str) -> None:
    name = f"hub-{unique}"
    test_queue = kombu.Queue(name, routing_key=name)
    acked: list[Any] = []
    hub = Hub()
    timers: list[threading.Timer] = []

    def ack(message: Any) -> None:
        message.ack()
        acked.append(message.payload)

    def callback(body: Any, message: Any) -> None:
        timer = threading.Timer(0.1, hub.call_soon, (ack, message))
        timers.append(timer)
        timer.start()

    with kombu_conn(nats_server.url, prefix) as conn:
        with conn.channel() as channel:
            producer = kombu.Producer(channel)
            for body in range(2):
                producer.publish(body, exchange=test_queue.exchange, routing_key=test_queue.routing_key,
                                 declare=[test_queue])
        consumer = kombu.Consumer(conn, [test_queue], callbacks=[callback], prefetch_count=1)
        with consumer:
            try:
                conn.register_with_event_loop(hub)
                deadline = time.monotonic() + 1 * FACTOR  # kombu's test: both within 1 s
                while len(acked) < 2 and time.monotonic() < deadline:
                    hub.run_once()
                assert acked == [0, 1]
            finally:
                hub.close()
                for timer in timers:
                    timer.join(5)
                test_queue(consumer.channel).delete()
