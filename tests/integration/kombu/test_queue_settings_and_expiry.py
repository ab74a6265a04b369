"""Who owns a queue's consumer settings, and queues that go away: ``x-expires`` and
``auto_delete`` (Celery's event-monitor, pidbox and reply queues). Against a real nats-server,
with real kombu (and a real Celery worker for the many-queues prefetch case)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Consumer, Exchange, Producer, Queue

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import drain_until, kombu_conn
from tests.integration.kombu.test_celery_delivery import _close, _runs, _sender, _stop, _worker, _write_app

pytestmark = pytest.mark.timeout(180)


def _consumer_config(url: str, prefix: str, queue: str) -> Any:
    with jssync.connect(url) as nc:
        return nc.jetstream().consumer(f"{prefix}_{queue}", prefix).info().config


def _streams(url: str, prefix: str) -> list[str]:
    with jssync.connect(url) as nc:
        return sorted(n for n in nc.jetstream().stream_names() if n.startswith(f"{prefix}_"))


def _binding_keys(url: str, prefix: str) -> list[str]:
    with jssync.connect(url) as nc:
        kv = nc.jetstream().key_value(f"{prefix}_bindings")
        try:
            return sorted(kv.keys())
        except jssync.Error:
            return []


def test_a_producer_with_default_options_leaves_the_workers_consumer_settings(
        nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("owned", Exchange("ox"), routing_key="owned")
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix, ack_wait=60.0, max_deliver=5) as worker:
        ch = worker.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
            with pytest.raises(TimeoutError):
                worker.drain_events(timeout=0.3)  # the consumer's pull starts: the worker's settings
            cfg = _consumer_config(nats_server.url, prefix, "owned")
            assert (cfg.ack_wait, cfg.max_deliver) == (60.0, 5)
            with kombu_conn(nats_server.url, prefix) as producer_conn:  # default options
                pch = producer_conn.channel()
                Producer(pch).publish("hello", exchange=queue.exchange, routing_key="owned", declare=[queue])
                pch.close()
            drain_until(worker, lambda: got == ["hello"])
            cfg = _consumer_config(nats_server.url, prefix, "owned")
            assert (cfg.ack_wait, cfg.max_deliver) == (60.0, 5)
        ch.close()


def test_a_queue_first_declared_by_a_producer_gets_the_workers_settings_when_consumed(
        nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("later", Exchange("lx"), routing_key="later")
    with kombu_conn(nats_server.url, prefix) as producer_conn:
        pch = producer_conn.channel()
        Producer(pch).publish("first", exchange=queue.exchange, routing_key="later", declare=[queue])
        pch.close()
    assert _consumer_config(nats_server.url, prefix, "later").ack_wait == 1800.0
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix, ack_wait=60.0, max_deliver=5) as worker:
        ch = worker.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: (got.append(body), message.ack())]):
            drain_until(worker, lambda: got == ["first"])
        ch.close()
    cfg = _consumer_config(nats_server.url, prefix, "later")
    assert (cfg.ack_wait, cfg.max_deliver) == (60.0, 5)


def test_an_auto_delete_queue_goes_away_when_its_consumer_is_cancelled(nats_server: NatsServer, prefix: str) -> None:
    ex = Exchange("adx", type="fanout")
    queue = Queue("gone-soon", ex, auto_delete=True)
    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        consumer = Consumer(ch, [queue], callbacks=[lambda body, message: message.ack()])
        consumer.consume()
        with pytest.raises(TimeoutError):
            conn.drain_events(timeout=0.3)
        assert _streams(nats_server.url, prefix) == [f"{prefix}_gone-soon"]
        assert len(_binding_keys(nats_server.url, prefix)) == 1
        consumer.cancel()
        assert _streams(nats_server.url, prefix) == []
        assert _binding_keys(nats_server.url, prefix) == []
        ch.close()


def test_an_auto_delete_queue_goes_away_when_its_channel_closes(nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("closing", Exchange("cx", type="fanout"), auto_delete=True)
    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        Consumer(ch, [queue], callbacks=[lambda body, message: message.ack()]).consume()
        with pytest.raises(TimeoutError):
            conn.drain_events(timeout=0.3)
        assert _streams(nats_server.url, prefix) == [f"{prefix}_closing"]
        ch.close()
    assert _streams(nats_server.url, prefix) == []


def test_a_queue_with_x_expires_left_unused_is_deleted_with_its_bindings(nats_server: NatsServer, prefix: str) -> None:
    """A process declares and consumes the queue and goes away without cancelling (killed):
    once nobody pulled from it for ``expires``, the server drops its consumer and a live
    connection's check deletes the stream and its bindings; a queue without expires stays."""
    ex = Exchange("ev", type="topic")
    expiring = Queue("monitor-1", ex, routing_key="#", expires=1.0)
    kept = Queue("kept", ex, routing_key="kept.#")
    dead = kombu_conn(nats_server.url, prefix)
    ch = dead.channel()
    Consumer(ch, [expiring, kept], callbacks=[lambda body, message: message.ack()]).consume()
    with pytest.raises(TimeoutError):
        dead.drain_events(timeout=0.3)
    assert _streams(nats_server.url, prefix) == [f"{prefix}_kept", f"{prefix}_monitor-1"]
    # the process dies: no cancel, no close of its channel (its connection just goes)
    dead.transport._nc.close()  # type: ignore[union-attr]
    with kombu_conn(nats_server.url, prefix, expires_check=0.5 * FACTOR) as live:
        live.connect()
        wait_for(lambda: _streams(nats_server.url, prefix) == [f"{prefix}_kept"], timeout=30,
                 what="the expired queue deleted")
        assert [k for k in _binding_keys(nats_server.url, prefix) if "monitor" in k] == []
        # a publish through the exchange reaches the queue that is left, and does not bring the other back
        pch = live.channel()
        Producer(pch).publish("x", exchange=ex, routing_key="kept.one")
        pch.close()
        assert _streams(nats_server.url, prefix) == [f"{prefix}_kept"]
    dead.release()


