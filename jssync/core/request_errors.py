"""Why a request failed: the errors the request paths raise (built here, raised at their sites).

Every request path (``Connection.request``, ``request_many``, the JetStream API, a publish
waiting for its PubAck) builds its failure with one of these, so each says the same thing the
same way: :class:`RequestTimeoutError` (and whether the connection was down),
:class:`NoRespondersError`, :class:`RequestCancelledError` (closed, or drained),
:class:`JetStreamNotEnabledError`. Pure apart from reading the connection's state; never blocks.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    JetStreamNotEnabledError,
    NoRespondersError,
    RequestCancelledError,
    RequestTimeoutError,
    ServiceUnavailableError,
)

if TYPE_CHECKING:
    from .connection import Connection

#: Connections whose ``drain`` has started: a request they cancel was cancelled by the drain.
_draining: weakref.WeakSet[Any] = weakref.WeakSet()


def mark_draining(conn: Connection) -> None:
    """``Connection.drain`` started: requests it ends say ``reason == "drained"``."""
    _draining.add(conn)


def ending(conn: Connection) -> bool:
    """``conn`` is closing, closed or draining: a request it ends was cancelled."""
    return bool(conn._closed or conn._closing or conn._closed_error is not None or conn in _draining)


def cancel_reason(conn: Connection) -> str:
    """``"drained"`` when ``conn`` is (or was) draining, else ``"closed"``."""
    return "drained" if conn in _draining else "closed"


def timed_out(subject: str, timeout: float | None, state: str | None, what: str = "request") -> RequestTimeoutError:
    """No reply within ``timeout``; ``state`` is the connection's link state (None: connected)."""
    return RequestTimeoutError(f"no reply to {what} on {subject!r} within {timeout}s" + (f": {state}" if state else ""),
                               subject=subject, disconnected=state is not None)


def no_responders(subject: str, message: str | None = None) -> NoRespondersError:
    """Nobody listens on ``subject`` (the server's 503 status)."""
    return NoRespondersError(message or f"no responders are available for the request on {subject!r}",
                             subject=subject)


def cancelled(conn: Connection, subject: str, why: str | None = None) -> RequestCancelledError:
    """The connection closed (or drained) while the request on ``subject`` waited."""
    reason = cancel_reason(conn)
    text = why or (f"the connection {'was drained' if reason == 'drained' else 'closed'} while it waited for "
                   "the reply")
    return RequestCancelledError(f"request on {subject!r} cancelled: {text}", subject=subject, reason=reason)


def jetstream_unavailable(conn: Connection, subject: str) -> ServiceUnavailableError:
    """A JetStream API request had no responders: JetStream not enabled on the connected server
    (its INFO says so; not retriable), else not available now (e.g. restarting; retriable)."""
    try:
        info = conn.server_info or {}
    except Exception:  # noqa: BLE001 - no INFO (closing): say what is known
        info = {}
    if info and not info.get("jetstream"):  # the server leaves the field out without JetStream
        exc: ServiceUnavailableError = JetStreamNotEnabledError(
            503, None, f"JetStream is not available: it is not enabled on the server this connection uses "
                       f"({info.get('server_name') or conn.connected_url}; no responders on {subject})")
    else:
        exc = ServiceUnavailableError(
            503, None, f"JetStream is not available on this account/server (no responders on {subject})")
    exc.subject = subject
    return exc
