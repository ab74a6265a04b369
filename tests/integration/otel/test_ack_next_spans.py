"""jssync.otel on ``msg.ack_next``: an ack and a pull in one call are one settle span and one
receive span, linked to the messages' send spans."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind  # noqa: E402

from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import attrs, jssync_spans, spans_named, tracing  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


def _ids(span):
    return span.context.trace_id, span.context.span_id


def _first(stream):
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    return c.next(timeout=2 * FACTOR)


def test_ack_next_is_one_settle_span_and_one_receive_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"1")
    js.publish(subject, b"2")
    send1, send2 = spans_named(f"publish {subject}")
    msg = _first(stream)
    [nxt] = msg.ack_next()  # all defaults: one message
    assert nxt.data == b"2"
    [settle] = spans_named(f"ack {subject}")
    a = attrs(settle)
    assert settle.kind is SpanKind.CLIENT
    assert a["messaging.operation.type"] == "settle"
    assert a["messaging.operation.name"] == "ack"
    assert a["messaging.nats.message.stream_sequence"] == 1
    assert [_ids(link) for link in settle.links] == [_ids(send1)]
    [receive] = spans_named(f"ack_next {subject}")
    a = attrs(receive)
    assert receive.kind is SpanKind.CLIENT
    assert a["messaging.operation.type"] == "receive"
    assert a["messaging.operation.name"] == "ack_next"
    assert a["messaging.nats.stream.name"] == stream.name
    assert a["messaging.nats.consumer.name"] == "D"
    assert a["messaging.nats.message.stream_sequence"] == 2
    assert "messaging.batch.message_count" not in a
    assert [_ids(link) for link in receive.links] == [_ids(send2)]
    # next() is its receive span; ack_next adds exactly two; no inner fetch or ack spans
    assert sorted(s.name for s in jssync_spans() if attrs(s)["messaging.operation.type"] != "send") == sorted(
        [f"next {subject}", f"ack {subject}", f"ack_next {subject}"])
    assert msg.is_acked


def test_ack_next_of_a_batch_is_one_receive_span_linked_to_every_message(js, stream):
    subject = f"{stream.name}.a"
    for i in range(4):
        js.publish(subject, b"%d" % i)
    sends = spans_named(f"publish {subject}")
    msg = _first(stream)
    got = msg.ack_next(3, timeout=2 * FACTOR)
    assert [m.data for m in got] == [b"1", b"2", b"3"]
    assert len(spans_named(f"ack {subject}")) == 1
    [receive] = spans_named(f"ack_next {subject}")
    assert attrs(receive)["messaging.batch.message_count"] == 3
    assert [_ids(link) for link in receive.links] == [_ids(s) for s in sends[1:]]


def test_ack_next_that_gets_nothing_is_still_one_settle_and_one_receive_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"only")
    msg = _first(stream)
    assert msg.ack_next(no_wait=True, timeout=2 * FACTOR) == []
    assert len(spans_named(f"ack {subject}")) == 1
    [receive] = spans_named("ack_next")  # no message: no subject in the name
    assert receive.links == () or list(receive.links) == []
    assert attrs(receive)["messaging.nats.consumer.name"] == "D"


def test_ack_next_after_a_terminal_ack_makes_no_span(js, stream):
    subject = f"{stream.name}.a"
    js.publish(subject, b"x")
    msg = _first(stream)
    msg.ack()
    assert msg.ack_next() == []
    assert len(spans_named(f"ack {subject}")) == 1
    assert not [s for s in jssync_spans() if s.name.startswith("ack_next")]
