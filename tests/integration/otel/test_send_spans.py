"""jssync.otel send spans: core publish, js.publish, publish_async; trace context into the headers."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import baggage, context, propagate  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import attrs, own_tracer, spans_named, tracing, wait_spans  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


def _traceparent_of(span) -> str:
    return f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-"


def test_core_publish_makes_one_producer_span_whose_context_the_subscriber_gets(nc, unique):
    sub = nc.subscribe(f"otel.{unique}")
    nc.flush()
    nc.publish(f"otel.{unique}", b"hello")
    msg = sub.next_msg(timeout=5 * FACTOR)
    [span] = spans_named(f"publish otel.{unique}")
    assert span.kind is SpanKind.PRODUCER
    a = attrs(span)
    assert a["messaging.system"] == "nats"
    assert a["messaging.operation.type"] == "send"
    assert a["messaging.operation.name"] == "publish"
    assert a["messaging.destination.name"] == f"otel.{unique}"
    assert a["messaging.message.body.size"] == 5
    assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
    assert span.status.status_code is StatusCode.UNSET
    assert msg.headers is not None and msg.headers["traceparent"].startswith(_traceparent_of(span))
    assert msg.data == b"hello"


def test_publish_keeps_the_callers_headers_and_does_not_change_the_callers_dict(nc, unique):
    sub = nc.subscribe(f"otel.{unique}")
    nc.flush()
    mine = {"X-Mine": "1"}
    nc.publish(f"otel.{unique}", b"x", headers=mine)
    msg = sub.next_msg(timeout=5 * FACTOR)
    assert mine == {"X-Mine": "1"}
    assert msg.headers is not None and msg.headers["X-Mine"] == "1" and "traceparent" in msg.headers


def test_a_span_around_the_publish_is_the_send_spans_parent(nc, unique):
    with own_tracer().start_as_current_span("checkout") as outer:
        nc.publish(f"otel.{unique}", b"x")
    [span] = spans_named(f"publish otel.{unique}")
    assert span.parent is not None and span.parent.span_id == outer.get_span_context().span_id
    assert span.context.trace_id == outer.get_span_context().trace_id


def test_a_message_with_its_own_traceparent_keeps_it_and_the_send_span_links_to_it(nc, unique):
    sub = nc.subscribe(f"otel.{unique}")
    nc.flush()
    theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    nc.publish(f"otel.{unique}", b"x", headers={"traceparent": theirs})
    msg = sub.next_msg(timeout=5 * FACTOR)
    assert msg.headers is not None and msg.headers["traceparent"] == theirs
    [span] = spans_named(f"publish otel.{unique}")
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331)]


def test_baggage_goes_into_the_headers_through_the_global_propagator(nc, unique):
    sub = nc.subscribe(f"otel.{unique}")
    nc.flush()
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        nc.publish(f"otel.{unique}", b"x")
    finally:
        context.detach(token)
    msg = sub.next_msg(timeout=5 * FACTOR)
    assert msg.headers is not None and msg.headers.get("baggage") == "tenant=acme"
    assert baggage.get_baggage("tenant", propagate.extract(msg.headers)) == "acme"


def test_js_publish_span_ends_with_the_puback_and_names_stream_and_sequence(js, stream):
    ack = js.publish(f"{stream.name}.a", b"order", msg_id="order-1")
    [span] = spans_named(f"publish {stream.name}.a")
    assert span.kind is SpanKind.PRODUCER
    a = attrs(span)
    assert a["messaging.operation.type"] == "send"
    assert a["messaging.message.id"] == "order-1"
    assert a["messaging.nats.stream.name"] == stream.name
    assert a["messaging.nats.message.stream_sequence"] == ack.seq == 1
    stored = stream.get_msg(ack.seq)
    assert stored.headers is not None and stored.headers["traceparent"].startswith(_traceparent_of(span))
    assert stored.headers["Nats-Msg-Id"] == "order-1"


def test_js_publish_of_a_duplicate_says_so(js, stream):
    js.publish(f"{stream.name}.a", b"order", msg_id="dup")
    js.publish(f"{stream.name}.a", b"order", msg_id="dup")
    spans = spans_named(f"publish {stream.name}.a")
    assert len(spans) == 2
    assert "messaging.nats.message.duplicate" not in attrs(spans[0])
    assert attrs(spans[1])["messaging.nats.message.duplicate"] is True


def test_js_publish_is_one_span_not_also_a_core_publish_span(js, stream):
    js.publish(f"{stream.name}.a", b"1")
    js.publish(f"{stream.name}.a", b"2", ack=False)
    js.conn.flush()
    assert len(spans_named(f"publish {stream.name}.a")) == 2
    assert stream.info().state.messages == 2


def test_publish_async_span_ends_when_the_puback_arrives(js, stream):
    fut = js.publish_async(f"{stream.name}.a", b"x")
    ack = fut.result(timeout=5 * FACTOR)
    [span] = wait_spans(f"publish {stream.name}.a")
    a = attrs(span)
    assert span.kind is SpanKind.PRODUCER
    assert a["messaging.nats.stream.name"] == stream.name
    assert a["messaging.nats.message.stream_sequence"] == ack.seq
    stored = stream.get_msg(ack.seq)
    assert stored.headers is not None and stored.headers["traceparent"].startswith(_traceparent_of(span))
