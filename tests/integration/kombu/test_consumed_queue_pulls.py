"""How the kombu transport fetches for consumed queues: one open pull per queue, bounded by the
prefetch count, waited on (not polled), and ended cleanly on cancel and close, so nothing waits
out ``ack_wait`` on the server. Against a real nats-server, with real kombu.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kombu import Consumer, Exchange, Producer, Queue

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import drain_until, kombu_conn

pytestmark = pytest.mark.timeout(120)


def _ack_pending(url: str, prefix: str, queue: str) -> int:
    """Messages the server has handed to consumers and not had acked (the queue's consumer)."""
    with jssync.connect(url) as nc:
        info = nc.jetstream().consumer(f"{prefix}_{queue}", prefix).info()
        return int(info.num_ack_pending or 0)


def _publish(url: str, prefix: str, queue: Queue, bodies: list[Any]) -> None:
    with kombu_conn(url, prefix) as conn:
        ch = conn.channel()
        queue(ch).declare()
        producer = Producer(ch)
        for body in bodies:
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key)
        ch.close()


def test_a_consumer_never_holds_more_than_its_prefetch_count_on_the_server(
        nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("held", Exchange("hx"), routing_key="held")
    _publish(nats_server.url, prefix, queue, list(range(20)))
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix) as conn:  # fetch_batch at its default, above the prefetch
        ch = conn.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: got.append(message)]) as consumer:
            consumer.qos(prefetch_count=3)  # after consume, as kombu programs do
            drain_until(conn, lambda: len(got) >= 3)
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=1 * FACTOR)
            assert len(got) == 3
            # delivered, buffered and asked for: never more than the prefetch count
            assert _ack_pending(nats_server.url, prefix, "held") <= 3
            while len(got) < 20:
                for m in got:
                    if not m.acknowledged:
                        m.ack()
                seen = len(got)
                drain_until(conn, lambda: len(got) > seen)  # noqa: B023 - read at once
                assert _ack_pending(nats_server.url, prefix, "held") <= 3
            for m in got:
                if not m.acknowledged:
                    m.ack()
        assert sorted(m.payload for m in got) == list(range(20))
        wait_for(lambda: _ack_pending(nats_server.url, prefix, "held") == 0, timeout=5, what="the acks")
        ch.close()


def test_an_idle_queue_does_not_hold_the_prefetch_room_of_a_busy_one(nats_server: NatsServer, prefix: str) -> None:
    ex = Exchange("two")
    idle, busy = Queue("idle", ex, routing_key="idle"), Queue("busy", ex, routing_key="busy")
    _publish(nats_server.url, prefix, idle, [])
    _publish(nats_server.url, prefix, busy, list(range(6)))
    got: list[Any] = []

    def on_message(body: Any, message: Any) -> None:
        got.append(body)
        message.ack()

    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        with Consumer(ch, [idle, busy], callbacks=[on_message]) as consumer:
            consumer.qos(prefetch_count=2)
            start = time.monotonic()
            drain_until(conn, lambda: len(got) >= 6, timeout=20)
            took = time.monotonic() - start
        ch.close()
    assert sorted(got) == list(range(6))
    # were the idle queue's open pull (5 s) holding the room, each message would wait for it
    assert took < 4 * FACTOR, took


def test_a_consumer_waits_for_the_next_message_instead_of_polling(nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("wait", Exchange("wx"), routing_key="wait")
    _publish(nats_server.url, prefix, queue, [])
    got: list[Any] = []
    # a polling consumer would sleep polling_interval (here longer than the drain) between polls
    with kombu_conn(nats_server.url, prefix, polling_interval=60.0) as conn:
        ch = conn.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)  # the queue is empty: its pull is open and waits
            later = threading.Timer(0.3, _publish, (nats_server.url, prefix, queue, ["late"]))
            later.start()
            try:
                start = time.monotonic()
                conn.drain_events(timeout=10 * FACTOR)
                took = time.monotonic() - start
            finally:
                later.join()
        ch.close()
    assert got == ["late"]
    assert took < 5 * FACTOR


