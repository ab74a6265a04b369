"""The heartbeat monitor: has a consumer heard from the server within its heartbeat interval?

Pure (sans-I/O): no threads, no asyncio, no clock. The caller passes the time (any
monotonic clock, in seconds) with every event and owns the one timer that fires at
:meth:`HeartbeatMonitor.next_deadline`. One monitor per consumer of any kind: the push
subscription's heartbeat alarm (ADR-15), the Key-Value watcher, the Liftbridge
subscription.

::

    seen(now) ........ any message or status arrived: the interval starts again
    paused(now) ...... no traffic is expected (e.g. disconnected): no misses until resumed
    resumed(now) ..... traffic is expected again, counted from ``now``
    check(now) ....... True once per missed interval (then the next interval starts at ``now``)
    next_deadline() .. when ``check`` can next report a miss (None while paused)
"""

from __future__ import annotations

from ...base.errors import ValidationError

__all__ = ["HeartbeatMonitor"]

#: A timer may fire a hair before its deadline; a check this close to the deadline counts as at it.
_EARLY = 1e-3


class HeartbeatMonitor:
    """Reports a missed heartbeat interval, once per interval.

    Args:
        interval: seconds without any message or status that count as a miss (> 0; for
            ADR-37 that is 2 x the idle heartbeat, for an ADR-15 alarm 3 x).
        now: the time the monitor starts at (the first interval is counted from it).

    Raises:
        jssync.ValidationError: ``interval`` is not a number > 0.

    Not thread-safe: feed it from one thread (the consumer's I/O thread or reader).
    """

    __slots__ = ("interval", "_last", "_paused", "misses")

    def __init__(self, interval: float, now: float) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise ValidationError(f"heartbeat interval must be a number of seconds > 0, got {interval!r}")
        self.interval = float(interval)
        self._last = now
        self._paused = False
        #: how many misses were reported
        self.misses = 0

    def __repr__(self) -> str:
        return f"<HeartbeatMonitor interval={self.interval} last={self._last} paused={self._paused}>"

    @property
    def is_paused(self) -> bool:
        """True between :meth:`paused` and :meth:`resumed`."""
        return self._paused

    def seen(self, now: float) -> None:
        """Any message or status arrived at ``now``: the current interval starts again."""
        self._last = now

    def paused(self, now: float) -> None:
        """No traffic is expected from ``now`` on (e.g. disconnected): :meth:`check` reports nothing."""
        self._paused = True
        self._last = now

    def resumed(self, now: float) -> None:
        """Traffic is expected again from ``now``: a miss comes one full interval later at the earliest."""
        self._paused = False
        self._last = now

    def check(self, now: float) -> bool:
        """True when a whole interval passed by ``now`` without :meth:`seen` (a miss).

        Reports each missed interval once: after a miss, the next one is counted from ``now``,
        so checking again at once (or many times) reports nothing until another interval passes.
        """
        if self._paused or now - self._last < self.interval - _EARLY:
            return False
        self._last = now
        self.misses += 1
        return True

    def next_deadline(self) -> float | None:
        """When :meth:`check` can next return True (the time to arm one timer at); None while paused."""
        if self._paused:
            return None
        return self._last + self.interval
