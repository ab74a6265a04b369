"""A configuration service on the jssync key-value store.

One thread watches the ``config`` bucket and keeps a local copy of every setting up to
date; the main thread changes settings (a compare-and-set update, a delete) and reads
them back, with Direct Get, a batch read and a point-in-time multi-key read.

Starts its own nats-server, so it runs anywhere::

    python examples/kv_config_watcher.py
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import jssync
from jssync.server import NatsServer

if TYPE_CHECKING:
    from jssync import KeyValue


def watch_config(kv: KeyValue, settings: dict[str, bytes], ready: threading.Event,
                 changed: threading.Condition) -> None:
    """Keep ``settings`` equal to the bucket's current values until the watcher stops."""
    with kv.watch("app.>") as watcher:
        for entry in watcher:
            if entry is None:  # the initial values are all in
                print(f"[watcher] loaded {len(settings)} setting(s): {sorted(settings)}")
                ready.set()
                continue
            with changed:
                if entry.operation == "PUT":
                    settings[entry.key] = entry.value
                    print(f"[watcher] {entry.key} = {entry.value.decode()} (revision {entry.revision})")
                else:
                    settings.pop(entry.key, None)
                    print(f"[watcher] {entry.key} removed ({entry.operation})")
                changed.notify_all()
            if entry.key == "app.shutdown":
                watcher.stop()


def main() -> int:
    with NatsServer() as server, jssync.connect(server.url) as nc:
        js = nc.jetstream()
        kv = js.create_key_value(bucket="config", history=5)
        kv.put("app.color", b"blue")
        kv.put("app.size", b"10")

        settings: dict[str, bytes] = {}
        ready = threading.Event()
        changed = threading.Condition()
        t = threading.Thread(target=watch_config, args=(kv, settings, ready, changed), name="config-watcher")
        t.start()
        if not ready.wait(10):
            raise SystemExit("the watcher did not load the initial values")

        # compare-and-set: only one writer wins
        entry = kv.get("app.size")
        kv.update("app.size", b"20", entry.revision)
        try:
            kv.update("app.size", b"30", entry.revision)  # stale revision
        except jssync.WrongLastSequenceError:  # KeyWrongLastSequenceError is one
            print("[main] stale update refused, as expected")

        kv.put("app.color", b"green")
        kv.delete("app.size")
        with changed:
            if not changed.wait_for(lambda: "app.size" not in settings and settings.get("app.color") == b"green",
                                    timeout=10):
                raise SystemExit("the watcher did not see the changes")

        # reads: Direct Get (any replica may answer), history, keys
        print("[main] color is", kv.get("app.color").value.decode())
        print("[main] color history:", [e.value.decode() for e in kv.history("app.color")])
        print("[main] keys:", kv.keys())

        # the stream under the bucket: a batch read and a consistent multi-key read
        stream = kv.stream
        revisions = [m.seq for m in stream.direct_get_batch("$KV.config.>", 100)]
        print("[main] every stored revision:", revisions)
        as_of = stream.direct_get_last_for(["$KV.config.app.>"], up_to_seq=2)
        print("[main] settings as of revision 2:",
              {m.subject.removeprefix("$KV.config."): m.data.decode() for m in as_of})

        kv.put("app.shutdown", b"now")
        t.join(10)
        if t.is_alive():
            raise SystemExit("the watcher did not stop")
        js.delete_key_value("config")
    print("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