@pytest.mark.parametrize("how", ["close the connection", "cancel the consumer"])
def test_messages_pulled_and_not_delivered_go_back_at_once(nats_server: NatsServer, prefix: str, how: str) -> None:
    """Closing (or cancelling) a consumer hands back what it pulled and did not deliver, and its
    open pull takes nothing afterwards: another consumer gets every message well before ack_wait."""
    queue = Queue("back", Exchange("bx"), routing_key="back")
    _publish(nats_server.url, prefix, queue, list(range(5)))
    first: list[Any] = []
    conn = kombu_conn(nats_server.url, prefix, ack_wait=600.0)
    try:
        ch = conn.channel()
        consumer = Consumer(ch, [queue], callbacks=[lambda body, message: first.append(message)])
        consumer.consume()
        consumer.qos(prefetch_count=10)
        drain_until(conn, lambda: len(first) >= 1)
        wait_for(lambda: _ack_pending(nats_server.url, prefix, "back") == 5, timeout=5,
                 what="the rest to be pulled into the buffer")
        first[0].ack()
        if how == "cancel the consumer":
            consumer.cancel()
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)
        else:
            conn.close()
        # the cancelled or closed consumer's pull was open: what is published now is not taken by it
        _publish(nats_server.url, prefix, queue, [5, 6, 7])
        assert len(first) == 1
        got: list[int] = []

        def on_message(body: Any, message: Any) -> None:
            got.append(body)
            message.ack()

        with kombu_conn(nats_server.url, prefix, ack_wait=600.0) as other:
            och = other.channel()
            with Consumer(och, [queue], callbacks=[on_message]):
                drain_until(other, lambda: len(got) >= 7, timeout=15)
            och.close()
        assert sorted(got) == [1, 2, 3, 4, 5, 6, 7]
        assert first[0].payload == 0
    finally:
        conn.release()


def test_a_queue_its_pull_cannot_declare_again_is_reported_by_drain_events_and_then_recovers(
        nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("lost", Exchange("lx"), routing_key="lost")
    _publish(nats_server.url, prefix, queue, [])
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)  # the queue's pull is open
            with jssync.connect(nats_server.url) as nc:
                js = nc.jetstream()
                js.delete_stream(f"{prefix}_lost")
                # another stream takes the queue's subject: the queue cannot be declared again
                js.create_stream(name=f"{prefix}_blocker", subjects=[f"{prefix}.q.lost"])
            with pytest.raises(jssync.APIError):
                drain_until(conn, lambda: False, timeout=10)
            with jssync.connect(nats_server.url) as nc:
                nc.jetstream().delete_stream(f"{prefix}_blocker")
            _publish(nats_server.url, prefix, queue, ["again"])  # declares the queue again
            drain_until(conn, lambda: got == ["again"])
        ch.close()


def test_a_queue_consumed_after_an_idle_one_gets_its_share_of_the_room_at_once(
        nats_server: NatsServer, prefix: str) -> None:
    """An idle queue's pull, opened while it was the channel's only queue (so with the whole
    prefetch room), is cut down to its share as soon as a second queue is consumed: the busy
    queue's messages do not wait for the idle pull to expire (5 s)."""
    ex = Exchange("cut")
    idle, busy = Queue("idle", ex, routing_key="idle"), Queue("busy", ex, routing_key="busy")
    _publish(nats_server.url, prefix, idle, [])
    _publish(nats_server.url, prefix, busy, list(range(6)))
    got: list[Any] = []

    def on_message(body: Any, message: Any) -> None:
        got.append(body)
        message.ack()

    def waiting(queue: str) -> int:
        with jssync.connect(nats_server.url) as nc:
            return int(nc.jetstream().consumer(f"{prefix}_{queue}", prefix).info().num_waiting or 0)

    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        ch.basic_qos(0, 2, False)
        with Consumer(ch, [idle], callbacks=[on_message]):
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=0.3)  # starts the idle queue's pull thread: the only queue
            wait_for(lambda: waiting("idle") == 1, timeout=10 * FACTOR, what="the idle queue's open pull")
            with Consumer(ch, [busy], callbacks=[on_message]):
                start = time.monotonic()
                drain_until(conn, lambda: len(got) >= 6, timeout=20)
                took = time.monotonic() - start
        ch.close()
    assert sorted(got) == list(range(6))
    assert took < 4 * FACTOR, took
