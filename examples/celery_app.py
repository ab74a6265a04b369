"""Celery + jssync: a task that publishes to JetStream.

Every worker process has its own jssync connection, made after the fork: in the
``worker_process_init`` signal (prefork pool children, and the solo pool), or on first use
(the threads pool and eager tasks, where every thread shares the process's connection:
jssync is thread-safe). It is closed in ``worker_process_shutdown`` / ``worker_shutdown``.
Never connect at import time of the tasks module: the prefork pool forks after importing it,
and a connection made before a fork raises ``jssync.ForkError`` in the child.

The task publishes with ``msg_id`` set to the order id, so a retried task (Celery
``autoretry_for``, or a task redelivered after a worker crash with ``acks_late``) stores the
order once.

Run this file for a demo: it starts a local nats-server and a Celery worker thread with the
in-memory broker, then calls the task::

    python examples/celery_app.py

Run a real worker (any Celery broker; Redis here)::

    export CELERY_BROKER_URL=redis://localhost:6379/0 CELERY_RESULT_BACKEND=redis://localhost:6379/1
    export NATS_URL=nats://127.0.0.1:4222
    cd examples && celery -A celery_app worker --loglevel=INFO --concurrency=4
    # in another shell, same environment:
    cd examples && python -c "from celery_app import publish_order; \\
        print(publish_order.delay({'item': 'book', 'qty': 1}, 'order-1').get(timeout=10))"
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown, worker_shutdown

import jssync

app = Celery(
    "orders",
    broker=os.environ.get("CELERY_BROKER_URL", "memory://"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "cache+memory://"),
)
app.conf.task_acks_late = True  # a task lost with its worker runs again; msg_id keeps it stored once
app.conf.nats_url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")  # read on connect
app.conf.orders_stream = os.environ.get("ORDERS_STREAM", "ORDERS")
if app.conf.broker_url.startswith("memory://"):
    app.conf.broker_transport_options = {"polling_interval": 0.1}

# -- one connection per worker process ----------------------------------------------------

_lock = threading.Lock()
_pid: int | None = None
_nc: jssync.Connection | None = None
_js: jssync.JetStream | None = None


def jetstream() -> jssync.JetStream:
    """This process's JetStream context; connects (and creates the stream) on first use."""
    global _pid, _nc, _js
    with _lock:
        if _pid != os.getpid() or _js is None:
            # first use in this process, or a forked child holding its parent's handles
            nc = jssync.connect(app.conf.nats_url, name=f"orders-celery-{os.getpid()}", timeout=5.0)
            try:
                js = nc.jetstream()
                try:
                    js.create_stream(name=app.conf.orders_stream, subjects=["orders.>"], duplicate_window=120.0)
                except jssync.StreamNameInUseError:
                    pass  # it exists with another configuration: use it as it is
            except BaseException:
                nc.close()
                raise
            _pid, _nc, _js = os.getpid(), nc, js
        return _js


def close_connection() -> None:
    """Close this process's connection (flushes what was published). Idempotent."""
    global _pid, _nc, _js
    with _lock:
        nc = _nc if _pid == os.getpid() else None
        _pid = _nc = _js = None
    if nc is not None:
        nc.close()


@worker_process_init.connect
def _connect_in_worker_process(**_: Any) -> None:
    jetstream()  # connect now, in the new process, so the first task does not wait for it


@worker_process_shutdown.connect
@worker_shutdown.connect
def _close_in_worker_process(**_: Any) -> None:
    close_connection()


# -- the task ---------------------------------------------------------------------------------


@app.task(autoretry_for=(jssync.TimeoutError, jssync.NoRespondersError, jssync.ConnectionClosedError),
          retry_backoff=True, max_retries=5)
def publish_order(order: dict[str, Any], order_id: str) -> dict[str, Any]:
    """Publish ``order`` on ``orders.new`` with ``order_id`` as the message id.

    Returns the PubAck as a dict. Retried on timeouts and while JetStream is unavailable;
    a retry of a publish that did reach the stream is reported as a duplicate.
    """
    ack = jetstream().publish("orders.new", json.dumps(order).encode(), msg_id=order_id, timeout=5.0)
    return {"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}


def main() -> None:
    """The demo: a local server, a worker thread on the in-memory broker, a few tasks."""
    from celery.contrib.testing.worker import start_worker

    from jssync.server import NatsServer

    with NatsServer(jetstream=True) as srv:
        app.conf.nats_url = srv.url
        try:
            with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
                for i in (1, 2, 3):
                    print("published", publish_order.delay({"item": "book", "qty": i}, f"order-{i}").get(timeout=10))
                again = publish_order.delay({"item": "book", "qty": 1}, "order-1").get(timeout=10)
                print("the same order again:", again)
            with jssync.connect(srv.url) as nc:
                stream = nc.jetstream().stream(app.conf.orders_stream)
                print("orders in the stream:", stream.info().state.messages)
        finally:
            close_connection()


if __name__ == "__main__":
    main()
