"""Request many (ADR-47): one request, every reply that comes within the limits, as an iterator."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    PermissionDeniedError,
    SubscriptionClosedError,
    TimeoutError,
)
from ..base.status import is_no_responders
from ..base.validate import MAX_I64, check_number, check_optional_int, check_optional_number
from .hooks import HOOKS
from .msg import Msg
from .request_errors import cancel_reason, no_responders

if TYPE_CHECKING:
    from .connection import Connection
    from .subscription import Subscription

#: Replies buffered at most (also with ``max_messages``: replies past it must not be
#: reported as a slow consumer while the unsubscribe is on its way).
_PENDING = 65536


def empty_payload(msg: Msg) -> bool:
    """The standard sentinel (ADR-47): a reply with an empty payload (and no status header)."""
    return not msg.data


def _number(value: Any, what: str, *, allow_none: bool) -> float | None:
    if allow_none:
        return check_optional_number(value, what, unit="seconds")
    return check_number(value, what, unit="seconds")


def check_options(max_wait: Any, max_messages: Any, stall: Any,
                  sentinel: Any) -> tuple[float, int | None, float | None, Callable[[Msg], bool] | None]:
    """Validate request_many's options; raise ``ValueError``/``TypeError`` naming the bad one."""
    wait = _number(max_wait, "max_wait", allow_none=False)
    assert wait is not None
    check_optional_int(max_messages, "max_messages", maximum=MAX_I64, open_ended=True)
    st = _number(stall, "stall", allow_none=True)
    if st is not None and st >= wait:
        st = None  # ADR-47: a stall of at least the total wait is the same as none
    if sentinel is True:
        sentinel = empty_payload
    elif sentinel is False:
        sentinel = None
    elif sentinel is not None and not callable(sentinel):
        raise TypeError(f"sentinel must be a callable(msg) -> bool, True or None, got {sentinel!r}")
    return wait, max_messages, st, sentinel


