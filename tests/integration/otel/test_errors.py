"""jssync.otel records failures: status ERROR, an exception event and error.type on the span."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import StatusCode  # noqa: E402

import jssync  # noqa: E402
from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import attrs, spans_named, tracing, wait_spans  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


def _assert_error(span, exc_type: type[BaseException], error_type: str) -> None:
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == error_type
    events = [e for e in span.events if e.name == "exception"]
    assert len(events) == 1
    assert events[0].attributes is not None
    assert events[0].attributes["exception.type"].endswith(exc_type.__name__)


def test_a_callback_that_raises_ends_its_process_span_with_the_error(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    errors = []

    def handle(msg):
        raise RuntimeError("boom")

    cc = c.consume(handle, error_cb=errors.append)
    try:
        [span] = wait_spans(f"process {subject}")
    finally:
        cc.stop()
    _assert_error(span, RuntimeError, "RuntimeError")
    assert "boom" in (span.status.description or "")


def test_js_publish_nobody_stores_is_a_send_span_with_the_error(js, unique):
    with pytest.raises(jssync.NoRespondersError):
        js.publish(f"nostream.{unique}", b"x", retry_attempts=0)
    [span] = spans_named(f"publish nostream.{unique}")
    _assert_error(span, jssync.NoRespondersError, "jssync.NoRespondersError")


def test_publish_async_that_fails_ends_its_span_with_the_error(js, unique):
    fut = js.publish_async(f"nostream.{unique}", b"x", retry_attempts=0)
    with pytest.raises(jssync.NoRespondersError):
        fut.result(timeout=5 * FACTOR)
    [span] = wait_spans(f"publish nostream.{unique}")
    _assert_error(span, jssync.NoRespondersError, "jssync.NoRespondersError")


def test_a_publish_refused_before_sending_is_a_span_with_the_error(nc):
    with pytest.raises(jssync.BadSubjectError):
        nc.publish("bad subject", b"x")
    [span] = spans_named("publish bad subject")
    _assert_error(span, jssync.BadSubjectError, "jssync.BadSubjectError")


def test_next_that_times_out_is_a_receive_span_with_the_error(stream):
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=0.2)
    [span] = spans_named("next")
    _assert_error(span, jssync.TimeoutError, "jssync.TimeoutError")
    a = attrs(span)
    assert a["messaging.nats.stream.name"] == stream.name and a["messaging.nats.consumer.name"] == "D"
    assert "messaging.destination.name" not in a  # no message: no destination


def test_an_ack_on_a_closed_connection_is_a_settle_span_with_the_error(nats_server, js, stream):
    js.publish(f"{stream.name}.a", b"x")
    stream.create_consumer(durable_name="D", ack_policy="explicit")
    other = jssync.connect(nats_server.url)
    try:
        msg = other.jetstream().consumer(stream.name, "D").next(timeout=2 * FACTOR)
    finally:
        other.close()
    with pytest.raises(jssync.ConnectionClosedError):
        msg.ack()
    [span] = spans_named(f"ack {stream.name}.a")
    _assert_error(span, jssync.ConnectionClosedError, "jssync.ConnectionClosedError")
