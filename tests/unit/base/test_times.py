"""The one parser of server times (jssync/base/times.py) reads what each former parser read.

The former parsers (core/natspy.py, jetstream/direct.py, jetstream/push.py, liftbridge/codec.py,
spark) are kept below, as they were, as the reference: on every well-formed server time
hypothesis makes, the one parser gives the same instant.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jssync
from jssync.base.times import format_server_time, parse_server_time, server_time_or_none

# -- the former parsers, as they were -------------------------------------------------------------


def old_natspy_parse_utc_iso(text: str) -> _dt.datetime:
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    date, dot, rest = s.partition(".")
    if dot:
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        if i == 0:
            raise ValueError(f"bad time {text!r}")
        s = f"{date}.{rest[:i][:6].ljust(6, '0')}{rest[i:]}"
    when = _dt.datetime.fromisoformat(s)
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.astimezone(_dt.UTC)


_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?")


def old_direct_parse_timestamp(value: str | None) -> _dt.datetime | None:
    if not value:
        return None
    m = _TS.match(value.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    tzinfo = _dt.UTC
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        tzinfo = _dt.timezone(sign * _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4])))
    try:
        t = _dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micros, tzinfo=tzinfo)
    except ValueError:
        return None
    return t.astimezone(_dt.UTC)


def old_push_parse_time(v: Any) -> Any:
    if isinstance(v, str):
        s = v.replace("Z", "+00:00")
        if "." in s:
            head, _, frac = s.partition(".")
            digits = "".join(c for c in frac if c.isdigit())
            rest = frac[len(digits):]
            s = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
        try:
            return _dt.datetime.fromisoformat(s)
        except ValueError:
            return v
    return v


def old_liftbridge_parse_ts(value: Any) -> _dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _dt.datetime.fromisoformat(value)
    except ValueError:
        return None


# -- server times -------------------------------------------------------------------------------

_when = st.datetimes(min_value=_dt.datetime(1970, 1, 1), max_value=_dt.datetime(2400, 12, 31))
_digits = st.text("0123456789", min_size=1, max_size=9)
_offset = st.one_of(st.just("Z"), st.builds(lambda sign, m: f"{sign}{m // 60:02d}:{m % 60:02d}",
                                            st.sampled_from("+-"), st.integers(0, 14 * 60)))


@st.composite
def server_times(draw: Any, offsets: Any = _offset) -> str:
    """An RFC 3339 time as the server writes it: 0-9 fractional digits, ``Z`` or an offset."""
    when = draw(_when).strftime("%Y-%m-%dT%H:%M:%S")
    frac = draw(st.one_of(st.just(""), _digits.map(lambda d: "." + d)))
    return when + frac + draw(offsets)


@given(server_times())
def test_same_as_the_former_strict_parser(text):
    assert parse_server_time(text) == old_natspy_parse_utc_iso(text)
    assert parse_server_time(text).tzinfo is _dt.UTC


@given(server_times(st.one_of(_offset, st.just(""))))
def test_same_as_the_former_header_parser(text):
    assert server_time_or_none(text) == old_direct_parse_timestamp(text)


@given(server_times(), st.sampled_from(["+0000 UTC", "+0200 CEST", "-0500 EST"]))
def test_reads_go_time_string_as_the_header_parser_did(text, zone):
    base = text[:19].replace("T", " ")
    frac = text[19:].split("Z")[0].split("+")[0].split("-")[0]
    go_form = f"{base}{frac} {zone}"
    assert server_time_or_none(go_form) == old_direct_parse_timestamp(go_form)


@given(server_times())
def test_same_instant_as_the_former_push_and_liftbridge_parsers(text):
    new = parse_server_time(text)
    assert new == old_liftbridge_parse_ts(text)
    if "." not in text:  # the former push parser lost the offset after a fraction (below)
        assert new == old_push_parse_time(text)


def test_the_offset_after_a_fraction_is_kept():
    """The former push parser took the offset's digits for the fraction's: a naive time."""
    text = "2000-01-01T00:00:00.5+02:00"
    assert old_push_parse_time(text).tzinfo is None
    assert parse_server_time(text) == _dt.datetime(1999, 12, 31, 22, 0, 0, 500000, tzinfo=_dt.UTC)


@given(_when.map(lambda d: d.replace(tzinfo=_dt.UTC)))
def test_format_then_parse_gives_the_time_back(when):
    assert parse_server_time(format_server_time(when)) == when


@pytest.mark.parametrize("bad", ["", "yesterday", "2024-13-01T00:00:00Z", "2024-01-01T00:00:00.Z",
                                 "2024-01-01T25:00:00Z"])
def test_bad_times_raise_a_validation_error_naming_them(bad):
    with pytest.raises(jssync.ValidationError, match="bad time"):
        parse_server_time(bad)
    assert server_time_or_none(bad) is None


def test_missing_values_are_none():
    assert server_time_or_none(None) is None
    assert server_time_or_none(12) is None
