"""The OpenTelemetry auto-instrumentation entry point of jssync.

``opentelemetry-instrument python app.py`` (from the ``opentelemetry-instrumentation``
package) loads every ``opentelemetry_instrumentor`` entry point; jssync's names
:class:`JssyncInstrumentor`, which calls :func:`jssync.otel.instrument` with the tracer provider
it is given. Importing this module needs ``opentelemetry-instrumentation``; plain
``jssync.otel.instrument()`` does not.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import instrument, uninstrument


class JssyncInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """``JssyncInstrumentor().instrument(tracer_provider=...)`` / ``.uninstrument()``.

    A BaseInstrumentor (one instance per process; instrumenting twice is ignored). The same
    as :func:`jssync.otel.instrument` / :func:`jssync.otel.uninstrument`.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: the instrumented library is jssync itself."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        instrument(tracer_provider=kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        uninstrument()
