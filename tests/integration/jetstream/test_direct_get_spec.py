"""Where ADR-31 (Direct Get), the object store and nats-server 2.15 meet: one real server.

Each test pins down one point of docs/direct-get-and-kv.md's "spec says / jssync does"
table.
"""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

import jssync
from jssync.objectstore import objectstore as _objectstore
from jssync.objectstore.objectstore import create_object_store, delete_object_store
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


class _ApiSpy:
    """Counts the JetStream API requests (by subject prefix) another connection sends."""

    def __init__(self, nc, prefix: str) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._nc = nc
        self._sub = nc.subscribe(f"{prefix}.>", callback=self._on)
        nc.flush()

    def _on(self, msg) -> None:
        with self._lock:
            self.seen.append(msg.subject)

    def requests(self, nc_of_caller) -> list[str]:
        nc_of_caller.flush()
        self._nc.flush()
        with self._lock:
            return list(self.seen)

    def close(self) -> None:
        self._sub.unsubscribe()


# -- item 9: a Direct Get needs no stream handle and no STREAM.INFO ------------------------------


def test_js_direct_get_sends_no_stream_info(nats_server, js, nc, unique):
    name = f"D{unique}"
    js.create_stream(name=name, subjects=[f"d{unique}.>"], storage="memory", allow_direct=True)
    try:
        for i in range(6):
            js.publish(f"d{unique}.{i % 3}", str(i).encode())
        with jssync.connect(nats_server.url) as spy_nc:
            spy = _ApiSpy(spy_nc, "$JS.API.STREAM")
            try:
                assert js.direct_get(name, 2).data == b"1"
                assert js.direct_get(name, last_by_subject=f"d{unique}.0").seq == 4
                assert js.direct_get(name, next_by_subject=f"d{unique}.2").seq == 3
                assert [m.seq for m in js.direct_get_batch(name, f"d{unique}.>", 10)] == [1, 2, 3, 4, 5, 6]
                assert [m.seq for m in js.direct_get_last_for(name, [f"d{unique}.>"])] == [4, 5, 6]
                with pytest.raises(jssync.MessageNotFoundError):
                    js.direct_get(name, 99, timeout=2)
                # a handle made from a create reply (it says allow_direct) asks nothing either
                assert spy.requests(nc) == []
            finally:
                spy.close()
    finally:
        js.delete_stream(name)


def test_js_direct_get_explains_why_nobody_answered(js, unique):
    name = f"N{unique}"
    js.create_stream(name=name, subjects=[f"n{unique}"], storage="memory")  # no allow_direct
    try:
        js.publish(f"n{unique}", b"x")
        t0 = time.monotonic()
        with pytest.raises(jssync.DirectGetNotAllowedError, match=name):
            js.direct_get(name, 1, timeout=5)
        with pytest.raises(jssync.DirectGetNotAllowedError):
            list(js.direct_get_batch(name, f"n{unique}", 5, timeout=5))
        with pytest.raises(jssync.DirectGetNotAllowedError):
            list(js.direct_get_last_for(name, [f"n{unique}"], timeout=5))
        assert time.monotonic() - t0 < 2 * FACTOR  # a 503 answers at once: no timeout is waited out
    finally:
        js.delete_stream(name)
    with pytest.raises(jssync.StreamNotFoundError):
        js.direct_get(name, 1, timeout=2)
    with pytest.raises(ValueError):
        js.direct_get("bad.name", 1)
    with pytest.raises(ValueError):
        js.direct_get(name)  # no selector: nothing is sent


# -- item 11: max_msgs_per_subject does not turn allow_direct on (nats-server 2.15) ----------------


def test_max_msgs_per_subject_leaves_allow_direct_off(js, unique):
    """ADR-31 says allow_direct is forced on when max_msgs_per_subject > 0; the server does not."""
    name = f"M{unique}"
    s = js.create_stream(name=name, subjects=[f"m{unique}.>"], storage="memory", max_msgs_per_subject=5)
    try:
        assert s.cached_info.config.max_msgs_per_subject == 5
        assert not s.cached_info.config.allow_direct
        js.publish(f"m{unique}.a", b"1")
        with pytest.raises(jssync.DirectGetNotAllowedError):
            s.direct_get(1, timeout=2)
        # the documented way: ask for it (create or update); the server keeps it
        s = js.update_stream(name=name, subjects=[f"m{unique}.>"], storage="memory", max_msgs_per_subject=5,
                             allow_direct=True)
        assert s.cached_info.config.allow_direct
        wait_for(lambda: _reads(s), 5, what="direct get after enabling allow_direct")
        # and it is not forced on the other way round either: allow_direct without a limit
        other = js.create_stream(name=f"{name}X", subjects=[f"x{unique}.>"], storage="memory", allow_direct=True)
        try:
            assert other.cached_info.config.allow_direct
            assert (other.cached_info.config.max_msgs_per_subject or -1) < 1
        finally:
            js.delete_stream(f"{name}X")
    finally:
        js.delete_stream(name)


def _reads(s) -> bool:
    try:
        return s.direct_get(1, timeout=1).data == b"1"
    except (jssync.NoRespondersError, jssync.DirectGetNotAllowedError, jssync.TimeoutError):
        return False


# -- item 12: a no_ack stream never sends a PubAck ------------------------------------------------


