"""The one timeout rule against a real server: on a JetStream call ``timeout=None`` is no
limit (it waits past the context's timeout), and leaving ``timeout`` out waits the context's.

The JetStream context uses its own API prefix, answered by a core responder that replies
only once the context's timeout has passed since the request arrived (or never).
"""

from __future__ import annotations

import threading
import time

import pytest

import jssync

from ..conftest import FACTOR

CTX_TIMEOUT = 0.3 * FACTOR


def _late_responder(nc, subject: str, late: float | None, seen: list[float]):
    """Answer requests on ``subject`` ``late`` seconds after each arrives (None: never)."""

    def on_req(msg: jssync.Msg) -> None:
        seen.append(time.monotonic())
        if late is None:
            return
        threading.Event().wait(late)  # on the worker pool: only this responder waits
        msg.respond(b'{"success": true}')

    sub = nc.subscribe(subject, callback=on_req)
    nc.flush()
    return sub


def test_timeout_none_waits_past_the_context_timeout(nats_server, nc, unique):
    prefix = f"late{unique}.api"
    seen: list[float] = []
    with jssync.connect(nats_server.url) as other:
        sub = _late_responder(other, f"{prefix}.STREAM.DELETE.S{unique}", 2 * CTX_TIMEOUT, seen)
        try:
            js = nc.jetstream(api_prefix=prefix, timeout=CTX_TIMEOUT)
            t0 = time.monotonic()
            assert js.delete_stream(f"S{unique}", timeout=None) is True
            waited = time.monotonic() - t0
            assert len(seen) == 1
            assert waited >= 2 * CTX_TIMEOUT  # the reply came after the context's timeout, and was waited for
        finally:
            sub.unsubscribe()


def test_timeout_left_out_is_the_context_timeout(nats_server, nc, unique):
    prefix = f"late{unique}.api"
    seen: list[float] = []
    with jssync.connect(nats_server.url) as other:
        sub = _late_responder(other, f"{prefix}.STREAM.DELETE.S{unique}", None, seen)
        try:
            js = nc.jetstream(api_prefix=prefix, timeout=CTX_TIMEOUT)
            t0 = time.monotonic()
            with pytest.raises(jssync.TimeoutError):
                js.delete_stream(f"S{unique}")
            waited = time.monotonic() - t0
            assert len(seen) == 1  # the request arrived; nobody answered
            assert CTX_TIMEOUT * 0.9 <= waited < CTX_TIMEOUT + 5 * FACTOR
        finally:
            sub.unsubscribe()


def test_kv_calls_take_timeout_none(nats_server, nc, unique):
    """A KeyValue handle takes timeout=None (no limit) too; a negative timeout is refused."""
    js = nc.jetstream(timeout=CTX_TIMEOUT)
    kv = js.create_key_value(bucket=f"B{unique}")
    try:
        kv.put("k", b"v")
        assert kv.get("k", timeout=None).value == b"v"
        with pytest.raises(jssync.ValidationError):
            kv.get("k", timeout=-1)
    finally:
        js.delete_key_value(f"B{unique}", timeout=None)
