"""The one duration reader: numbers, timedeltas and Go duration strings; bad values refused naming the option."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jssync
from jssync.base.durations import MAX_NANOS, parse_go_duration, seconds

_UNITS = {"h": 3_600_000_000_000, "m": 60_000_000_000, "s": 1_000_000_000, "ms": 1_000_000, "us": 1_000,
          "µs": 1_000, "ns": 1}


@pytest.mark.parametrize("text, secs", [
    ("30s", 30.0), ("1h30m", 5400.0), ("500ms", 0.5), ("1.5s", 1.5), ("2us", 2e-6), ("2µs", 2e-6),
    ("100ns", 1e-7), ("0", 0.0), ("1h", 3600.0), ("2.5", 2.5), (".5s", 0.5), ("1m0.5s", 60.5), ("+3s", 3.0),
    (" 10s ", 10.0),
])
def test_go_duration_strings(text, secs):
    assert seconds(text, "opt") == pytest.approx(secs)


@pytest.mark.parametrize("value, secs", [
    (30, 30.0), (2.5, 2.5), (0, 0.0), (datetime.timedelta(minutes=2), 120.0),
    (datetime.timedelta(milliseconds=250), 0.25),
])
def test_numbers_and_timedeltas(value, secs):
    got = seconds(value, "opt")
    assert got == secs and type(got) is float


@pytest.mark.parametrize("value, said", [
    ("30s30", "'30s30'"), ("1 s", "'1 s'"), ("", "''"), ("s", "'s'"), ("1d", "'1d'"), ("nan", "'nan'"),
    ("-1s", "negative"), (-0.5, "negative"), (datetime.timedelta(seconds=-1), "negative"),
    (float("nan"), "nan"), (float("inf"), "inf"), (True, "bool"), (False, "bool"), (None, "None"),
    ([1], "list"), (b"1s", "bytes"), ("3000000h", "292 years"),
])
def test_bad_values_are_refused_naming_the_option(value, said):
    with pytest.raises(jssync.ValidationError) as ei:
        seconds(value, "ack_wait")
    text = str(ei.value)
    assert text.startswith("ack_wait ") and said in text, text


def test_minimum():
    assert seconds("1s", "ttl", minimum=1) == 1.0
    with pytest.raises(jssync.ValidationError, match=r"ttl must be a duration >= 1s, got '500ms'"):
        seconds("500ms", "ttl", minimum=1)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(_UNITS))), min_size=1, max_size=5))
def test_go_strings_read_back_exactly(parts):
    text = "".join(f"{n}{unit}" for n, unit in parts)
    assert parse_go_duration(text) == sum(n * _UNITS[unit] for n, unit in parts)


@given(st.integers(0, MAX_NANOS))
def test_nanoseconds_as_seconds_round_trip(nanos):
    assert parse_go_duration(f"{nanos}ns") == nanos
    assert seconds(f"{nanos}ns", "opt") == pytest.approx(nanos / 1e9)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_numbers_pass_through(x):
    assert seconds(x, "opt") == x
    assert seconds(datetime.timedelta(seconds=x), "opt") == pytest.approx(x, abs=1e-6)


@given(st.text(max_size=12))
def test_any_text_is_read_or_refused_cleanly(text):
    try:
        secs = seconds(text, "opt")
    except jssync.ValidationError as exc:
        assert str(exc).startswith("opt ")
    else:
        assert secs >= 0
