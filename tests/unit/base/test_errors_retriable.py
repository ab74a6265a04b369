"""Which errors every retry loop of jssync sends a request again for (base/errors.retriable)."""

from __future__ import annotations

import pytest

import jssync
from jssync.base.errors import api_error, retriable


@pytest.mark.parametrize(("code", "err_code", "text"), [
    (503, 10008, "JetStream system temporarily unavailable"),
    (503, None, "JetStream is not available on this account/server (no responders on $JS.API.INFO)"),
    (500, 10009, "JetStream cluster can not handle request"),
    (400, 10005, "no suitable peers for placement"),
    (500, 10049, "no suitable peers for placement"),
])
def test_transient_replies_are_retried(code, err_code, text):
    assert retriable(api_error(code, err_code, text))


@pytest.mark.parametrize(("code", "err_code", "text"), [
    (500, 10074, "replicas > 1 not supported in non-clustered mode"),
    (500, 10028, "insufficient memory resources available"),
    (500, 10047, "insufficient storage resources available"),
    (503, 10039, "JetStream not enabled for account"),
    (400, 10058, "stream name already in use with a different configuration"),
    (404, 10059, "stream not found"),
])
def test_permanent_replies_are_not_retried(code, err_code, text):
    assert not retriable(api_error(code, err_code, text))


def test_no_responders_is_retried_and_other_errors_are_not():
    assert retriable(jssync.NoRespondersError("no responders"))
    assert not retriable(jssync.TimeoutError("timed out"))
    assert not retriable(jssync.ConnectionClosedError("closed"))
    assert not retriable(ValueError("x"))
