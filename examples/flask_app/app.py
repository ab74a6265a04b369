"""An orders web app: jssync in Flask, one connection per process.

Routes:

- ``POST /orders`` publishes the JSON body ``{"item": "...", "qty": 2}`` on ``orders.new``.
  The ``Idempotency-Key`` header becomes the JetStream message id, so a retried request is
  stored once (the answer says ``"duplicate": true``).
- ``GET /orders/next?n=5&wait=2`` fetches up to ``n`` processed orders with one pull request
  (``consumer.fetch``), acks them and returns them. It waits up to ``wait`` seconds for them.
- ``GET /worker`` says what this process's background worker has processed.

Each process also runs a background worker: ``consumer.consume(callback)`` on a durable
consumer that all processes share (a work queue). It "processes" each new order, publishes
the result on ``orders.processed`` and acks the order.

Nothing connects at import. The connection is made on first use, or by
:meth:`OrdersNats.start` in gunicorn's ``post_fork`` hook (see ``gunicorn.conf.py``), so
every process has its own connection, made after the fork.

Run it with gunicorn (2 workers)::

    NATS_URL=nats://127.0.0.1:4222 gunicorn -c examples/flask_app/gunicorn.conf.py

or with Flask's development server (the worker starts on the first request)::

    NATS_URL=nats://127.0.0.1:4222 flask --app examples/flask_app/app.py run
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

from flask import Flask, Response, jsonify, request

import jssync

log = logging.getLogger("orders")

NEW = "orders.new"
PROCESSED = "orders.processed"
PROCESSOR = "processor"  # durable consumer of orders.new, shared by every process's worker
REVIEW = "review"  # durable consumer of orders.processed, read by GET /orders/next


def setup_stream(js: jssync.JetStream, name: str) -> None:
    """Create the stream and the two consumers if they do not exist (safe to race)."""
    try:
        js.create_stream(name=name, subjects=["orders.>"], duplicate_window=120.0)
    except jssync.StreamNameInUseError:
        pass  # it exists with another configuration: use it as it is
    for durable, subject in ((PROCESSOR, NEW), (REVIEW, PROCESSED)):
        try:
            js.create_consumer(name, durable_name=durable, filter_subject=subject,
                               ack_policy="explicit", ack_wait=30.0, max_deliver=5)
        except jssync.ConsumerExistsError:
            pass


class OrdersNats:
    """This app's jssync connection: one per process, made on first use or by :meth:`start`.

    A process that was forked from one that had connected (gunicorn with ``preload_app``,
    multiprocessing) does not reuse the parent's connection: jssync would raise
    ``jssync.ForkError``. It connects again instead.
    """

    def __init__(self, url: str, stream: str, name: str = "orders-web") -> None:
        self.url = url
        self.stream = stream
        self.name = name
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._nc: jssync.Connection | None = None
        self._js: jssync.JetStream | None = None
        self._review: jssync.Consumer | None = None
        self._worker: Any = None  # the ConsumeContext of the background worker
        self.processed: list[str] = []

    # -- connecting -------------------------------------------------------------------------

    @property
    def js(self) -> jssync.JetStream:
        """This process's JetStream context (connects on first use)."""
        with self._lock:
            return self._connect_locked()

    def _connect_locked(self) -> jssync.JetStream:
        if self._pid != os.getpid():
            # First use in this process, or we are a forked child and what we hold belongs to
            # the parent: forget it (never close or use it here) and connect afresh.
            self._nc = self._js = self._review = self._worker = None
            self.processed = []
            nc = jssync.connect(self.url, name=f"{self.name}-{os.getpid()}", timeout=5.0)
            try:
                js = nc.jetstream()
                setup_stream(js, self.stream)
                self._review = js.consumer(self.stream, REVIEW)
            except BaseException:
                nc.close()
                raise
            self._nc, self._js, self._pid = nc, js, os.getpid()
        assert self._js is not None
        return self._js

    def review_consumer(self) -> jssync.Consumer:
        """The consumer that ``GET /orders/next`` fetches from."""
        with self._lock:
            self._connect_locked()
            assert self._review is not None
            return self._review

    def start(self, worker: bool = True) -> None:
        """Connect now and, with ``worker``, start this process's background worker. Idempotent."""
        with self._lock:
            js = self._connect_locked()
            if worker and self._worker is None:
                consumer = js.consumer(self.stream, PROCESSOR)
                self._worker = consumer.consume(self._process, error_cb=self._on_error, max_messages=20)

    @property
    def worker_running(self) -> bool:
        return self._pid == os.getpid() and self._worker is not None and not self._worker.closed

    def close(self, timeout: float = 10.0) -> None:
        """Finish the messages the worker holds, then close the connection. Idempotent.

        A no-op in a process that never connected (the gunicorn master).
        """
        with self._lock:
            if self._pid != os.getpid() or self._nc is None:
                return
            worker, nc = self._worker, self._nc
            self._worker = None
        if worker is not None:
            worker.drain()  # stop pulling; the buffered messages still go through _process
            try:
                worker.wait(timeout=timeout / 2)
            except jssync.TimeoutError:
                worker.stop()  # the rest are nak'ed: another worker gets them at once
        nc.close(timeout=timeout / 2)  # flushes the acks
        with self._lock:
            self._pid = self._nc = self._js = self._review = None

    # -- the background worker (runs on the connection's worker pool) ----------------------------

    def _process(self, msg: jssync.Msg) -> None:
        order_id = (msg.headers or {}).get("Nats-Msg-Id") or f"seq-{msg.metadata.sequence.stream}"
        try:
            order = json.loads(msg.data)
        except ValueError:
            msg.term("not JSON")  # never redelivered
            return
        result = dict(order, id=order_id, processed_by=os.getpid(), order_seq=msg.metadata.sequence.stream)
        try:
            js = self._js
            if js is None:  # closed meanwhile
                msg.nak()
                return
            # The message id makes a redelivered order publish its result once.
            js.publish(PROCESSED, json.dumps(result).encode(), msg_id=f"processed-{order_id}", timeout=5.0)
        except jssync.Error as exc:
            log.warning("could not publish the result of order %s: %s", order_id, exc)
            msg.nak(delay=1.0)
            return
        msg.ack()
        self.processed.append(order_id)

    def _on_error(self, exc: BaseException) -> None:
        log.warning("orders worker: %s", exc)


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Make the app. Config: ``NATS_URL``, ``ORDERS_STREAM``, ``ORDERS_WORKER`` (start the
    background worker on first use; gunicorn starts it in ``post_fork`` instead). No I/O here."""
    app = Flask(__name__)
    app.config.from_mapping(
        NATS_URL=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
        ORDERS_STREAM=os.environ.get("ORDERS_STREAM", "ORDERS"),
        ORDERS_WORKER=os.environ.get("ORDERS_WORKER", "1") == "1",
    )
    app.config.update(config or {})
    nats = OrdersNats(app.config["NATS_URL"], app.config["ORDERS_STREAM"])
    app.extensions["jssync"] = nats

    @app.before_request
    def _worker_on_first_use() -> None:
        if app.config["ORDERS_WORKER"] and not nats.worker_running:
            nats.start(worker=True)

    @app.post("/orders")
    def publish_order() -> tuple[Response, int]:
        key = request.headers.get("Idempotency-Key", "").strip()
        if not key:
            return jsonify(error="the Idempotency-Key header is required"), 400
        order = request.get_json(silent=True)
        if not isinstance(order, dict) or not isinstance(order.get("item"), str) \
                or not isinstance(order.get("qty"), int) or order["qty"] < 1:
            return jsonify(error='the body must be JSON like {"item": "book", "qty": 1}'), 400
        try:
            ack = nats.js.publish(NEW, json.dumps(order).encode(), msg_id=key, timeout=5.0)
        except jssync.Error as exc:
            return jsonify(error=f"could not store the order: {exc}"), 503
        status = 200 if ack.duplicate else 201
        return jsonify(id=key, stream=ack.stream, seq=ack.seq, duplicate=bool(ack.duplicate)), status

    @app.get("/orders/next")
    def next_orders() -> tuple[Response, int]:
        try:
            n = int(request.args.get("n", "5"))
            wait = float(request.args.get("wait", "2"))
        except ValueError:
            return jsonify(error="n must be an integer and wait a number"), 400
        if not 1 <= n <= 100 or not 0 < wait <= 10:
            return jsonify(error="n must be 1 to 100 and wait over 0 and at most 10 seconds"), 400
        orders = []
        try:
            # One pull request: ends when n messages came or after `wait` seconds.
            for msg in nats.review_consumer().fetch(n, expires=wait):
                orders.append(json.loads(msg.data))
                msg.ack()
        except jssync.Error as exc:
            return jsonify(error=f"could not fetch: {exc}", orders=orders), 503
        return jsonify(orders=orders), 200

    @app.get("/worker")
    def worker_status() -> tuple[Response, int]:
        return jsonify(pid=os.getpid(), running=nats.worker_running, processed=list(nats.processed)), 200

    return app


#: For ``gunicorn app:app`` and ``flask run``. Making it does no I/O.
app = create_app()


if __name__ == "__main__":
    app.run(port=int(os.environ.get("PORT", "5000")))
