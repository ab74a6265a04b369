"""Where a Liftbridge subscription starts: the start options turned into a JetStream deliver policy.

:func:`resolve_start` checks ``start_at`` / ``start_at_offset`` / ``start_at_time`` /
``start_at_time_delta`` (pure, before anything is sent) and returns a :class:`StartSpec`;
:mod:`.consumer` puts it in the first consumer's configuration.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from typing import Any

from nats.js import api

from ..base.errors import ValidationError
from ..base.validate import MAX_U64, check_int
from .codec import StartPosition


@dataclass(frozen=True)
class StartSpec:
    """A resolved start position: the JetStream deliver policy and its option."""

    policy: api.DeliverPolicy
    opt_start_seq: int | None = None
    opt_start_time: _dt.datetime | None = None

    def describe(self) -> str:
        if self.opt_start_seq is not None:
            return f"offset {self.opt_start_seq - 1}"
        if self.opt_start_time is not None:
            return f"time {self.opt_start_time.isoformat()}"
        return str(self.policy.value)


def _check_time(t: Any) -> _dt.datetime:
    if not isinstance(t, _dt.datetime):
        raise TypeError(f"start_at_time must be a datetime, got {type(t).__name__}")
    if t.tzinfo is None:
        raise ValidationError(f"start_at_time must be timezone-aware (e.g. tzinfo=datetime.timezone.utc), got {t!r}")
    return t.astimezone(_dt.UTC)


def _check_delta(d: Any) -> float:
    if isinstance(d, _dt.timedelta):
        secs = d.total_seconds()
    elif isinstance(d, int | float) and not isinstance(d, bool):
        secs = float(d)
    else:
        raise TypeError(f"start_at_time_delta must be a timedelta or seconds, got {type(d).__name__}")
    if not math.isfinite(secs) or secs < 0:
        raise ValidationError(f"start_at_time_delta must be a finite duration >= 0, got {d!r}")
    try:  # the start time it makes must be a datetime (from year 1)
        _dt.datetime.now(_dt.UTC) - _dt.timedelta(seconds=secs)
    except OverflowError:
        raise ValidationError(
            f"start_at_time_delta reaches back before the year 1, got {d!r}") from None
    return secs


def _check_offset(o: Any) -> int:
    return check_int(o, "start_at_offset", minimum=0, maximum=MAX_U64 - 1)  # offset + 1 is a uint64 sequence


def resolve_start(start_at: Any = None, start_at_offset: Any = None, start_at_time: Any = None,
                  start_at_time_delta: Any = None) -> StartSpec:
    """Turn the subscribe start options into a :class:`StartSpec`.

    ``start_at`` is a :class:`StartPosition` (or its name), an offset (int), an aware
    datetime or a timedelta; ``start_at_offset``/``start_at_time``/``start_at_time_delta``
    are the Liftbridge-named alternatives. At most one position may be given.

    Raises:
        ValueError, TypeError: conflicting or bad options, naming the value.
    """
    given = [(n, v) for n, v in (("start_at_offset", start_at_offset), ("start_at_time", start_at_time),
                                 ("start_at_time_delta", start_at_time_delta)) if v is not None]
    if len(given) > 1:
        raise ValidationError(f"give one start position, got {', '.join(n for n, _ in given)}")
    if isinstance(start_at, str) and not isinstance(start_at, StartPosition):
        if start_at.upper() not in StartPosition.__members__:
            raise ValidationError(f"start_at must be a StartPosition, got {start_at!r}")
        start_at = StartPosition[start_at.upper()]
    if isinstance(start_at, StartPosition):
        if start_at is StartPosition.OFFSET:
            if start_at_offset is None:
                raise ValidationError("start_at=StartPosition.OFFSET needs start_at_offset")
        elif start_at is StartPosition.TIMESTAMP:
            if start_at_time is None and start_at_time_delta is None:
                raise ValidationError("start_at=StartPosition.TIMESTAMP needs start_at_time or start_at_time_delta")
        elif given:
            raise ValidationError(f"start_at={start_at.name} conflicts with {given[0][0]}={given[0][1]!r}")
        else:
            return {
                StartPosition.NEW_ONLY: StartSpec(api.DeliverPolicy.NEW),
                StartPosition.EARLIEST: StartSpec(api.DeliverPolicy.ALL),
                StartPosition.LATEST: StartSpec(api.DeliverPolicy.LAST),
            }[start_at]
    elif start_at is not None:
        if given:
            raise ValidationError(f"start_at={start_at!r} conflicts with {given[0][0]}")
        if isinstance(start_at, _dt.datetime):
            start_at_time = start_at
        elif isinstance(start_at, _dt.timedelta):
            start_at_time_delta = start_at
        elif isinstance(start_at, int) and not isinstance(start_at, bool):
            start_at_offset = start_at
        else:
            raise TypeError(
                f"start_at must be a StartPosition, an offset, a datetime or a timedelta, got {start_at!r}"
            )
    if start_at_offset is not None:
        return StartSpec(api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=_check_offset(start_at_offset) + 1)
    if start_at_time is not None:
        return StartSpec(api.DeliverPolicy.BY_START_TIME, opt_start_time=_check_time(start_at_time))
    if start_at_time_delta is not None:
        secs = _check_delta(start_at_time_delta)
        when = _dt.datetime.now(_dt.UTC) - _dt.timedelta(seconds=secs)
        return StartSpec(api.DeliverPolicy.BY_START_TIME, opt_start_time=when)
    return StartSpec(api.DeliverPolicy.NEW)
