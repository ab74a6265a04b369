"""A watcher whose bucket is deleted ends: next() and iteration raise BucketNotFoundError (a
jssync.StreamNotFoundError, as the ordered pull consume raises) within a few seconds.

The server sends nothing to a push consumer's deliver subject when its stream goes (the
heartbeats just stop); the watcher hears the consumer-deleted advisory, or, without it,
misses the heartbeats, and then finds the stream gone when it re-creates its consumer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import jssync
import jssync.kv.watcher as kvwatcher
from jssync.kv.keyvalue import KeyWatcher
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def _bucket(js: Any, unique: str) -> Any:
    kv = js.create_key_value(bucket=f"wd{unique}")
    kv.put("a", b"1")
    return kv


def test_next_raises_bucket_not_found_soon_after_the_bucket_is_deleted(js, unique):
    kv = _bucket(js, unique)
    with kv.watch() as w:
        assert w.next(timeout=5) is not None
        assert w.next(timeout=5) is None
        t0 = time.monotonic()
        js.delete_key_value(kv.bucket)
        with pytest.raises(jssync.BucketNotFoundError) as info:
            w.next(timeout=30)
        took = time.monotonic() - t0
        assert isinstance(info.value, jssync.StreamNotFoundError)
        assert kv.bucket in str(info.value)
        assert took < 3 * FACTOR, f"the deleted bucket was noticed after {took:.1f}s"
        # and again on the next call: the watcher stays ended
        with pytest.raises(jssync.BucketNotFoundError):
            w.next(timeout=1)


def test_iteration_ends_with_bucket_not_found_after_the_bucket_is_deleted(js, unique):
    kv = _bucket(js, unique)
    out: dict[str, Any] = {}
    with kv.watch() as w:
        def run() -> None:
            try:
                for e in w:
                    out.setdefault("entries", []).append(e)
            except BaseException as exc:  # noqa: BLE001 - checked below
                out["error"] = exc
            out["at"] = time.monotonic()

        t = threading.Thread(target=run, name="kv-iterating")
        t.start()
        try:
            wait_for(lambda: None in out.get("entries", ()), 5, what="the end of the initial values")
            t0 = time.monotonic()
            js.delete_key_value(kv.bucket)
            t.join(10 * FACTOR)
            assert not t.is_alive(), "iteration still blocked after the bucket was deleted"
        finally:
            w.stop()
            t.join(5 * FACTOR)
    assert isinstance(out.get("error"), jssync.BucketNotFoundError), out
    assert out["at"] - t0 < 3 * FACTOR


def test_without_the_advisory_the_missed_heartbeats_end_it(js, unique, monkeypatch):
    """No consumer-deleted advisory (no permission to subscribe to it, or an imported API):
    the heartbeats stop, the consumer is re-created, the stream is gone."""
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)
    monkeypatch.setattr(KeyWatcher, "_watches_deletions", False, raising=False)
    kv = _bucket(js, unique)
    with kv.watch() as w:
        assert w.next(timeout=5) is not None
        assert w.next(timeout=5) is None
        t0 = time.monotonic()
        js.delete_key_value(kv.bucket)
        with pytest.raises(jssync.BucketNotFoundError):
            w.next(timeout=30)
        assert time.monotonic() - t0 < 3 * FACTOR
