"""Which errors every retry loop of jssync sends a request again for (base/errors.retriable)."""

from __future__ import annotations

import pickle

import pytest

import jssync
from jssync.base.errors import api_error, retriable, worth_retrying


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


def test_every_error_says_what_retriable_says():
    for exc in (api_error(503, 10008, "temporarily unavailable"), api_error(404, 10059, "stream not found"),
                jssync.NoRespondersError("none"), jssync.RequestTimeoutError("t"), jssync.TimeoutError("t"),
                jssync.RequestCancelledError("c"), api_error(503, 10039, "JetStream not enabled"),
                jssync.Error("x")):
        assert exc.retriable is retriable(exc), exc


def test_jetstream_not_enabled_is_a_service_unavailable_that_is_not_retried():
    exc = api_error(503, 10076, "jetstream not enabled for account")
    assert type(exc) is jssync.JetStreamNotEnabledError and isinstance(exc, jssync.ServiceUnavailableError)
    assert not exc.retriable and exc.reason == "not_enabled"


def test_retry_loops_retry_timeouts_only_when_they_ask_to():
    t = jssync.RequestTimeoutError("t", subject="a", disconnected=True)
    assert worth_retrying(t, timeouts=True) and not worth_retrying(t)
    assert worth_retrying(jssync.NoRespondersError("none"))
    cancelled = jssync.RequestCancelledError("c", reason="drained")
    assert not worth_retrying(cancelled, timeouts=True)
    assert not worth_retrying(api_error(404, 10059, "stream not found"), timeouts=True)
    assert not worth_retrying(ValueError("x"), timeouts=True)


@pytest.mark.parametrize("exc", [
    jssync.RequestTimeoutError("t", subject="a.b", disconnected=True),
    jssync.RequestCancelledError("c", subject="a.b", reason="drained"),
    jssync.NoRespondersError("n", subject="a.b"),
    api_error(503, 10039, "JetStream not enabled"),
])
def test_request_errors_pickle_with_their_reasons(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert (back.reason, back.subject, back.retriable) == (exc.reason, exc.subject, exc.retriable)
    assert getattr(back, "disconnected", None) == getattr(exc, "disconnected", None)
