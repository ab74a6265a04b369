"""One deadline for a whole blocking operation, in monotonic time."""

from __future__ import annotations

import time

from ._errors import TimeoutError

#: The longest a blocking wait sleeps before it looks again (so Ctrl-C gets through).
SLICE = 0.1


class _Default:
    """Marks an argument that was not passed (``None`` means "no limit")."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = _Default()


class Deadline:
    """A point in monotonic time by which an operation must finish.

    ``Deadline(None)`` never expires.
    """

    __slots__ = ("_end", "timeout")

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None for no limit."""
        if self._end is None:
            return None
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def slice(self, limit: float = SLICE) -> float:
        """The time to wait next: at most ``limit``, at most what is left."""
        rem = self.remaining()
        return limit if rem is None else min(limit, rem)

    def check(self, what: str = "operation") -> None:
        """Raise :class:`jssync.TimeoutError` if the deadline has passed."""
        if self.expired():
            raise TimeoutError(f"{what} timed out after {self.timeout}s")