def test_a_consumed_queue_with_x_expires_stays_while_its_consumer_lives(nats_server: NatsServer, prefix: str) -> None:
    queue = Queue("alive", Exchange("ax"), routing_key="alive", expires=1.0)
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix, expires_check=0.5 * FACTOR) as conn:
        ch = conn.channel()
        with Consumer(ch, [queue], callbacks=[lambda body, message: (got.append(body), message.ack())], no_ack=True):
            end = time.monotonic() + 3 * FACTOR
            while time.monotonic() < end:  # several expiry checks pass
                try:
                    conn.drain_events(timeout=0.3)
                except TimeoutError:
                    pass
            assert _streams(nats_server.url, prefix) == [f"{prefix}_alive"]
            with kombu_conn(nats_server.url, prefix) as other:
                pch = other.channel()
                Producer(pch).publish("still here", exchange=queue.exchange, routing_key="alive")
                pch.close()
            drain_until(conn, lambda: got == ["still here"])
        ch.close()


def test_a_celery_worker_on_more_queues_than_its_prefetch_runs_every_task(
        nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    """``-c 1``, prefetch multiplier 1, ``-Q celery,high``: the idle queue's open pull must not
    keep the busy one from fetching."""
    options: dict[str, Any] = {"subject_prefix": prefix}
    runs = _write_app(tmp_path, nats_server.url, options)
    app_file = tmp_path / "kombu_runs.py"
    app_file.write_text(app_file.read_text() + "\napp.conf.worker_prefetch_multiplier = 1\n")
    sender = _sender(nats_server.url, options)
    proc = _worker(tmp_path, "--pool=threads", "--concurrency=1", "-Q", "celery,high")
    try:
        sender.send_task("kombu_runs.record", args=[0])
        wait_for(lambda: sum(_runs(runs).values()) >= 1 or proc.poll() is not None, timeout=60, interval=0.05,
                 what="the worker's first task")
        start = time.monotonic()
        for i in range(1, 10):
            sender.send_task("kombu_runs.record", args=[i])
        wait_for(lambda: sum(_runs(runs).values()) >= 10 or proc.poll() is not None, timeout=60, interval=0.05,
                 what="10 tasks to run")
        took = time.monotonic() - start
    finally:
        code = _stop(proc)
        _close(sender)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-3000:]
    assert sorted(_runs(runs)) == list(range(10)), log[-3000:]
    assert took < 8 * FACTOR, took


def test_a_celery_task_that_expires_while_queued_is_revoked_by_the_worker(
        nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    """``expires`` on a task: the worker takes it after it expired and revokes it, so its
    result is REVOKED (the server must not drop it unseen, which left it PENDING forever)."""
    results = tmp_path / "results"
    results.mkdir()
    options: dict[str, Any] = {"subject_prefix": prefix}
    runs = _write_app(tmp_path, nats_server.url, options)
    app_file = tmp_path / "kombu_runs.py"
    app_file.write_text(app_file.read_text().replace("task_ignore_result=True", "task_ignore_result=False")
                        + f"\napp.conf.result_backend = {'file://' + str(results)!r}\n")
    sender = _sender(nats_server.url, options)
    sender.conf.result_backend = f"file://{results}"
    proc = None
    try:
        expired = sender.send_task("kombu_runs.record", args=[1], expires=1.0)
        time.sleep(2 * FACTOR)  # behaviour: the queued task expires before any worker runs
        proc = _worker(tmp_path, "--pool=threads", "--concurrency=1")
        kept = sender.send_task("kombu_runs.record", args=[2])
        wait_for(lambda: 2 in _runs(runs) or proc.poll() is not None, timeout=60, interval=0.05,
                 what="the worker's next task")
        wait_for(lambda: expired.state == "REVOKED", timeout=10, interval=0.05, what="the expired task revoked")
        assert kept.state == "SUCCESS"
        assert 1 not in _runs(runs)
    finally:
        if proc is not None:
            assert _stop(proc) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        _close(sender)
