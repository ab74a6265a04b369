"""KV codecs (NATS ADR-54) against a real nats-server: what is stored is exactly what orbit.go's
``kvcodec`` stores, data written raw reads back decoded, every bucket call goes through the codecs,
and bad keys/values are refused before anything is sent."""

from __future__ import annotations

import logging
import threading

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def bucket(js, unique):
    name = f"c{unique}"
    js.create_key_value(bucket=name, history=5, storage="memory")
    try:
        yield name
    finally:
        js.delete_key_value(name)


def _stored(js, bucket: str, stored_key: str) -> bytes:
    """The payload of the latest message on the key's subject, read from the stream itself."""
    return js.stream(f"KV_{bucket}").get_msg(last_by_subject=f"$KV.{bucket}.{stored_key}").data


def _messages(js, bucket: str) -> int:
    return js.stream(f"KV_{bucket}").info().state.messages


def test_base64_keys_and_values_are_stored_as_orbit_stores_them(js, bucket):
    kv = js.key_value(bucket, key_codec=jssync.Base64Codec(), value_codec=jssync.Base64Codec())
    assert isinstance(kv, jssync.CodecKeyValue)
    kv.put("Acme Inc.contact", b"info@acme.com")
    kv.put("user.123", b"\x00\xff")
    # orbit.go: each token base64.RawURLEncoding, the value the same
    assert _stored(js, bucket, "QWNtZSBJbmM.Y29udGFjdA") == b"aW5mb0BhY21lLmNvbQ"
    assert _stored(js, bucket, "dXNlcg.MTIz") == b"AP8"
    assert js.key_value(bucket).keys() == ["QWNtZSBJbmM.Y29udGFjdA", "dXNlcg.MTIz"]
    e = kv.get("Acme Inc.contact")
    assert (e.key, e.value, e.raw_key) == ("Acme Inc.contact", b"info@acme.com", "QWNtZSBJbmM.Y29udGFjdA")


def test_data_written_raw_as_orbit_would_reads_back_decoded(js, bucket):
    raw = js.key_value(bucket)
    raw.put("dXNlcg.MTIz", b"aGVsbG8")       # orbit: Put("user.123", "hello") with Base64Codec for both
    raw.put("_root_.etc.hosts", b"127.0.0.1")  # orbit: Put("/etc/hosts", ...) with PathCodec
    b64 = raw.with_codecs(key_codec=jssync.Base64Codec(), value_codec=jssync.Base64Codec())
    assert b64.get("user.123").value == b"hello"
    path = js.key_value(bucket, key_codec=jssync.PathCodec())
    assert path.get("/etc/hosts").value == b"127.0.0.1"
    assert path.keys(">") == ["/etc/hosts", "dXNlcg/MTIz"]
    assert b64.keys("user.*") == ["user.123"]


def test_path_keys_and_json_values_through_every_call(js, bucket):
    kv = js.key_value(bucket, key_codec=jssync.PathCodec(), value_codec=jssync.JSONCodec())
    r1 = kv.put("/app/db/host", {"host": "db1", "port": 5432})
    assert _stored(js, bucket, "_root_.app.db.host") == b'{"host":"db1","port":5432}'
    r2 = kv.update("/app/db/host", {"host": "db2"}, r1)
    kv.create("app/flags", [1, 2])
    with pytest.raises(jssync.KeyExistsError):
        kv.create("app/flags", [3])
    assert kv.get("/app/db/host").value == {"host": "db2"}
    assert kv.get("/app/db/host", revision=r1).value == {"host": "db1", "port": 5432}
    assert kv.keys() == ["/app/db/host", "app/flags"]
    assert kv.keys("/app/*/host") == ["/app/db/host"]
    hist = kv.history("/app/db/host")
    assert [(e.key, e.value, e.revision) for e in hist] == [
        ("/app/db/host", {"host": "db1", "port": 5432}, r1), ("/app/db/host", {"host": "db2"}, r2)]
    kv.delete("app/flags")
    with pytest.raises(jssync.KeyDeletedError) as info:
        kv.get("app/flags")
    assert info.value.entry.key == "app/flags" and info.value.entry.operation is jssync.KeyValueOp.DEL
    kv.purge("/app/db/host")
    assert kv.keys() == []
    assert [e.operation for e in kv.history("/app/db/host")] == [jssync.KeyValueOp.PURGE]
    with pytest.raises(jssync.KeyNotFoundError, match="/never/set"):
        kv.get("/never/set")


