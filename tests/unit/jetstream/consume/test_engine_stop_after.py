"""PullEngine with ``stop_after`` (``consume(stop_after=N)``, nats.go's StopAfter): pulls never ask
for more than what is left of N; ``reached`` once N were taken. Pure: events in, actions out."""

from __future__ import annotations

import pytest

from jssync import ValidationError
from jssync.jetstream.consume.engine import PullEngine, SendPull
from jssync.jetstream.consume.options import ConsumeOptions

pytestmark = pytest.mark.timeout(10)


def pulls(acts) -> list[SendPull]:
    return [a for a in acts if isinstance(a, SendPull)]


def engine(**kw) -> PullEngine:
    kw.setdefault("max_messages", 10)
    return PullEngine(expires=30.0, heartbeat=15.0, **kw)


def test_the_first_pull_asks_only_for_n_when_n_is_smaller_than_the_batch():
    eng = engine(stop_after=3)
    (pull,) = pulls(eng.start(0.0))
    assert pull.batch == 3
    for _ in range(3):
        eng.message(10)
    assert not eng.reached
    eng.taken()
    eng.taken()
    assert pulls(eng.refill()) == []  # all 3 asked for already
    assert not eng.reached
    eng.taken()
    assert eng.reached
    assert pulls(eng.refill()) == []


def test_an_expired_pull_is_asked_again_only_for_what_is_left():
    eng = engine(stop_after=5, max_messages=4, threshold_messages=2)
    (pull,) = pulls(eng.start(0.0))
    assert pull.batch == 4
    eng.message()
    eng.message()
    eng.taken()
    eng.taken()  # pending 2 = the threshold: a pull for what is left of 5 (1)
    (pull,) = pulls(eng.refill())
    assert pull.batch == 1
    # the first pull expires with its 2 undelivered: 2 more may be asked for
    (pull,) = pulls(eng.status(408, "Request Timeout", pending_msgs=2))
    assert pull.batch == 2
    assert pulls(eng.refill()) == []


def test_bytes_mode_pulls_ask_for_no_more_messages_than_are_left():
    eng = engine(max_messages=1_000_000, max_bytes=1000, stop_after=2)
    (pull,) = pulls(eng.start(0.0))
    assert (pull.batch, pull.max_bytes) == (2, 1000)


def test_without_stop_after_nothing_changes():
    eng = engine()
    (pull,) = pulls(eng.start(0.0))
    assert pull.batch == 10
    for _ in range(10):
        eng.message()
        eng.taken()
    assert not eng.reached


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_stop_after_must_be_an_int_of_at_least_one(bad):
    with pytest.raises(ValidationError, match="stop_after"):
        ConsumeOptions(stop_after=bad)


def test_stop_after_none_is_no_end():
    assert ConsumeOptions().stop_after == 0 and ConsumeOptions(stop_after=7).stop_after == 7


def test_messages_past_n_from_a_written_off_pull_are_nakked_once_n_were_taken():
    """The one way more than N arrive: a pull written off (e.g. missed heartbeats) whose messages
    come after all, on top of the pull that replaced it. Once N are taken the runner stops:
    the buffer is nak'ed, and what still arrives too."""
    from jssync.jetstream.consume.actions import Nak, NakBuffered, SwapInbox

    eng = engine(stop_after=2)
    (pull,) = pulls(eng.start(0.0))
    assert pull.batch == 2
    assert any(isinstance(a, SwapInbox) for a in eng.write_off())
    (again,) = pulls(eng.inbox_swapped(True))
    assert again.batch == 2  # the written-off 2 no longer count
    for _ in range(2):
        eng.message(written_off=True)  # the old pull's messages after all
    eng.message()
    assert eng.buffered == 3
    eng.taken()
    eng.taken()
    assert eng.reached
    assert pulls(eng.refill()) == []
    acts = eng.stop()
    assert any(isinstance(a, NakBuffered) for a in acts)
    assert any(isinstance(a, Nak) for a in eng.message())
