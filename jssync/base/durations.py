"""The one reading of a duration a caller hands over: seconds, a ``timedelta``, or a Go duration string.

Every duration option of jssync (stream ``max_age``, consumer ``ack_wait``, a bucket's ``ttl``,
a publish ``ttl``, a pull's ``expires``, the CLI's ``--max-age`` ...) goes through
:func:`seconds`, so ``30``, ``30.0``, ``timedelta(seconds=30)`` and ``"30s"`` mean the same
everywhere, and a bad value is refused at once, naming the option, before anything is sent.

Pure: no jssync imports beyond the errors, no I/O.
"""

from __future__ import annotations

import datetime
import math
import re
from fractions import Fraction
from typing import Any

from .errors import ValidationError

#: nanoseconds per unit, as Go's time.ParseDuration takes them (µ: micro sign and Greek mu)
_UNIT_NS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
            "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_NUMBER = re.compile(r"\d+\.?\d*|\.\d+")
#: the largest duration the server takes: a Go time.Duration is an int64 of nanoseconds (~292 years)
MAX_NANOS = 2**63 - 1
MAX_SECONDS = MAX_NANOS / 1e9
_HINT = "seconds as a number, a datetime.timedelta, or a Go duration such as '30s', '1h30m', '500ms'"


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string (``"1h30m"``, ``"1.5s"``, ``"500ms"``, ``"0"``).

    The grammar of Go's ``time.ParseDuration`` (what the ``nats`` CLI takes): one or more
    decimal numbers each followed by a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``,
    ``h``), optionally signed; ``"0"`` alone needs no unit. A plain number (``"2.5"``) is
    taken as seconds. Surrounding whitespace is ignored.

    Raises:
        jssync.ValidationError: ``text`` is not such a string.
    """
    t = text.strip()
    sign = 1
    if t.startswith(("+", "-")):
        sign = -1 if t[0] == "-" else 1
        t = t[1:]
    if _NUMBER.fullmatch(t):
        return sign * round(Fraction(t) * _UNIT_NS["s"])
    total = Fraction(0)
    pos = 0
    for m in _PART.finditer(t):
        if m.start() != pos:
            break
        total += Fraction(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    if not t or pos != len(t):
        raise ValidationError(f"{text!r} is not a duration")
    return sign * round(total)


def seconds(value: Any, what: str, *, minimum: float = 0.0) -> float:
    """``value`` as seconds (float): a number, a ``datetime.timedelta`` or a Go duration string.

    ``what`` names the option in the error (``"ack_wait"``, ``"--max-age"``).

    Raises:
        jssync.ValidationError: a bool, another type, an unreadable string, NaN, infinity,
            a negative value, less than ``minimum``, or more than a Go duration holds
            (about 292 years). The message names ``what`` and the value.
    """
    if isinstance(value, datetime.timedelta):
        secs = value.total_seconds()
    elif isinstance(value, bool):
        raise ValidationError(f"{what} must be a duration ({_HINT}), got the bool {value!r}")
    elif isinstance(value, int | float):
        secs = float(value)
    elif isinstance(value, str):
        try:
            secs = parse_go_duration(value) / 1e9
        except ValueError:
            raise ValidationError(f"{what} must be a duration ({_HINT}), got {value!r}") from None
    else:
        raise ValidationError(f"{what} must be a duration ({_HINT}), got {type(value).__name__} {value!r}")
    if math.isnan(secs) or math.isinf(secs):
        raise ValidationError(f"{what} must be a finite duration, got {value!r}")
    if secs < 0:
        raise ValidationError(f"{what} must not be negative, got {value!r}")
    if secs < minimum:
        raise ValidationError(f"{what} must be a duration >= {minimum:g}s, got {value!r}")
    if secs > MAX_SECONDS:
        raise ValidationError(f"{what} is longer than the longest duration the server takes (~292 years), "
                              f"got {value!r}")
    return secs


def optional_seconds(value: Any, what: str, *, minimum: float = 0.0) -> float | None:
    """:func:`seconds`, with None passed through (an option left unset)."""
    return None if value is None else seconds(value, what, minimum=minimum)
