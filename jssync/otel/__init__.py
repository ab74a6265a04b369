"""OpenTelemetry tracing for jssync (extra ``jssync[otel]``): spans and trace context in headers.

```python
import jssync.otel

jssync.otel.instrument()      # from now on: send, receive, process and settle spans
...
jssync.otel.uninstrument()    # off again
```

Off by default, and free while off: the call sites read one attribute per message
(``jssync.core.hooks.HOOKS.tracer``, None) and nothing of ``opentelemetry`` is imported until
:func:`instrument` is called. docs/tracing.md describes the spans, their attributes and how
the trace context travels in message headers. The ``opentelemetry-instrument`` command finds
:class:`jssync.otel.instrumentor.JssyncInstrumentor` through the ``opentelemetry_instrumentor``
entry point.
"""

from __future__ import annotations

import threading
from typing import Any

from ..core.hooks import HOOKS

__all__ = ["instrument", "is_instrumented", "uninstrument"]

_lock = threading.Lock()


def instrument(*, tracer_provider: Any = None) -> None:
    """Turn tracing on for every connection of this process (those open now and later).

    Spans go to ``tracer_provider`` (an ``opentelemetry.trace.TracerProvider``; default: the
    global one, so configure the OpenTelemetry SDK first). The trace context is written to
    and read from message headers through the global propagator (W3C ``traceparent``,
    ``tracestate`` and ``baggage`` by default). Calling it again is harmless: the new
    provider replaces the old one, and each operation still makes one span. Never blocks.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (``pip install opentelemetry-api``; the
            extra ``.[otel]`` in a jssync checkout).
    """
    try:
        from ._tracer import MessageTracer
    except ImportError as exc:
        if (exc.name or "").startswith("opentelemetry"):
            raise ImportError("jssync.otel needs opentelemetry-api: pip install opentelemetry-api "
                              "(the extra '.[otel]' in a jssync checkout)") from exc
        raise
    tracer = MessageTracer(tracer_provider)
    with _lock:
        HOOKS.tracer = tracer


def uninstrument() -> None:
    """Turn tracing off: no more spans and no trace headers on messages sent from now on.

    Spans already started end as usual. Harmless when tracing is off. Never blocks.
    """
    with _lock:
        HOOKS.tracer = None


def is_instrumented() -> bool:
    """True while tracing is on (between :func:`instrument` and :func:`uninstrument`)."""
    return HOOKS.tracer is not None
