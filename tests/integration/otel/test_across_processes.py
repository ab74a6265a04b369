"""jssync.otel joins a publisher and a consumer in another process into one trace.

The consumer is a child process with its own SDK and in-memory exporter; it prints the spans it
made as JSON, and the test checks that its process span is the child of the publisher's send
span (same trace id, the send span as parent) and its ack a child of the process span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import own_tracer, spans_named, tracing  # noqa: E402, F401

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("tracing")]

ROOT = Path(__file__).resolve().parents[3]

CONSUMER = r'''
import json, sys, time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import jssync, jssync.otel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
jssync.otel.instrument()
url, stream, consumer, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

def names():
    return {s.name.split(" ")[0] for s in exporter.get_finished_spans()}

with jssync.connect(url) as nc:
    cc = nc.jetstream().consumer(stream, consumer).consume(lambda msg: msg.ack())
    end = time.monotonic() + limit
    while not {"process", "ack"} <= names() and time.monotonic() < end:
        time.sleep(0.01)  # poll: for the spans, inside the limit
    cc.stop()
print(json.dumps([{
    "name": s.name, "kind": s.kind.name, "trace_id": s.context.trace_id, "span_id": s.context.span_id,
    "parent": s.parent.span_id if s.parent else None, "remote_parent": bool(s.parent and s.parent.is_remote),
    "links": [[l.context.trace_id, l.context.span_id] for l in s.links],
} for s in exporter.get_finished_spans()]))
'''


def test_a_consumer_in_another_process_continues_the_publishers_trace(nats_server, js, stream):
    subject = f"{stream.name}.order"
    stream.create_consumer(durable_name="WORKER", ack_policy="explicit")
    with own_tracer().start_as_current_span("checkout") as outer:
        js.publish(subject, b"order 1")
    [send] = spans_named(f"publish {subject}")
    assert send.context.trace_id == outer.get_span_context().trace_id
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", CONSUMER, nats_server.url, stream.name, "WORKER", str(20 * FACTOR)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60 * FACTOR)
    assert proc.returncode == 0, proc.stderr
    spans = {s["name"]: s for s in json.loads(proc.stdout.strip().splitlines()[-1])}
    process = spans[f"process {subject}"]
    ack = spans[f"ack {subject}"]
    assert process["kind"] == "CONSUMER"
    assert process["trace_id"] == send.context.trace_id
    assert process["parent"] == send.context.span_id and process["remote_parent"]
    assert process["links"] == [[send.context.trace_id, send.context.span_id]]
    assert ack["kind"] == "CLIENT"
    assert ack["trace_id"] == send.context.trace_id and ack["parent"] == process["span_id"]
    assert stream.consumer("WORKER").info().num_ack_pending == 0
