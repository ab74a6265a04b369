"""publish_async from many threads: no lock per message, nothing lost, close fails what is left."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import weakref

import pytest

import jssync
from tests.conftest import needs_fast_paths, wait_for

pytestmark = pytest.mark.timeout(120)


class _CountingLock:
    """A threading.Lock that counts its acquisitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.count += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_publish_async_takes_no_lock_per_message(js, stream):
    # A lock on every publish_async made 16 publishing threads queue behind one that the
    # GIL switch interval preempted inside it (a lock convoy: a context switch per message).
    subj = f"{stream.name}.x"
    js.publish_async(subj, b"warm-up").result(10)
    pub = js._async
    counting = _CountingLock()
    pub._lock = counting
    futs = [js.publish_async(subj, b"m") for _ in range(1000)]
    js.publish_async_completed(timeout=30)
    assert all(f.result(0).stream == stream.name for f in futs)
    # arming the timeout sweep and the registration take it, once per busy period
    assert counting.count <= 20, f"{counting.count} lock acquisitions for 1000 publishes"


def test_publish_async_leaves_no_garbage_cycle(js, stream):
    # Each publish_async made a reply handler that referred to itself (and held the
    # Future): a reference cycle per message that only the cyclic GC could free. With
    # thousands in flight the collector ran every few hundred publishes and scanned the
    # whole heap every few thousand: about 40 % of publish_async's CPU. Everything a
    # publish allocates must be freed by reference counting once its PubAck is handled.
    subj = f"{stream.name}.x"
    js.publish_async(subj, b"warm-up").result(10)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        refs = [weakref.ref(js.publish_async(subj, b"m")) for _ in range(500)]
        js.publish_async_completed(timeout=30)
        # the I/O thread may still be finishing the last handler: wait until it let go
        wait_for(lambda: all(r() is None for r in refs), timeout=5,
                 what="every publish_async Future freed without the cyclic GC")
    finally:
        if was_enabled:
            gc.enable()


def test_publish_async_future_wakes_wait_and_as_completed_registered_while_pending(js, unique):
    # A publish_async Future makes its waiter list on first use (thousands of empty lists
    # in flight kept the cyclic GC busy); concurrent.futures.wait() and as_completed()
    # registering while the PubAck is outstanding must still be woken when it arrives.
    name = f"FW{unique}"
    # no stream yet: the 503 replies keep the Future pending (resent) until it exists
    fut = js.publish_async(f"{name}.x", b"x", timeout=60, retry_attempts=30, retry_wait=0.05)
    results: list[tuple[str, int]] = []

    def waiter() -> None:
        done, _ = concurrent.futures.wait([fut], timeout=60, return_when=concurrent.futures.FIRST_COMPLETED)
        results.append(("wait", len(done)))

    def completed() -> None:
        for f in concurrent.futures.as_completed([fut], timeout=60):
            results.append(("as_completed", f.result(0).seq))

    ts = [threading.Thread(target=waiter), threading.Thread(target=completed)]
    for t in ts:
        t.start()
    wait_for(lambda: len(fut._waiters) == 2, timeout=10, what="both registered while the PubAck is outstanding")
    assert not fut.done()
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for t in ts:
            t.join(60)
        assert sorted(results) == [("as_completed", 1), ("wait", 1)]
        assert not fut._waiters  # both removed themselves
    finally:
        js.delete_stream(name)


def test_publisher_one_puback_short_of_a_full_window_asks_to_be_woken(js, unique):
    # A publisher that found the window full, then (inside the wait loop) one PubAck short
    # of it, waited without asking to be woken at 3/4 (_kick_at kept a level an earlier
    # kick had lowered, here the initial -1): nobody woke it, and 16-thread runs stalled
    # for its 0.1 s wait slices while the window drained.
    name = f"KW{unique}"
    js8 = js.conn.jetstream(max_pending=8)  # low water: 8 - 8 // 4 = 6
    pub = js8._async
    entering, waiting = threading.Event(), threading.Event()

    class Room(threading.Condition):
        def __enter__(self) -> bool:
            if threading.current_thread() is publisher:
                entering.set()
            return super().__enter__()

        def wait(self, timeout: float | None = None) -> bool:
            waiting.set()
            return super().wait(timeout)

    room = Room()
    pub._room = room
    # no stream yet: 7 stay pending (resent after each 503), the 8th fails after one resend
    stuck = [js8.publish_async(f"{name}.x", b"s", timeout=60, retry_attempts=100, retry_wait=0.2)
             for _ in range(7)]
    last = js8.publish_async(f"{name}.x", b"s", timeout=60, retry_attempts=1, retry_wait=0.5)
    assert js8.publish_async_pending() == 8
    futs: list[concurrent.futures.Future[object]] = []
    publisher = threading.Thread(target=lambda: futs.append(js8.publish_async(f"{name}.x", b"late", timeout=60)))
    with room:  # held: the publisher saw a full window and stops at the lock
        publisher.start()
        assert entering.wait(10)
        with pytest.raises(jssync.NoRespondersError):
            last.result(10)
        wait_for(lambda: js8.publish_async_pending() == 7, timeout=10, what="one PubAck short of full")
    try:
        assert waiting.wait(10)
        # waiting with 7 of 8 in flight: it asked to be woken at 3/4 (6)
        assert pub._kick_at == 6, pub._kick_at
    finally:
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        publisher.join(30)
        assert not publisher.is_alive()
        assert futs[0].result(30).stream == name
        assert all(f.result(30).stream == name for f in stuck)
        js8.publish_async_completed(timeout=30)
    finally:
        js.delete_stream(name)


