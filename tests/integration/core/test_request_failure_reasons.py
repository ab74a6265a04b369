"""A failed request says why: timed out, no responders, cancelled by close or drain, JetStream
not enabled, a server error; each also the error it was before and each says ``retriable``.

Against real nats-servers: the session server (JetStream on), one without JetStream, and one
that is stopped while a JetStream API call waits.
"""

from __future__ import annotations

import builtins
import threading
import time

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def _silent(nc, subject: str) -> jssync.Subscription:
    """A subscriber that never answers: requests to ``subject`` time out."""
    sub = nc.subscribe(subject, callback=lambda m: None)
    nc.flush()
    return sub


def _fail_in_thread(call) -> tuple[threading.Event, list[BaseException]]:
    """Run ``call`` in a thread; the list gets what it raised."""
    got: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            got.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, got


# -- core requests -----------------------------------------------------------------------------


def test_request_with_no_responders_says_so_and_is_retriable(nc, unique):
    with pytest.raises(jssync.NoRespondersError) as ei:
        nc.request(f"why.none.{unique}", b"x", timeout=2.0 * FACTOR)
    exc = ei.value
    assert exc.retriable is True and jssync.retriable(exc)
    assert exc.subject == f"why.none.{unique}"
    assert isinstance(exc, jssync.RequestError)


def test_request_that_times_out_is_a_request_timeout_and_a_builtin_timeout(nc, unique):
    subj = f"why.slow.{unique}"
    _silent(nc, subj)
    with pytest.raises(jssync.RequestTimeoutError) as ei:
        nc.request(subj, b"x", timeout=0.2)
    exc = ei.value
    assert isinstance(exc, jssync.TimeoutError) and isinstance(exc, builtins.TimeoutError)
    assert isinstance(exc, jssync.RequestError)
    assert exc.retriable is False and not jssync.retriable(exc)
    assert exc.subject == subj and exc.disconnected is False


def test_request_cancelled_by_close_from_another_thread(nats_server, unique):
    subj = f"why.close.{unique}"
    nc = jssync.connect(nats_server.url)
    try:
        _silent(nc, subj)
        done, got = _fail_in_thread(lambda: nc.request(subj, b"x", timeout=30.0))
        wait_for(lambda: nc._req.replies, 5, what="the request waiting for its reply")
        t0 = time.monotonic()
        nc.close()
        assert done.wait(5 * FACTOR)
        assert time.monotonic() - t0 < 5 * FACTOR
    finally:
        nc.close()
    [exc] = got
    assert isinstance(exc, jssync.RequestCancelledError), repr(exc)
    assert isinstance(exc, jssync.ConnectionClosedError)  # what it was before
    assert exc.reason == "closed" and exc.subject == subj
    assert exc.retriable is False


def test_request_cancelled_by_drain_from_another_thread(nats_server, unique):
    subj = f"why.drain.{unique}"
    nc = jssync.connect(nats_server.url)
    try:
        _silent(nc, subj)
        done, got = _fail_in_thread(lambda: nc.request(subj, b"x", timeout=30.0))
        wait_for(lambda: nc._req.replies, 5, what="the request waiting for its reply")
        nc.drain(timeout=10.0)
        assert done.wait(5 * FACTOR)
    finally:
        nc.close()
    [exc] = got
    assert isinstance(exc, jssync.RequestCancelledError), repr(exc)
    assert exc.reason == "drained"


@pytest.mark.parametrize("how", ["close", "drain"])
def test_pull_request_through_request_cancelled_by_close_or_drain_says_why(nats_server, js, unique, how):
    # a CONSUMER.MSG.NEXT request is answered on a subscription of its own (not the reply
    # multiplexer): ended by a close or a drain, it says so like every other request
    js.create_stream(name=f"WHY{unique}", subjects=[f"whypull.{unique}"], storage="memory")
    try:
        js.create_consumer(f"WHY{unique}", durable_name="C", ack_policy="explicit")
        subj = f"$JS.API.CONSUMER.MSG.NEXT.WHY{unique}.C"
        nc = jssync.connect(nats_server.url)
        try:
            body = b'{"batch": 1, "expires": 30000000000}'  # waits 30 s: only the close ends it
            done, got = _fail_in_thread(lambda: nc.request(subj, body, timeout=30.0))
            wait_for(lambda: len(nc._subs) > 0, 5, what="the pull request's own inbox")
            if how == "close":
                nc.close()
            else:
                nc.drain(timeout=10.0)
            assert done.wait(5 * FACTOR)
        finally:
            nc.close()
        [exc] = got
        assert isinstance(exc, jssync.RequestCancelledError), repr(exc)
        assert isinstance(exc, jssync.ConnectionClosedError)
        assert exc.reason == ("closed" if how == "close" else "drained") and exc.subject == subj
    finally:
        js.delete_stream(f"WHY{unique}")


def test_request_many_ended_by_close_says_why(nats_server, unique):
    subj = f"why.rm.{unique}"
    nc = jssync.connect(nats_server.url)
    try:
        _silent(nc, subj)
        rm = nc.request_many(subj, b"x", max_wait=30.0)
        done, got = _fail_in_thread(lambda: list(rm))
        time.sleep(0.2 * FACTOR)  # behaviour: close() finds the iteration waiting (no event says so)
        nc.close()
        assert done.wait(5 * FACTOR)
    finally:
        nc.close()
    assert got == []  # the iteration ends quietly, as before
    assert rm.reason == "connection_closed"


