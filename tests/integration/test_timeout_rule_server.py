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


# -- timeout=None on the calls whose default is a number (Connection, Subscription, Msg, Consumer) --


def _publish_later(nc, subject: str, delay: float = 0.5) -> threading.Thread:
    """Publish one message on ``subject`` ``delay`` seconds from now, from another thread."""

    def run() -> None:
        time.sleep(delay)  # behaviour: the message comes while the call waits
        nc.publish(subject, b"late")
        nc.flush()

    t = threading.Thread(target=run, name="publish-later")
    t.start()
    return t


def test_next_msg_timeout_none_waits_for_a_late_message(nats_server, nc, unique):
    with jssync.connect(nats_server.url) as other:
        sub = nc.subscribe(f"late.{unique}")
        nc.flush(timeout=None)  # returns: the SUB reached the server
        t = _publish_later(other, f"late.{unique}")
        try:
            assert sub.next_msg(timeout=None).data == b"late"
        finally:
            t.join()
        sub.unsubscribe(timeout=None)


def test_consumer_next_timeout_none_waits_for_a_late_message(nc, js, stream):
    c = stream.create_consumer(durable_name="N", ack_policy="explicit")
    t = _publish_later(nc, f"{stream.name}.m")
    try:
        msg = c.next(timeout=None)
    finally:
        t.join()
    assert msg.data == b"late"
    msg.ack_sync(timeout=None)  # returns once the server confirmed it
    assert msg.is_acked
    assert c.info().num_ack_pending == 0


def test_next_timeout_none_pulls_again_when_a_pull_expires(nc, js, stream, monkeypatch):
    """With no limit, a pull that expires empty is followed by another (each pull's expiry
    made short here, so the message comes after several of them)."""
    monkeypatch.setattr("jssync.jetstream.consumers.NO_LIMIT_PULL", 0.2)
    monkeypatch.setattr("jssync.jetstream.ordered.NO_LIMIT_PULL", 0.2)
    c = stream.create_consumer(durable_name="N", ack_policy="explicit")
    oc = stream.ordered_consumer()
    t = _publish_later(nc, f"{stream.name}.m", 1.0)
    try:
        msg = c.next(timeout=None)
    finally:
        t.join()
    assert msg.data == b"late"
    msg.ack_sync(timeout=None)
    t = _publish_later(nc, f"{stream.name}.m", 1.0)  # the ordered consumer reads both
    try:
        assert oc.next(timeout=None).data == b"late"
        assert oc.next(timeout=None).data == b"late"
    finally:
        t.join()


def test_close_and_drain_take_timeout_none(nats_server, unique):
    nc = jssync.connect(nats_server.url)
    sub = nc.subscribe(f"d.{unique}")
    sub.drain(timeout=None)
    nc.subscribe(f"d2.{unique}")
    nc.drain(timeout=None)  # drains, then closes without a limit
    assert nc.is_closed
    nc2 = jssync.connect(nats_server.url)
    nc2.publish(f"d.{unique}", b"x")
    nc2.close(timeout=None)
    assert nc2.is_closed


def test_flush_timeout_none_pings_again_after_a_reconnect(nats_server):
    """A PING sent before a disconnect is never answered (nats-py forgets it on the reconnect):
    flush(timeout=None) sends it again once reconnected, and returns."""
    from tests.conftest import wait_for
    from tests.proxy import TcpProxy

    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        nc = jssync.connect(p.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
        done = threading.Event()
        errors: list[BaseException] = []

        def flush() -> None:
            try:
                nc.flush(timeout=None)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            done.set()

        t = threading.Thread(target=flush, name="flush-none")
        try:
            p.stall(new_connections=False)  # this connection's PONG will not come
            t.start()
            wait_for(lambda: len(nc._nc._pongs) > 0, what="the PING sent")
            assert not done.is_set()
            p.drop()  # nats-py reconnects through the proxy (forwarding new connections)
            assert done.wait(20 * FACTOR), "flush(timeout=None) did not return after the reconnect"
            assert errors == []
        finally:
            nc.close()
            t.join()