def test_publish_async_from_16_threads_loses_nothing(nats_server, stream):
    subj = f"{stream.name}.x"
    per = 400
    with jssync.connect(nats_server.url) as nc:
        js = nc.jetstream(max_pending=64)  # small window: publishers block and are woken often
        results: list[list[concurrent.futures.Future[object]]] = [[] for _ in range(16)]
        errors: list[BaseException] = []
        go = threading.Barrier(16)

        def work(i: int) -> None:
            try:
                go.wait(10)
                for j in range(per):
                    results[i].append(js.publish_async(subj, f"{i}.{j}".encode()))
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors
        js.publish_async_completed(timeout=60)
        seqs = sorted(f.result(0).seq for r in results for f in r)
        assert len(seqs) == 16 * per
        assert len(set(seqs)) == 16 * per
        assert js.publish_async_pending() == 0
    assert stream.info().state.messages == 16 * per


def test_close_while_threads_publish_fails_every_future(nats_server, stream):
    subj = f"{stream.name}.x"
    nc = jssync.connect(nats_server.url)
    js = nc.jetstream()
    futs: list[concurrent.futures.Future[object]] = []
    lock = threading.Lock()
    ended: list[BaseException] = []
    started = threading.Event()

    def work() -> None:
        try:
            while True:
                f = js.publish_async(subj, b"m")
                with lock:
                    futs.append(f)
                started.set()
        except BaseException as exc:  # noqa: BLE001 - checked below
            ended.append(exc)

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    assert started.wait(10)
    wait_for(lambda: len(futs) > 2000, 20, what="2000 publishes")
    nc.close()
    for t in ts:
        t.join(20)
        assert not t.is_alive()
    assert len(ended) == 8
    assert all(isinstance(e, jssync.ConnectionClosedError) for e in ended), ended
    # every Future handed out is done: a PubAck, or failed because the connection closed
    for f in futs:
        exc = f.exception(10)
        assert exc is None or isinstance(exc, jssync.ConnectionClosedError), exc


@needs_fast_paths  # (the caller-side socket path is one)
def test_concurrent_requests_leave_the_socket_to_the_io_thread(nats_server, stream, monkeypatch):
    # A caller watching the socket for its own reply (CallerSocket.watch) is
    # woken by every reply that arrives; with 16 threads in js.publish each reply woke all
    # of them (about 12 context switches per message). Only a lone request watches now.
    subj = f"{stream.name}.x"
    with jssync.connect(nats_server.url) as nc:
        js = nc.jetstream()
        js.publish(subj, b"warm-up")
        orig = nc._sockpath.watch
        crowded: list[int] = []
        watched: list[int] = []

        def spy(waiter, token, deadline):
            n = len(nc._replies)
            (crowded if n > 1 else watched).append(n)
            return orig(waiter, token, deadline)

        monkeypatch.setattr(nc._sockpath, "watch", spy)
        # A lone request falls back to the I/O thread when the socket is busy at that moment
        # (the pump writing, a PING): under load one try may do so; 20 in a row may not.
        lone = 0
        while lone < 20 and not watched:
            js.publish(subj, b"alone")
            lone += 1
        assert watched, "a lone js.publish no longer watches the socket for its reply"
        go = threading.Barrier(8)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                go.wait(10)
                for _ in range(150):
                    js.publish(subj, b"m")
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors
        assert not crowded, f"{len(crowded)} of 1200 concurrent requests polled the socket themselves"
    assert stream.info().state.messages == 1 + lone + 8 * 150
