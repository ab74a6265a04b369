"""The runner: the only consuming code that turns the pure parts' answers into I/O.

:class:`HeartbeatTimer` owns the one alarm of one :class:`HeartbeatMonitor`, armed at the
monitor's :meth:`~HeartbeatMonitor.next_deadline`; :class:`LoopTimer` the one alarm of a pure
engine (``ArmTimer``) or of a lease check. Both arm on the connection's one timer thread
(``conn.internal.loop.clock``, core/clock.py: a heap of deadlines, never a thread per alarm),
which posts each alarm to the I/O thread; they handle it there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...base.errors import Error
from .heartbeat import HeartbeatMonitor

if TYPE_CHECKING:
    from ...core.clock import Alarm
    from ...core.loop import IOLoop

__all__ = ["HeartbeatTimer"]

log = logging.getLogger("jssync")


class HeartbeatTimer:
    """Runs one :class:`HeartbeatMonitor` on the I/O thread; calls ``on_miss()`` there once per miss.

    :meth:`seen` is for the I/O thread (each message or status); :meth:`start`,
    :meth:`restart` and :meth:`stop` may be called from any thread and never wait.

    Args:
        loop: the connection's I/O loop.
        interval: seconds without traffic that count as a miss.
        on_miss: called on the I/O thread for each miss (it must not block).
    """

    __slots__ = ("monitor", "_clock", "_loop", "_on_miss", "_handle", "_stopped")

    def __init__(self, loop: IOLoop, interval: float, on_miss: Callable[[], None]) -> None:
        self._clock = loop.clock
        self.monitor = HeartbeatMonitor(interval, self._clock.now())
        self._loop = loop
        self._on_miss = on_miss
        self._handle: Alarm | None = None
        self._stopped = False

    def seen(self) -> None:
        """A message or status arrived (I/O thread)."""
        self.monitor.seen(self._clock.now())

    def start(self) -> None:
        """Start watching from now (any thread, no wait; nothing when the connection is closed)."""
        self._soon(self._restart)

    def restart(self) -> None:
        """Count the next interval from now (e.g. a new consumer was made; any thread, no wait)."""
        self._soon(self._restart)

    def stop(self) -> None:
        """Stop watching (any thread, no wait; idempotent)."""
        self._stopped = True
        self._soon(self._cancel)

    def _soon(self, fn: Callable[[], None]) -> None:
        if self._loop.in_loop_thread():
            fn()
            return
        try:
            self._loop.call_soon(fn)
        except Error:
            pass  # the connection is closed: no more heartbeats to watch

    # -- on the I/O thread ------------------------------------------------------------------

    def _restart(self) -> None:
        if self._stopped:
            return
        self.monitor.resumed(self._clock.now())
        self._arm()

    def _cancel(self) -> None:
        h, self._handle = self._handle, None
        if h is not None:
            h.cancel()

    def _arm(self) -> None:
        self._cancel()
        at = self.monitor.next_deadline()
        if self._stopped or at is None:
            return
        self._handle = self._clock.at(at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._stopped:
            return
        try:
            if self.monitor.check(self._clock.now()):
                self._on_miss()
        except Exception:  # noqa: BLE001 - the timer must go on
            log.exception("heartbeat miss handler %r raised", self._on_miss)
        self._arm()


class LoopTimer:
    """One timer on the connection's I/O loop that calls ``fn()`` there at a given time.

    The timer of a pure engine (:class:`~jssync.jetstream.consume.engine.PullEngine`'s
    ``ArmTimer``) and of a consume's lease checks. Times are the connection's clock
    (:meth:`now`, monotonic). :meth:`arm` may be called from any thread and never
    waits; arming again replaces the pending call; ``arm(None)`` cancels it.

    Args:
        loop: the connection's I/O loop.
        fn: called on the I/O thread when the time comes (it must not block; what it
            raises is logged).
    """

    __slots__ = ("_loop", "_clock", "_fn", "_handle")

    def __init__(self, loop: IOLoop, fn: Callable[[], None]) -> None:
        self._loop = loop
        self._clock = loop.clock
        self._fn = fn
        self._handle: Alarm | None = None

    def now(self) -> float:
        """The connection's clock (the time to pass to the engine's events)."""
        return self._clock.now()

    def arm(self, at: float | None) -> None:
        """Call ``fn`` at ``at`` (:meth:`now` time), replacing any pending call; None: cancel (any thread)."""
        if self._loop.in_loop_thread():
            self._arm(at)
            return
        try:
            self._loop.call_soon(self._arm, at)
        except Error:
            pass  # the connection is closed: nothing more to time

    def after(self, delay: float) -> None:
        """Call ``fn`` ``delay`` seconds from now (any thread)."""
        self.arm(self._clock.now() + delay)

    def _arm(self, at: float | None) -> None:
        h, self._handle = self._handle, None
        if h is not None:
            h.cancel()
        if at is None:
            return
        self._handle = self._clock.at(at, self._fire)

    def _fire(self) -> None:
        self._handle = None
        try:
            self._fn()
        except Exception:  # noqa: BLE001 - the loop must go on
            log.exception("timer callback %r raised", self._fn)
