"""Core subscriptions: messages handed from the I/O thread to user threads."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..base.deadline import EXPIRED, Deadline
from ..base.errors import (
    ConnectionClosedError,
    Error,
    SlowConsumerError,
    SubscriptionClosedError,
    TimeoutError,
    ValidationError,
)
from . import natspy as _natspy
from .hooks import HOOKS
from .msg import Msg
from .workers import SerialLane

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("jssync")

#: Put on a subscription's queue when it ends.
_END = object()


class _Inbound(_natspy.Receiver):
    """The receiver (see :class:`jssync._natspy.Receiver`) of a core subscription.

    nats-py calls ``put_nowait`` on the I/O thread for each message; we hand the message
    straight to the user side (a ``SimpleQueue`` or a serial callback lane), so there is
    no loop task and no wake-up per message.
    """

    __slots__ = ("_sub",)

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub

    def put_nowait(self, msg: Msg) -> None:
        self._sub._deliver(msg)


class Subscription:
    """A subscription to a subject.

    Iterate it (``for msg in sub``), call :meth:`next_msg`, or pass ``callback=`` to
    :meth:`Connection.subscribe`; callbacks run on the connection's worker pool, one
    message at a time per subscription, in order. Thread-safe.
    """

    def __init__(
        self,
        conn: Connection,
        subject: str,
        queue: str | None,
        callback: Callable[[Msg], Any] | None,
        pending_msgs_limit: int,
    ) -> None:
        if pending_msgs_limit < 1:
            raise ValidationError(f"pending_msgs_limit must be >= 1, got {pending_msgs_limit!r}")
        self._conn = conn
        self.subject = subject
        self.queue = queue
        self._callback = callback
        self._limit = pending_msgs_limit
        self._q: SimpleQueue[Any] = SimpleQueue()
        self._lane: SerialLane | None = None
        if callback is not None:
            self._lane = SerialLane(conn._pool, self._run_callback)
        self._nsub: Any = None
        self._closed = False
        self._end_error: Error | None = None
        self._dropped = 0
        self._slow_reported = False
        self._delivered = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        q = f" queue={self.queue!r}" if self.queue else ""
        return f"<jssync.Subscription subject={self.subject!r}{q} closed={self._closed}>"

    # -- I/O thread side -----------------------------------------------------------------

    def _deliver(self, msg: Msg) -> None:
        lane = self._lane
        pending = len(lane) if lane is not None else self._q.qsize()
        if pending >= self._limit:
            self._dropped += 1
            if not self._slow_reported:
                self._slow_reported = True
                self._conn._report_error(SlowConsumerError(self.subject, self._dropped))
            # nats-py sees QueueFull and calls its error callback, which we ignore for this case.
            raise asyncio.QueueFull
        self._slow_reported = False
        self._delivered += 1
        if lane is not None:
            lane.put(msg)
        else:
            self._q.put(msg)

    def _end(self, error: Error | None = None) -> None:
        """Mark the subscription finished; wakes iterators (any thread).

        ``error``: why the connection closed by itself (it gave up reconnecting): reading
        past the end then raises it instead of ending quietly.
        """
        if self._closed:
            return
        self._end_error = error
        self._closed = True
        self._q.put(_END)

    def _ended_error(self) -> Error:
        """What reading past the end raises: the connection's close error, or SubscriptionClosedError."""
        err = self._end_error
        if err is not None:
            return ConnectionClosedError(str(err))
        return SubscriptionClosedError(f"subscription on {self.subject!r} is closed")

    def _run_callback(self, msg: Msg) -> None:
        assert self._callback is not None
        tracer = HOOKS.tracer  # jssync.otel: a process span around the callback (None: off)
        if tracer is not None:
            tracer.process(self._callback, msg, self._conn, self.queue)
            return
        self._callback(msg)

    # -- user side -------------------------------------------------------------------------

    @property
    def pending_msgs(self) -> int:
        """Messages received and not yet taken by the application."""
        if self._lane is not None:
            return len(self._lane)
        n = self._q.qsize()
        return n - 1 if self._closed and n > 0 else n

    @property
    def dropped(self) -> int:
        """Messages dropped because ``pending_msgs_limit`` was reached (slow consumer)."""
        return self._dropped

    @property
    def delivered(self) -> int:
        return self._delivered

    @property
    def is_closed(self) -> bool:
        return self._closed

    def next_msg(self, timeout: float | None = 1.0) -> Msg:
        """Return the next message, blocking up to ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: no message in time.
            jssync.SubscriptionClosedError: the subscription ended and no message is left.
            jssync.ConnectionClosedError: the connection gave up reconnecting (the message says
                why); iterating raises it too (after ``close()`` iteration ends quietly).
            jssync.ForkError: called in a forked child (nothing would ever arrive).
            RuntimeError: the subscription has a callback.
        """
        if self._lane is not None:
            raise RuntimeError("next_msg() cannot be used on a subscription with a callback")
        q = self._q
        try:
            item = q.get_nowait()
        except Empty:
            item = None
        if item is None:
            # waits outside ``except Empty``: an error raised here has no queue.Empty as context
            self._conn._loop.check_fork()
            item = Deadline(timeout).get(q)
            if item is EXPIRED:
                raise TimeoutError(f"no message on {self.subject!r} within {timeout}s")
        if item is _END:
            q.put(_END)
            raise self._ended_error()
        return item  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Msg]:
        while True:
            try:
                yield self.next_msg(timeout=None)
            except SubscriptionClosedError:
                return

    def unsubscribe(self, timeout: float | None = 5.0) -> None:
        """Remove interest; pending messages stay readable, then iteration ends. Idempotent.

        Blocks until the UNSUB is handed to the I/O thread (at most ``timeout``; None: no limit).
        """
        if self._closed:
            return
        self._end()
        self._conn._unsubscribe(self, drain=False, timeout=timeout)

    def _unsubscribe_soon(self) -> None:
        """End the subscription and hand its UNSUB to the I/O thread without waiting.

        Takes no lock and never blocks or raises: it also runs from finalizers (wherever
        the garbage collector runs, possibly on a thread holding the connection's locks)
        and after an interrupted drain. ``set.discard`` is atomic.
        """
        try:
            self._end()
            conn = self._conn
            conn._subs.discard(self)
            nsub = self._nsub
            if nsub is None or conn._closed or conn._loop.forked:
                return

            async def _unsub() -> None:
                if _natspy.sub_closed(nsub) or conn._nc.is_closed:
                    return
                try:
                    await nsub.unsubscribe()
                except Exception:  # noqa: BLE001 - best effort
                    log.debug("unsubscribe failed", exc_info=True)

            loop = conn._loop
            if loop.in_loop_thread():
                loop.loop.create_task(_unsub())
            else:
                loop.call_soon(lambda: loop.loop.create_task(_unsub()))
        except Exception:  # noqa: BLE001 - the connection is closing or closed: nothing to undo
            log.debug("could not hand over an unsubscribe", exc_info=True)

    def drain(self, timeout: float | None = 30.0) -> None:
        """Stop receiving, process what arrived already, then end the subscription.

        Blocks until buffered messages were delivered to the callback (callback form) or
        until the server confirmed the unsubscribe (iterator form, where the rest stays
        readable), at most ``timeout`` (None: no limit). Called from this subscription's own callback, it
        returns once the unsubscribe is confirmed (the buffered messages follow when the
        callback returns).

        Raises:
            jssync.TimeoutError: the drain did not finish in time.
        """
        if self._closed:
            return
        deadline = Deadline(timeout)
        try:
            self._conn._unsubscribe(self, drain=True, timeout=deadline)
        except BaseException:
            self._unsubscribe_soon()
            raise
        self._end()
        lane = self._lane
        if lane is not None and not lane.in_handler():
            while not lane.idle.wait(deadline.slice()):
                deadline.check("subscription drain")
