"""PullEngine after a pull was refused or lost on the server's side (503, 409 Leadership
Change): the pull is written off and a new one goes out after the pause (or at once), not
only after the heartbeat check notices (2 x idle_heartbeat later)."""

from __future__ import annotations

import pytest

from jssync.jetstream.consume.engine import CheckConsumer, PullEngine, SendPull

pytestmark = pytest.mark.timeout(60)

HB = 1.0


def _pulls(acts: tuple[object, ...]) -> list[SendPull]:
    return [a for a in acts if isinstance(a, SendPull)]


def test_after_a_503_the_pull_goes_out_again_once_the_pause_passed() -> None:
    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB)
    e.start(0.0)
    acts = e.status(503, "", 0, 0, 1.0)  # no Nats-Pending headers: nobody got the pull
    assert CheckConsumer() in acts and _pulls(acts) == []
    assert _pulls(e.tick(1.2)) == []  # within min(1 s, idle_heartbeat / 2)
    assert _pulls(e.tick(1.5)) == [SendPull(10, 0, 30.0, HB)]


def test_after_a_leadership_change_the_pull_goes_out_again_at_once() -> None:
    e = PullEngine(max_messages=10, expires=30.0, heartbeat=HB)
    e.start(0.0)
    for _ in range(3):
        e.message()
    acts = e.status(409, "Leadership Change", 0, 0, 1.0)
    assert _pulls(acts) == [SendPull(7, 0, 30.0, HB)]  # 3 buffered
