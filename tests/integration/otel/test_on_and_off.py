"""jssync.otel on and off: uninstrument removes everything, instrumenting twice is harmless,
nothing of OpenTelemetry is imported or run while tracing is off, and the auto-instrumentation
entry point turns it on."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

import jssync.otel  # noqa: E402
from jssync.core.hooks import HOOKS  # noqa: E402
from tests.conftest import FACTOR  # noqa: E402
from tests.integration.otel.otel_support import exporter, jssync_spans, spans_named, tracing  # noqa: E402, F401

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def _round_trip(nc, js, stream):
    """One of each: publish, js.publish, fetch + ack, consume callback; the headers the subscriber saw."""
    sub = nc.subscribe(f"{stream.name}.core")
    nc.flush()
    nc.publish(f"{stream.name}.core", b"x")
    core_headers = sub.next_msg(timeout=5 * FACTOR).headers
    js.publish(f"{stream.name}.a", b"x")
    c = stream.create_consumer(durable_name="D", ack_policy="explicit", filter_subject=f"{stream.name}.a")
    for msg in c.fetch(1, expires=2 * FACTOR):
        msg.ack()
    sub.unsubscribe()
    return core_headers, stream.get_msg(1).headers


def test_tracing_is_off_by_default_and_sends_no_trace_headers(nc, js, stream):
    exporter().clear()
    assert not jssync.otel.is_instrumented() and HOOKS.tracer is None
    core_headers, stored_headers = _round_trip(nc, js, stream)
    assert core_headers is None and stored_headers is None
    assert jssync_spans() == []


def test_uninstrument_removes_spans_and_trace_headers(nc, js, stream):
    exp = exporter()
    jssync.otel.instrument()
    jssync.otel.uninstrument()
    jssync.otel.uninstrument()  # twice: harmless
    exp.clear()
    core_headers, stored_headers = _round_trip(nc, js, stream)
    assert HOOKS.tracer is None and not jssync.otel.is_instrumented()
    assert core_headers is None and stored_headers is None
    assert jssync_spans() == []


@pytest.mark.usefixtures("tracing")
def test_instrumenting_twice_makes_one_span_and_one_traceparent_per_message(nc, unique):
    jssync.otel.instrument()
    assert jssync.otel.is_instrumented()
    sub = nc.subscribe(f"otel.{unique}")
    nc.flush()
    nc.publish(f"otel.{unique}", b"x")
    msg = sub.next_msg(timeout=5 * FACTOR)
    assert len(spans_named(f"publish otel.{unique}")) == 1
    assert msg.headers is not None and list(msg.headers) == ["traceparent"]


def test_importing_jssync_and_jssync_otel_imports_no_opentelemetry():
    code = ("import sys, jssync, jssync.otel\n"
            "from jssync.core.hooks import HOOKS\n"
            "assert HOOKS.tracer is None\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60 * FACTOR, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _declared_entry_point() -> EntryPoint:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    name, _, value = cfg["options.entry_points"]["opentelemetry_instrumentor"].strip().partition("=")
    return EntryPoint(name=name.strip(), value=value.strip(), group="opentelemetry_instrumentor")


def test_the_opentelemetry_instrumentor_entry_point_turns_tracing_on_and_off(nc, unique):
    pytest.importorskip("opentelemetry.instrumentation")
    from opentelemetry.instrumentation.distro import DefaultDistro

    ep = _declared_entry_point()
    assert ep.name == "jssync"
    installed = [e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "jssync"]
    if installed:  # installed from this tree (pip install -e .): the same entry point
        assert installed[0].value == ep.value
    exp = exporter()
    exp.clear()
    DefaultDistro().load_instrumentor(ep, skip_dep_check=True)  # what opentelemetry-instrument does
    instrumentor = ep.load()()
    try:
        assert jssync.otel.is_instrumented()
        nc.publish(f"otel.{unique}", b"x")
        assert len(spans_named(f"publish otel.{unique}")) == 1
    finally:
        instrumentor.uninstrument()
    assert not jssync.otel.is_instrumented()
    nc.publish(f"otel.{unique}", b"x")
    assert len(spans_named(f"publish otel.{unique}")) == 1


def test_request_reply_and_ack_next_with_tracing_off_add_no_headers_and_make_no_spans(nc, js, stream):
    exporter().clear()
    assert HOOKS.tracer is None
    seen = []

    def answer(msg):
        seen.append(msg.headers)
        msg.respond(b"a")

    sub = nc.subscribe(f"{stream.name}.svc", callback=answer)
    nc.flush()
    reply = nc.request(f"{stream.name}.svc", b"q", timeout=5 * FACTOR)
    replies = list(nc.request_many(f"{stream.name}.svc", b"q", max_wait=5 * FACTOR, max_messages=1))
    sub.unsubscribe()
    js.publish(f"{stream.name}.a", b"1")
    js.publish(f"{stream.name}.a", b"2")
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    [nxt] = c.next(timeout=2 * FACTOR).ack_next()
    assert seen == [None, None] and reply.headers is None and replies[0].headers is None
    assert nxt.headers is None
    assert jssync_spans() == []
