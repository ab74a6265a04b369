"""Messages whose deliveries reached the queue's ``max_deliver``: without a dead-letter queue they stay
in their stream, never delivered again; with ``dead_letter_queue`` they move there (real server, real
kombu, and a real Celery worker rejecting a poison task)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from queue import Empty

import kombu
import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import kill_celery_worker, kombu_conn, start_celery_worker

pytestmark = pytest.mark.timeout(int(120 * FACTOR))


def _stored(url: str, stream: str) -> int:
    with jssync.connect(url) as nc:
        return nc.jetstream().stream(stream).info().state.messages


def test_without_a_dead_letter_queue_a_message_past_max_deliver_stays_in_its_stream(
        nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix, max_deliver=2) as conn:
        queue = conn.SimpleQueue("work")
        queue.put({"n": 1})
        for _ in range(2):
            queue.get(timeout=5 * FACTOR).requeue()
        with pytest.raises(Empty):
            queue.get(timeout=1.0)  # the server delivers it no more
        assert _stored(nats_server.url, f"{prefix}_work") == 1  # nobody acked it: it stays
        queue.close()


def test_a_message_past_max_deliver_moves_to_the_dead_letter_queue_once(nats_server: NatsServer, prefix: str) -> None:
    options = {"max_deliver": 2, "dead_letter_queue": "dead"}
    with kombu_conn(nats_server.url, prefix, **options) as conn, \
            kombu_conn(nats_server.url, prefix, **options) as other:
        other.connect()  # a second connection hears the same advisory: the copy is stored once
        queue = conn.SimpleQueue("work")
        queue.put({"n": 1}, headers={"mine": "yes"})
        for _ in range(2):
            queue.get(timeout=5 * FACTOR).requeue()
        dead = conn.SimpleQueue("dead")
        msg = dead.get(timeout=10 * FACTOR)
        assert msg.payload == {"n": 1}
        assert msg.headers == {"mine": "yes", "x-first-death-queue": "work", "x-delivery-count": 2}
        msg.ack()
        wait_for(lambda: conn.transport._dead.moved + other.transport._dead.moved >= 1, 10)
        with pytest.raises(Empty):
            dead.get(timeout=1.0)  # one copy, though both connections moved it
        assert _stored(nats_server.url, f"{prefix}_work") == 0  # gone from its queue
        dead.close()
        queue.close()


def test_a_bad_dead_letter_queue_option_is_refused(nats_server: NatsServer) -> None:
    with pytest.raises(jssync.ValidationError, match="dead_letter_queue"):
        kombu_conn(nats_server.url, "kbad", dead_letter_queue="").connect()


_APP = '''
from pathlib import Path
from celery import Celery
from celery.exceptions import Reject

app = Celery("dead_app", broker={url!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}, "max_deliver": 3, "dead_letter_queue": "dead"}},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
)


@app.task(name="dead_app.poison")
def poison():
    with open(Path(__file__).with_name("runs"), "a") as f:
        f.write("x")
    raise Reject("cannot do this one", requeue=True)
'''


def test_a_celery_task_rejected_on_every_delivery_ends_in_the_dead_letter_queue(
        nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    from celery import Celery

    (tmp_path / "dead_app.py").write_text(_APP.format(url=nats_server.url, prefix=prefix))
    proc, log = start_celery_worker(tmp_path, "dead_app", f"dead{time.monotonic_ns()}@localhost", "-P", "threads",
                                    "-c", "1")
    options = {"subject_prefix": prefix, "max_deliver": 3, "dead_letter_queue": "dead"}
    app = Celery("dead_app", broker=nats_server.url)
    app.conf.broker_transport = "jssync.kombu:Transport"
    app.conf.broker_transport_options = options
    try:
        wait_for(lambda: bool(app.control.inspect(timeout=1.0).ping()) or proc.poll() is not None, 60)
        assert proc.poll() is None, log.read_text()[-3000:]
        task_id = str(uuid.uuid4())
        app.send_task("dead_app.poison", task_id=task_id)
        with kombu.Connection(nats_server.url, transport="jssync.kombu:Transport",
                              transport_options=options) as conn:
            dead = conn.SimpleQueue("dead")
            msg = dead.get(timeout=30 * FACTOR)
            assert msg.headers["id"] == task_id and msg.headers["task"] == "dead_app.poison"
            assert msg.headers["x-first-death-queue"] == "celery" and msg.headers["x-delivery-count"] == 3
            msg.ack()
            dead.close()
        assert (tmp_path / "runs").read_text() == "xxx"  # max_deliver runs, then no more
        assert _stored(nats_server.url, f"{prefix}_celery") == 0
    finally:
        kill_celery_worker(proc)
        app.pool.force_close_all()
        app.close()
