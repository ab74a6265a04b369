"""``nc.drain()`` drains every consume and subscription together, not one after another:
many idle consumes drain in about the time of one, and nothing buffered is lost; real server."""

from __future__ import annotations

import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)

CONSUMES = 100


def test_one_hundred_idle_consumes_drain_in_under_two_seconds(nats_server, js, stream):
    for i in range(CONSUMES):
        stream.create_consumer(durable_name=f"D{i}", ack_policy="explicit")
    nc2 = jssync.connect(nats_server.url)
    try:
        js2 = nc2.jetstream()
        ccs = [js2.consumer(stream.name, f"D{i}").consume(lambda m: m.ack()) for i in range(CONSUMES)]
        its = [js2.consumer(stream.name, f"D{i}").consume() for i in range(3)]  # iterators too
        subs = [nc2.subscribe(f"{stream.name}.core.{i}") for i in range(10)]
        start = time.monotonic()
        nc2.drain()
        took = time.monotonic() - start
        assert took < 2 * FACTOR, f"drain took {took:.2f}s for {CONSUMES} idle consumes"
        assert all(cc.closed for cc in ccs)
        assert all(s.is_closed for s in subs)
        for it in its:
            assert list(it) == []
    finally:
        nc2.close()


def test_drain_of_many_consumes_hands_over_what_they_hold(nats_server, js, stream):
    """Each callback consume gets every message it was sent before the drain, through its
    callback, and acks it: nothing is left unacknowledged on any consumer."""
    n_consumes, per = 20, 10
    for i in range(n_consumes):
        stream.create_consumer(durable_name=f"H{i}", ack_policy="explicit", filter_subject=f"{stream.name}.h{i}")
    for i in range(n_consumes):
        for j in range(per):
            js.publish_async(f"{stream.name}.h{i}", b"%d" % j)
    js.publish_async_completed(20)
    nc2 = jssync.connect(nats_server.url)
    got: list[int] = [0] * n_consumes
    lock = threading.Lock()
    try:
        js2 = nc2.jetstream()

        def handler(i):
            def cb(m):
                with lock:
                    got[i] += 1
                m.ack()
            return cb

        for i in range(n_consumes):
            js2.consumer(stream.name, f"H{i}").consume(handler(i))
        wait_for(lambda: sum(got) >= n_consumes * per // 2, timeout=10, what="half of them handled")
        nc2.drain(timeout=30 * FACTOR)
    finally:
        nc2.close()
    assert got == [per] * n_consumes
    for i in range(n_consumes):
        info = js.consumer(stream.name, f"H{i}").info()
        assert info.num_ack_pending == 0 and info.num_pending == 0, (i, info.num_ack_pending, info.num_pending)


def test_drain_naks_what_unread_iterator_consumes_hold(nats_server, js, stream):
    """Iterator consumes nobody reads any more: nc.drain() finishes at once for all of them
    together, and what they held is nak'ed, so it is delivered again at once elsewhere."""
    n_consumes, per = 20, 5
    for i in range(n_consumes):
        stream.create_consumer(durable_name=f"I{i}", ack_policy="explicit", ack_wait=60,
                               filter_subject=f"{stream.name}.i{i}")
        for j in range(per):
            js.publish_async(f"{stream.name}.i{i}", b"%d" % j)
    js.publish_async_completed(20)
    nc2 = jssync.connect(nats_server.url)
    try:
        js2 = nc2.jetstream()
        its = [js2.consumer(stream.name, f"I{i}").consume() for i in range(n_consumes)]
        wait_for(lambda: all(js.consumer(stream.name, f"I{i}").info().num_ack_pending == per
                             for i in range(n_consumes)), timeout=10, what="every message delivered")
        start = time.monotonic()
        nc2.drain(timeout=30 * FACTOR)
        took = time.monotonic() - start
        assert took < 2 * FACTOR, f"drain took {took:.2f}s"
        assert all(it.closed for it in its)
    finally:
        nc2.close()
    for i in range(n_consumes):  # nak'ed: here again at once (ack_wait is 60 s)
        c = js.consumer(stream.name, f"I{i}")
        got = list(c.fetch(per, expires=5 * FACTOR))
        assert len(got) == per, (i, len(got))
        for m in got:
            assert m.metadata.num_delivered == 2
            m.ack_sync()
