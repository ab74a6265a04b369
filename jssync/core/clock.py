"""The heartbeat clock: one timer thread per connection, and the loop-stall watch it runs.

Every consumer's heartbeat alarm and every pure engine's ``ArmTimer`` of a connection is
one deadline in one heap, waited on by one daemon thread (``jssync-clock-<id>``) on one
``threading.Condition``: never a thread per alarm. A deadline that comes due is posted to
the connection's I/O thread (``call_soon_threadsafe``), where the consumer's runner
(jetstream/consume/runner.py) handles it; the pure monitors never see a thread.

Because the clock does not run on the I/O loop it can see the loop stall: it posts a
no-op to the loop every :data:`PROBE_EVERY` seconds, and when one has waited more than
:data:`STALL_AFTER` seconds it warns once (the ``jssync`` logger and ``error_cb``) with how
long and what the I/O thread is running; the warning is re-armed when the loop runs again.
Nothing of this is on the hot path: the loop runs one tiny callback per probe.

The thread starts with the first alarm (lazily), stops with the connection, and belongs
to the process that started it: after ``os.fork()`` the child's copy arms nothing (its
connection raises :class:`jssync.ForkError` on use).

The parts: :class:`AlarmHeap` and :class:`StallWatch` are pure (time passed in);
:class:`Clock` is the thread that drives them.
"""

from __future__ import annotations

import heapq
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base.errors import LoopStalledError

if TYPE_CHECKING:
    import asyncio

__all__ = ["Alarm", "AlarmHeap", "Clock", "StallWatch", "PROBE_EVERY", "STALL_AFTER"]

log = logging.getLogger("jssync")

#: seconds the I/O thread may go without running before the clock warns
STALL_AFTER = 1.0
#: seconds between the clock's probes of the I/O loop
PROBE_EVERY = 0.25
#: the longest the clock thread waits in one slice (so stop() is seen even if a notify is lost)
_SLICE = 0.5


class Alarm:
    """One armed deadline; :meth:`cancel` it from any thread (idempotent)."""

    __slots__ = ("at", "fn", "cancelled", "_heap")

    def __init__(self, at: float, fn: Callable[[], None], heap: AlarmHeap | None) -> None:
        self.at = at
        self.fn = fn
        self.cancelled = False
        self._heap = heap

    def __repr__(self) -> str:
        return f"<Alarm at={self.at:.3f} fn={self.fn!r} cancelled={self.cancelled}>"

    def __lt__(self, other: Alarm) -> bool:
        return self.at < other.at

    def cancel(self) -> None:
        """The alarm will not fire (if it was already posted to the loop, it is skipped there).

        Its callback is dropped at once (a stopped consumer is not kept alive until the deadline).
        """
        if not self.cancelled:
            self.cancelled = True
            self.fn = _dropped
            heap = self._heap  # (read once: the clock thread may pop it meanwhile)
            if heap is not None:
                heap.cancelled += 1  # a hint for compaction only (a lost update is harmless)


def _dropped() -> None:
    """The callback of a cancelled alarm."""


class AlarmHeap:
    """The deadlines of one clock, earliest first (pure: no lock, no clock, no thread).

    Cancelled alarms stay in the heap until they come up (or until they are more than half
    of it, then it is compacted), so cancel is O(1).
    """

    __slots__ = ("_heap", "cancelled")

    def __init__(self) -> None:
        self._heap: list[Alarm] = []
        #: cancelled alarms still in the heap
        self.cancelled = 0

    def __len__(self) -> int:
        return len(self._heap) - self.cancelled

    def push(self, at: float, fn: Callable[[], None]) -> Alarm:
        """Add an alarm at ``at``; True-ish result: the alarm (cancel it to drop it)."""
        alarm = Alarm(at, fn, self)
        heapq.heappush(self._heap, alarm)
        if self.cancelled > 64 and self.cancelled * 2 > len(self._heap):
            self._compact()
        return alarm

    def next_at(self) -> float | None:
        """The earliest live deadline, None when there is none."""
        heap = self._heap
        while heap and heap[0].cancelled:
            heapq.heappop(heap)._heap = None
            self.cancelled -= 1
        return heap[0].at if heap else None

    def pop_due(self, now: float) -> list[Alarm]:
        """Remove and return the live alarms due by ``now``, earliest first."""
        due = []
        heap = self._heap
        while heap and (heap[0].cancelled or heap[0].at <= now):
            alarm = heapq.heappop(heap)
            if alarm.cancelled:
                self.cancelled -= 1
            else:
                due.append(alarm)
            alarm._heap = None  # a later cancel() no longer counts here
        return due

    def clear(self) -> None:
        for alarm in self._heap:
            alarm._heap = None
        self._heap.clear()
        self.cancelled = 0

    def _compact(self) -> None:
        live = []
        for alarm in self._heap:
            if alarm.cancelled:
                alarm._heap = None
            else:
                live.append(alarm)
        heapq.heapify(live)
        self._heap = live
        self.cancelled = 0


