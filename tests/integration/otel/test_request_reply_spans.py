"""jssync.otel on request/reply: ``nc.request`` is one send span up to the reply (as nats.net
traces it), ``request_many`` one send span and a receive span per reply, ``msg.respond`` one
send span linked to its request."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import jssync  # noqa: E402
from tests.conftest import FACTOR, echo  # noqa: E402
from tests.integration.otel.otel_support import attrs, jssync_spans, spans_named, tracing, wait_spans  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


def _ids(span):
    return span.context.trace_id, span.context.span_id


def _by_type(op_type: str):
    return [s for s in jssync_spans() if attrs(s)["messaging.operation.type"] == op_type]


def test_request_is_one_send_span_up_to_the_reply_and_the_responder_continues_its_trace(nc, unique):
    subject = f"otel.{unique}"
    sub = nc.subscribe(subject, callback=lambda m: m.respond(m.data))
    nc.flush()
    try:
        reply = nc.request(subject, b"ping")  # all defaults
    finally:
        sub.unsubscribe()
    assert reply.data == b"ping"
    [span] = spans_named(f"request {subject}")
    assert span.kind is SpanKind.PRODUCER
    a = attrs(span)
    assert a["messaging.system"] == "nats"
    assert a["messaging.operation.type"] == "send"
    assert a["messaging.operation.name"] == "request"
    assert a["messaging.destination.name"] == subject
    assert a["messaging.message.body.size"] == 4
    assert span.status.status_code is StatusCode.UNSET
    # the responder's callback is a process span under the request, its reply a send span under that
    [process] = wait_spans(f"process {subject}")
    assert process.parent is not None and process.parent.span_id == span.context.span_id
    [respond] = [s for s in _by_type("send") if s.name == "publish"]
    assert attrs(respond)["messaging.destination.temporary"] is True
    assert respond.parent is not None and respond.parent.span_id == process.context.span_id
    # the request span ends with the reply and links to the reply's send span
    assert [_ids(link) for link in span.links] == [_ids(respond)]
    assert span.end_time >= respond.start_time
    assert len(jssync_spans()) == 3  # request, process, respond: nothing else (no inner publish span)


def test_a_request_nobody_answers_records_the_error_on_its_span(nc, unique):
    subject = f"otel.{unique}"
    with pytest.raises(jssync.NoRespondersError):
        nc.request(subject, b"x", timeout=2 * FACTOR)
    [span] = spans_named(f"request {subject}")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "jssync.NoRespondersError"
    assert [e.name for e in span.events] == ["exception"]


def test_request_keeps_the_callers_headers(nc, unique):
    subject = f"otel.{unique}"
    sub = echo(nc, subject)  # echoes the request's headers
    mine = {"X-Mine": "1"}
    try:
        reply = nc.request(subject, b"x", headers=mine, timeout=5 * FACTOR)
    finally:
        sub.unsubscribe()
    assert mine == {"X-Mine": "1"}
    [span] = spans_named(f"request {subject}")
    assert reply.headers is not None and reply.headers["X-Mine"] == "1"
    assert reply.headers["traceparent"].split("-")[1] == f"{span.context.trace_id:032x}"
    assert list(span.links) == []  # the echoed traceparent is the request's own: no link to itself


def test_respond_outside_a_callback_is_one_send_span_linked_to_the_request(nc, unique):
    subject = f"otel.{unique}"
    sub = nc.subscribe(subject)
    nc.flush()
    got: list[jssync.Msg] = []
    requester = threading.Thread(target=lambda: got.append(nc.request(subject, b"q", timeout=10 * FACTOR)))
    requester.start()
    try:
        request = sub.next_msg(timeout=5 * FACTOR)
        request.respond(b"a")  # all defaults
    finally:
        requester.join(15 * FACTOR)
        sub.unsubscribe()
    assert [m.data for m in got] == [b"a"]
    [span] = spans_named(f"request {subject}")
    [respond] = [s for s in _by_type("send") if s.name == "publish"]
    assert respond.kind is SpanKind.PRODUCER
    assert attrs(respond)["messaging.destination.name"] == request.reply
    assert [_ids(link) for link in respond.links] == [_ids(span)]
    assert respond.parent is None  # not inside a callback: a trace of its own, linked to the request
    assert len(_by_type("send")) == 2  # the request and the reply, no more


def test_request_many_is_one_send_span_and_one_receive_span_per_reply(nc, unique):
    subject = f"otel.{unique}"
    subs = [nc.subscribe(subject, callback=lambda m: m.respond(m.data)) for _ in range(2)]
    nc.flush()
    try:
        replies = list(nc.request_many(subject, b"who"))  # all defaults: ends after max_wait
    finally:
        for s in subs:
            s.unsubscribe()
    assert [m.data for m in replies] == [b"who", b"who"]
    [span] = spans_named(f"request {subject}")
    assert span.kind is SpanKind.PRODUCER
    assert attrs(span)["messaging.operation.name"] == "request"
    receives = spans_named("request_many")
    assert len(receives) == 2
    responds = [s for s in _by_type("send") if s.name == "publish"]
    assert len(responds) == 2
    for r in receives:
        a = attrs(r)
        assert r.kind is SpanKind.CLIENT
        assert a["messaging.operation.type"] == "receive"
        assert a["messaging.destination.temporary"] is True
        assert a["messaging.message.body.size"] == 3
        [link] = r.links
        assert _ids(link) in {_ids(s) for s in responds}
    assert {_ids(r.links[0]) for r in receives} == {_ids(s) for s in responds}


def test_request_many_with_no_responders_records_the_error_on_a_receive_span(nc, unique):
    subject = f"otel.{unique}"
    with pytest.raises(jssync.NoRespondersError), nc.request_many(subject, b"x", max_wait=2 * FACTOR) as it:
        next(it)
    assert len(spans_named(f"request {subject}")) == 1
    [span] = spans_named("request_many")
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)["error.type"] == "jssync.NoRespondersError"
