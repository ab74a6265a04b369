"""Key and value codecs on the jssync key-value store (NATS ADR-54, as orbit.go's kvcodec).

A settings tree keeps path keys (``/users/Ada Lovelace/prefs``: any character but ``.``) and
JSON values that are compressed by a codec written here; Base64Codec and PathCodec store exactly what orbit.go's
codecs store, so a Go service using orbit.go could share the bucket.

Starts its own nats-server, so it runs anywhere::

    python examples/kv_codecs.py
"""

from __future__ import annotations

import zlib
from typing import Any

import jssync
from jssync.server import NatsServer


class ZlibCodec:
    """A value codec of our own: any object with encode_value and decode_value is one."""

    def encode_value(self, value: Any) -> bytes:
        return zlib.compress(value)

    def decode_value(self, stored: bytes) -> bytes:
        return zlib.decompress(stored)


def main() -> int:
    with NatsServer() as server, jssync.connect(server.url) as nc:
        js = nc.jetstream()
        raw = js.create_key_value(bucket="settings", history=3)
        # path keys -> subject tokens -> each token base64 (any character); JSON, then compressed
        kv = raw.with_codecs(key_codec=jssync.KeyChainCodec(jssync.PathCodec(), jssync.Base64Codec()),
                             value_codec=jssync.ValueChainCodec(jssync.JSONCodec(), ZlibCodec()))

        kv.put("/users/Ada Lovelace/prefs", {"theme": "dark", "font": 14})
        kv.put("/users/Ada Lovelace/tabs", ["inbox", "notes"])
        rev = kv.put("/users/Grace Hopper/prefs", {"theme": "light", "font": 12})
        kv.update("/users/Grace Hopper/prefs", {"theme": "light", "font": 16}, rev)

        print("Ada:", kv.keys("/users/Ada Lovelace/*"))
        print("Grace's prefs:", kv.get("/users/Grace Hopper/prefs").value)
        print("font history:", [e.value["font"] for e in kv.history("/users/Grace Hopper/prefs")])
        print("stored keys:", raw.keys())

        with kv.watch("/users/*/prefs") as watcher:
            for entry in watcher:
                if entry is None:
                    break
                print(f"watch: {entry.key} (stored as {entry.raw_key}) -> {entry.value}")

        try:
            kv.put("/users/readme.txt", {})  # PathCodec would read the '.' back as a '/'
        except jssync.InvalidKeyError as exc:
            print("refused:", exc)
        js.delete_key_value("settings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
