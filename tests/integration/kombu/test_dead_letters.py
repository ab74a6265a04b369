"""Messages whose deliveries reached the queue's ``max_deliver``: without a dead-letter queue they stay
in their stream, never delivered again; with ``dead_letter_queue`` they move there (real server, real
kombu, and a real Celery worker rejecting a poison task)."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from queue import Empty
from typing import Any

import kombu
import pytest

import jssync
from jssync.kombu.channel import Channel
from jssync.kombu.deadletter import MAX_DELIVERIES_ADVISORY, DeadLetters
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
            dead.get(timeout=1.0)  # one copy
        assert _stored(nats_server.url, f"{prefix}_work") == 0  # gone from its queue
        dead.close()
        queue.close()


def test_a_bad_dead_letter_queue_option_is_refused(nats_server: NatsServer) -> None:
    with pytest.raises(jssync.ValidationError, match="dead_letter_queue"):
        kombu_conn(nats_server.url, "kbad", dead_letter_queue="").connect()


def _dead_letter_once(conn: Any, queue: Any, body: dict[str, Any], deliveries: int = 2) -> None:
    queue.put(body)
    for _ in range(deliveries):
        queue.get(timeout=5 * FACTOR).requeue()


def test_two_connections_hear_each_advisory_once_and_one_of_them_moves_it(
        nats_server: NatsServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = DeadLetters.move

    def counted(self: DeadLetters, advisory: dict[str, Any]) -> bool:
        calls.append(id(self))
        return original(self, advisory)

    monkeypatch.setattr(DeadLetters, "move", counted)
    options = {"max_deliver": 2, "dead_letter_queue": "dead"}
    with kombu_conn(nats_server.url, prefix, **options) as conn, \
            kombu_conn(nats_server.url, prefix, **options) as other:
        other.connect()
        queue = conn.SimpleQueue("work")
        _dead_letter_once(conn, queue, {"n": 1})
        dead = conn.SimpleQueue("dead")
        assert dead.get(timeout=10 * FACTOR).payload == {"n": 1}
        with pytest.raises(Empty):
            dead.get(timeout=1.0)  # meanwhile the other connection would have heard it too
        assert len(calls) == 1  # one advisory handled, by one of the two connections
        assert conn.transport._dead.moved + other.transport._dead.moved == 1
        dead.close()
        queue.close()


def test_a_move_that_fails_is_tried_again_and_the_message_lands(
        nats_server: NatsServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = DeadLetters._publish
    failed: list[str] = []

    def flaky(self: DeadLetters, data: bytes, *, msg_id: str) -> None:
        if not failed:
            failed.append(msg_id)
            raise jssync.TimeoutError("the dead-letter publish timed out")
        original(self, data, msg_id=msg_id)

    monkeypatch.setattr(DeadLetters, "_publish", flaky)
    with kombu_conn(nats_server.url, prefix, max_deliver=2, dead_letter_queue="dead") as conn:
        queue = conn.SimpleQueue("work")
        _dead_letter_once(conn, queue, {"n": 7})
        dead = conn.SimpleQueue("dead")
        msg = dead.get(timeout=15 * FACTOR)
        assert msg.payload == {"n": 7} and failed
        msg.ack()
        wait_for(lambda: _stored(nats_server.url, f"{prefix}_work") == 0, 10)
        dead.close()
        queue.close()


def test_a_queue_deleted_and_declared_again_dead_letters_its_new_first_message_too(
        nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix, max_deliver=2, dead_letter_queue="dead") as conn:
        dead = conn.SimpleQueue("dead")
        queue = conn.SimpleQueue("work")
        _dead_letter_once(conn, queue, {"n": "old"})
        assert dead.get(timeout=10 * FACTOR).payload == {"n": "old"}
        queue.close()
        conn.default_channel.queue_delete("work")
        queue = conn.SimpleQueue("work")  # a new stream: its first message is sequence 1 again
        _dead_letter_once(conn, queue, {"n": "new"})
        msg = dead.get(timeout=10 * FACTOR)
        assert msg.payload == {"n": "new"}  # not taken for the old one's copy
        wait_for(lambda: _stored(nats_server.url, f"{prefix}_work") == 0, 10)
        dead.close()
        queue.close()


def test_a_malformed_advisory_is_logged_and_the_mover_goes_on(
        nats_server: NatsServer, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="jssync"), \
            kombu_conn(nats_server.url, prefix, max_deliver=2, dead_letter_queue="dead") as conn:
        queue = conn.SimpleQueue("work")
        with jssync.connect(nats_server.url) as nc:
            subject = f"{MAX_DELIVERIES_ADVISORY}.{prefix}_work.{prefix}"
            for junk in (b"[1, 2]", b'"text"', b"not json", b'{"stream": 5, "stream_seq": "x"}', b"null"):
                nc.publish(subject, junk)
            nc.flush()
        wait_for(lambda: sum("no JSON object" in r.getMessage() for r in caplog.records) >= 4, 10)
        _dead_letter_once(conn, queue, {"n": 3})
        dead = conn.SimpleQueue("dead")
        assert dead.get(timeout=10 * FACTOR).payload == {"n": 3}
        dead.close()
        queue.close()


def test_closing_the_connection_stops_the_dead_letter_mover_before_the_channels(
        nats_server: NatsServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # kombu closes the connection's default channel itself first; the transport then closes
    # the others (the mover's own among them): the mover must be stopped before those
    order: list[str] = []
    stop, close = DeadLetters.stop, Channel.close
    conn = kombu_conn(nats_server.url, prefix, max_deliver=2, dead_letter_queue="dead")
    queue = conn.SimpleQueue("work", channel=conn.channel())
    _dead_letter_once(conn, queue, {"n": 1})
    dead = conn.SimpleQueue("dead")
    assert dead.get(timeout=10 * FACTOR).payload == {"n": 1}  # the mover has made its channel
    mover = conn.transport._dead
    assert mover is not None and mover._channel is not None

    def stopping(self: DeadLetters, timeout: float = 5.0) -> None:
        order.append("mover")
        stop(self, timeout)

    def closing(self: Channel) -> None:
        if self is not conn.default_channel:
            order.append("mover's channel" if self is mover._channel else "channel")
        close(self)

    monkeypatch.setattr(DeadLetters, "stop", stopping)
    monkeypatch.setattr(Channel, "close", closing)
    conn.close()
    assert order[0] == "mover" and "mover's channel" in order and "channel" in order, order
    assert not mover._thread.is_alive()


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
