"""``connect()`` checks the type and range of its numeric options before it connects: a wrong
value raises jssync.ValidationError naming the option and the value, not a TypeError from deep
inside a comparison, and nothing is dialled (port 1 has no server: a check made after dialling
would say NoServersError)."""

from __future__ import annotations

import pytest

import jssync

pytestmark = pytest.mark.timeout(30)

NOWHERE = "nats://127.0.0.1:1"


@pytest.mark.parametrize(("option", "value"), [
    ("callback_workers", "4"), ("callback_workers", 0), ("callback_workers", True),
    ("max_reconnect_attempts", "3"), ("max_reconnect_attempts", -2), ("max_reconnect_attempts", 1.5),
    ("reconnect_time_wait", "1"), ("reconnect_time_wait", -0.5), ("reconnect_time_wait", float("nan")),
    ("ping_interval", "x"), ("ping_interval", 0),
    ("max_outstanding_pings", "2"), ("max_outstanding_pings", 0),
    ("timeout", "5"),
])
def test_a_bad_numeric_option_is_refused_naming_it_before_connecting(option: str, value: object) -> None:
    with pytest.raises(jssync.ValidationError, match=option) as info:
        jssync.connect(NOWHERE, **{option: value})  # type: ignore[arg-type]
    assert repr(value) in str(info.value)


def test_the_documented_ranges_are_accepted(nats_server) -> None:
    with jssync.connect(nats_server.url, callback_workers=1, max_reconnect_attempts=0, reconnect_time_wait=0,
                        ping_interval=0.5, max_outstanding_pings=1) as nc:
        nc.flush(timeout=5)
    with jssync.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=1) as nc:
        nc.flush(timeout=5)
