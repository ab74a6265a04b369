"""Tracing with OpenTelemetry: one trace from a publish to the consumer that processes it.

Needs the OpenTelemetry SDK (``pip install '.[otel]' opentelemetry-sdk``). The spans are
printed by the SDK's console exporter; in an application you would export them with OTLP
(``opentelemetry-exporter-otlp``) to a collector, Jaeger, Tempo, ...

Run: python examples/tracing.py   (starts its own local nats-server)
"""

from __future__ import annotations

import threading

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import jssync
import jssync.otel
from jssync.server import NatsServer


class PrintSpans(SpanExporter):
    """A short line per span: kind, name, trace id, parent (a console exporter prints pages)."""

    def export(self, spans: object) -> SpanExportResult:
        for span in spans:  # type: ignore[attr-defined]
            assert isinstance(span, ReadableSpan)
            parent = f"{span.parent.span_id:016x}" if span.parent else "-" * 16
            print(f"  {span.kind.name:<8} {span.name:<24} trace {span.context.trace_id:032x} "
                  f"span {span.context.span_id:016x} parent {parent}")
        return SpanExportResult.SUCCESS


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "orders"}))
    provider.add_span_processor(SimpleSpanProcessor(PrintSpans()))
    trace.set_tracer_provider(provider)
    jssync.otel.instrument()          # from here on: send, receive, process and settle spans
    tracer = trace.get_tracer("example")

    with NatsServer(jetstream=True) as server, jssync.connect(server.url) as nc:
        js = nc.jetstream()
        stream = js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory")
        consumer = stream.create_consumer(durable_name="DISPATCH", ack_policy="explicit",
                                          filter_subject="ORDERS.new")

        print("publish (the HTTP handler's span around it is the trace's root):")
        with tracer.start_as_current_span("POST /orders"):
            token = context.attach(baggage.set_baggage("tenant", "acme"))
            try:
                ack = js.publish("ORDERS.new", b"order 1", msg_id="order-1")
            finally:
                context.detach(token)
        stored = stream.get_msg(ack.seq)
        print("headers stored with the message:", stored.headers)

        print("consume with a callback (a process span, child of the publish span):")
        done = threading.Event()

        def handle(msg: jssync.Msg) -> None:
            with tracer.start_as_current_span("charge card"):   # the handler's own work
                print("  handling", msg.data, "for tenant", baggage.get_baggage("tenant"))
            msg.ack()                                          # a settle span
            done.set()

        cc = consumer.consume(handle)
        done.wait(10)
        cc.stop()

        print("fetch (a receive span per message: a child of the job's span, linked to the publish span):")
        js.publish("ORDERS.audit", b"audit 1")
        auditor = stream.create_consumer(durable_name="AUDIT", ack_policy="explicit", filter_subject="ORDERS.audit")
        with tracer.start_as_current_span("nightly audit"):
            for msg in auditor.fetch(1, expires=2.0):
                msg.ack()

        print("request/reply (one request span up to the reply; the responder's process and reply spans under it):")
        prices = nc.subscribe("prices.get", callback=lambda m: m.respond(b"9.99"))
        nc.flush()
        with tracer.start_as_current_span("GET /price"):
            print("  price:", nc.request("prices.get", b"order 1", timeout=2.0).data)
        prices.unsubscribe()

    jssync.otel.uninstrument()
    provider.shutdown()


if __name__ == "__main__":
    main()
