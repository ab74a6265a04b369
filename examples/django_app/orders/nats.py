"""This process's jssync connection, made on first use.

Views call :func:`jetstream`. The connection is made on first use in each process, so it is
always made after any fork (gunicorn or uwsgi workers, ``runserver``'s reloader): a
connection made before a fork raises ``jssync.ForkError`` in the child. It is closed at
interpreter exit (jssync does that for every open connection) or by :func:`close`.
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

import jssync

NEW = "orders.new"

_lock = threading.Lock()
_pid: int | None = None
_nc: jssync.Connection | None = None
_js: jssync.JetStream | None = None


def ensure_stream(js: jssync.JetStream, name: str) -> None:
    """Create the orders stream if it does not exist (safe to race)."""
    try:
        js.create_stream(name=name, subjects=["orders.>"], duplicate_window=120.0)
    except jssync.StreamNameInUseError:
        pass  # it exists with another configuration: use it as it is


def jetstream() -> jssync.JetStream:
    """Return this process's JetStream context, connecting on first use. Thread-safe.

    Raises:
        jssync.NoServersError: the server at ``settings.NATS_URL`` cannot be reached.
    """
    global _pid, _nc, _js
    with _lock:
        if _pid != os.getpid() or _js is None:
            # first use here, or a forked child holding its parent's handles: connect afresh
            nc = jssync.connect(settings.NATS_URL, name=f"orders-django-{os.getpid()}", timeout=5.0)
            try:
                js = nc.jetstream()
                ensure_stream(js, settings.ORDERS_STREAM)
            except BaseException:
                nc.close()
                raise
            _pid, _nc, _js = os.getpid(), nc, js
        return _js


def close() -> None:
    """Close this process's connection (flushes what was published). Idempotent."""
    global _pid, _nc, _js
    with _lock:
        nc = _nc if _pid == os.getpid() else None
        _pid = _nc = _js = None
    if nc is not None:
        nc.close()
