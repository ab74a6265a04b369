"""The object store (ADR-20) against a real nats-server (lives next to the KV tests it builds on)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os

import pytest
from nats.js import api

import jssync
from jssync.kv.keyvalue import BucketExistsError, BucketNotFoundError, InvalidBucketNameError
from jssync.objectstore.objectstore import (
    BadObjectMetaError,
    DigestMismatchError,
    ObjectAlreadyExistsError,
    ObjectNotFoundError,
    ObjectResult,
    ObjectStore,
    ObjectStoreStatus,
    create_object_store,
    delete_object_store,
    encode_name,
    object_store,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(js, unique):
    s = create_object_store(js, bucket=f"o{unique}", storage="memory")
    try:
        yield s
    finally:
        delete_object_store(js, f"o{unique}")


def test_store_stream_config_and_status(js, unique):
    s = create_object_store(js, api.ObjectStoreConfig(bucket=f"c{unique}", description="files", ttl=60.0,
                                                      storage=api.StorageType.MEMORY), metadata={"a": "b"})
    try:
        assert isinstance(s, ObjectStore)
        cfg = js.stream(f"OBJ_c{unique}").cached_info.config
        assert cfg.subjects == [f"$O.c{unique}.C.>", f"$O.c{unique}.M.>"]
        assert cfg.allow_rollup_hdrs and cfg.allow_direct and cfg.discard == api.DiscardPolicy.NEW
        assert cfg.max_age == 60.0
        st = s.status()
        assert isinstance(st, ObjectStoreStatus)
        assert (st.bucket, st.description, st.ttl, st.sealed, st.backing_store) == (f"c{unique}", "files", 60.0,
                                                                                   False, "JetStream")
        assert st.metadata.get("a") == "b"
        assert object_store(js, f"c{unique}").bucket == f"c{unique}"
        with pytest.raises(BucketExistsError):
            create_object_store(js, bucket=f"c{unique}", ttl=5.0, storage="memory")
    finally:
        delete_object_store(js, f"c{unique}")
    with pytest.raises(BucketNotFoundError):
        object_store(js, f"c{unique}")
    with pytest.raises(BucketNotFoundError):
        delete_object_store(js, f"c{unique}")
    with pytest.raises(InvalidBucketNameError):
        create_object_store(js, bucket="a.b")


def test_put_get_chunked_with_digest(store, js):
    data = os.urandom(300_000)
    info = store.put("dir/file.bin", data, description="random", headers={"Content-Type": "application/x"})
    assert (info.name, info.size, info.chunks, info.bucket) == ("dir/file.bin", 300_000, 3, store.bucket)
    want = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    assert info.digest == want
    assert info.headers == {"Content-Type": ["application/x"]}
    r = store.get("dir/file.bin")
    assert isinstance(r, ObjectResult) and r.data == data
    assert r.info.description == "random" and r.info.mtime
    # the layout of ADR-20: chunks on $O.<b>.C.<nuid>, the info on $O.<b>.M.<base64url(name)>
    st = js.stream(f"OBJ_{store.bucket}")
    meta = st.get_msg(last_by_subject=f"$O.{store.bucket}.M.{encode_name('dir/file.bin')}")
    assert meta.headers == {"Nats-Rollup": "sub"}
    raw = json.loads(meta.data)
    assert raw["nuid"] == info.nuid and "mtime" not in raw
    assert len(list(st.direct_get_batch(f"$O.{store.bucket}.C.{info.nuid}", 10))) == 3


def test_put_file_objects_and_write_into(store):
    data = os.urandom(50_000)
    info = store.put("f", io.BytesIO(data), chunk_size=7_000)
    assert info.chunks == 8
    out = io.BytesIO()
    r = store.get("f", writeinto=out)
    assert out.getvalue() == data and r.data == b""
    store.put("s", "text")
    assert store.get_bytes("s") == b"text"
    store.put("empty", b"")
    assert store.get("empty").data == b"" and store.get_info("empty").chunks == 0


def test_replace_purges_old_chunks(store, js):
    first = store.put("x", b"a" * 1000, chunk_size=100)
    second = store.put("x", b"b" * 10)
    assert first.nuid != second.nuid
    assert store.get_bytes("x") == b"b" * 10
    st = js.stream(f"OBJ_{store.bucket}")
    assert list(st.direct_get_batch(f"$O.{store.bucket}.C.{first.nuid}", 100)) == []


def test_delete_and_list(store):
    store.put("a", b"1")
    store.put("b", b"22")
    assert sorted(i.name for i in store.list()) == ["a", "b"]
    deleted = store.delete("a")
    assert deleted.deleted and deleted.size == 0
    with pytest.raises(ObjectNotFoundError):
        store.get("a")
    with pytest.raises(ObjectNotFoundError):
        store.get_info("a")
    assert store.get_info("a", show_deleted=True).deleted
    store.delete("a")  # again: nothing to do
    with pytest.raises(ObjectNotFoundError):
        store.delete("never")
    assert [i.name for i in store.list()] == ["b"]
    assert sorted((i.name, bool(i.deleted)) for i in store.list(include_deleted=True)) == [("a", True),
                                                                                          ("b", False)]
    assert store.status().size > 0


def test_empty_store_lists_nothing(store):
    assert store.list() == []


def test_digest_mismatch_is_detected(store, js):
    info = store.put("d", b"payload")
    raw = {"name": "d", "bucket": store.bucket, "nuid": info.nuid, "size": 7, "chunks": 1,
           "digest": "SHA-256=" + base64.urlsafe_b64encode(b"\0" * 32).decode()}
    js.publish(f"$O.{store.bucket}.M.{encode_name('d')}", json.dumps(raw).encode(), headers={"Nats-Rollup": "sub"})
    with pytest.raises(DigestMismatchError):
        store.get("d")
    raw["size"] = 8
    js.publish(f"$O.{store.bucket}.M.{encode_name('d')}", json.dumps(raw).encode(), headers={"Nats-Rollup": "sub"})
    with pytest.raises(DigestMismatchError, match="bytes"):
        store.get("d")


@pytest.mark.parametrize("direct", [True, False], ids=["direct-get", "through-the-leader"])
def test_an_extra_chunk_is_a_digest_mismatch(store, js, direct):
    # every read takes all the chunks the server has for the object, not just the count its
    # info names: a stray chunk makes the read fail, it is not dropped unseen
    info = store.put("A", b"x" * 300, chunk_size=128)
    store._direct = direct
    assert store.get("A").data == b"x" * 300
    js.publish(f"$O.{store.bucket}.C.{info.nuid}", b"stray")
    with pytest.raises(DigestMismatchError, match="4 chunk"):
        store.get("A")


def test_links(store, js, unique):
    other = create_object_store(js, bucket=f"l{unique}", storage="memory")
    try:
        target = other.put("t", b"linked bytes")
        link = store.add_link("ln", target)
        assert link.is_link() and link.options.link.bucket == other.bucket
        assert store.get_bytes("ln") == b"linked bytes"
        blink = store.add_bucket_link("all", other)
        assert blink.is_link()
        with pytest.raises(BadObjectMetaError):
            store.get("all")
        with pytest.raises(BadObjectMetaError):
            store.add_link("x", link)  # a link to a link
        store.put("regular", b"r")
        with pytest.raises(ObjectAlreadyExistsError):
            store.add_link("regular", target)
        with pytest.raises(BadObjectMetaError):
            store.put("x", b"", meta=api.ObjectMeta(name="x", options=api.ObjectMetaOptions(link=link.options.link)))
    finally:
        delete_object_store(js, f"l{unique}")


def test_update_meta(store):
    store.put("a", b"1", description="old")
    store.put("b", b"2")
    info = store.update_meta("a", description="new", headers={"k": "v"})
    assert store.get_info("a").description == "new" and info.headers == {"k": ["v"]}
    with pytest.raises(ObjectAlreadyExistsError):
        store.update_meta("a", new_name="b")
    store.update_meta("a", api.ObjectMeta(name="c"))
    assert sorted(i.name for i in store.list()) == ["b", "c"]
    assert store.get_bytes("c") == b"1"
    with pytest.raises(ObjectNotFoundError):
        store.get_info("a", show_deleted=True)
    with pytest.raises(ObjectNotFoundError):
        store.update_meta("nope", description="x")


def test_watch(store):
    store.put("a", b"1")
    with store.watch() as w:
        first = w.next(timeout=5)
        assert first is not None and first.name == "a"
        assert w.next(timeout=5) is None
        store.put("b", b"2")
        e = w.next(timeout=5)
        assert e is not None and (e.name, e.size) == ("b", 1)
        store.delete("a")
        e = w.next(timeout=5)
        assert e is not None and e.name == "a" and e.deleted


def test_seal(store):
    store.put("a", b"1")
    st = store.seal()
    assert st.sealed and store.status().sealed
    with pytest.raises(jssync.Error):
        store.put("b", b"2", timeout=2)
    assert store.get_bytes("a") == b"1"


def test_bad_arguments(store):
    with pytest.raises(BadObjectMetaError):
        store.put("", b"x")
    with pytest.raises(BadObjectMetaError):
        store.put("a", b"x", chunk_size=0)
    with pytest.raises(jssync.MaxPayloadError):
        store.put("a", b"x", chunk_size=64 * 1024 * 1024)
    with pytest.raises(TypeError):
        store.put("a", 5)  # type: ignore[arg-type]


def test_store_without_direct_get(js, unique):
    """Older stores (no allow_direct) are read through the leader and an ordered consumer."""
    s = create_object_store(js, bucket=f"n{unique}", storage="memory")
    try:
        js.update_stream(s.stream.cached_info.config.evolve(allow_direct=False))
        s = object_store(js, f"n{unique}")
        assert not s.stream.cached_info.config.allow_direct
        data = os.urandom(40_000)
        s.put("x", data, chunk_size=4096)
        assert s.get_bytes("x") == data
    finally:
        delete_object_store(js, f"n{unique}")
