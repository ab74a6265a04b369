"""Review of the consuming code (session 4): defects found reading _pull.py against ADR-37 and
docs/consuming.md, each reproduced against a real server."""

from __future__ import annotations

import threading

import pytest

import jssync
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def _publish(js, subject, n):
    for _ in range(n):
        js.publish_async(subject, b"x")
    js.publish_async_completed(20)


def test_close_ends_callback_consume_at_once(nats_server, js, stream):
    """docs/consuming.md "Ending a consume": nc.close() ends a consume at once, quietly: the
    messages still buffered are dropped, not handed to the callback after close returned."""
    _publish(js, f"{stream.name}.m", 200)
    stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=60)
    nc2 = jssync.connect(nats_server.url)
    try:
        c = nc2.jetstream().consumer(stream.name, "D")
        in_cb = threading.Event()
        release = threading.Event()
        calls = []

        def cb(msg):
            calls.append(msg)
            in_cb.set()
            release.wait(10)

        cc = c.consume(cb, max_messages=100)
        assert in_cb.wait(10)
        wait_for(lambda: cc.pending_messages >= 99 and cc._q.qsize() >= 50, what="messages buffered")
        threading.Timer(0.3, release.set).start()  # the running callback returns while close waits
        nc2.close()
        n = len(calls)
        assert cc.closed
    finally:
        release.set()
        nc2.close()
    assert n == 1, f"{n - 1} callbacks ran with buffered messages during/after close()"


def test_close_ends_iterator_at_once(nats_server, js, stream):
    """nc.close() ends an iterating consume at once: the buffered messages are dropped, the
    loop does not go on yielding messages whose acks can only fail."""
    _publish(js, f"{stream.name}.m", 50)
    stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=60)
    nc2 = jssync.connect(nats_server.url)
    try:
        c = nc2.jetstream().consumer(stream.name, "D")
        it = c.consume(max_messages=100)
        first = next(it)
        wait_for(lambda: it._q.qsize() >= 49, what="messages buffered")
        nc2.close()
        rest = list(it)
    finally:
        nc2.close()
    assert first is not None
    assert rest == [], f"{len(rest)} messages yielded after close()"