def test_publish_to_a_no_ack_stream(js, unique):
    name = f"A{unique}"
    s = js.create_stream(name=name, subjects=[f"a{unique}.>"], storage="memory", no_ack=True)
    try:
        # ack=False: sent and flushed, nothing waited for
        t0 = time.monotonic()
        assert js.publish(f"a{unique}.x", b"1", ack=False) is None
        assert time.monotonic() - t0 < 1 * FACTOR
        wait_for(lambda: s.info().state.messages == 1, 5, what="the message stored")
        # waiting for a PubAck that never comes: the first timeout keeps the caller's timeout
        # (TimeoutError with a hint; the stream is looked up in the background), later ones say why
        t0 = time.monotonic()
        with pytest.raises((jssync.TimeoutError, jssync.NoAckStreamError), match="ack=False"):
            js.publish(f"a{unique}.y", b"2", timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + 0.35 * FACTOR
        wait_for(lambda: f"a{unique}.y" in js._no_ack, 5, what="the background no_ack lookup")
        t0 = time.monotonic()
        with pytest.raises(jssync.NoAckStreamError, match=f"{name}.*no_ack.*ack=False") as ei:
            js.publish(f"a{unique}.y", b"3", timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + 0.35 * FACTOR
        assert not isinstance(ei.value, jssync.TimeoutError)
        assert ei.value.stream == name
        wait_for(lambda: s.info().state.messages == 3, 5, what="the other messages stored")
        with pytest.raises(ValueError):
            js.publish(f"a{unique}.z", b"4", ack=False, expected_last_seq=2)  # needs a PubAck: nothing sent
    finally:
        js.delete_stream(name)


def test_publish_timeout_on_an_acking_stream_stays_a_timeout(js, nc, unique):
    """A stream that acks but does not answer in time still gives TimeoutError (not NoAckStreamError)."""
    subject = f"t{unique}"
    sub = nc.subscribe(subject, callback=lambda m: None)  # a "stream" that never answers
    try:
        nc.flush()
        with pytest.raises(jssync.TimeoutError):
            js.publish(subject, b"x", timeout=0.3)
    finally:
        sub.unsubscribe()


# -- a get while the same name is replaced ----------------------------------------


def _replace_after_info(store, name: str, new: bytes):
    """Make ``store.get`` read the info, then have another writer replace the object at once."""
    real = store.get_info
    calls = {"n": 0}

    def get_info(n, **kw):
        info = real(n, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            store.put(name, new, chunk_size=1024)  # purges the old chunks the get is about to read
        return info

    store.get_info = get_info
    return calls


def test_get_during_a_replace_reads_the_new_object(js, unique):
    store = create_object_store(js, bucket=f"r{unique}", storage="memory")
    try:
        old, new = os.urandom(64 * 1024), os.urandom(50_000)
        store.put("blob", old, chunk_size=1024)  # 64 chunks
        _replace_after_info(store, "blob", new)
        got = store.get("blob")
        assert got.data == new
        assert got.info.size == len(new)
        # into a file object that cannot rewind: nothing was written yet, so the re-read is fine
        _replace_after_info(store, "blob", old)
        out = _NoSeek()
        store.get("blob", writeinto=out)
        assert out.getvalue() == old
    finally:
        delete_object_store(js, f"r{unique}")


class _ReplaceOnFirstWrite(io.RawIOBase):
    """A writeinto target that has another writer replace the object when the first bytes arrive."""

    def __init__(self, replace, seekable: bool) -> None:
        self._buf = io.BytesIO()
        self._replace = replace
        self._seekable = seekable

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._seekable

    def tell(self) -> int:
        return self._buf.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        if not self._seekable:
            raise io.UnsupportedOperation("seek")
        return self._buf.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        return self._buf.truncate(size)

    def write(self, b) -> int:  # type: ignore[override]
        if self._replace is not None:
            replace, self._replace = self._replace, None
            replace()
        return self._buf.write(b)

    def getvalue(self) -> bytes:
        return self._buf.getvalue()


def test_get_into_a_file_replaced_after_the_first_bytes(js, unique):
    """Over 8 MiB the chunks come in two Direct Get batches; the replace lands between them."""
    store = create_object_store(js, bucket=f"w{unique}", storage="memory")
    try:
        old, new = os.urandom(9 << 20), os.urandom(1000)
        store.put("big", old)
        out = _ReplaceOnFirstWrite(lambda: store.put("big", new), seekable=False)
        with pytest.raises(_objectstore.ObjectChangedError, match="replaced during the read"):
            store.get("big", writeinto=out)
        # a file object that seeks back gets the new version whole
        store.put("big", old)
        out = _ReplaceOnFirstWrite(lambda: store.put("big", new), seekable=True)
        got = store.get("big", writeinto=out)
        assert out.getvalue() == new
        assert got.info.size == len(new)
    finally:
        delete_object_store(js, f"w{unique}")


def test_get_of_an_object_deleted_during_the_read(js, unique):
    store = create_object_store(js, bucket=f"q{unique}", storage="memory")
    try:
        store.put("blob", os.urandom(8192), chunk_size=1024)
        real = store.get_info

        def get_info(n, **kw):
            info = real(n, **kw)
            store.get_info = real
            store.delete("blob")
            return info

        store.get_info = get_info
        with pytest.raises(jssync.NotFoundError, match="deleted"):
            store.get("blob")
    finally:
        delete_object_store(js, f"q{unique}")


def test_object_changed_error_is_an_object_store_error():
    changed = _objectstore.ObjectChangedError
    assert issubclass(changed, _objectstore.ObjectStoreError)
    assert not issubclass(changed, _objectstore.DigestMismatchError)


class _NoSeek(io.RawIOBase):
    def __init__(self) -> None:
        self._buf = io.BytesIO()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, b) -> int:  # type: ignore[override]
        return self._buf.write(b)

    def getvalue(self) -> bytes:
        return self._buf.getvalue()
