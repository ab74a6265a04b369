"""The CPython adapter's Future readers: a settled result is read as Future.result() would give it."""

from __future__ import annotations

import concurrent.futures

import pytest

from jssync.base.cpython import NOT_SETTLED, is_finished, settled_result

pytestmark = pytest.mark.timeout(10)


def test_a_future_with_a_result_is_finished_and_its_result_is_read():
    fut: concurrent.futures.Future[str] = concurrent.futures.Future()
    assert not is_finished(fut) and settled_result(fut) is NOT_SETTLED
    fut.set_result("ack")
    assert is_finished(fut) and settled_result(fut) == "ack"


def test_a_failed_or_cancelled_future_has_no_settled_result():
    failed: concurrent.futures.Future[str] = concurrent.futures.Future()
    failed.set_exception(ValueError("no"))
    assert is_finished(failed) and settled_result(failed) is NOT_SETTLED
    cancelled: concurrent.futures.Future[str] = concurrent.futures.Future()
    cancelled.cancel()
    assert not is_finished(cancelled) and settled_result(cancelled) is NOT_SETTLED


def test_a_none_result_is_a_settled_result():
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()
    fut.set_result(None)
    assert settled_result(fut) is None
