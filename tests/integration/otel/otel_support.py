"""What the jssync.otel tests share: the OpenTelemetry SDK's global provider with an in-memory
exporter, and a fixture that turns tracing on with all-default options.

Import it after ``pytest.importorskip("opentelemetry.sdk")``: the tests skip only when
OpenTelemetry is not installed (the ``test`` extra installs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jssync.otel
from tests.conftest import wait_for

_EXPORTER: InMemorySpanExporter | None = None


def exporter() -> InMemorySpanExporter:
    """The exporter of the process-wide tracer provider (set once: OpenTelemetry allows one)."""
    global _EXPORTER
    if _EXPORTER is None:
        _EXPORTER = InMemorySpanExporter()
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    return _EXPORTER


def jssync_spans() -> list[ReadableSpan]:
    """The finished spans jssync made (the tests' own spans left out)."""
    return [s for s in exporter().get_finished_spans()
            if s.instrumentation_scope is not None and s.instrumentation_scope.name == "jssync.otel"]


def spans_named(name: str) -> list[ReadableSpan]:
    return [s for s in jssync_spans() if s.name == name]


def wait_spans(name: str, n: int = 1, timeout: float = 10.0) -> list[ReadableSpan]:
    """Wait until ``n`` spans called ``name`` have ended (callbacks end theirs on worker threads)."""
    wait_for(lambda: len(spans_named(name)) >= n, timeout, what=f"{n} span(s) {name!r}")
    return spans_named(name)


def own_tracer() -> trace.Tracer:
    """A tracer for the tests' own spans (around a publish, say)."""
    exporter()
    return trace.get_tracer("jssync-tests")


@pytest.fixture
def tracing() -> Iterator[InMemorySpanExporter]:
    """Tracing on, as a user turns it on (``jssync.otel.instrument()``, the global provider)."""
    exp = exporter()
    exp.clear()
    jssync.otel.instrument()
    try:
        yield exp
    finally:
        jssync.otel.uninstrument()
        exp.clear()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
