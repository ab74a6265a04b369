"""KV watches and listings across a re-created consumer (ADR-8: initial values are the latest per key).

A watcher (and ``keys``/``history``, which read through one) re-creates its ordered push
consumer after a reconnect, missed heartbeats or a sequence gap. While the initial values
are still being read, the new consumer must again deliver the latest value per key (not
every revision after the last one seen), so no older revision arrives as if current and
a delete marker written after a key's older PUTs is not missed.

The faults are injected at an exact point: a wrapper around ``KeyWatcher._handle`` cuts
(or stalls) the connection through the TCP proxy right after the N-th message, and waits
until the watcher has noticed before it lets the reader go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import jssync
import jssync.kv.watcher as kvwatcher
from jssync.kv.keyvalue import Entry, KeyValueOp, KeyWatcher
from tests.conftest import FACTOR, wait_for
from tests.proxy import TcpProxy

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]

# Written in this order: e_i, l_i (v1), d_i (v1) for each i; then every l_i again (v2); then a
# delete of every d_i. The latest values start with the e keys, spread among older revisions.
EARLY = 2000    # keys written once
LIVE = 2000     # keys written twice
DELETED = 2000  # keys written once, then deleted
CUT_AT = 100    # the cut comes after this many messages: among the e keys



class Bucket:
    """A bucket whose older revisions sit after the first latest values, and what is latest per key."""

    def __init__(self, js: Any, name: str, size: int = 2) -> None:
        self.name = name
        self.kv = js.create_key_value(bucket=name, history=5, storage="memory")
        pre = f"$KV.{name}."
        latest: dict[str, tuple[int, KeyValueOp]] = {}
        futs: list[tuple[str, KeyValueOp, Any]] = []

        def put(key: str, value: bytes, op: KeyValueOp = KeyValueOp.PUT) -> None:
            hdrs = {"KV-Operation": "DEL"} if op is KeyValueOp.DEL else None
            futs.append((key, op, js.publish_async(pre + key, value, headers=hdrs)))

        for i in range(max(EARLY, LIVE, DELETED)):
            if i < EARLY:
                put(f"e{i:04}", b"early".ljust(size))
            if i < LIVE:
                put(f"l{i:04}", b"v1".ljust(size))
            if i < DELETED:
                put(f"d{i:04}", b"v1".ljust(size))
        for i in range(LIVE):
            put(f"l{i:04}", b"v2".ljust(size))
        for i in range(DELETED):
            put(f"d{i:04}", b"", KeyValueOp.DEL)
        js.publish_async_completed(timeout=30)
        for key, op, fut in futs:
            latest[key] = (int(fut.result().seq), op)
        self.latest = latest
        self.live = sorted(k for k, (_, op) in latest.items() if op is KeyValueOp.PUT)


@pytest.fixture
def bucket(js, unique) -> Iterator[Bucket]:
    b = Bucket(js, f"rs{unique}")
    try:
        yield b
    finally:
        js.delete_key_value(b.name)


@pytest.fixture
def big_bucket(js, unique) -> Iterator[Bucket]:
    """12 MB of older revisions: more than the server pushes before it waits for flow control."""
    b = Bucket(js, f"rb{unique}", size=2000)
    try:
        yield b
    finally:
        js.delete_key_value(b.name)


def _connect(url: str, **kw: Any) -> jssync.Connection:
    opts: dict[str, Any] = dict(reconnect_time_wait=0.1, max_reconnect_attempts=-1, timeout=2.0,
                                name="kv-reset-client")
    opts.update(kw)
    return jssync.connect(url, **opts)


def _cut_after(monkeypatch: pytest.MonkeyPatch, n: int, fault: Any) -> dict[str, int]:
    """Run ``fault(watcher)`` on the reader thread right after the watcher handled its n-th message."""
    state = {"handled": 0, "faults": 0}
    orig = KeyWatcher._handle

    def handle(self: KeyWatcher, msg: Any) -> None:
        orig(self, msg)
        state["handled"] += 1
        if state["handled"] == n:
            state["faults"] += 1
            fault(self)

    monkeypatch.setattr(KeyWatcher, "_handle", handle)
    return state


def _drop_and_wait(proxy: TcpProxy, nc: jssync.Connection):
    def fault(w: KeyWatcher) -> None:
        before = nc.stats["reconnects"]
        proxy.drop()
        wait_for(lambda: nc.stats["reconnects"] > before and nc.is_connected, 10, what="the reconnect")
        wait_for(lambda: w._reset_needed, 5, what="the watcher to see the reconnect")

    return fault


def _check_initial(b: Bucket, initial: list[Entry]) -> None:
    """Every initial entry is the latest of its key, each key once, and every key is there."""
    seen: dict[str, Entry] = {}
    for e in initial:
        rev, op = b.latest[e.key]
        assert e.key not in seen, f"{e.key} delivered twice: {seen[e.key]} then {e}"
        assert (e.revision, e.operation) == (rev, op), \
            f"initial value of {e.key} is revision {e.revision} ({e.operation}), its latest is {rev} ({op})"
        seen[e.key] = e
    assert set(seen) == set(b.latest), f"{len(set(b.latest) - set(seen))} keys missing from the initial values"


def test_keys_cut_while_listing_lists_no_deleted_key(proxy, bucket, monkeypatch):
    with _connect(proxy.url) as nc:
        kv = nc.jetstream().key_value(bucket.name)
        state = _cut_after(monkeypatch, CUT_AT, _drop_and_wait(proxy, nc))
        keys = kv.keys(timeout=30)
        assert state["faults"] == 1, "the listing ended before the cut"
        deleted = [k for k in keys if k.startswith("d")]
        assert not deleted, f"keys() listed {len(deleted)} deleted keys (of {len(keys)})"
        assert keys == bucket.live


def test_watch_cut_during_initial_values_delivers_only_latest(proxy, bucket, monkeypatch):
    with _connect(proxy.url) as nc:
        kv = nc.jetstream().key_value(bucket.name)
        state = _cut_after(monkeypatch, CUT_AT, _drop_and_wait(proxy, nc))
        with kv.watch() as w:
            initial: list[Entry] = []
            while (e := w.next(timeout=20)) is not None:
                initial.append(e)
            assert state["faults"] == 1
            stale_puts = [e for e in initial if e.key.startswith("d") and e.operation is KeyValueOp.PUT]
            assert not stale_puts, f"{len(stale_puts)} PUTs of deleted keys among the initial values"
            _check_initial(bucket, initial)
            # and the watch goes on with updates, nothing repeated
            r = kv.put("after", b"x")
            e = w.next(timeout=10)
            assert e is not None and (e.key, e.revision) == ("after", r)
            with pytest.raises(jssync.TimeoutError):
                w.next(timeout=0.3)


def test_watch_reset_by_missed_heartbeats_without_a_disconnect(proxy, big_bucket, monkeypatch):
    """A stall shorter than PING detection: the watcher misses heartbeats and re-creates its consumer.

    The server stops pushing at its flow-control window (the bucket holds more than that), so
    the heartbeats are missed while the initial values are still being read.
    """
    bucket = big_bucket
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)
    resets: list[tuple[str, bool]] = []
    orig_reset = KeyWatcher._reset

    def reset(self: KeyWatcher, why: str) -> None:
        resets.append((why, self._init_done))
        if "missed heartbeats" in why:
            proxy.forward()  # the new consumer is made on the same, flowing again, connection
        orig_reset(self, why)

    monkeypatch.setattr(KeyWatcher, "_reset", reset)
    with _connect(proxy.url, ping_interval=60) as nc:
        kv = nc.jetstream().key_value(bucket.name)
        state = _cut_after(monkeypatch, CUT_AT, lambda w: proxy.stall(new_connections=False))
        with kv.watch() as w:
            initial: list[Entry] = []
            while (e := w.next(timeout=20)) is not None:
                initial.append(e)
            assert state["faults"] == 1
            # the reset came while the initial values were being read
            assert any("missed heartbeats" in why and not done for why, done in resets), resets
            assert nc.stats["reconnects"] == 0
            _check_initial(bucket, initial)


def test_keys_retries_the_consumer_create_within_its_timeout(proxy, bucket):
    """The connection is down when keys() starts: it waits for it within its own timeout."""
    with _connect(proxy.url) as nc:
        js = nc.jetstream(timeout=1.0)
        kv = js.key_value(bucket.name)
        attempts = []
        create = js.create_consumer

        def counting_create(*a: Any, **kw: Any) -> Any:
            attempts.append(time.monotonic())
            return create(*a, **kw)

        js.create_consumer = counting_create  # type: ignore[method-assign]
        proxy.refuse()
        proxy.drop()
        wait_for(lambda: not nc.is_connected, 5, what="the disconnect")
        out: dict[str, Any] = {}

        def run() -> None:
            t0 = time.monotonic()
            try:
                out["keys"] = kv.keys(timeout=20)
            except BaseException as exc:  # noqa: BLE001 - reported below
                out["error"] = exc
            out["took"] = time.monotonic() - t0

        t = threading.Thread(target=run)
        t.start()
        # longer than the context's 1 s timeout: the first create is lost
        wait_for(lambda: "took" in out or (attempts and time.monotonic() - attempts[0] > 2.5), 10,
                 what="the first create to time out")
        proxy.forward()
        t.join(25 * FACTOR)
        assert not t.is_alive()
        assert "error" not in out, f"keys() failed after {out['took']:.1f}s: {out['error']!r}"
        assert out["keys"] == bucket.live
        assert out["took"] < 20 * FACTOR


def test_history_cut_while_reading_is_complete_and_in_order(proxy, bucket, monkeypatch):
    """history() (every revision: re-created from the next revision) across the same cut."""
    with _connect(proxy.url) as nc:
        kv = nc.jetstream().key_value(bucket.name)
        state = _cut_after(monkeypatch, CUT_AT, _drop_and_wait(proxy, nc))
        revs = [e.revision for e in kv.history(">", timeout=30)]
        assert state["faults"] == 1
        total = EARLY + 2 * LIVE + 2 * DELETED
        assert revs == list(range(1, total + 1))
