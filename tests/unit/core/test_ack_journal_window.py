"""The ack journal's window and cap (pure: the time is passed in, the queue is a list)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from jssync.core import ackjournal
from jssync.core.ackjournal import BUCKET, MAX_KEPT, WINDOW, AckJournal

pytestmark = pytest.mark.timeout(30)


def _journal(start: float = 100.0) -> tuple[AckJournal, SimpleNamespace]:
    out = SimpleNamespace(acks=[], q=[])
    j = AckJournal(out, lambda: False)
    j.rotate(start)
    return j, out


def _reply(n: int) -> str:
    return f"$JS.ACK.S.C.1.{n}.{n}.0.0"


def test_acks_older_than_the_window_before_the_outage_are_not_sent_again() -> None:
    j, out = _journal(0.0)
    out.acks.append(_reply(1))
    now = 0.0
    while now < WINDOW + 2 * BUCKET:  # the first ack's bucket leaves the window
        now += BUCKET
        j.rotate(now)
    out.acks.append(_reply(2))
    j.mark_down(now + 0.01)
    assert j.take() == [_reply(2)]


def test_the_acks_within_the_window_are_sent_again_once() -> None:
    j, out = _journal()
    out.acks.extend([_reply(1), (_reply(2), b"+TERM")])
    j.rotate(100.0 + BUCKET)
    out.acks.append(_reply(3))
    j.mark_down(100.0 + 2 * BUCKET)
    assert j.take() == [_reply(1), (_reply(2), b"+TERM"), _reply(3)]
    assert j.take() == []  # once


def test_acks_queued_while_the_link_is_down_are_not_kept() -> None:
    j, out = _journal()
    out.acks.append(_reply(1))
    j.mark_down(100.1)
    t = 100.1
    for n in range(2, 10):  # acks queued while down wait in the outgoing queue
        out.acks.append(_reply(n))
        t += BUCKET
        j.rotate(t)
    out.acks.append(_reply(99))
    assert j.kept <= 1 + 1
    assert j.take() == [_reply(1)]
    assert out.acks == []


def test_acks_still_in_the_outgoing_queue_at_the_disconnect_are_not_sent_twice() -> None:
    j, out = _journal()
    out.acks.extend([_reply(1), _reply(2)])
    queued = [(_reply(2), b"+ACK", "", None), ("orders.new", b"x", "", None)]
    j.mark_down(100.1, queued)
    assert j.take() == [_reply(1)]


def test_nothing_is_sent_again_without_an_outage() -> None:
    j, out = _journal()
    out.acks.append(_reply(1))
    assert j.take() == []
    assert j.kept == 1  # still kept for the next outage


def test_the_cap_drops_the_oldest_acks_of_the_current_bucket_too(caplog: pytest.LogCaptureFixture) -> None:
    j, out = _journal()
    out.acks.extend(_reply(n) for n in range(MAX_KEPT + 10))  # all in one bucket
    with caplog.at_level(logging.WARNING, logger="jssync"):
        j.rotate(100.0 + BUCKET)
        out.acks.extend(_reply(n) for n in range(MAX_KEPT + 10, MAX_KEPT + 30))
        j.rotate(100.0 + 2 * BUCKET)
    assert j.kept == MAX_KEPT
    assert j.dropped == 30
    warnings = [r for r in caplog.records if "at most" in r.getMessage()]
    assert len(warnings) == 1  # once per connection
    j.mark_down(100.0 + 2 * BUCKET + 0.01)
    todo = j.take()
    assert len(todo) == MAX_KEPT
    assert todo[0] == _reply(30) and todo[-1] == _reply(MAX_KEPT + 29)  # the oldest went


def test_the_cap_applies_at_the_disconnect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ackjournal, "MAX_KEPT", 5)
    j, out = _journal()
    out.acks.extend(_reply(n) for n in range(8))
    j.mark_down(100.1)
    assert j.take() == [_reply(n) for n in range(3, 8)]