class StallWatch:
    """Has the I/O loop run lately? (pure: time passed in)

    ::

        probe_due(now) .. True when a probe should be posted to the loop (none is waiting)
        posted(now) ..... a probe was posted
        ran(now) ........ the probe ran on the loop: the loop is alive (re-arms the warning)
        stalled(now) .... seconds the waiting probe has waited, once per stall, when > ``after``
        next_at() ....... when to look next (a probe is due, or a stall would be reached)
    """

    __slots__ = ("after", "every", "_posted_at", "_ran_at", "_warned")

    def __init__(self, after: float = STALL_AFTER, every: float = PROBE_EVERY, now: float = 0.0) -> None:
        self.after = after
        self.every = every
        self._posted_at: float | None = None
        self._ran_at = now
        self._warned = False

    def probe_due(self, now: float) -> bool:
        return self._posted_at is None and now - self._ran_at >= self.every

    def posted(self, now: float) -> None:
        self._posted_at = now

    def ran(self, now: float) -> None:
        self._posted_at = None
        self._ran_at = now
        self._warned = False

    def stalled(self, now: float) -> float | None:
        at = self._posted_at
        if at is None or self._warned or now - at <= self.after:
            return None
        self._warned = True
        return now - at

    def next_at(self, now: float = 0.0) -> float:
        at = self._posted_at
        if at is None:
            return self._ran_at + self.every
        if self._warned:
            # only ran() ends this stall: look again a probe interval from now (never a time
            # already past: the clock thread would spin for the rest of the stall)
            return max(at + self.after, now) + self.every
        return at + self.after + 1e-3


def where(thread_id: int | None) -> str:
    """One line naming what the thread ``thread_id`` runs now: ``function (file:line)``."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return "nothing known"
    code = frame.f_code
    return f"{code.co_name} ({code.co_filename}:{frame.f_lineno})"


_clocks: weakref.WeakSet[Clock] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for c in list(_clocks):
        c.forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class Clock:
    """The timer thread of one connection: alarms posted to its I/O loop, and the stall watch.

    :meth:`at` may be called from any thread and never waits beyond taking one lock;
    the alarm's ``fn`` runs on the I/O thread (it must not block). The thread starts with
    the first alarm; :meth:`stop` ends it (idempotent).

    Args:
        name: the thread's name.
        loop: the connection's asyncio loop (alarms are posted there).
        loop_thread: the I/O thread (whose frame a stall warning names).
        report: how a stall warning reaches the user (the connection's ``report_error``);
            None: the ``jssync`` logger only.
        clock: the monotonic clock (tests inject one).
    """

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, loop_thread: threading.Thread,
                 report: Callable[[BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.report = report
        self.forked = False
        self._loop = loop
        self._loop_thread = loop_thread
        self._now = clock
        self._cond = threading.Condition(threading.Lock())
        self._heap = AlarmHeap()
        self._stall = StallWatch(now=clock())
        self._thread: threading.Thread | None = None
        self._stopped = False
        _clocks.add(self)

    def __repr__(self) -> str:
        return f"<Clock {self.name} alarms={len(self._heap)} running={self.running}>"

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def now(self) -> float:
        """The clock's time (monotonic seconds; the time :meth:`at` takes)."""
        return self._now()

    def at(self, when: float, fn: Callable[[], None]) -> Alarm:
        """Call ``fn()`` on the I/O thread at ``when`` (the clock's time); cancel the result to drop it.

        Any thread; starts the timer thread on first use. After :meth:`stop` (or in a forked
        child) the alarm is returned already cancelled and never fires.
        """
        if self.forked or self._stopped:
            alarm = Alarm(when, fn, None)
            alarm.cancelled = True
            return alarm
        with self._cond:
            if self._stopped:
                alarm = Alarm(when, fn, None)
                alarm.cancelled = True
                return alarm
            first = self._heap.next_at()
            alarm = self._heap.push(when, fn)
            if self._thread is None:
                self._start()
            elif first is None or when < first:
                self._cond.notify()
        return alarm

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the timer thread and drop every alarm (idempotent, any thread; a no-op in a forked child)."""
        if self.forked:
            self._stopped = True
            return
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    # -- the timer thread -------------------------------------------------------------------

    def _start(self) -> None:  # under the lock
        self._stall.ran(self._now())
        t = threading.Thread(target=self._run, name=self.name, daemon=True)
        t.start()  # (set only once started: a failed start is tried again by the next alarm)
        self._thread = t

    def _run(self) -> None:
        cond, heap, stall, now_fn = self._cond, self._heap, self._stall, self._now
        while True:
            probe = False
            with cond:
                if self._stopped:
                    return
                now = now_fn()
                due = heap.pop_due(now)
                if stall.probe_due(now):
                    stall.posted(now)
                    probe = True
                stalled = stall.stalled(now)
                if not due and not probe and stalled is None:
                    nxt = heap.next_at()
                    look = stall.next_at(now)
                    wake = look if nxt is None else min(nxt, look)
                    cond.wait(min(max(wake - now, 0.0), _SLICE))
                    continue
            try:
                for alarm in due:
                    self._loop.call_soon_threadsafe(self._fire, alarm)
                if probe:
                    self._loop.call_soon_threadsafe(self._probed)
            except RuntimeError:  # the loop is closed: the connection is gone
                return
            except Exception:  # noqa: BLE001 - one failure must not end every timer of the connection
                log.exception("the timer thread %s failed to post its alarms", self.name)
            if stalled is not None:
                self._warn(stalled)

    def _fire(self, alarm: Alarm) -> None:  # on the I/O thread
        if alarm.cancelled:
            return
        try:
            alarm.fn()
        except Exception:  # noqa: BLE001 - the loop must go on
            log.exception("timer callback %r raised", alarm.fn)

    def _probed(self) -> None:  # on the I/O thread
        with self._cond:
            self._stall.ran(self._now())

    def _warn(self, seconds: float) -> None:
        t = self._loop_thread
        exc = LoopStalledError(t.name, seconds, where(t.ident))
        try:
            if self.report is not None:
                self.report(exc)
            else:
                log.warning("%s: %s", type(exc).__name__, exc)
        except Exception:  # noqa: BLE001 - the clock must go on
            log.exception("reporting a stalled I/O loop failed")
