from __future__ import annotations

import pytest
from freezegun import freeze_time

from jssync._deadline import Deadline
from jssync._errors import TimeoutError


def test_none_never_expires():
    d = Deadline(None)
    assert d.remaining() is None and not d.expired() and d.slice() == 0.1


def test_expires_with_time():
    with freeze_time("2026-01-01 00:00:00") as ft:
        d = Deadline(1.0)
        assert d.slice() == 0.1
        ft.tick(0.95)
        assert 0 < d.slice() <= 0.05 + 1e-9
        ft.tick(0.1)
        assert d.expired() and d.remaining() == 0
        with pytest.raises(TimeoutError):
            d.check("x")


def test_negative_rejected():
    with pytest.raises(ValueError):
        Deadline(-1)