def test_request_many_with_no_responders_says_so(nc, unique):
    with pytest.raises(jssync.NoRespondersError) as ei:
        list(nc.request_many(f"why.rmnone.{unique}", max_wait=2.0 * FACTOR))
    assert ei.value.retriable is True and ei.value.subject == f"why.rmnone.{unique}"


# -- JetStream ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_server():
    with NatsServer(jetstream=False) as srv:
        yield srv


def test_jetstream_api_without_jetstream_is_not_enabled_and_not_retriable(plain_server):
    with jssync.connect(plain_server.url) as nc:
        js = nc.jetstream(timeout=2.0 * FACTOR)
        for call in (js.account_info, lambda: js.stream("S"), lambda: js.key_value("B"),
                     lambda: js.object_store("B"), lambda: js.create_stream(name="S", subjects=["s"])):
            with pytest.raises(jssync.JetStreamNotEnabledError) as ei:
                call()
            exc = ei.value
            assert isinstance(exc, jssync.ServiceUnavailableError)  # what it was before
            assert isinstance(exc, jssync.RequestError)
            assert exc.retriable is False and not jssync.retriable(exc)
            assert "not enabled" in str(exc)


def test_publish_to_a_server_without_jetstream_has_no_responders(plain_server):
    with jssync.connect(plain_server.url) as nc:
        js = nc.jetstream(timeout=2.0 * FACTOR)
        with pytest.raises(jssync.NoRespondersError) as ei:
            js.publish("s.x", b"x", retry_attempts=0)
        assert ei.value.subject == "s.x" and ei.value.retriable is True


def test_jetstream_api_call_while_the_server_restarts_times_out_disconnected(tmp_path):
    with NatsServer(jetstream=True, store_dir=str(tmp_path)) as srv:
        with jssync.connect(srv.url, reconnect_time_wait=0.1) as nc:
            js = nc.jetstream()
            js.account_info()
            srv.stop()
            wait_for(lambda: not nc.is_connected, what="disconnected")
            with pytest.raises(jssync.RequestTimeoutError) as ei:
                js.account_info(timeout=0.5)
            exc = ei.value
            assert exc.disconnected is True and exc.retriable is False
            assert "reconnecting" in str(exc)
            with pytest.raises(jssync.RequestTimeoutError) as ei2:
                js.publish("x.y", b"1", timeout=0.5)
            assert ei2.value.disconnected is True
            srv.start()
            wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")


def test_publish_waiting_for_its_puback_is_cancelled_by_close(nats_server, unique):
    subj = f"why.pub.{unique}"
    nc = jssync.connect(nats_server.url)
    try:
        _silent(nc, subj)  # no stream; a subscriber that never sends a PubAck
        js = nc.jetstream()
        done, got = _fail_in_thread(lambda: js.publish(subj, b"x", timeout=30.0))
        wait_for(lambda: nc._req.replies, 5, what="the request waiting for its reply")
        nc.close()
        assert done.wait(5 * FACTOR)
    finally:
        nc.close()
    [exc] = got
    assert isinstance(exc, jssync.RequestCancelledError), repr(exc)
    assert exc.reason == "closed"


def test_publish_timeout_is_a_request_timeout(nc, unique):
    subj = f"why.pubslow.{unique}"
    _silent(nc, subj)
    with pytest.raises(jssync.RequestTimeoutError) as ei:
        nc.jetstream().publish(subj, b"x", timeout=0.3)
    assert ei.value.subject == subj and not ei.value.retriable


def test_server_error_says_whether_retriable(js, unique):
    with pytest.raises(jssync.StreamNotFoundError) as ei:
        js.stream(f"NOPE_{unique}")
    assert ei.value.retriable is False and isinstance(ei.value, jssync.RequestError)
    unavailable = jssync.ServiceUnavailableError(503, None, "JetStream system temporarily unavailable")
    assert unavailable.retriable is True and jssync.retriable(unavailable)


def test_kv_and_object_store_get_on_a_missing_bucket_keep_their_errors(js, unique):
    with pytest.raises(jssync.BucketNotFoundError) as ei:
        js.key_value(f"nokv{unique}")
    assert ei.value.retriable is False


def test_publish_async_futures_say_why(nats_server, unique):
    subj = f"why.pa.{unique}"
    nc = jssync.connect(nats_server.url)
    try:
        _silent(nc, subj)
        js = nc.jetstream()
        timed = js.publish_async(subj, b"x", timeout=0.3)
        exc = timed.exception(timeout=5 * FACTOR)
        assert isinstance(exc, jssync.RequestTimeoutError) and exc.subject == subj, repr(exc)
        assert not exc.retriable and not exc.disconnected
        waiting = js.publish_async(subj, b"y", timeout=30.0)
        nc.close()
        exc = waiting.exception(timeout=5 * FACTOR)
    finally:
        nc.close()
    assert isinstance(exc, jssync.RequestCancelledError) and isinstance(exc, jssync.ConnectionClosedError), repr(exc)
    assert exc.reason == "closed" and exc.subject == subj
