"""``ObjectStore.list()`` while another client keeps rewriting some objects lists every object
current when the call started (the object-store side of nats.go's "list while writing" idea; the
KV side is tests/integration/kv/test_snapshot_under_writes.py).

The server may report ``num_pending == 0`` on a message before the info of an object rewritten
while the listing's consumer was being created has arrived; the listing must not end there.
"""

from __future__ import annotations

import threading

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(120)

NAMES = [f"obj{i}" for i in range(10)]
REWRITTEN = NAMES[:5]
CALLS = 400
WRITERS = 3


def test_list_while_a_writer_rewrites_objects_lists_every_object(js, nats_server, unique):
    name = f"ol{unique}"
    store = js.create_object_store(bucket=name)
    for n in NAMES:
        store.put(n, b"0")
    stop = threading.Event()
    errors: list[BaseException] = []
    nc2 = jssync.connect(nats_server.url)

    def write() -> None:
        wstore = nc2.jetstream().object_store(name)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                wstore.put(REWRITTEN[i % len(REWRITTEN)], str(i).encode())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, name=f"obj-writer-{k}") for k in range(WRITERS)]
    for t in threads:
        t.start()
    short = []
    try:
        for _ in range(CALLS):
            listed = sorted(info.name for info in store.list())
            if listed != NAMES:
                short.append(sorted(set(NAMES) - set(listed)))
    finally:
        stop.set()
        for t in threads:
            t.join(10 * FACTOR)
        nc2.close()
        js.delete_object_store(name)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert not short, f"{len(short)} of {CALLS} list() calls missed objects: {short[:5]}"