class RequestMany:
    """The replies to one request, as a blocking iterator (``Connection.request_many``).

    Iteration ends quietly when ``max_messages`` replies were yielded, when ``max_wait``
    seconds of waiting have passed in all, when no reply came for ``stall`` seconds after
    the first one, or when ``sentinel(msg)`` is true (that message is not yielded). Time
    the application spends between two ``next()`` calls does not count against
    ``max_wait`` or ``stall``; replies that arrived meanwhile are yielded first.
    :attr:`reason` then says why it ended. The reply inbox subscription is removed when
    the iteration ends, on :meth:`close` (or leaving a ``with`` block), and when the object
    is garbage collected. Waits happen in slices of 0.1 s (Ctrl-C gets through).

    Use from one thread at a time.

    Raises (from ``next()``):
        jssync.NoRespondersError: nobody listens on the subject (the server's 503).
        jssync.PermissionDeniedError: the server refused the publish or the inbox subscription.
    """

    def __init__(self, conn: Connection, subject: str, sub: Subscription, max_wait: float,
                 max_messages: int | None, stall: float | None, sentinel: Callable[[Msg], bool] | None,
                 watch_keys: tuple[int, ...], denied: list[PermissionDeniedError]) -> None:
        self._conn = conn
        self.subject = subject
        self._sub = sub
        self._left = max_wait
        self._max = max_messages
        self._stall = stall
        self._sentinel = sentinel
        self._denied = denied
        self._count = 0
        #: Why the iteration ended: ``"max_messages"``, ``"max_wait"``, ``"stall"``,
        #: ``"sentinel"``, ``"closed"`` (by :meth:`close`), ``"connection_closed"`` (the connection
        #: closed meanwhile), ``"connection_drained"`` (it was drained), or None while it runs.
        self.reason: str | None = None
        finalizer: Any = weakref.finalize(self, _cleanup, conn, sub, watch_keys)
        finalizer.atexit = False  # a property of finalize (typeshed's __slots__ hides it from some mypy versions)
        self._finalizer = finalizer

    def __repr__(self) -> str:
        return f"<jssync.RequestMany subject={self.subject!r} received={self._count} reason={self.reason!r}>"

    @property
    def received(self) -> int:
        """Replies yielded so far."""
        return self._count

    def __iter__(self) -> RequestMany:
        return self

    def __enter__(self) -> RequestMany:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop early and remove the reply subscription (idempotent; never blocks long)."""
        if self.reason is None:
            self.reason = "closed"
        self._finalizer()

    def _finish(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self._finalizer()

    def __next__(self) -> Msg:
        tracer = HOOKS.tracer  # jssync.otel: a receive span per reply (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("request_many", self.__next__, self._conn, None, None)
        if self.reason is not None:
            raise StopIteration
        if self._max is not None and self._count >= self._max:
            self._finish("max_messages")
            raise StopIteration
        first = self._count == 0
        if first or self._stall is None:
            wait, why = self._left, "max_wait"
        elif self._stall < self._left:
            wait, why = self._stall, "stall"
        else:
            wait, why = self._left, "max_wait"
        start = time.monotonic()
        try:
            msg = self._sub.next_msg(timeout=wait)
        except TimeoutError:
            self._left = 0.0 if why == "max_wait" else max(0.0, self._left - (time.monotonic() - start))
            self._finish(why)
            raise StopIteration from None
        except SubscriptionClosedError:
            self._finish(_ended_by(self._conn))
            if self._denied:
                err = self._denied[0]
                subj = self.subject if err.operation == "publish" else self._sub.subject
                what = "publish to" if err.operation == "publish" else "subscription to the reply inbox"
                raise PermissionDeniedError(
                    f"permission denied: the server refused the request's {what} {subj!r}",
                    operation=err.operation, subject=subj,
                ) from err
            raise StopIteration from None
        except BaseException:
            self._left = max(0.0, self._left - (time.monotonic() - start))
            raise
        self._left = max(0.0, self._left - (time.monotonic() - start))
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            self._finish("no_responders")
            raise no_responders(self.subject)
        sentinel = self._sentinel
        if sentinel is not None and sentinel(msg):
            self._finish("sentinel")
            raise StopIteration
        self._count += 1
        if self._max is not None and self._count >= self._max:
            self._finish("max_messages")
        return msg


def _ended_by(conn: Connection) -> str:
    """The reason of an iteration whose inbox subscription ended without :meth:`RequestMany.close`."""
    if cancel_reason(conn) == "drained":
        return "connection_drained"
    return "connection_closed" if conn._closed or conn._closing else "closed"


def _cleanup(conn: Connection, sub: Subscription, watch_keys: tuple[int, ...]) -> None:
    """Remove the inbox subscription and the permission watchers (no lock, never raises)."""
    for key in watch_keys:
        conn._perms.unwatch(key)
    sub._unsubscribe_soon()


def start(conn: Connection, subject: str, data: bytes, headers: dict[str, str] | None, max_wait: float,
          max_messages: int | None, stall: float | None,
          sentinel: Callable[[Msg], bool] | None) -> RequestMany:
    """Subscribe a fresh inbox, publish the request, return the iterator (arguments checked)."""
    inbox = conn.new_inbox()
    denied: list[PermissionDeniedError] = []
    holder: list[Subscription] = []

    def on_denied(err: PermissionDeniedError) -> None:
        denied.append(err)
        if holder:
            holder[0]._end()

    perms = conn._perms
    keys = (perms.watch("publish", subject, on_denied), perms.watch("subscribe", inbox, on_denied))
    try:
        sub = conn._make_subscription(inbox, None, None, _PENDING,
                                      check_permissions=False)
    except BaseException:
        for k in keys:
            perms.unwatch(k)
        raise
    holder.append(sub)
    rm = RequestMany(conn, subject, sub, max_wait, max_messages, stall, sentinel, keys, denied)
    if denied:
        sub._end()
    conn._enqueue((subject, data, inbox, headers))
    return rm
