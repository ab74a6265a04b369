"""The connection's timer thread (core/clock.py): its pure heap and stall watch, then the thread
itself driving a real asyncio loop on a thread (no server: the clock only posts to a loop)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from jssync import LoopStalledError
from jssync.core.clock import AlarmHeap, Clock, StallWatch, where
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(30)


# -- AlarmHeap: pure ----------------------------------------------------------------------------


def test_alarms_come_due_earliest_first_and_only_when_due() -> None:
    heap = AlarmHeap()
    fired: list[str] = []
    for at, name in [(3.0, "c"), (1.0, "a"), (2.0, "b")]:
        heap.push(at, lambda n=name: fired.append(n))  # type: ignore[misc]
    assert heap.next_at() == 1.0
    assert heap.pop_due(0.5) == []
    for alarm in heap.pop_due(2.0):
        alarm.fn()
    assert fired == ["a", "b"]
    assert heap.next_at() == 3.0 and len(heap) == 1


def test_a_cancelled_alarm_never_comes_due_and_is_not_counted() -> None:
    heap = AlarmHeap()
    a = heap.push(1.0, lambda: None)
    b = heap.push(2.0, lambda: None)
    a.cancel()
    a.cancel()  # idempotent
    assert len(heap) == 1
    assert heap.next_at() == 2.0
    assert heap.pop_due(5.0) == [b]
    assert len(heap) == 0 and heap.next_at() is None
    b.cancel()  # after it came due: no effect on the heap's count
    assert heap.cancelled == 0


def test_many_rearmed_alarms_do_not_grow_the_heap_without_bound() -> None:
    heap = AlarmHeap()
    alarm = heap.push(100.0, lambda: None)
    for i in range(10_000):  # one timer re-armed over and over (each re-arm cancels the last)
        alarm.cancel()
        alarm = heap.push(100.0 + i, lambda: None)
    assert len(heap) == 1
    assert len(heap._heap) < 200


# -- StallWatch: pure ----------------------------------------------------------------------------


def test_a_stall_is_reported_once_with_its_length_and_again_after_the_loop_ran() -> None:
    w = StallWatch(after=1.0, every=0.25, now=0.0)
    assert not w.probe_due(0.1)
    assert w.next_at() == 0.25
    assert w.probe_due(0.25)
    w.posted(0.25)
    assert not w.probe_due(0.5)  # one probe at a time
    assert w.stalled(1.2) is None  # 0.95 s: not yet
    assert w.next_at() == pytest.approx(1.251)
    assert w.stalled(1.3) == pytest.approx(1.05)
    assert w.stalled(1.5) is None and w.stalled(9.0) is None  # once per stall
    w.ran(9.1)
    assert w.stalled(9.2) is None
    assert w.probe_due(9.35)
    w.posted(9.35)
    assert w.stalled(10.4) == pytest.approx(1.05)  # a new stall: reported again


def test_after_a_stall_was_reported_the_next_look_is_always_ahead_of_now() -> None:
    # (the clock thread waits until next_at(now): a time already past made it spin for the
    # rest of a long stall)
    w = StallWatch(after=1.0, every=0.25, now=0.0)
    w.posted(0.25)
    assert w.stalled(1.3) is not None
    for now in (1.3, 1.6, 5.0, 60.0):
        assert w.next_at(now) > now
        assert w.stalled(now) is None


def test_a_cancelled_alarm_drops_its_callback_and_never_fires() -> None:
    heap = AlarmHeap()
    held = []
    alarm = heap.push(1.0, lambda: held.append(1))
    alarm.cancel()
    alarm.cancel()  # idempotent
    assert heap.pop_due(2.0) == [] and len(heap) == 0
    alarm.fn()  # the dropped callback: nothing of the consumer's is called or kept
    assert held == []


def test_a_loop_that_answers_each_probe_in_time_is_never_reported() -> None:
    w = StallWatch(after=1.0, every=0.25, now=0.0)
    now = 0.0
    for _ in range(100):
        now = w.next_at()
        assert w.probe_due(now)
        w.posted(now)
        assert w.stalled(now + 0.9) is None
        w.ran(now + 0.9)


def test_where_names_a_threads_function_and_line() -> None:
    started, release = threading.Event(), threading.Event()

    def parked_here() -> None:
        started.set()
        release.wait(10)

    t = threading.Thread(target=parked_here, name="test-parked")
    t.start()
    try:
        assert started.wait(5 * FACTOR)
        # the innermost Python frame: threading's wait, with its file and line
        assert "wait (" in where(t.ident) and "threading.py:" in where(t.ident)
    finally:
        release.set()
        t.join(5)
    assert where(None) == "nothing known"


# -- Clock: the thread --------------------------------------------------------------------------


class _Loop:
    """A real asyncio loop on its own thread (what IOLoop is, without a connection)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-io", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def io() -> Iterator[_Loop]:
    lp = _Loop()
    yield lp
    lp.close()


