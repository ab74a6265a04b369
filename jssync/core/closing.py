"""Closing a connection: ``drain`` and ``close`` (the public docstrings are Connection's).

``close`` lets every stopped consume send the naks it promised while acks are still
accepted, then takes the close lock (the ack lock: an ack either raised or is in the queue
that close writes), hands the queue to the socket, closes nats-py and tears the threads
down. ``drain`` drains every subscription and consume first, and waits (within its
timeout) for a reconnect so that what was published goes out; the consumes' drains are
all started first, so that they run together (100 idle consumes drain in well under 2 s,
not 0.5 s each). At interpreter exit every open connection is closed with a 2 s limit.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.deadline import Deadline
from ..base.errors import Error, TimeoutError
from . import request_errors as _why
from .subscription import Subscription

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("jssync")

#: The open connections (closed at interpreter exit).
live: weakref.WeakSet[Connection] = weakref.WeakSet()

#: The share of ``close``'s timeout a stopped consume may take to send its naks first.
_BEFORE_CLOSE_SHARE = 0.6


def drain(conn: Connection, timeout: float | None) -> None:
    """``Connection.drain``."""
    if conn._closed or conn._closing:
        return
    _why.mark_draining(conn)
    deadline = Deadline(timeout)
    with conn._subs_lock:
        subs = list(conn._subs)
    left: list[str] = []
    for sub in subs:  # every consume starts its drain now: they run together (each waits >= 0.5 s)
        start: Callable[[], None] | None = getattr(sub, "_drain_start", None)
        if start is None:
            continue
        try:
            start()
        except Error as exc:
            conn._report_error(exc)
    for sub in subs:  # then each is waited for (those started above are over or nearly)
        try:
            sub.drain(timeout=deadline.remaining())
        except TimeoutError as exc:
            left.append(_drain_what(sub, exc))
        except Error as exc:
            conn._report_error(exc)
    in_loop = conn._loop.forked or conn._loop.in_loop_thread()
    if not in_loop:
        before_close(conn, deadline, drain=True, subs=subs)  # (a drained consume left _subs)
    state = conn._link_state()  # (before close: why the drain could not finish)
    if conn._pubq and not in_loop and not conn._nc.is_connected and not deadline.expired():
        try:  # what was published waits for the reconnect, within the drain's timeout
            conn.flush(timeout=deadline.remaining())
        except TimeoutError:
            state = conn._link_state()
        except Error as exc:
            conn._report_error(exc)
    rem = deadline.remaining()
    conn.close(timeout=None if rem is None else max(0.5, rem))
    dropped = conn._dropped_at_close
    if left or dropped:
        what = left + ([f"{dropped} queued message(s) dropped"] if dropped else [])
        raise TimeoutError(f"drain did not finish within {timeout}s and closed the connection; "
                           f"not drained: {'; '.join(what)}" + (f" ({state})" if state else ""))


def close(conn: Connection, timeout: float | None) -> None:
    """``Connection.close``."""
    deadline = Deadline(timeout)
    if not (conn._closed or conn._closing or conn._loop.forked or conn._loop.in_loop_thread()) \
            and conn._nc.is_connected:
        # acks are still accepted: the naks a stopped consume promised go out first (not
        # while disconnected: close does not wait for a reconnect, and drops the queue)
        rem = deadline.remaining()
        try:
            before_close(conn, Deadline(None if rem is None else rem * _BEFORE_CLOSE_SHARE), drain=False)
        except KeyboardInterrupt:
            with conn._close_lock:
                if conn._closed or conn._closing:
                    raise
                conn._closing = True
            teardown(conn, 0.5)
            raise
    with conn._close_lock:  # (also the ack lock: see Outbound.send_ack)
        if conn._closed or conn._closing:
            return
        conn._closing = True
    if conn._loop.forked:
        conn._closed = True
        return
    if not conn._loop.in_loop_thread():
        try:

            async def _close() -> None:
                # not while disconnected: close does not wait for a reconnect
                if conn._nc.is_connected:
                    try:
                        rem = deadline.remaining()
                        await asyncio.wait_for(conn._sync_pubs(), None if rem is None else max(0.1, rem - 0.2))
                    except Exception:
                        log.debug("could not hand over every publish before close", exc_info=True)
                dropped = conn._out.drop_all()
                if dropped:
                    conn._dropped_at_close = dropped
                    log.warning("close: %d queued message(s) dropped (not sent before close)", dropped)
                await conn._nc.close()

            conn._loop.run(_close(), deadline, "close")
        except BaseException as exc:  # noqa: BLE001 - closing goes on
            if isinstance(exc, KeyboardInterrupt):
                teardown(conn, 0.5)
                raise
            log.debug("error while closing: %s", exc)
    rem = deadline.remaining()
    teardown(conn, None if rem is None else rem or 0.5)


def before_close(conn: Connection, deadline: Deadline, drain: bool, subs: list[Subscription] | None = None) -> None:
    """Before ``close`` refuses acks: let every consume send what it promised (its
    ``_before_close``: the naks of a stopped consume; with ``drain``, the hand-over of
    an iterator's buffer). ``subs``: those to look at (default: the open ones). Blocks
    until ``deadline`` at most; reports what fails."""
    if subs is None:
        with conn._subs_lock:
            subs = list(conn._subs)
    for sub in subs:
        hook: Callable[[Deadline, bool], None] | None = getattr(sub, "_before_close", None)
        if hook is None:
            continue
        try:
            hook(deadline, drain)
        except Error as exc:
            conn._report_error(exc)


def teardown(conn: Connection, timeout: float | None) -> None:
    """Mark ``conn`` closed, end its subscriptions, stop its I/O thread and worker pool."""
    conn._closed = True
    conn._closing = False
    with conn._subs_lock:
        subs = list(conn._subs)
        conn._subs.clear()
    err = conn._closed_error  # None after close(): iterators end quietly
    for sub in subs:
        sub._end(err)
    conn._loop.stop(timeout)
    conn._pool.stop(1.0 if timeout is None or timeout > 1.0 else timeout)  # at most 1 s
    live.discard(conn)


def _drain_what(sub: Any, exc: BaseException) -> str:
    """What a subscription (or consume, or the PubAck waiter) whose drain timed out was, for drain's error."""
    if isinstance(sub, Subscription):
        return f"the subscription on {sub.subject!r}"
    stream, consumer = getattr(sub, "stream", None), getattr(sub, "consumer", None)
    if isinstance(stream, str) and isinstance(consumer, str):
        return f"the consume of {stream}/{consumer}"
    return str(exc)


@atexit.register
def _close_all_at_exit() -> None:
    for conn in list(live):
        try:
            if not conn._loop.forked:
                conn.close(timeout=2.0)
        except BaseException:  # noqa: BLE001
            pass
