"""jssync.otel consumer spans: receive (fetch, next, consume iterator), process (consume and
subscribe callbacks) and settle (ack, nak, term, in_progress), with the producer's context."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import baggage, context  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import attrs, spans_named, tracing, wait_spans  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


def _durable(stream, name="D"):
    return stream.create_consumer(durable_name=name, ack_policy="explicit")


def _ids(span):
    return span.context.trace_id, span.context.span_id


def test_fetch_makes_one_receive_span_per_message_linked_to_its_send_span(js, stream):
    subject = f"{stream.name}.a"
    for i in range(3):
        js.publish(subject, b"m%d" % i)
    sends = spans_named(f"publish {subject}")
    c = _durable(stream)
    msgs = list(c.fetch(3, expires=2 * FACTOR))
    assert len(msgs) == 3
    receives = spans_named(f"fetch {subject}")
    assert len(receives) == 3
    for i, (span, send) in enumerate(zip(receives, sends, strict=True)):
        assert span.kind is SpanKind.CLIENT
        a = attrs(span)
        assert a["messaging.operation.type"] == "receive"
        assert a["messaging.operation.name"] == "fetch"
        assert a["messaging.destination.name"] == subject
        assert a["messaging.nats.stream.name"] == stream.name
        assert a["messaging.nats.consumer.name"] == "D"
        assert a["messaging.consumer.group.name"] == "D"
        assert a["messaging.nats.message.stream_sequence"] == i + 1
        assert a["messaging.nats.message.consumer_sequence"] == i + 1
        assert a["messaging.nats.message.delivery_count"] == 1
        assert a["messaging.message.body.size"] == 2
        assert [_ids(link) for link in span.links] == [_ids(send)]


def test_next_is_one_receive_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    [send] = spans_named(f"publish {subject}")
    msg = _durable(stream).next(timeout=2 * FACTOR)
    assert msg.data == b"x"
    [span] = spans_named(f"next {subject}")
    assert span.kind is SpanKind.CLIENT
    assert attrs(span)["messaging.operation.type"] == "receive"
    assert [_ids(link) for link in span.links] == [_ids(send)]
    assert not spans_named(f"fetch {subject}")  # next's own pull makes no span of its own


def test_consume_iterator_makes_receive_spans(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"1")
    js.publish(subject, b"2")
    c = _durable(stream)
    with c.consume() as messages:
        got = [messages.next(timeout=2 * FACTOR), next(messages)]
    assert [m.data for m in got] == [b"1", b"2"]
    spans = spans_named(f"consume {subject}")
    assert len(spans) == 2
    assert all(s.kind is SpanKind.CLIENT and attrs(s)["messaging.operation.type"] == "receive" for s in spans)


def test_consume_callback_runs_in_a_process_span_whose_parent_is_the_send_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    [send] = spans_named(f"publish {subject}")
    seen = []

    def handle(msg):
        seen.append(msg)
        msg.ack()

    cc = _durable(stream).consume(handle)
    try:
        [span] = wait_spans(f"process {subject}")
        [ack] = wait_spans(f"ack {subject}")
    finally:
        cc.stop()
    assert len(seen) == 1
    assert span.kind is SpanKind.CONSUMER
    a = attrs(span)
    assert a["messaging.operation.type"] == "process"
    assert a["messaging.nats.stream.name"] == stream.name
    assert a["messaging.nats.message.delivery_count"] == 1
    assert span.context.trace_id == send.context.trace_id
    assert span.parent is not None and span.parent.span_id == send.context.span_id
    assert [_ids(link) for link in span.links] == [_ids(send)]
    # the ack in the callback is a settle span inside the process span
    assert ack.parent is not None and ack.parent.span_id == span.context.span_id
    assert attrs(ack)["messaging.operation.type"] == "settle"


def test_subscribe_callback_runs_in_a_process_span_with_the_senders_baggage(nc, unique):
    subject = f"otel.{unique}"
    seen = []
    done = threading.Event()

    def handle(msg):
        seen.append(baggage.get_baggage("tenant"))
        done.set()

    nc.subscribe(subject, queue="workers", callback=handle)
    nc.flush()
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        nc.publish(subject, b"x")
    finally:
        context.detach(token)
    assert done.wait(5 * FACTOR)
    [span] = wait_spans(f"process {subject}")
    [send] = spans_named(f"publish {subject}")
    assert seen == ["acme"]
    assert span.kind is SpanKind.CONSUMER
    assert attrs(span)["messaging.consumer.group.name"] == "workers"
    assert span.parent is not None and span.parent.span_id == send.context.span_id


def test_push_subscribe_callback_runs_in_a_process_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    [send] = spans_named(f"publish {subject}")
    sub = js.subscribe(subject, callback=lambda m: None)
    try:
        [span] = wait_spans(f"process {subject}")
        wait_spans(f"ack {subject}")  # the automatic ack is settled too
    finally:
        sub.unsubscribe()
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is not None and span.parent.span_id == send.context.span_id


@pytest.mark.parametrize(("settle", "name"), [
    (lambda m: m.ack(), "ack"), (lambda m: m.nak(), "nak"), (lambda m: m.term(), "term"),
    (lambda m: m.in_progress(), "in_progress"), (lambda m: m.ack_sync(timeout=5 * FACTOR), "ack"),
], ids=["ack", "nak", "term", "in_progress", "ack_sync"])
def test_each_ack_kind_is_one_settle_span(js, stream, settle, name):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    [send] = spans_named(f"publish {subject}")
    msg = _durable(stream).next(timeout=2 * FACTOR)
    settle(msg)
    msg.ack()  # after a terminal ack: ignored, and no span; after in_progress: an ack span of its own
    [span] = spans_named(f"{name} {subject}")
    assert len(spans_named(f"ack {subject}")) == (1 if name in ("ack", "in_progress") else 0)
    assert span.kind is SpanKind.CLIENT
    a = attrs(span)
    assert a["messaging.operation.type"] == "settle"
    assert a["messaging.operation.name"] == name
    assert a["messaging.nats.message.stream_sequence"] == 1
    assert [_ids(link) for link in span.links] == [_ids(send)]


def test_a_traceparent_in_any_case_from_another_client_is_the_process_spans_parent(nc, unique):
    subject = f"otel.{unique}"
    done = threading.Event()
    nc.subscribe(subject, callback=lambda m: done.set())
    nc.flush()
    # a Go client writes canonical header names: Traceparent
    nc.publish(subject, b"x", headers={"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    assert done.wait(5 * FACTOR)
    [span] = wait_spans(f"process {subject}")
    assert span.context.trace_id == 0x0af7651916cd43dd8448eb211c80319c
    assert span.parent is not None and span.parent.span_id == 0xb7ad6b7169203331 and span.parent.is_remote
