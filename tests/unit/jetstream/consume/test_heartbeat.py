"""HeartbeatMonitor (jssync/jetstream/consume/heartbeat.py): pure, time is an argument.

ADR-15 (heartbeats): "a client should detect missed heartbeats"; ADR-37: a consumer that
hears nothing for 2 x the idle heartbeat reports it. The monitor says when: one miss per
silent interval, never a storm of them.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jssync import ValidationError
from jssync.jetstream.consume.heartbeat import HeartbeatMonitor

pytestmark = pytest.mark.timeout(30)

EXAMPLES = int(os.environ.get("JSSYNC_MODEL_EXAMPLES", "200"))

# (events, expected results of the checks in order); interval 1.0, start at 0
# event: ("seen", t) | ("check", t) | ("pause", t) | ("resume", t)
CASES = [
    ("silence for less than an interval is no miss", [("check", 0.5), ("check", 0.99)], [False, False]),
    ("a whole silent interval is one miss", [("check", 1.0)], [True]),
    ("a miss is reported once, not on every check", [("check", 1.0), ("check", 1.0), ("check", 1.5)],
     [True, False, False]),
    ("each further silent interval is one more miss", [("check", 1.0), ("check", 2.0), ("check", 3.1)],
     [True, True, True]),
    ("a late check still reports one miss", [("check", 10.0), ("check", 10.5)], [True, False]),
    ("traffic starts the interval again", [("seen", 0.8), ("check", 1.5), ("check", 1.8)], [False, True]),
    ("no misses while paused", [("pause", 0.2), ("check", 5.0), ("check", 50.0)], [False, False]),
    ("after resume a full interval is needed", [("pause", 0.2), ("resume", 5.0), ("check", 5.9), ("check", 6.0)],
     [False, True]),
    ("a timer firing a hair early counts", [("check", 0.9995)], [True]),
]


@pytest.mark.parametrize(("events", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_misses_follow_the_table(events: list[tuple[str, float]], expected: list[bool]) -> None:
    mon = HeartbeatMonitor(1.0, 0.0)
    got = []
    for kind, t in events:
        if kind == "seen":
            mon.seen(t)
        elif kind == "pause":
            mon.paused(t)
        elif kind == "resume":
            mon.resumed(t)
        else:
            got.append(mon.check(t))
    assert got == expected
    assert mon.misses == sum(expected)


def test_next_deadline_is_when_the_timer_must_fire() -> None:
    mon = HeartbeatMonitor(2.0, 10.0)
    assert mon.next_deadline() == 12.0
    mon.seen(11.0)
    assert mon.next_deadline() == 13.0
    assert mon.check(13.0)
    assert mon.next_deadline() == 15.0
    mon.paused(14.0)
    assert mon.next_deadline() is None
    mon.resumed(20.0)
    assert mon.next_deadline() == 22.0


@pytest.mark.parametrize("bad", [0, -1.0, "1", None, True, float("nan")])
def test_a_bad_interval_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(ValidationError, match="interval"):
        HeartbeatMonitor(bad, 0.0)  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES, deadline=None)
@given(interval=st.floats(0.01, 100.0),
       steps=st.lists(st.tuples(st.sampled_from(["seen", "check"]), st.floats(0.0, 50.0)), max_size=60))
def test_at_most_one_miss_per_silent_interval(interval: float, steps: list[tuple[str, float]]) -> None:
    """Checked at any times, the misses reported are never closer than one interval, and a
    check one interval after the last traffic or miss always reports one."""
    mon = HeartbeatMonitor(interval, 0.0)
    now = 0.0
    last = 0.0  # last traffic or reported miss
    for kind, dt in steps:
        now += dt
        if kind == "seen":
            mon.seen(now)
            last = now
            continue
        missed = mon.check(now)
        assert missed == (now - last >= interval - 1e-3)
        if missed:
            last = now
        deadline = mon.next_deadline()
        assert deadline is not None and deadline == pytest.approx(last + interval)
