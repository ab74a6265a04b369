"""KV snapshots while a writer updates keys: ``keys()``, ``history()`` and a watch's initial values
hold every key current when the call started (the idea of nats.go's kv_test.go: list keys while
another client keeps rewriting some of them).

The server may report ``num_pending == 0`` on a message before the value of a key rewritten while
the consumer was being created has arrived; the listing must not end there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import jssync
import jssync.kv.watcher as kvwatcher
from jssync.kv.keyvalue import KeyValueOp, KeyWatcher
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(120)

KEYS = [f"key{i}" for i in range(10)]
UPDATED = KEYS[:5]
CALLS = 50


@pytest.fixture
def writer_kv(js, nats_server, unique) -> Iterator[Any]:
    """A bucket holding 10 keys (all defaults) and a second connection rewriting 5 of them
    as fast as it can until the test ends."""
    name = f"sw{unique}"
    kv = js.create_key_value(bucket=name)
    for k in KEYS:
        kv.put(k, b"0")
    stop = threading.Event()
    errors: list[BaseException] = []
    nc2 = jssync.connect(nats_server.url)

    def write() -> None:
        wkv = nc2.jetstream().key_value(name)
        n = 0
        try:
            while not stop.is_set():
                n += 1
                wkv.put(UPDATED[n % len(UPDATED)], str(n).encode())
        except BaseException as exc:  # noqa: BLE001 - reported by the fixture
            errors.append(exc)

    t = threading.Thread(target=write, name="kv-writer")
    t.start()
    try:
        yield kv
    finally:
        stop.set()
        t.join(10 * FACTOR)
        nc2.close()
        js.delete_key_value(name)
    assert not t.is_alive()
    assert not errors, errors


def test_keys_while_a_writer_updates_lists_every_key(writer_kv):
    short = []
    for _ in range(CALLS):
        keys = writer_kv.keys()
        if keys != KEYS:
            short.append(sorted(set(KEYS) - set(keys)))
    assert not short, f"{len(short)} of {CALLS} keys() calls missed keys: {short[:5]}"


def test_watch_marker_comes_after_every_current_key_while_a_writer_updates(writer_kv):
    short = []
    for _ in range(CALLS):
        with writer_kv.watch() as w:
            seen: set[str] = set()
            while (e := w.next(timeout=10)) is not None:
                seen.add(e.key)
        if seen != set(KEYS):
            short.append(sorted(set(KEYS) - seen))
    assert not short, f"{len(short)} of {CALLS} watches sent the marker early: {short[:5]}"


def test_history_while_a_writer_updates_ends_with_the_latest_revisions(js, nats_server, unique):
    """history(">") holds every key, the ones not rewritten with their one revision."""
    name = f"sh{unique}"
    kv = js.create_key_value(bucket=name, history=2)
    try:
        for k in KEYS:
            kv.put(k, b"0")
        stop = threading.Event()
        with jssync.connect(nats_server.url) as nc2:
            wkv = nc2.jetstream().key_value(name)

            def write() -> None:
                n = 0
                while not stop.is_set():
                    n += 1
                    wkv.put(UPDATED[n % len(UPDATED)], str(n).encode())

            t = threading.Thread(target=write, name="kv-writer")
            t.start()
            try:
                short = []
                for _ in range(CALLS):
                    keys = {e.key for e in kv.history(">") if e.operation is KeyValueOp.PUT}
                    if keys != set(KEYS):
                        short.append(sorted(set(KEYS) - keys))
            finally:
                stop.set()
                t.join(10 * FACTOR)
        assert not short, f"{len(short)} of {CALLS} history() calls missed keys: {short[:5]}"
    finally:
        js.delete_key_value(name)


def test_watch_marker_comes_on_the_idle_heartbeat_when_the_last_message_is_gone(js, unique, monkeypatch):
    """The last sequence read is never delivered (here: a read that names one past the end, as
    for a value that expired meanwhile): the first idle heartbeat reads it again, and the
    marker comes then."""
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)
    reads: list[int] = []
    orig = KeyWatcher._read_bound

    def read_bound(self: KeyWatcher) -> int | None:
        got = orig(self)
        reads.append(0 if got is None else got)
        return got + 5 if got is not None and len(reads) == 1 else got

    monkeypatch.setattr(KeyWatcher, "_read_bound", read_bound)
    name = f"sg{unique}"
    kv = js.create_key_value(bucket=name)
    try:
        for k in KEYS:
            kv.put(k, b"0")
        with kv.watch() as w:
            initial = []
            while (e := w.next(timeout=5 * FACTOR)) is not None:
                initial.append(e.key)
            assert initial == KEYS
            assert len(reads) == 2, reads  # the first read, then one on the heartbeat
            r = kv.put("after", b"1")
            e = w.next(timeout=5 * FACTOR)
            assert e is not None and (e.key, e.revision) == ("after", r)
    finally:
        js.delete_key_value(name)


def test_keys_of_a_filter_list_while_a_writer_updates_lists_every_key(writer_kv):
    """Several filters (a consumer with filter_subjects): the last revision is read per filter."""
    wanted = ["key0", "key1", "key7"]
    short = []
    for _ in range(CALLS):
        keys = writer_kv.keys(["key0", "key1", "key7"])
        if keys != wanted:
            short.append(sorted(set(wanted) - set(keys)))
    assert not short, f"{len(short)} of {CALLS} keys() calls missed keys: {short[:5]}"
