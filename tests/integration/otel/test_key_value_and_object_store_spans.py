"""jssync.otel and key-value / object store buckets: a put is the send span of each publish it
is (the entry carries the trace context); get and watch read the bucket's state and make no
spans; a request or publish to the JetStream API (``$JS.``) is not traced."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind  # noqa: E402

from tests.conftest import FACTOR, wait_for  # noqa: E402
from tests.integration.otel.otel_support import jssync_spans, spans_named, tracing  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("tracing")]


@pytest.fixture
def kv(js, unique):
    b = js.create_key_value(bucket=f"b{unique}", storage="memory")  # all other options default
    try:
        yield b
    finally:
        js.delete_key_value(f"b{unique}")


def test_put_is_one_send_span_and_the_stored_entry_carries_its_context(js, kv):
    rev = kv.put("k", b"v")
    [span] = spans_named(f"publish $KV.{kv.bucket}.k")
    assert span.kind is SpanKind.PRODUCER
    stored = js.stream(f"KV_{kv.bucket}").get_msg(rev)
    assert stored.headers is not None
    assert stored.headers["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"
    assert len(jssync_spans()) == 1


def test_get_and_watch_make_no_spans(kv):
    kv.put("k", b"v")
    before = len(jssync_spans())
    assert kv.get("k").value == b"v"  # a Direct Get: a request to $JS.API.DIRECT.GET
    with kv.watch("k") as w:
        entry = next(w)
        assert entry is not None and entry.value == b"v"
        assert next(w) is None
    assert len(jssync_spans()) == before == 1


def test_a_request_to_the_jetstream_api_makes_no_span_and_carries_no_trace_headers(nc):
    seen = nc.subscribe("$JS.API.INFO")  # sees the request as the server gets it
    nc.flush()
    try:
        reply = nc.request("$JS.API.INFO", b"", timeout=5 * FACTOR)
        request = seen.next_msg(timeout=5 * FACTOR)
    finally:
        seen.unsubscribe()
    assert b"account_info_response" in reply.data
    assert request.headers is None
    assert jssync_spans() == []


def test_object_store_put_is_a_send_span_per_chunk_and_get_makes_none(js, unique):
    ob = js.create_object_store(bucket=f"o{unique}", storage="memory")
    try:
        ob.put("f", b"x" * 300_000)  # 128 KiB chunks: 3 chunks and the meta entry
        # a chunk's span ends when its PubAck's future resolves, on another thread: wait for all
        wait_for(lambda: len(jssync_spans()) >= 4, 10, what="the chunks' and the meta entry's spans")
        sends = jssync_spans()
        assert len([s for s in sends if s.name.startswith(f"publish $O.o{unique}.C.")]) == 3
        assert len([s for s in sends if s.name.startswith(f"publish $O.o{unique}.M.")]) == 1
        assert len(sends) == 4
        assert ob.get("f").data == b"x" * 300_000  # a Direct Get batch published to $JS.API...: untraced
        assert len(jssync_spans()) == 4
    finally:
        js.delete_object_store(f"o{unique}")
