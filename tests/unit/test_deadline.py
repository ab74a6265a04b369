from __future__ import annotations

import pytest
from freezegun import freeze_time

from jssync.base.deadline import Deadline
from jssync.base.errors import TimeoutError


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


def test_wait_future_timeout_has_no_internal_context():
    import concurrent.futures

    from jssync.core.loop import wait_future

    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    with pytest.raises(TimeoutError) as ei:
        wait_future(fut, Deadline(0.15), "thing")
    assert ei.value.__context__ is None and ei.value.__cause__ is None
    assert fut.cancelled()


def test_wait_future_cancelled_is_connection_closed_without_context():
    import concurrent.futures

    from jssync.base.errors import ConnectionClosedError
    from jssync.core.loop import wait_future

    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    fut.cancel()
    with pytest.raises(ConnectionClosedError) as ei:
        wait_future(fut, Deadline(1), "thing")
    assert ei.value.__context__ is None


def test_deadline_get_returns_expired_sentinel():
    from queue import SimpleQueue

    from jssync.base.deadline import EXPIRED

    q: SimpleQueue[int] = SimpleQueue()
    q.put(1)
    d = Deadline(0.05)
    assert d.get(q) == 1
    assert d.get(q) is EXPIRED
