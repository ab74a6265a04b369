"""Celery with JetStream as its broker: the kombu transport ``jssync.kombu:Transport``.

Each Celery queue is a work-queue stream (``kombu_celery`` for the default queue) with one
durable pull consumer that every worker shares; a task acked by its worker is removed from
the stream. With ``acks_late=True`` a task whose worker dies comes back after ``ack_wait``.

Run this file for a demo: it starts a local nats-server and a Celery worker thread on that
broker, then sends tasks and reads their results::

    python examples/celery_broker.py

Run a real worker against a nats-server with JetStream enabled (``nats-server -js``)::

    # tasks.py: app = Celery("tasks", broker="nats://127.0.0.1:4222")
    #           app.conf.broker_transport = "jssync.kombu:Transport"
    celery -A tasks worker --loglevel=INFO --pool=threads --concurrency=8
"""

from __future__ import annotations

import threading

from celery import Celery
from celery.contrib.testing.worker import start_worker

import jssync
from jssync.server import NatsServer

ran: list[int] = []
ran_lock = threading.Lock()


def make_app(url: str) -> Celery:
    app = Celery("celery_broker", broker=url, backend="cache+memory://")
    app.conf.update(
        broker_transport="jssync.kombu:Transport",
        broker_transport_options={"ack_wait": 60.0, "storage": "memory"},
        worker_hijack_root_logger=False,
        task_acks_late=True,          # ack after the task ran: a crashed worker's task runs again
    )

    @app.task(name="celery_broker.add")
    def add(x: int, y: int) -> int:
        with ran_lock:
            ran.append(x)
        return x + y

    return app


def main() -> None:
    with NatsServer(jetstream=True) as server:
        app = make_app(server.url)
        try:
            with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, loglevel="WARNING",
                              shutdown_timeout=30):
                results = [app.send_task("celery_broker.add", args=[i, 10]) for i in range(5)]
                print("results:", [r.get(timeout=30) for r in results])
        finally:
            app.pool.force_close_all()   # Celery's close() only drops the pool of broker connections
            app.close()
        print("tasks ran:", sorted(ran))
        with jssync.connect(server.url) as nc:
            info = nc.jetstream().stream("kombu_celery").info()
            print(f"stream kombu_celery (retention {info.config.retention}) holds {info.state.messages} messages")


if __name__ == "__main__":
    main()
