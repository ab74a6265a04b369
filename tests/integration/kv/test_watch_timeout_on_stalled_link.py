"""A watcher's next(timeout) bounds the whole call, also when it has to re-create its consumer
on a stalled link (sockets open, nothing moving: no disconnect is noticed)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import jssync
import jssync.kv.keyvalue as kvmod
import jssync.kv.watcher as kvwatcher
from tests.conftest import FACTOR

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def _connect(url: str) -> jssync.Connection:
    # no PING for a minute: the stall is not noticed as a lost connection
    return jssync.connect(url, ping_interval=60, timeout=2.0, name="kv-stall-client")


def test_next_keeps_its_timeout_while_the_consumer_is_recreated_on_a_stalled_link(proxy, js, unique,
                                                                                   monkeypatch):
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)  # heartbeats missed after 0.6 s
    resets: list[str] = []
    orig_reset = kvmod.KeyWatcher._reset

    def reset(self: Any, why: str) -> None:
        resets.append(why)
        orig_reset(self, why)

    monkeypatch.setattr(kvmod.KeyWatcher, "_reset", reset)
    name = f"ws{unique}"
    js.create_key_value(bucket=name).put("a", b"1")
    try:
        with _connect(proxy.url) as nc:
            kv = nc.jetstream(timeout=5.0).key_value(name)
            w = kv.watch()
            try:
                assert w.next(timeout=5) is not None
                assert w.next(timeout=5) is None
                proxy.stall()
                took = []
                for _ in range(3):  # the first call notices the missed heartbeats, the next ones retry
                    t0 = time.monotonic()
                    with pytest.raises(jssync.TimeoutError):
                        w.next(timeout=2)
                    took.append(time.monotonic() - t0)
                assert resets, "the watcher never tried to re-create its consumer"
                assert max(took) < 2 + 0.5 * FACTOR, f"next(timeout=2) took {took}"
                proxy.forward()
                rev = js.key_value(name).put("b", b"2")
                got = None
                end = time.monotonic() + 20 * FACTOR
                while time.monotonic() < end:
                    try:
                        got = w.next(timeout=1)
                    except jssync.TimeoutError:
                        continue
                    break
                assert got is not None and (got.key, got.revision) == ("b", rev)
            finally:
                proxy.forward()
                w.stop()
    finally:
        js.delete_key_value(name)


def test_a_reset_left_no_time_by_the_call_is_done_by_the_next_call(js, unique):
    """A call whose time is up when the watcher must re-create its consumer raises its
    TimeoutError (it does not spin); the next call re-creates the consumer and goes on."""
    name = f"wn{unique}"
    kv = js.create_key_value(bucket=name)
    try:
        kv.put("a", b"1")
        with kv.watch() as w:
            assert w.next(timeout=5) is not None
            assert w.next(timeout=5) is None
            w._reset_needed = True  # as after a reconnect, noticed by this reader
            t0 = time.monotonic()
            with pytest.raises(jssync.TimeoutError):
                w.next(timeout=0.0005)
            assert time.monotonic() - t0 < 0.5 * FACTOR
            rev = kv.put("b", b"2")
            e = w.next(timeout=5)
            assert e is not None and (e.key, e.revision) == ("b", rev)
    finally:
        js.delete_key_value(name)


def test_keys_history_and_watch_keep_their_timeouts_on_a_stalled_link(proxy, js, unique):
    """The inbox subscription's check waits on the stalled link too: the consumer create gets
    only what is left (keys/history: their timeout; watch: the context's timeout)."""
    name = f"wk{unique}"
    js.create_key_value(bucket=name).put("a", b"1")
    try:
        with _connect(proxy.url) as nc:
            kv = nc.jetstream(timeout=3.0).key_value(name)
            assert kv.keys() == ["a"]
            proxy.stall()
            try:
                for call, bound in ((lambda: kv.keys(timeout=2), 2.0), (lambda: kv.history("a", timeout=2), 2.0),
                                    (kv.watch, 3.0)):
                    t0 = time.monotonic()
                    with pytest.raises(jssync.TimeoutError):
                        call()
                    took = time.monotonic() - t0
                    assert took < bound + 0.5 * FACTOR, f"took {took:.1f}s (bound {bound}s)"
            finally:
                proxy.forward()
    finally:
        js.delete_key_value(name)
