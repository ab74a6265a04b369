"""The disconnect promises (docs/reliability.md, docs/faults.md) through the TCP proxy.

- a ``request`` (and ``js.publish``) made while disconnected with the publish queue at its
  bound keeps its own timeout: it raises ``TimeoutError`` on time, not after 15 x the
  connect timeout;
- a ``fetch`` whose pull request waited for the reconnect and whose caller gave up (the
  fetch ended at its deadline) does not have that pull request sent after the reconnect:
  the server would hand messages to an inbox nobody reads (lost with ``ack_policy=none``);
- a KV watch and an ordered consumer (last_per_subject) go on through 8 drops and leave no
  extra client subscription or server consumer behind.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import jssync
from tests.conftest import FACTOR, wait_for
from tests.proxy import LinkEvents, connect_through, go_down

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


def _connect(url: str, ev: LinkEvents, **kw: Any) -> jssync.Connection:
    return connect_through(url, ev, "promise-client", 1.0, **kw)



def test_request_keeps_its_timeout_with_the_queue_full_while_disconnected(proxy, nats_server, unique):
    ev = LinkEvents()
    subject = f"promise.full.{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        sub = direct.subscribe(f"promise.svc.{unique}", callback=lambda m: m.respond(b"ok"))
        direct.flush()
        assert nc.request(f"promise.svc.{unique}", b"warm", timeout=2).data == b"ok"  # the reply inbox exists
        go_down(proxy, ev, nc)
        for _ in range(65536):  # the queue's bound
            nc.publish(subject, b"x")
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError):
            nc.request(f"promise.svc.{unique}", b"q", timeout=0.5)
        took = time.monotonic() - t0
        assert took < 0.5 + 0.3 * FACTOR, f"request(timeout=0.5) took {took:.2f}s"
        proxy.forward()
        assert ev.reconnected.wait(5 * FACTOR)
        nc.flush(timeout=10 * FACTOR)
        sub.unsubscribe()


def test_fetch_that_ended_while_disconnected_does_not_pull_after_the_reconnect(proxy, nats_server, unique):
    ev = LinkEvents()
    name = f"REV{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        djs = direct.jetstream()
        djs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        try:
            djs.create_consumer(name, durable_name="C", ack_policy="none")
            js = nc.jetstream(timeout=2)
            consumer = js.consumer(name, "C")
            assert list(consumer.fetch(1, expires=0.2)) == []  # warm-up: inbox pool, consumer handle
            go_down(proxy, ev, nc)
            res = consumer.fetch(10, expires=0.3)
            assert list(res) == []  # ends at its deadline: the pull request never left
            for i in range(10):
                djs.publish(f"{name}.x", str(i).encode())
            proxy.forward()
            assert ev.reconnected.wait(5 * FACTOR)
            nc.flush(timeout=5 * FACTOR)
            got = [int(m.data) for m in consumer.fetch(10, expires=1.0)]
            info = djs.consumer(name, "C").info()
            assert got == list(range(10)), f"fetched {got}; delivered to nobody: {info.delivered.stream_seq - len(got)}"
        finally:
            djs.delete_stream(name)


def _subs(nc: jssync.Connection) -> int:
    return len(nc.client._subs)


def test_kv_watch_and_ordered_consumer_leak_nothing_across_many_resets(proxy, nats_server, unique):
    """8 drops: a KV watch and an ordered consumer (last_per_subject) keep working, and the
    client's subscriptions and the server's consumers stay at what one of each needs."""
    ev = LinkEvents()
    bucket = f"REVKV{unique}"
    with jssync.connect(nats_server.url) as direct, _connect(proxy.url, ev) as nc:
        djs = direct.jetstream()
        dkv = djs.create_key_value(bucket=bucket, history=3, storage="memory")
        try:
            for i in range(5):
                dkv.put(f"k{i}", b"0")
            js = nc.jetstream(timeout=2)
            kv = js.key_value(bucket)
            w = kv.watch()
            seen = [w.next(timeout=2) for _ in range(6)]
            assert seen[-1] is None
            oc = js.stream(f"KV_{bucket}").ordered_consumer(deliver_policy="last_per_subject",
                                                              filter_subjects=f"$KV.{bucket}.>")
            got = [oc.next(timeout=2) for _ in range(5)]
            assert sorted(m.subject for m in got) == [f"$KV.{bucket}.k{i}" for i in range(5)]
            base_subs = _subs(nc)
            base_cons = djs.stream(f"KV_{bucket}").info().state.consumer_count
            for r in range(8):
                ev.reconnected.clear()
                proxy.drop()
                assert ev.reconnected.wait(5 * FACTOR), f"reset {r}: no reconnect"
                dkv.put(f"k{r % 5}", f"r{r}".encode())
                e = w.next(timeout=5 * FACTOR)
                assert e is not None and e.key == f"k{r % 5}" and e.value == f"r{r}".encode(), (r, e)
                m = oc.next(timeout=5 * FACTOR)
                assert m.data == f"r{r}".encode(), (r, m.data)
            assert sorted(kv.keys(timeout=5)) == [f"k{i}" for i in range(5)]
            wait_for(lambda: _subs(nc) <= base_subs, 3, what=f"subscriptions back to {base_subs}")
            wait_for(lambda: djs.stream(f"KV_{bucket}").info().state.consumer_count <= base_cons, 5,
                     what=f"consumers back to {base_cons}")
            w.stop()
        finally:
            djs.delete_key_value(bucket)
