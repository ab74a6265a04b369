"""The one retry wait: :class:`Backoff` (how long before the next attempt) and :func:`retry`.

Pure apart from the sleep: the random source and the sleep are passed in (tests inject
them). Every wait is bounded by the caller's :class:`~jssync.base.deadline.Deadline` and
sleeps in slices of at most 0.1 s, so Ctrl-C gets through.

::

    Backoff(base, cap, factor=2.0, jitter=0.0)
      delay(failures) ... min(cap, base * factor ** failures), less a random share of up to
                          ``jitter`` of it (jitter 0: exactly that; 0.98 with base = cap = 0.5:
                          a uniform wait of 10-500 ms)
      sleep(failures, deadline) .. wait delay(failures), never past ``deadline``
    sleep_for(seconds, deadline)  a plain wait in the same slices (a poll's interval)
    retry(attempt, backoff, deadline, worth_retrying=..., max_attempts=..., give_up=...)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from .deadline import Deadline
from .errors import ValidationError

__all__ = ["Backoff", "retry", "sleep_for"]

T = TypeVar("T")

#: the longest one slice of a retry wait (Ctrl-C reaches the caller within it)
_SLICE = 0.1


def _number(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise ValidationError(f"{what} must be a number, got {v!r}")
    return float(v)


class Backoff:
    """How long to wait after a number of failed attempts: exponential, capped, optionally jittered.

    Args:
        base: the wait after the first failure (``delay(0)``), seconds > 0.
        cap: the longest wait, seconds >= ``base``.
        factor: each further failure multiplies the wait by this (>= 1; 1: a constant wait).
        jitter: the share (0 to 1) of the wait that is random: the wait is drawn uniformly
            between ``(1 - jitter) * w`` and ``w``.
        rng: a random number in [0, 1) per call (tests inject one).

    Raises:
        jssync.ValidationError: an argument out of its range.
    """

    __slots__ = ("base", "cap", "factor", "jitter", "_rng")

    def __init__(self, base: float, cap: float, *, factor: float = 2.0, jitter: float = 0.0,
                 rng: Callable[[], float] = random.random) -> None:
        self.base = _number(base, "backoff base")
        self.cap = _number(cap, "backoff cap")
        self.factor = _number(factor, "backoff factor")
        self.jitter = _number(jitter, "backoff jitter")
        if not self.base > 0:
            raise ValidationError(f"backoff base must be > 0 seconds, got {base!r}")
        if not self.cap >= self.base:
            raise ValidationError(f"backoff cap must be >= its base ({base!r}), got {cap!r}")
        if not self.factor >= 1:
            raise ValidationError(f"backoff factor must be >= 1, got {factor!r}")
        if not 0 <= self.jitter <= 1:
            raise ValidationError(f"backoff jitter must be between 0 and 1, got {jitter!r}")
        self._rng = rng

    def __repr__(self) -> str:
        return f"<Backoff base={self.base} cap={self.cap} factor={self.factor} jitter={self.jitter}>"

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed attempts beyond the first (0: after the first failure)."""
        wait = self.base
        for _ in range(max(failures, 0)):
            wait *= self.factor
            if wait >= self.cap:
                break
        wait = min(wait, self.cap)
        if self.jitter:
            wait *= 1.0 - self.jitter * self._rng()
        return wait

    def sleep(self, failures: int, deadline: Deadline | None = None,
              sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait :meth:`delay` ``(failures)`` seconds, never past ``deadline``; blocks in slices of 0.1 s."""
        sleep_for(self.delay(failures), deadline, sleep)


def sleep_for(seconds: float, deadline: Deadline | None = None,
              sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait ``seconds``, never past ``deadline``; blocks in slices of 0.1 s (Ctrl-C gets through)."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        rem = None if deadline is None else deadline.remaining()
        if rem is not None:
            left = min(left, rem)
        if left <= 0:
            return
        sleep(min(left, _SLICE))


def retry(attempt: Callable[[int], T], backoff: Backoff, deadline: Deadline, *,
          worth_retrying: Callable[[Exception], bool],
          max_attempts: int | None = None,
          give_up: Callable[[Exception], BaseException] | None = None,
          on_retry: Callable[[Exception], None] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> T:
    """Call ``attempt(failures)`` until it returns, waiting ``backoff`` between attempts.

    An exception that is not ``worth_retrying`` propagates at once. The retries end when
    ``deadline`` has passed or ``max_attempts`` attempts failed (None: no limit but the
    deadline); then ``give_up(last error)`` is raised (from the last error), or the last
    error itself when there is no ``give_up``. ``on_retry(error)`` runs before each wait
    (e.g. to log). Blocks for the attempts and the waits, never past ``deadline`` between them.

    Raises:
        whatever ``attempt`` raised that is not worth retrying; at the end, ``give_up``'s error.
    """
    failures = 0
    while True:
        try:
            return attempt(failures)
        except Exception as exc:
            if not worth_retrying(exc):
                raise
            last = exc
        failures += 1
        if not deadline.expired() and (max_attempts is None or failures < max_attempts):
            if on_retry is not None:
                on_retry(last)
            backoff.sleep(failures - 1, deadline, sleep)
            if not deadline.expired():
                continue
        err = give_up(last) if give_up is not None else last
        if err is last:
            raise last
        raise err from last