def test_alarms_run_on_the_loop_thread_in_deadline_order_from_one_timer_thread(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    ran: list[tuple[str, int]] = []
    done = threading.Event()
    assert not clock.running  # started by the first alarm
    try:
        now = clock.now()
        threads_before = threading.active_count()
        for delay, name in [(0.15, "c"), (0.05, "a"), (0.10, "b")]:
            clock.at(now + delay, lambda n=name: ran.append((n, threading.get_ident())))  # type: ignore[misc]
        clock.at(now + 0.2, done.set)
        assert threading.active_count() == threads_before + 1  # one thread, not one per alarm
        assert done.wait(5 * FACTOR)
        assert [n for n, _ in ran] == ["a", "b", "c"]
        assert {t for _, t in ran} == {io.thread.ident}
        assert clock.running
        assert [t.name for t in threading.enumerate()].count("test-clock") == 1
    finally:
        clock.stop()
    assert not clock.running


def test_an_alarm_armed_earlier_than_the_one_waited_for_wakes_the_thread(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    early = threading.Event()
    try:
        clock.at(clock.now() + 60, lambda: None)  # the thread now waits for this one
        t0 = time.monotonic()
        clock.at(clock.now() + 0.05, early.set)
        assert early.wait(5 * FACTOR)
        assert time.monotonic() - t0 < 0.4 * FACTOR  # not the 0.5 s slice: the notify woke it
    finally:
        clock.stop()


def test_a_cancelled_alarm_does_not_run(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    ran: list[str] = []
    after = threading.Event()
    try:
        a = clock.at(clock.now() + 0.05, lambda: ran.append("cancelled"))
        clock.at(clock.now() + 0.1, after.set)
        a.cancel()
        assert after.wait(5 * FACTOR)
        assert ran == []
    finally:
        clock.stop()


def test_an_alarm_that_raises_is_logged_and_the_clock_goes_on(io: _Loop, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    later = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    try:
        clock.at(clock.now() + 0.02, boom)
        clock.at(clock.now() + 0.05, later.set)
        assert later.wait(5 * FACTOR)
        assert any("raised" in r.getMessage() and r.exc_info for r in caplog.records)
    finally:
        clock.stop()


def test_after_stop_alarms_never_fire_and_no_thread_starts(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    clock.stop()
    clock.stop()  # idempotent
    alarm = clock.at(clock.now(), lambda: None)
    assert alarm.cancelled and not clock.running


def test_stop_ends_the_thread_at_once_with_alarms_pending(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    clock.at(clock.now() + 3600, lambda: None)
    t0 = time.monotonic()
    clock.stop()
    assert not clock.running
    assert time.monotonic() - t0 < 1 * FACTOR


def test_a_blocked_loop_is_reported_once_naming_what_it_runs(io: _Loop) -> None:
    reports: list[BaseException] = []
    clock = Clock("test-clock", io.loop, io.thread, report=reports.append)
    try:
        clock.at(clock.now() + 3600, lambda: None)  # starts the thread
        io.loop.call_soon_threadsafe(_block_the_loop, 1.5 * FACTOR)
        wait_for(lambda: reports, 10, interval=0.02, what="the clock's report")
        assert len(reports) == 1, reports
        err = reports[0]
        assert isinstance(err, LoopStalledError)
        assert err.seconds > 1.0
        assert "_block_the_loop" in err.running and "test_clock.py" in err.running
        assert "test-io" in str(err)
        # the loop runs again: no second report for the same stall
        ok = threading.Event()
        io.loop.call_soon_threadsafe(ok.set)
        assert ok.wait(5 * FACTOR)
        time.sleep(0.5)  # nothing happens: the clock probes every 0.25 s and sees the loop alive (no second report)
        assert len(reports) == 1
    finally:
        clock.stop()


def test_without_a_report_hook_a_stall_goes_to_the_jssync_logger(io: _Loop, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    caplog.set_level(logging.WARNING, logger="jssync")
    try:
        clock.at(clock.now() + 3600, lambda: None)
        io.loop.call_soon_threadsafe(_block_the_loop, 1.5 * FACTOR)
        wait_for(lambda: any("has not run" in r.getMessage() for r in caplog.records), 10, interval=0.02,
                 what="the stall's log line")
        assert [r.name for r in caplog.records if "has not run" in r.getMessage()] == ["jssync"]
    finally:
        clock.stop()


def _block_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # behaviour: a callback that blocks the I/O loop


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_arms_nothing_on_the_parents_clock(io: _Loop) -> None:
    clock = Clock("test-clock", io.loop, io.thread)
    try:
        clock.at(clock.now() + 3600, lambda: None)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the parent's clock must not start a thread nor take its lock
            try:
                a = clock.at(clock.now(), lambda: None)
                ok = a.cancelled and not clock.running and clock.forked
                clock.stop()
                os.write(w, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        assert got == b"1"
        assert clock.running and not clock.forked  # the parent's clock goes on
    finally:
        clock.stop()