def test_watch_encodes_the_filter_and_decodes_entries(js, bucket):
    kv = js.key_value(bucket, key_codec=jssync.Base64Codec(), value_codec=jssync.JSONCodec())
    kv.put("user.1", {"n": 1})
    kv.put("order.1", {"n": 2})
    got: list = []
    done = threading.Event()
    with kv.watch("user.*") as w:
        first = w.next(timeout=5 * FACTOR)
        assert (first.key, first.value) == ("user.1", {"n": 1})
        assert w.next(timeout=5 * FACTOR) is None

        def read() -> None:
            got.append(w.next(timeout=10 * FACTOR))
            got.append(w.next(timeout=10 * FACTOR))
            done.set()

        t = threading.Thread(target=read)
        t.start()
        kv.put("order.2", {"n": 3})  # not watched
        kv.put("user.2 é", {"n": 4})
        kv.delete("user.1")
        assert done.wait(10 * FACTOR)
        t.join()
    assert [(e.key, e.value, e.operation) for e in got] == [
        ("user.2 é", {"n": 4}, jssync.KeyValueOp.PUT), ("user.1", b"", jssync.KeyValueOp.DEL)]
    assert all(isinstance(e, jssync.CodecEntry) for e in got)


class _Reverse:
    """A user's key codec without encode_filter: each key's characters reversed."""

    def encode_key(self, key: str) -> str:
        return key[::-1]

    def decode_key(self, stored: str) -> str:
        return stored[::-1]


def test_a_codec_without_encode_filter_refuses_wildcards_but_watches_everything(js, bucket):
    kv = js.key_value(bucket, key_codec=_Reverse())
    kv.put("ab.cd", b"1")
    assert _stored(js, bucket, "dc.ba") == b"1"
    with pytest.raises(jssync.InvalidKeyError, match="cannot encode wildcards"):
        kv.watch("ab.*")
    with pytest.raises(jssync.InvalidKeyError, match="cannot encode wildcards"):
        kv.keys("ab.>")
    assert kv.keys() == ["ab.cd"]
    assert kv.keys("ab.cd") == ["ab.cd"]
    with kv.watch() as w:
        assert w.next(timeout=5 * FACTOR).key == "ab.cd"


def test_bad_keys_and_values_are_refused_before_anything_is_sent(js, bucket):
    kv = js.key_value(bucket, key_codec=jssync.Base64Codec(), value_codec=jssync.JSONCodec())
    path = js.key_value(bucket, key_codec=jssync.PathCodec())
    calls = [
        (lambda: kv.put("a..b", 1), jssync.InvalidKeyError, "'a..b'.*empty"),
        (lambda: kv.get("", 1), jssync.InvalidKeyError, "empty"),
        (lambda: kv.delete(".a"), jssync.InvalidKeyError, "empty"),
        (lambda: kv.put("ok", {1, 2}), jssync.InvalidValueError, r"\{1, 2\}.*JSONCodec"),
        (lambda: kv.create("ok", float("nan")), jssync.InvalidValueError, "nan"),
        (lambda: kv.update("ok", object(), 1), jssync.InvalidValueError, "JSONCodec"),
        (lambda: path.put("a.b/c", b"x"), jssync.InvalidKeyError, "'a.b/c'"),
        (lambda: path.purge("a//b"), jssync.InvalidKeyError, "'a//b' encodes to 'a..b'"),
        (lambda: js.key_value(bucket, value_codec=jssync.NoOpCodec()).put("k", 5), jssync.InvalidValueError,
         "NoOpCodec returned int"),
    ]
    for call, exc, match in calls:
        with pytest.raises(exc, match=match) as info:
            call()
        assert isinstance(info.value, jssync.ValidationError)
    with pytest.raises(jssync.ValidationError, match="value_codec"):
        js.key_value(bucket, value_codec=jssync.PathCodec())
    assert _messages(js, bucket) == 0


def test_data_the_codecs_cannot_decode(js, bucket, caplog):
    raw = js.key_value(bucket)
    raw.put("not=base64", b"x")   # a valid key, but '=' is outside the URL-safe alphabet
    raw.put("dXNlcg", b"{oops")    # "user": a good key, a value that is not JSON
    kv = raw.with_codecs(key_codec=jssync.Base64Codec(), value_codec=jssync.JSONCodec())
    with caplog.at_level(logging.WARNING, logger="jssync"):
        assert kv.keys() == ["user"]
        with pytest.raises(jssync.KeyValueDecodeError, match="JSONCodec") as info:
            kv.get("user")
        assert info.value.raw == b"{oops"
        with kv.watch() as w:
            entries = [w.next(timeout=5 * FACTOR), w.next(timeout=5 * FACTOR)]
    # as orbit.go does: an entry that cannot be decoded is delivered as stored
    assert [(e.key, e.value) for e in entries] == [("not=base64", b"x"), ("user", b"{oops")]
    assert any("not=base64" in r.getMessage() for r in caplog.records)


def test_no_codecs_gives_the_plain_bucket(js, bucket):
    kv = js.key_value(bucket)
    assert type(kv) is jssync.KeyValue
    assert type(js.key_value(bucket, key_codec=None, value_codec=None)) is jssync.KeyValue
