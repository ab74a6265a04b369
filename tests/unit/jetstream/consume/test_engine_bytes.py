"""PullEngine in bytes mode (``max_bytes``): the threshold is met exactly, not one byte late;
a write-off (a missed heartbeat, a reconnect) is followed by a replacement pull."""

from __future__ import annotations

import pytest

from jssync.jetstream.consume.engine import PullEngine, SendPull, SwapInbox

pytestmark = pytest.mark.timeout(60)

HB = 1.0


def _bytes(acts: tuple[object, ...]) -> list[int]:
    return [a.max_bytes for a in acts if isinstance(a, SendPull)]


def test_a_pull_goes_out_when_pending_bytes_fall_exactly_to_the_threshold() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB)
    assert _bytes(e.start(0.0)) == [100]
    for _ in range(10):
        e.message(10)
    for _ in range(4):
        assert e.taken(1, 10) is False  # 100 -> 60 pending bytes, above 50
    assert e.taken(1, 10) is True  # 50 = threshold_bytes
    assert _bytes(e.refill()) == [50]
    assert _bytes(e.refill()) == []


def test_bytes_mode_a_missed_heartbeat_and_a_reconnect_send_a_replacement_pull() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB)
    e.start(0.0)
    acts = e.tick(2.05)  # the pull is lost: 2 x idle_heartbeat of silence
    assert SwapInbox() in acts
    assert _bytes(e.inbox_swapped(True)) == [100]
    e.disconnected(3.0)
    assert _bytes(e.reconnected(4.0)) == [] and e.resetting  # the old one may be alive: a new inbox first
    assert _bytes(e.inbox_swapped(True)) == [100]


def test_a_pull_never_asks_for_fewer_bytes_than_the_biggest_message_seen() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, threshold_bytes=90, expires=30.0, heartbeat=HB)
    e.start(0.0)
    e.message(70)
    e.message(20)
    e.status(408, "Request Timeout", 999_998, 10, 0.5)  # the pull ended: 10 bytes never came
    assert e.taken(1, 20) is True  # 70 pending <= 90 ...
    assert _bytes(e.refill()) == []  # ... but 30 bytes could not take a 70-byte message: wait
    assert e.taken(1, 70) is True
    assert _bytes(e.refill()) == [100]


def test_409_message_size_on_a_top_up_asks_for_more_next_time_not_the_same() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB)
    e.start(0.0)
    e.message(50)
    e.message(50)  # the first pull is filled
    assert e.taken(1, 50) is True
    assert _bytes(e.refill()) == [50]
    # the next message is bigger than 50: the top-up got nothing
    assert _bytes(e.status(409, "Message Size Exceeds MaxBytes", 1_000_000, 50, 1.0)) == []
    assert _bytes(e.tick(1.1)) == []  # not the same 50 again (a loop of 409s)
    assert e.taken(1, 50) is True
    assert _bytes(e.refill()) == [100]


def test_a_skipped_message_takes_its_place_in_a_single_pull() -> None:
    """(ordered fetch) a message delivered already is not handed out but fills the batch."""
    e = PullEngine(max_messages=2, expires=30.0, heartbeat=HB, single=True)
    e.start(0.0)
    e.pull_sent(2)
    assert e.skipped(5) == ()
    assert e.message(5) != ()  # the batch is full: the fetch ends
    assert e.in_flight == 0 and e.buffered == 1


def test_an_ordered_consume_pulls_again_after_skipped_messages_and_a_recreation() -> None:
    """Messages skipped (delivered already) count neither as buffered nor as pending: after
    the consumer is made again, a pull goes out (they used to keep pending above the
    threshold for good: a stall)."""
    from jssync.jetstream.consume.engine import Recreate

    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB, recreate=True)
    e.start(0.0)
    for _ in range(6):
        e.skipped()
    assert e.buffered == 0 and e.in_flight == 4
    assert any(isinstance(a, Recreate) for a in e.gap())
    acts = e.recreated()
    assert [a.batch for a in acts if isinstance(a, SendPull)] == [10]


def test_a_message_too_big_for_max_bytes_is_tried_again_every_half_heartbeat() -> None:
    e = PullEngine(max_messages=1_000_000, max_bytes=100, expires=30.0, heartbeat=HB)
    e.start(0.0)
    e.status(409, "Message Size Exceeds MaxBytes", 1_000_000, 100, 0.05)
    assert e.hold
    asked = [_bytes(e.tick(0.1 * i)) for i in range(1, 6)]
    assert asked == [[], [], [], [], [100]]  # the 5th tick (idle_heartbeat / 2): once more, not a loop
    assert not e.hold
