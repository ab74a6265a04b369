"""Key-value watches against a real nats-server: initial values, the end marker, updates, recovery."""

from __future__ import annotations

import threading
import time

import pytest

import jssync
import jssync.kv.keyvalue as kvmod
import jssync.kv.watcher as kvwatcher
from jssync.kv.keyvalue import Entry, KeyValueOp, KeyWatcher
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def kv(js, unique):
    b = js.create_key_value(bucket=f"w{unique}", history=10, storage="memory")
    try:
        yield b
    finally:
        js.delete_key_value(f"w{unique}")


def until_marker(w: KeyWatcher, timeout: float = 5.0) -> list[Entry]:
    out: list[Entry] = []
    while True:
        e = w.next(timeout=timeout)
        if e is None:
            return out
        out.append(e)


def test_initial_values_marker_then_updates(kv):
    kv.put("a", b"1")
    kv.put("b", b"1")
    kv.put("a", b"2")
    kv.delete("b")
    with kv.watch() as w:
        assert isinstance(w, KeyWatcher)
        initial = until_marker(w)
        assert [(e.key, e.value, e.operation) for e in initial] == [("a", b"2", KeyValueOp.PUT),
                                                                    ("b", b"", KeyValueOp.DEL)]
        assert [e.delta for e in initial] == [1, 0]
        r = kv.put("c", b"new")
        e = w.next(timeout=5)
        assert e is not None and (e.key, e.value, e.revision, e.delta) == ("c", b"new", r, 0)
        assert e.created is not None
        kv.purge("a")
        e = w.next(timeout=5)
        assert e is not None and (e.key, e.operation) == ("a", KeyValueOp.PURGE)
        with pytest.raises(jssync.TimeoutError):
            w.next(timeout=0.2)
    assert w.stopped


def test_empty_bucket_gives_the_marker_first(kv):
    with kv.watch() as w:
        assert w.next(timeout=2) is None
        kv.put("x", b"1")
        e = w.updates(timeout=5)
        assert e is not None and e.key == "x"


def test_include_history(kv):
    for i in range(3):
        kv.put("k", str(i).encode())
    kv.put("other", b"o")
    with kv.watch("k", include_history=True) as w:
        assert [e.value for e in until_marker(w)] == [b"0", b"1", b"2"]


def test_ignore_deletes_still_sends_the_marker(kv):
    kv.put("a", b"1")
    kv.delete("b")  # the last initial entry is a delete
    with kv.watch(ignore_deletes=True) as w:
        assert [e.key for e in until_marker(w)] == ["a"]
        kv.delete("a")
        kv.put("c", b"1")
        e = w.next(timeout=5)
        assert e is not None and e.key == "c"


def test_updates_only(kv):
    kv.put("a", b"old")
    with kv.watch(updates_only=True) as w:
        assert w.next(timeout=2) is None  # at once: there are no initial values
        kv.put("a", b"new")
        e = w.next(timeout=5)
        assert e is not None and e.value == b"new"


def test_meta_only_and_filters(kv):
    kv.put("x.1", b"payload")
    kv.put("x.2", b"payload")
    kv.put("y.1", b"payload")
    with kv.watch("x.*", meta_only=True) as w:
        got = until_marker(w)
        assert [(e.key, e.value) for e in got] == [("x.1", b""), ("x.2", b"")]
    with kv.watch(["x.2", "y.>"]) as w:
        assert [e.key for e in until_marker(w)] == ["x.2", "y.1"]
        kv.put("x.1", b"no")
        kv.put("y.2", b"yes")
        e = w.next(timeout=5)
        assert e is not None and e.key == "y.2"


def test_resume_from_revision(kv):
    revs = [kv.put(f"k{i}", b"v") for i in range(5)]
    with kv.watch(resume_from_revision=revs[3]) as w:
        assert [e.key for e in until_marker(w)] == ["k3", "k4"]


def test_watch_bad_filters(kv):
    for bad in ["", "a..b", "a.>.b", "a b"]:
        with pytest.raises(kvmod.InvalidKeyError):
            kv.watch(bad)


def test_stop_from_another_thread_ends_iteration(kv, js):
    w = kv.watch()
    got: list[Entry | None] = []
    done = threading.Event()

    def reader():
        for e in w:
            got.append(e)
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    wait_for(lambda: got == [None], 5, what="the marker")
    kv.put("a", b"1")
    wait_for(lambda: len(got) == 2, 5, what="the update")
    w.stop()
    assert done.wait(2 * FACTOR)
    t.join(2)
    assert list(w) == []
    w.stop()  # idempotent
    # the consumer is gone
    assert list(js.consumer_names(f"KV_{kv.bucket}")) == []


