"""PullEngine in a priority group (ADR-42): a stop leaves no pull waiting, and (but for
pinned_client) a pull goes out as messages arrive, so one is always waiting on the server
while the application works through its buffer."""

from __future__ import annotations

import pytest

from jssync.jetstream.consume.engine import PullEngine, SendPull, Unsubscribe

pytestmark = pytest.mark.timeout(60)

HB = 1.0


def _pulls(acts: tuple[object, ...]) -> list[SendPull]:
    return [a for a in acts if isinstance(a, SendPull)]


def test_a_grouped_stop_unsubscribes_at_once_a_plain_one_lets_the_pulls_finish() -> None:
    for grouped, wait in ((True, False), (False, True)):
        e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB, grouped=grouped)
        e.start(0.0)
        acts = e.stop()
        assert [a for a in acts if isinstance(a, Unsubscribe)] == [Unsubscribe(wait=wait)]


def test_early_pulls_on_receipt_and_buffer_plus_requested_stays_within_twice_max_messages() -> None:
    e = PullEngine(max_messages=5, expires=30.0, heartbeat=HB, grouped=True, early=True)
    assert _pulls(e.start(0.0)) == [SendPull(5, 0, 30.0, HB)]
    sent = 5
    for _ in range(3):
        assert e.message() == ()
    assert e.due()  # in flight 2 <= threshold 2, nothing taken yet
    assert _pulls(e.refill()) == [SendPull(3, 0, 30.0, HB)]
    sent += 3
    assert not e.due()
    for _ in range(20):  # the application takes nothing; the server delivers all it was asked for
        if sent - e.rx == 0:
            break
        e.message()
        if e.due():
            sent += sum(p.batch for p in _pulls(e.refill()))
    # 8 buffered, nothing in flight: 3 past the limit is above the threshold, nothing more is
    # requested (buffer + requested never more than 2 x max_messages)
    assert e.rx == sent == 8
    assert not e.due() and _pulls(e.refill()) == []
    assert e.taken() is True  # 7 buffered: 2 past the limit = the threshold
    assert _pulls(e.refill()) == [SendPull(3, 0, 30.0, HB)]
    assert e.rx - e.taken_n + e.in_flight == 10


def test_early_bytes_mode() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB, grouped=True, early=True)
    assert [p.max_bytes for p in _pulls(e.start(0.0))] == [100]
    for _ in range(6):
        e.message(10)
    assert e.due()  # 40 bytes in flight <= 50
    assert [p.max_bytes for p in _pulls(e.refill())] == [60]


def test_not_early_waits_for_the_application() -> None:
    e = PullEngine(max_messages=5, expires=30.0, heartbeat=HB)
    e.start(0.0)
    for _ in range(5):
        e.message()
    assert not e.due() and _pulls(e.refill()) == []
