"""The one retry wait (base/backoff.py): Backoff's formula, its deadline-bounded sleep, and retry()."""

from __future__ import annotations

import pytest

import jssync
from jssync.base.backoff import Backoff, retry
from jssync.base.deadline import Deadline

pytestmark = pytest.mark.timeout(10)


def test_the_wait_doubles_from_its_base_up_to_its_cap() -> None:
    b = Backoff(0.1, 1.6)
    assert [b.delay(n) for n in range(7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6])
    assert b.delay(10_000) == 1.6  # no overflow however many failures
    assert b.delay(-1) == 0.1


def test_a_constant_jittered_wait_spans_its_range() -> None:
    draws = iter([0.0, 0.5, 0.999999])
    b = Backoff(0.5, 0.5, factor=1.0, jitter=0.98, rng=lambda: next(draws))
    got = [b.delay(n) for n in (0, 3, 9)]
    assert got == pytest.approx([0.5, 0.255, 0.01], abs=1e-5)  # 10 to 500 ms, whatever the failures


def test_bad_backoff_arguments_are_refused_naming_them() -> None:
    for kw, what in [({"base": 0, "cap": 1}, "base"), ({"base": 1, "cap": 0.5}, "cap"),
                     ({"base": 1, "cap": 2, "factor": 0.5}, "factor"),
                     ({"base": 1, "cap": 2, "jitter": 1.5}, "jitter"), ({"base": True, "cap": 2}, "base"),
                     ({"base": float("nan"), "cap": 2}, "base")]:
        with pytest.raises(jssync.ValidationError, match=what):
            Backoff(**kw)  # type: ignore[arg-type]


def test_the_sleep_is_sliced_and_never_passes_the_deadline() -> None:
    slept: list[float] = []
    Backoff(0.35, 0.35).sleep(0, None, sleep=lambda s: slept.append(s) or _advance(s))
    assert all(s <= 0.1 for s in slept) and len(slept) >= 4
    slept.clear()
    Backoff(5.0, 5.0).sleep(0, Deadline(0.0), sleep=slept.append)
    assert slept == []  # the deadline had passed: no wait


def _advance(s: float) -> None:
    import time

    time.sleep(s)  # behaviour: the fake sleep still lets the clock move (the wait ends by time)


def test_retry_returns_the_first_success_and_waits_between_failures() -> None:
    calls: list[int] = []
    waits: list[float] = []

    def attempt(failures: int) -> str:
        calls.append(failures)
        if failures < 2:
            raise jssync.TimeoutError("not yet")
        return "ok"

    assert retry(attempt, Backoff(0.001, 0.001), Deadline(5), worth_retrying=lambda e: True,
                 sleep=waits.append) == "ok"
    assert calls == [0, 1, 2] and waits


def test_retry_raises_what_is_not_worth_retrying_at_once() -> None:
    calls = []

    def attempt(failures: int) -> None:
        calls.append(failures)
        raise jssync.ValidationError("bad")

    with pytest.raises(jssync.ValidationError):
        retry(attempt, Backoff(0.001, 0.001), Deadline(5), worth_retrying=lambda e: False)
    assert calls == [0]


def test_retry_gives_up_after_max_attempts_with_give_ups_error_from_the_last() -> None:
    retried: list[Exception] = []

    def attempt(failures: int) -> None:
        raise jssync.TimeoutError(f"try {failures}")

    with pytest.raises(jssync.ConnectionClosedError, match="gave up") as info:
        retry(attempt, Backoff(0.001, 0.001), Deadline(None), worth_retrying=lambda e: True, max_attempts=3,
              give_up=lambda last: jssync.ConnectionClosedError(f"gave up: {last}"), on_retry=retried.append)
    assert str(info.value.__cause__) == "try 2"
    assert [str(e) for e in retried] == ["try 0", "try 1"]  # no retry announced after the last


def test_retry_gives_up_at_the_deadline_raising_the_last_error() -> None:
    def attempt(failures: int) -> None:
        raise jssync.TimeoutError("still not")

    with pytest.raises(jssync.TimeoutError, match="still not"):
        retry(attempt, Backoff(0.01, 0.05), Deadline(0.2), worth_retrying=lambda e: True)
