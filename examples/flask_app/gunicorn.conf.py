"""gunicorn settings for the orders app: one jssync connection per worker, made after the fork.

Run (from anywhere)::

    NATS_URL=nats://127.0.0.1:4222 gunicorn -c examples/flask_app/gunicorn.conf.py

The master process never connects. Each worker connects in ``post_fork`` (in the worker,
right after the fork), starts its background consumer, and drains and closes both in
``worker_exit``. A connection made before the fork must not be used in a worker: jssync
raises ``jssync.ForkError`` if it is.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_here = os.path.dirname(os.path.abspath(__file__))

wsgi_app = "app:app"
pythonpath = _here  # so that `app` (app.py next to this file) can be imported
bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# GET /orders/next holds a sync worker for up to 10 s: keep the timeout well above that.
timeout = 30
graceful_timeout = 15
# False (the default): app.py is imported in each worker. True works too, since importing
# app.py does no I/O; never connect in the master either way.
preload_app = False


def post_fork(server: Any, worker: Any) -> None:
    """In the new worker process: connect and start the background consumer."""
    from app import app  # imported in the worker (or inherited from the master with preload)

    app.extensions["jssync"].start(worker=app.config["ORDERS_WORKER"])
    server.log.info("worker %s: jssync connected, background consumer started", worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """In the exiting worker: let the consumer finish what it holds, flush acks, close."""
    mod = sys.modules.get("app")
    if mod is None:  # never imported in this process (or called in the master): nothing to close
        return
    mod.app.extensions["jssync"].close(timeout=10.0)
    server.log.info("worker %s: jssync consumer drained, connection closed", worker.pid)
