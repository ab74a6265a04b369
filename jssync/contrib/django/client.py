"""This process's connection: made on first use, shared by every thread, remade after a fork.

A gunicorn or uWSGI worker is a fork of the master; a connection made before the fork belongs
to the parent (jssync raises :class:`jssync.ForkError` when a child uses it). So the connection
is made lazily, and a forked child (seen by its pid, and by ``os.register_at_fork``) makes its
own on first use and leaves the parent's alone. It is closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from jssync import Connection, Error, JetStream, connect
from jssync.core.urls import redact_url

from .conf import connect_options

log = logging.getLogger("jssync")

_lock = threading.Lock()
_pid = os.getpid()
_conn: Connection | None = None
_js: JetStream | None = None


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's connection (never close it: it is the parent's), and
    replace the lock (a thread of the parent may have held it at the fork)."""
    global _lock, _pid, _conn, _js
    _lock = threading.Lock()
    _pid = os.getpid()
    _conn = _js = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _current() -> tuple[Connection, JetStream] | None:
    """The connection and context if they are this process's and open (call under ``_lock``)."""
    global _pid, _conn, _js
    if _pid != os.getpid():  # a fork the hook did not see (it always should): the parent's
        _pid, _conn, _js = os.getpid(), None, None
    if _conn is None or _js is None or _conn.is_closed:
        return None
    return _conn, _js


def _open() -> tuple[Connection, JetStream]:
    global _conn, _js
    with _lock:
        cur = _current()
        if cur is not None:
            return cur
        servers, opts, js_opts = connect_options()
        nc = connect(servers, **opts)
        try:
            js = nc.jetstream(**js_opts)
        except BaseException:
            nc.close()
            raise
        _conn, _js = nc, js
        log.debug("connected to %s for process %d", nc.connected_url, os.getpid())
        return nc, js


def connection() -> Connection:
    """Return this process's :class:`jssync.Connection`, connecting on first use.

    Every thread gets the same connection; a forked child (a gunicorn or uWSGI worker) gets
    its own, made on its first call; a closed one is replaced. The options come from
    ``settings.JSSYNC`` and the ``NATS_*`` environment variables (:mod:`jssync.contrib.django.conf`).

    Blocks while connecting, up to the connect timeout (``JSSYNC["options"]["timeout"]``,
    default 2 s); other threads calling meanwhile wait for that connection.

    Raises:
        jssync.ValidationError: the ``JSSYNC`` setting is wrong (nothing is sent).
        jssync.NoServersError: no server could be reached in time.
        jssync.AuthorizationError: the credentials were refused.
    """
    return _open()[0]


def jetstream() -> JetStream:
    """Return the JetStream context on :func:`connection` (``JSSYNC["jetstream"]`` options).

    Blocks and raises as :func:`connection` does.
    """
    return _open()[1]


def close(timeout: float = 5.0) -> None:
    """Close this process's connection, flushing what was published (up to ``timeout`` s).

    The next :func:`connection` connects again. Idempotent; does nothing in a forked child
    for the parent's connection. Thread-safe.
    """
    global _conn, _js
    with _lock:
        cur = _current()
        _conn = _js = None
    if cur is not None:
        cur[0].close(timeout=timeout)


@atexit.register
def _close_at_exit() -> None:
    try:
        close(timeout=2.0)
    except BaseException:  # noqa: BLE001 - nothing to report to at exit
        pass


def health(timeout: float = 2.0, *, jetstream: bool = True) -> dict[str, Any]:
    """Check this process's connection for a readiness probe; never raises a jssync error.

    Connects if needed (see :func:`connection`), then round-trips a PING to the server and,
    with ``jetstream``, asks JetStream for the account info. Returns a dict for JSON:
    ``{"ok": bool, "status": "ok" | "error", "connected": bool, "server": url or None,
    "rtt_ms": float or None, "jetstream": bool or None, "pid": int}``, plus ``"error"``
    (the reason, no credentials) when not ok.

    Blocks up to ``timeout`` seconds for each round trip (and the connect timeout when
    it connects). Thread-safe.
    """
    out: dict[str, Any] = {"ok": False, "status": "error", "connected": False, "server": None,
                           "rtt_ms": None, "jetstream": None, "pid": os.getpid()}
    try:
        nc, js = _open()
        out["connected"] = nc.is_connected
        url = nc.connected_url
        out["server"] = redact_url(url) if url else None
        if not nc.is_connected:
            out["error"] = "disconnected from the server (reconnecting)"
            return out
        start = time.monotonic()
        nc.flush(timeout=timeout)
        out["rtt_ms"] = round((time.monotonic() - start) * 1000, 3)
        if jetstream:
            js.account_info(timeout=timeout)
            out["jetstream"] = True
    except Error as exc:
        if jetstream and out["rtt_ms"] is not None:
            out["jetstream"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["ok"] = True
    out["status"] = "ok"
    return out
