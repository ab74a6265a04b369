"""A Celery task message published twice (a publish retried after its PubAck was lost) is
stored once: the transport sends the task id and its retry count as ``Nats-Msg-Id``; a retry
of the task (the same id, one more retry) is a new message. Real nats-server, real kombu."""

from __future__ import annotations

import uuid

import pytest
from kombu import Exchange, Producer, Queue

import jssync
from jssync.server import NatsServer
from tests.integration.kombu.conftest import kombu_conn

pytestmark = pytest.mark.timeout(60)


def _stored(url: str, stream: str) -> int:
    with jssync.connect(url) as nc:
        return int(nc.jetstream().stream(stream).info().state.messages)


def test_a_task_message_published_twice_is_stored_once(nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("tasks", Exchange("tx"), routing_key="tasks")
    task_id = str(uuid.uuid4())
    with kombu_conn(nats_server.url, prefix) as conn:
        producer = Producer(conn.channel())
        for retries in (0, 0, 1, 1):  # each sent twice, as a retried publish would
            producer.publish({"args": [1]}, exchange=queue.exchange, routing_key="tasks", declare=[queue],
                             headers={"id": task_id, "task": "t.add", "retries": retries})
        producer.publish({"plain": True}, exchange=queue.exchange, routing_key="tasks")  # no task id:
        producer.publish({"plain": True}, exchange=queue.exchange, routing_key="tasks")  # each is stored
    assert _stored(nats_server.url, f"{prefix}_tasks") == 4
