"""The one parser of the server's times (RFC 3339 with nanoseconds) and its formatter. Pure.

The server writes times as RFC 3339 with up to nine fractional digits
(``2024-11-04T23:45:02.060192123Z``) in API replies, ``Nats-Time-Stamp`` headers and PubAcks;
servers before 2.10 wrote Go's ``time.String()`` form (``2022-08-06 00:29:27.587861324 +0000 UTC``)
in Direct Get headers. :func:`parse_server_time` reads both (and any other ISO 8601 time
``datetime.fromisoformat`` reads, for times a user gives) into an aware UTC ``datetime``;
``datetime`` holds microseconds, so the digits past the sixth are dropped (truncated, never
rounded: a time never moves past the one the server meant). Every layer that reads a server
time calls it; :func:`server_time_or_none` is the same for values that may be missing or bad.
"""

from __future__ import annotations

import datetime as _dt
import re

from .errors import ValidationError

__all__ = ["parse_server_time", "server_time_or_none", "format_server_time"]

_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"\s*(?:([Zz])|([+-])(\d{2}):?(\d{2}))?"
    r"(?:\s+[A-Z]{1,5})?"  # Go's time.String(): the zone's abbreviation after the offset
)


def parse_server_time(text: str) -> _dt.datetime:
    """Parse a server time (RFC 3339, nanoseconds allowed) into an aware UTC datetime.

    A time without an offset is taken as UTC.

    Raises:
        jssync.ValidationError (a ValueError): ``text`` is not such a time (named in the message).
    """
    if not isinstance(text, str):
        raise ValidationError(f"bad time {text!r}: not a string")
    s = text.strip()
    m = _TIME.fullmatch(s)
    if m is None and "." in s and not re.search(r"\.\d", s):
        raise _bad_time(text)  # a fraction without digits (fromisoformat takes it)
    try:
        if m is None:
            when = _dt.datetime.fromisoformat(s)
        else:
            y, mo, d, h, mi, sec, frac, z, sign, oh, om = m.groups()
            tz = _dt.UTC
            if sign is not None:
                off = _dt.timedelta(hours=int(oh), minutes=int(om))
                tz = _dt.timezone(-off if sign == "-" else off)
            when = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec),
                                int((frac or "0")[:6].ljust(6, "0")), tzinfo=tz)
    except ValueError:
        raise _bad_time(text) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.astimezone(_dt.UTC)


def _bad_time(text: str) -> ValidationError:
    # (made only for a bad time: a good one builds no exception)
    return ValidationError(f"bad time {text!r}: not an RFC 3339 time such as 2024-05-01T12:00:00Z")


def server_time_or_none(value: object) -> _dt.datetime | None:
    """:func:`parse_server_time` of ``value``, or None when it is missing, not a string or unreadable."""
    if not value or not isinstance(value, str):
        return None
    try:
        return parse_server_time(value)
    except ValueError:
        return None


def format_server_time(date: _dt.datetime) -> str:
    """``date`` as RFC 3339 in UTC, as the server takes it (a naive datetime counts as UTC)."""
    date = date.replace(tzinfo=_dt.UTC) if date.tzinfo is None else date.astimezone(_dt.UTC)
    return date.isoformat().replace("+00:00", "Z").replace(".000000", "")
