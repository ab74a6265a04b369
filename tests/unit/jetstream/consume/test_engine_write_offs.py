"""PullEngine's accounting when pulls are written off and the runner cannot move to a new
inbox: the statuses of the written-off pulls then come on the inbox in use, where the
engine cannot tell them from the live pulls' statuses (ADR-37 "Buffering messages": the
aggregate message and byte count is maintained)."""

from __future__ import annotations

import pytest

from jssync.jetstream.consume.engine import PullEngine, SendPull, SwapInbox, Warn

pytestmark = pytest.mark.timeout(60)

HB = 1.0


def _pulls(acts: tuple[object, ...]) -> list[SendPull]:
    return [a for a in acts if isinstance(a, SendPull)]


def test_a_written_off_pulls_status_after_a_failed_inbox_swap_is_not_counted_twice() -> None:
    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB)
    assert _pulls(e.start(0.0)) == [SendPull(10, 0, 30.0, HB)]  # pull A: 10
    acts = e.tick(2.5)  # 2 x idle_heartbeat of silence: A written off
    assert SwapInbox() in acts and any(isinstance(a, Warn) for a in acts)
    assert _pulls(e.inbox_swapped(False)) == [SendPull(10, 0, 30.0, HB)]  # pull B: 10, same inbox
    # A was alive after all: its 408 (10 pending) comes on the inbox B uses too; it may be
    # A's (written off already) or B's: no new pull while B may still be open
    assert _pulls(e.status(408, "Request Timeout", 10, 0, 2.6)) == []
    assert e.pending_messages <= 10
    for _ in range(10):  # B delivers
        e.message()
    due = [e.taken() for _ in range(10)]
    assert due[-1] is True
    asked = _pulls(e.refill())
    assert asked == [SendPull(10, 0, 30.0, HB)], asked  # never more than max_messages outstanding


def test_bytes_a_written_off_pulls_status_after_a_failed_inbox_swap_is_not_counted_twice() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB)
    assert [p.max_bytes for p in _pulls(e.start(0.0))] == [100]
    assert SwapInbox() in e.tick(2.5)
    assert [p.max_bytes for p in _pulls(e.inbox_swapped(False))] == [100]
    assert _pulls(e.status(408, "Request Timeout", 1_000_000, 100, 2.6)) == []
    assert e.pending_bytes <= 100


def test_a_late_message_during_the_swap_leaves_exactly_the_rest_to_its_pulls_statuses() -> None:
    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB)
    e.start(0.0)
    assert SwapInbox() in e.tick(2.5)  # pull A (10) written off
    assert e.message(written_off=True) == ()  # A was alive: one message after all
    assert _pulls(e.inbox_swapped(False)) == [SendPull(9, 0, 30.0, HB)]  # B: 9 (one is buffered)
    assert _pulls(e.status(408, "Request Timeout", 9, 0, 2.6)) == []  # A's end: its 9 counted off already
    # B's end: its 9 count; pending = the one buffered, a full top-up
    assert _pulls(e.status(408, "Request Timeout", 9, 0, 2.7)) == [SendPull(9, 0, 30.0, HB)]


def test_the_written_off_pulls_are_forgotten_once_they_expired() -> None:
    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB)
    e.start(0.0)
    assert SwapInbox() in e.tick(2.5)
    assert _pulls(e.inbox_swapped(False)) == [SendPull(10, 0, 30.0, HB)]  # B
    e.tick(2.6)
    for t in (20.0, 34.0):  # heartbeats keep B alive; A expired on the server by now
        e.status(100, "Idle Heartbeat", 0, 0, t)
        e.tick(t)
    # a status now is B's: its 10 pending count, a new pull goes out
    assert _pulls(e.status(408, "Request Timeout", 10, 0, 34.1)) == [SendPull(10, 0, 30.0, HB)]
