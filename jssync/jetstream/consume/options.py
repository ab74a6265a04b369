"""The options of a pull (ADR-37 "Defaults and constraints"): the defaults, the limits and
:class:`ConsumeOptions`, the validated options of a ``consume``. Pure: no I/O.

``fetch``/``next`` (jetstream/pull.py) check their arguments with the same helpers.
"""

from __future__ import annotations

from typing import Any

from ...base.errors import ValidationError
from ...base.validate import MAX_I64, check_int, check_number

__all__ = ["BYTES_ONLY_BATCH", "DEFAULT_EXPIRES", "DEFAULT_MAX_MESSAGES", "FETCH_DEFAULT_HEARTBEAT",
           "FETCH_GRACE", "FETCH_HEARTBEAT_AFTER", "MAX_HEARTBEAT", "MIN_EXPIRES", "MIN_FETCH_HEARTBEAT",
           "MIN_HEARTBEAT", "NO_LIMIT_PULL", "ConsumeOptions"]

#: Batch size of pull requests limited by bytes only (ADR-37: "a large number").
BYTES_ONLY_BATCH = 1_000_000
#: consume defaults (ADR-37 "Defaults and constraints").
DEFAULT_MAX_MESSAGES = 500
DEFAULT_EXPIRES = 30.0
#: ``next(timeout=None)`` (no limit): the expiry of each of its pulls.
NO_LIMIT_PULL = DEFAULT_EXPIRES
MIN_EXPIRES = 1.0
MIN_HEARTBEAT = 0.5
#: fetch / fetch_bytes / next: one pull, no refill cadence to protect; the server takes any
#: heartbeat up to half of expires (this floor only keeps a typo from flooding the inbox).
MIN_FETCH_HEARTBEAT = 0.01
MAX_HEARTBEAT = 30.0
#: fetch turns heartbeats on by default for requests that expire later than this.
FETCH_HEARTBEAT_AFTER = 30.0
FETCH_DEFAULT_HEARTBEAT = 5.0
#: How long a fetch waits past its expiry for the server's end-of-request status.
FETCH_GRACE = 1.0
_NS = 1_000_000_000


def _check_hb(hb: float, expires: float, what: str, minimum: float = MIN_HEARTBEAT) -> None:
    if not minimum <= hb <= MAX_HEARTBEAT:
        raise ValidationError(
            f"{what} idle_heartbeat must be between {minimum} and {MAX_HEARTBEAT} seconds, got {hb!r}"
        )
    if hb > expires / 2:
        raise ValidationError(f"{what} idle_heartbeat ({hb!r}) must be at most half of expires ({expires!r})")


def _pos_int(v: Any, what: str) -> int:
    return check_int(v, what, maximum=MAX_I64, open_ended=True)  # a count: int64 on the wire


def _pos_float(v: Any, what: str) -> float:
    return check_number(v, what, unit="seconds")


class ConsumeOptions:
    """Validated consume options (ADR-37 defaults and constraints)."""

    __slots__ = ("max_messages", "max_bytes", "expires", "idle_heartbeat", "threshold_messages",
                 "threshold_bytes", "bytes_mode", "stop_after")

    def __init__(self, max_messages: int | None = None, max_bytes: int | None = None,
                 expires: float = DEFAULT_EXPIRES, idle_heartbeat: float | None = None,
                 threshold_messages: int | None = None, threshold_bytes: int | None = None,
                 stop_after: int | None = None) -> None:
        if max_messages is not None and max_bytes is not None:
            raise ValidationError(
                f"max_messages ({max_messages!r}) and max_bytes ({max_bytes!r}) are exclusive: set one of them"
            )
        self.bytes_mode = max_bytes is not None
        if self.bytes_mode:
            self.max_bytes = _pos_int(max_bytes, "max_bytes")
            self.max_messages = BYTES_ONLY_BATCH
        else:
            self.max_bytes = 0
            self.max_messages = DEFAULT_MAX_MESSAGES if max_messages is None else _pos_int(
                max_messages, "max_messages")
        expires = _pos_float(expires, "expires")
        if expires < MIN_EXPIRES:
            raise ValidationError(f"expires must be at least {MIN_EXPIRES}s, got {expires!r}")
        self.expires = expires
        if idle_heartbeat is None:
            idle_heartbeat = max(MIN_HEARTBEAT, min(expires / 2, MAX_HEARTBEAT))
        else:
            _check_hb(_pos_float(idle_heartbeat, "idle_heartbeat"), expires, "consume")
        self.idle_heartbeat = float(idle_heartbeat)
        if threshold_messages is not None:
            if self.bytes_mode:
                raise ValidationError("threshold_messages goes with max_messages, not with max_bytes")
            self.threshold_messages = check_int(threshold_messages, "threshold_messages (at most max_messages)",
                                                minimum=0, maximum=self.max_messages)
        else:
            self.threshold_messages = self.max_messages // 2
        if threshold_bytes is not None:
            if not self.bytes_mode:
                raise ValidationError("threshold_bytes goes with max_bytes, not with max_messages")
            self.threshold_bytes = check_int(threshold_bytes, "threshold_bytes (at most max_bytes)",
                                             minimum=0, maximum=self.max_bytes)
        else:
            self.threshold_bytes = self.max_bytes // 2
        #: end after this many messages were handed to the application (0: no end)
        self.stop_after = 0 if stop_after is None else _pos_int(stop_after, "stop_after")

