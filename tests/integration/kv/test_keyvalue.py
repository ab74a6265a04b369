"""The key-value store (ADR-8) against a real nats-server: buckets, reads, writes, history, keys."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from nats.js import api

import jssync
from jssync.kv.keyvalue import (
    BadBucketError,
    BucketExistsError,
    BucketNotFoundError,
    Entry,
    InvalidBucketNameError,
    InvalidKeyError,
    KeyDeletedError,
    KeyExistsError,
    KeyHistoryTooLargeError,
    KeyNotFoundError,
    KeyValue,
    KeyValueError,
    KeyValueOp,
    KeyValueStatus,
    KeyWrongLastSequenceError,
)
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kv(js, unique):
    b = js.create_key_value(bucket=f"b{unique}", history=5, storage="memory")
    try:
        yield b
    finally:
        js.delete_key_value(f"b{unique}")


# -- buckets --------------------------------------------------------------------------------


def test_create_bucket_stream_config(js, unique):
    kv = js.create_key_value(bucket=f"c{unique}", history=3, ttl=60.0, max_value_size=1024, description="d",
                             storage="memory", compression=True, metadata={"team": "x"})
    try:
        assert isinstance(kv, KeyValue) and kv.bucket == f"c{unique}"
        cfg = js.stream(f"KV_c{unique}").cached_info.config
        assert cfg.subjects == [f"$KV.c{unique}.>"]
        assert cfg.max_msgs_per_subject == 3
        assert cfg.max_age == 60.0 and cfg.duplicate_window == 60.0
        assert cfg.max_msg_size == 1024
        assert cfg.allow_rollup_hdrs and cfg.deny_delete and cfg.allow_direct
        assert cfg.discard == api.DiscardPolicy.NEW
        assert cfg.max_msgs == -1 and cfg.max_bytes == -1
        assert (cfg.metadata or {}).get("team") == "x"
        st = kv.status()
        assert isinstance(st, KeyValueStatus)
        assert (st.bucket, st.history, st.ttl, st.values, st.backing_store) == (f"c{unique}", 3, 60.0, 0,
                                                                               "JetStream")
        assert st.is_compressed and st.metadata.get("team") == "x"
        # same config again: the same bucket
        again = js.create_key_value(api.KeyValueConfig(bucket=f"c{unique}", history=3, ttl=60.0,
                                                       max_value_size=1024, description="d",
                                                       storage=api.StorageType.MEMORY),
                                    compression=True, metadata={"team": "x"})
        assert again.bucket == kv.bucket
        with pytest.raises(BucketExistsError) as ei:
            js.create_key_value(bucket=f"c{unique}", history=4, storage="memory")
        assert isinstance(ei.value, jssync.StreamNameInUseError)
    finally:
        js.delete_key_value(f"c{unique}")


def test_bucket_defaults(js, unique):
    kv = js.create_key_value(bucket=f"d{unique}")
    try:
        cfg = kv.stream.cached_info.config
        assert cfg.max_msgs_per_subject == 1
        assert cfg.storage == api.StorageType.FILE
        assert cfg.num_replicas == 1
        assert not cfg.max_age
        assert cfg.duplicate_window == 120.0
        assert kv.status().ttl is None
    finally:
        js.delete_key_value(f"d{unique}")


def test_bad_bucket_options_raise_before_sending(js):
    for bad in ["", "a.b", "a b", "a*", "ä", 3]:
        with pytest.raises(InvalidBucketNameError):
            js.create_key_value(bucket=bad)
    with pytest.raises(KeyHistoryTooLargeError, match="65"):
        js.create_key_value(bucket="ok", history=65)
    with pytest.raises(ValueError, match="history"):
        js.create_key_value(bucket="ok", history=-1)
    with pytest.raises(ValueError, match="ttl"):
        js.create_key_value(bucket="ok", ttl=-1)
    with pytest.raises(TypeError, match="unknown option .colour. for create_key_value"):
        js.create_key_value(bucket="ok", colour="red")
    with pytest.raises(ValueError, match="bucket="):
        js.create_key_value(history=2)
    with pytest.raises(InvalidBucketNameError):
        js.key_value("a.b")
    with pytest.raises(InvalidBucketNameError):
        js.delete_key_value("")


def test_open_and_delete_bucket(js, unique, kv):
    kv.put("k", b"v")
    other = js.key_value(kv.bucket)
    assert other.get("k").value == b"v"
    with pytest.raises(BucketNotFoundError) as ei:
        js.key_value(f"nope{unique}")
    assert isinstance(ei.value, jssync.StreamNotFoundError) and isinstance(ei.value, KeyValueError)
    with pytest.raises(BucketNotFoundError):
        js.delete_key_value(f"nope{unique}")


def test_get_on_a_deleted_bucket(js, unique):
    kv = js.create_key_value(bucket=f"g{unique}", storage="memory")
    kv.put("k", b"v")
    js.delete_key_value(f"g{unique}")
    with pytest.raises(BucketNotFoundError):
        kv.get("k", timeout=2)
    with pytest.raises(BucketNotFoundError):
        kv.status()
    with pytest.raises(BucketNotFoundError):
        kv.keys()
    with pytest.raises(BucketNotFoundError):
        kv.watch()


def test_open_a_stream_that_is_not_a_bucket(js, unique):
    js.create_stream(name=f"KV_s{unique}", subjects=[f"s{unique}.>"], storage="memory")
    try:
        with pytest.raises(BadBucketError):
            js.key_value(f"s{unique}")
    finally:
        js.delete_stream(f"KV_s{unique}")


# -- get / put ----------------------------------------------------------------------------------


def test_put_and_get(kv):
    r1 = kv.put("name", b"Bob")
    r2 = kv.put("name", "Alice")  # str values are stored as UTF-8
    assert r2 == r1 + 1
    e = kv.get("name")
    assert isinstance(e, Entry)
    assert (e.bucket, e.key, e.value, e.revision, e.delta, e.operation) == (kv.bucket, "name", b"Alice", r2, 0,
                                                                            KeyValueOp.PUT)
    assert e.operation == "PUT"
    assert e.created is not None and abs((dt.datetime.now(dt.UTC) - e.created).total_seconds()) < 60
    assert kv.get("name", revision=r1).value == b"Bob"
    assert kv.get("name", r1).revision == r1


def test_get_missing(kv):
    with pytest.raises(KeyNotFoundError) as ei:
        kv.get("missing")
    assert isinstance(ei.value, jssync.NotFoundError)
    assert not isinstance(ei.value, KeyDeletedError)
    r = kv.put("other", b"x")
    with pytest.raises(KeyNotFoundError, match="not of key"):
        kv.get("missing", revision=r)
    with pytest.raises(KeyNotFoundError):
        kv.get("other", revision=r + 100)


def test_get_uses_direct_get(kv, nc):
    seen: list[str] = []
    ev = threading.Event()

    def spy(msg):
        seen.append(msg.subject)
        ev.set()

    kv.put("k.1", b"v")
    mon = nc.subscribe("$JS.API.>", callback=spy)
    try:
        nc.flush()
        assert kv.get("k.1").value == b"v"
        assert ev.wait(5)
        assert seen[0] == f"$JS.API.DIRECT.GET.KV_{kv.bucket}.$KV.{kv.bucket}.k.1"
    finally:
        mon.unsubscribe()


def test_get_without_direct_uses_the_leader(js, nc, unique):
    kv = js.create_key_value(bucket=f"n{unique}", direct=False, storage="memory")
    try:
        assert not kv.stream.cached_info.config.allow_direct
        r = kv.put("k", b"v")
        seen: list[str] = []
        mon = nc.subscribe("$JS.API.>", callback=lambda m: seen.append(m.subject))
        try:
            nc.flush()
            assert kv.get("k").value == b"v"
            assert kv.get("k", revision=r).value == b"v"
            with pytest.raises(KeyNotFoundError):
                kv.get("nope")
            wait_for(lambda: len(seen) >= 3, 5)
            assert all(s == f"$JS.API.STREAM.MSG.GET.KV_n{unique}" for s in seen)
        finally:
            mon.unsubscribe()
    finally:
        js.delete_key_value(f"n{unique}")


@pytest.mark.parametrize("key", ["", ".a", "a.", "a..b", "a b", "a*", "a.>", "ä", "a\r\n"])
def test_invalid_keys(kv, key):
    with pytest.raises(InvalidKeyError) as ei:
        kv.put(key, b"x")
    assert isinstance(ei.value, ValueError)
    with pytest.raises(InvalidKeyError):
        kv.get(key)
    with pytest.raises(InvalidKeyError):
        kv.delete(key)


def test_valid_unusual_keys(kv):
    for key in ["a/b", "a=b", "a-b_c", "A.B.C", "1"]:
        kv.put(key, key.encode())
        assert kv.get(key).value == key.encode()


def test_bad_values_and_revisions(kv):
    with pytest.raises(TypeError, match="int"):
        kv.put("k", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="revision"):
        kv.get("k", revision=0)
    with pytest.raises(ValueError, match="last"):
        kv.update("k", b"x", -1)


# -- create / update / delete / purge -------------------------------------------------------


def test_create_and_update(kv):
    r1 = kv.create("k", b"1")
    with pytest.raises(KeyExistsError) as ei:
        kv.create("k", b"2")
    assert isinstance(ei.value, KeyWrongLastSequenceError)
    assert isinstance(ei.value, jssync.WrongLastSequenceError)
    r2 = kv.update("k", b"2", r1)
    with pytest.raises(KeyWrongLastSequenceError) as ei2:
        kv.update("k", b"3", r1)
    assert ei2.value.err_code in (10071, 10164)
    assert kv.get("k").revision == r2
    # last=0: only when the key never had a value
    r = kv.update("fresh", b"x", 0)
    assert kv.get("fresh").revision == r


def test_delete_keeps_history(kv):
    r1 = kv.put("k", b"1")
    kv.delete("k")
    with pytest.raises(KeyDeletedError) as ei:
        kv.get("k")
    e = ei.value
    assert isinstance(e, KeyNotFoundError)
    assert e.op == KeyValueOp.DEL and e.entry.operation == KeyValueOp.DEL and e.entry.revision == r1 + 1
    assert kv.get("k", revision=r1).value == b"1"
    with pytest.raises(KeyDeletedError):
        kv.get("k", revision=r1 + 1)
    assert [h.operation for h in kv.history("k")] == [KeyValueOp.PUT, KeyValueOp.DEL]
    # create works over a delete marker
    r3 = kv.create("k", b"again")
    assert kv.get("k").revision == r3


def test_conditional_delete(kv):
    r = kv.put("k", b"1")
    with pytest.raises(KeyWrongLastSequenceError):
        kv.delete("k", last=r + 5)
    kv.delete("k", last=r)
    with pytest.raises(KeyDeletedError):
        kv.get("k")


def test_purge_removes_history(kv):
    for i in range(3):
        kv.put("k", str(i).encode())
    kv.put("other", b"o")
    kv.purge("k")
    h = kv.history("k")
    assert len(h) == 1 and h[0].operation == KeyValueOp.PURGE and h[0].value == b""
    with pytest.raises(KeyDeletedError) as ei:
        kv.get("k")
    assert ei.value.op == KeyValueOp.PURGE
    assert kv.get("other").value == b"o"
    assert kv.create("k", b"new") > h[0].revision


def test_history_limit_and_order(kv):
    revs = [kv.put("k", str(i).encode()) for i in range(8)]
    h = kv.history("k")
    assert [e.revision for e in h] == revs[-5:]  # history=5
    assert [e.value for e in h] == [b"3", b"4", b"5", b"6", b"7"]
    assert [e.delta for e in h] == [4, 3, 2, 1, 0]
    with pytest.raises(KeyNotFoundError):
        kv.history("never")


def test_purge_deletes(kv):
    kv.put("a", b"1")
    kv.put("b", b"1")
    kv.put("b", b"2")
    kv.delete("b")
    kv.put("c", b"1")
    kv.purge("c")
    assert kv.purge_deletes(older_than=0) == 2
    with pytest.raises(KeyNotFoundError) as ei:
        kv.history("b")
    assert not isinstance(ei.value, KeyDeletedError)
    with pytest.raises(KeyNotFoundError):
        kv.history("c")
    assert kv.get("a").value == b"1"
    # markers younger than older_than stay (only their history goes)
    kv.put("d", b"1")
    kv.delete("d")
    assert kv.purge_deletes() == 1
    assert [e.operation for e in kv.history("d")] == [KeyValueOp.DEL]


# -- keys, status --------------------------------------------------------------------------------


def test_keys(kv):
    assert kv.keys() == []
    for k in ["a.1", "a.2", "b.1", "c"]:
        kv.put(k, b"x")
    kv.put("a.1", b"y")
    kv.delete("c")
    assert kv.keys() == ["a.1", "a.2", "b.1"]
    assert kv.keys("a.>") == ["a.1", "a.2"]
    assert kv.keys("*.1") == ["a.1", "b.1"]
    assert kv.keys(["a.2", "b.*"]) == ["a.2", "b.1"]
    assert kv.keys("zzz") == []
    with pytest.raises(InvalidKeyError):
        kv.keys("a.>.b")
    with pytest.raises(InvalidKeyError):
        kv.keys("a*")


def test_keys_many(js, unique):
    kv = js.create_key_value(bucket=f"m{unique}", storage="memory")
    try:
        futs = [js.publish_async(f"$KV.m{unique}.k{i}", b"v") for i in range(2000)]
        js.publish_async_completed()
        assert all(f.result().seq for f in futs)
        keys = kv.keys()
        assert len(keys) == 2000 and keys[0] == "k0"
    finally:
        js.delete_key_value(f"m{unique}")


def test_status(kv):
    kv.put("a", b"12345")
    kv.put("a", b"x")
    kv.delete("b")
    st = kv.status()
    assert st.values == 3 and st.bytes > 0
    assert st.history == 5 and st.replicas == 1 and not st.is_compressed
    assert st.storage == api.StorageType.MEMORY
    assert st.stream_info.config.name == f"KV_{kv.bucket}"
    assert st.limit_marker_ttl is None


# -- TTLs -------------------------------------------------------------------------------------------


def test_bucket_ttl_expires_values(js, unique):
    kv = js.create_key_value(bucket=f"t{unique}", ttl=1.0, storage="memory")
    try:
        kv.put("k", b"v")
        assert kv.get("k").value == b"v"

        def gone() -> bool:
            try:
                kv.get("k")
                return False
            except KeyNotFoundError:
                return True

        wait_for(gone, 10, 0.1, what="value expired")
    finally:
        js.delete_key_value(f"t{unique}")


def test_per_key_ttl_and_limit_markers(js, unique):
    kv = js.create_key_value(bucket=f"p{unique}", limit_marker_ttl=5.0, storage="memory")
    try:
        cfg = kv.stream.cached_info.config
        assert cfg.allow_msg_ttl and cfg.subject_delete_marker_ttl == 5.0
        assert kv.status().limit_marker_ttl == 5.0
        kv.create("k", b"short-lived", ttl=1)
        assert kv.get("k").value == b"short-lived"
        with pytest.raises(ValueError, match="ttl"):
            kv.create("x", b"v", ttl=0.5)

        def marked() -> bool:
            try:
                kv.get("k")
            except KeyDeletedError as e:
                return e.op == KeyValueOp.PURGE  # Nats-Marker-Reason: MaxAge
            except KeyNotFoundError:
                return False
            return False

        wait_for(marked, 10, 0.1, what="a server marker after the per-key TTL")
        # a marker counts as "no value": create works again
        kv.create("k", b"back")
        kv.purge("k", ttl=1)
        wait_for(lambda: kv.status().values == 0, 10, 0.1, what="the purge marker to expire")
    finally:
        js.delete_key_value(f"p{unique}")


def test_bucket_in_a_domain():
    from jssync.server import NatsServer

    with NatsServer(domain="hub") as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream(domain="hub")
        kv = js.create_key_value(bucket="dom", history=2, storage="memory")
        r = kv.put("k", b"v1")  # written through $JS.hub.API.$KV.dom.k, like nats.go
        kv.update("k", b"v2", r)
        assert kv.get("k").value == b"v2"
        assert [e.value for e in kv.history("k")] == [b"v1", b"v2"]
        assert kv.keys() == ["k"]