def test_connection_close_ends_iteration(nats_server, unique):
    with jssync.connect(nats_server.url) as nc:
        js = nc.jetstream()
        kv = js.create_key_value(bucket=f"cc{unique}", storage="memory")
        try:
            w = kv.watch()
            assert w.next(timeout=2) is None
            done = threading.Event()

            def reader():
                for _ in w:
                    pass
                done.set()

            t = threading.Thread(target=reader)
            t.start()
            with jssync.connect(nats_server.url) as other:
                other.jetstream().delete_key_value(f"cc{unique}")
            nc.close()
            assert done.wait(3 * FACTOR)
            t.join(2)
        finally:
            if not nc.is_closed:
                js.delete_key_value(f"cc{unique}")


def test_many_updates_in_order_with_flow_control(kv, js, nc, monkeypatch):
    fc_replies: list[str] = []
    raw = nc.internal.publish_raw  # (push flow control replies go out through conn.internal)

    def spy(subject: str, data: bytes) -> None:
        if subject.startswith("$JS.FC."):
            fc_replies.append(subject)
        raw(subject, data)

    monkeypatch.setattr(nc.internal, "publish_raw", spy)
    with kv.watch(updates_only=True) as w:
        assert w.next(timeout=2) is None
        n = 3000
        for i in range(n):  # ~12 MB: enough for the server to ask for flow control
            js.publish_async(f"$KV.{kv.bucket}.k{i}", str(i).encode().ljust(4000))
        js.publish_async_completed()
        vals = []
        while len(vals) < n:
            e = w.next(timeout=5)
            assert e is not None
            vals.append(int(e.value))
        assert vals == list(range(n))
    assert fc_replies, "the server never asked for flow control"


def test_watch_sees_only_what_the_bucket_keeps(kv, js):
    """Values pushed out by the history limit before the watcher reads them are skipped, in order."""
    with kv.watch(updates_only=True) as w:
        assert w.next(timeout=2) is None
        for i in range(500):
            js.publish_async(f"$KV.{kv.bucket}.k{i % 3}", str(i).encode())
        js.publish_async_completed()
        last = -1
        while last < 499:
            e = w.next(timeout=5)
            assert e is not None and int(e.value) > last
            last = int(e.value)


def test_recovers_when_its_consumer_disappears(kv, js, monkeypatch):
    monkeypatch.setattr(kvwatcher, "WATCH_HEARTBEAT", 0.3)
    kv.put("a", b"1")
    with kv.watch() as w:
        assert [e.key for e in until_marker(w)] == ["a"]
        first = w._consumer
        assert first is not None
        js.delete_consumer(f"KV_{kv.bucket}", first)
        kv.put("b", b"while gone")
        t0 = time.monotonic()
        e = w.next(timeout=10)
        assert e is not None and (e.key, e.value) == ("b", b"while gone")
        assert w._consumer != first
        assert time.monotonic() - t0 < 5 * FACTOR
        kv.put("c", b"after")
        e = w.next(timeout=5)
        assert e is not None and e.key == "c"
        with pytest.raises(jssync.TimeoutError):  # nothing repeated
            w.next(timeout=0.3)


@pytest.mark.slow
@pytest.mark.fault
def test_watch_survives_a_server_restart(tmp_path, unique):
    with NatsServer(store_dir=tmp_path / "store") as srv:
        with jssync.connect(srv.url, reconnect_time_wait=0.1) as nc:
            js = nc.jetstream()
            kv = js.create_key_value(bucket="rs")  # file storage: survives the restart
            kv.put("a", b"1")
            with kv.watch() as w:
                assert [e.value for e in until_marker(w)] == [b"1"]
                kv.put("a", b"2")
                e = w.next(timeout=5)
                assert e is not None and e.value == b"2"
                srv.restart()
                wait_for(lambda: nc.is_connected, 10, what="reconnect")

                def put3() -> bool:
                    try:
                        kv.put("a", b"3", timeout=1)
                        return True
                    except jssync.Error:
                        return False

                wait_for(put3, 10, 0.2, what="JetStream back")
                e = w.next(timeout=10)
                assert e is not None and (e.value, e.revision) == (b"3", 3)
                kv.put("b", b"x")
                e = w.next(timeout=5)
                assert e is not None and e.key == "b"
                with pytest.raises(jssync.TimeoutError):
                    w.next(timeout=0.3)


def test_ctrl_c_reaches_a_caller_waiting_for_an_update(kv):
    import _thread

    with kv.watch(updates_only=True) as w:
        assert w.next(timeout=2) is None
        threading.Timer(0.2, _thread.interrupt_main).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            w.next(timeout=30)
        assert time.monotonic() - t0 < 1.0 * FACTOR
        kv.put("after", b"x")
        e = w.next(timeout=5)  # still usable
        assert e is not None and e.key == "after"
