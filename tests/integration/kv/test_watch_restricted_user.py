"""A user without permission for the watcher's extras (STREAM.MSG.GET, the JetStream advisories)
still lists keys and watches: the end marker falls back to the consumer's counts, the
deletion of the bucket to the missed heartbeats."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import jssync
import jssync.kv.watcher as kvwatcher
from jssync.server import NatsServer
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)

_PERMS = """
authorization {
  users: [
    {user: kvuser, password: kvpw, permissions: {
        publish: {deny: ["$JS.API.STREAM.MSG.GET.>"]},
        subscribe: {deny: ["$JS.EVENT.>"]}}}
  ]
}
"""


@pytest.fixture(scope="module")
def restricted_server() -> Iterator[NatsServer]:
    with NatsServer(jetstream=True, config=_PERMS) as srv:
        yield srv


def _connect(srv: NatsServer) -> jssync.Connection:
    return jssync.connect(srv.url, user="kvuser", password="kvpw", error_cb=lambda exc: None)


def test_keys_and_watch_without_permission_for_the_last_sequence_read(restricted_server, unique, monkeypatch):
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)
    with _connect(restricted_server) as nc:
        js = nc.jetstream(timeout=2.0)
        kv = js.create_key_value(bucket=f"rp{unique}")
        kv.put("a", b"1")
        kv.put("b", b"2")
        t0 = time.monotonic()
        assert kv.keys() == ["a", "b"]
        assert time.monotonic() - t0 < 1 * FACTOR
        with kv.watch() as w:
            assert [e.key for e in iter(lambda: w.next(timeout=5), None)] == ["a", "b"]
            r = kv.put("c", b"3")
            e = w.next(timeout=5)
            assert e is not None and (e.key, e.revision) == ("c", r)
            js.delete_key_value(kv.bucket)
            t0 = time.monotonic()
            with pytest.raises(jssync.BucketNotFoundError):
                w.next(timeout=20)
            assert time.monotonic() - t0 < 3 * FACTOR
