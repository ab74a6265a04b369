"""Nothing lost on any way out: an interrupt (KeyboardInterrupt) at every checkpoint of every
read kind, against a real server.

Deterministic injection: a trace function counts the line events of jssync's own code on the
reading thread and raises KeyboardInterrupt at the k-th one, for k = 1, 2, ... until a read
completes without it (then the sweep starts again at 1, on whichever path the next read
takes: a message buffered, or a wait). Line events are more places than a real signal can
land (CPython checks for signals at function starts, backward jumps and after calls), so
this is the stricter test; the real-SIGINT loops at the end cover the C-call windows.

The consumers have ``ack_wait=600``: a message stranded by an interrupt would wait ten
minutes for its redelivery, so a fresh fetch right after the loop (a few seconds) finds
it missing. An ordered consumer must hand out every stream sequence exactly once, in order.
"""

from __future__ import annotations

import ctypes
import linecache
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

import jssync
from jssync.jetstream.pull import _pools_lock
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(45)

N = 12
ACK_WAIT = 600
_JSSYNC = os.path.dirname(jssync.__file__) + os.sep
#: the readers' code (the checkpoints counted); the connection's own machinery (core/) is not
#: a reader: an interrupt there is its own subject
_READERS = tuple(_JSSYNC + p for p in ("base" + os.sep, "jetstream" + os.sep))
#: code that runs from a weakref finalizer (an exception there is unraisable, not the reader's)
_FINALIZERS = frozenset({"_finish_fetch"})


class Interrupt:
    """Raise KeyboardInterrupt at the ``at``-th line event of jssync code on this thread."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.n = 0
        self.where = ""

    def __enter__(self) -> Interrupt:
        _WITH_SEEN.clear()
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)

    @property
    def fired(self) -> bool:
        return bool(self.where)

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or self.where or not frame.f_code.co_filename.startswith(_READERS):
            return None
        f: FrameType | None = frame
        while f is not None:
            if f.f_code.co_name in _FINALIZERS:
                return None
            f = f.f_back
        return self._line

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not self.where:
            if _is_with_exit(frame):
                return self._line  # not a place a signal can land (see _is_with_exit)
            self.n += 1
            if self.n == self.at:
                self.where = f"{frame.f_code.co_name}:{frame.f_lineno}"
                raise KeyboardInterrupt(f"injected at line event {self.at} ({self.where})")
        return self._line


def _is_with_exit(frame: FrameType) -> bool:
    """A line event for a ``with`` line the frame has run already: the ``with`` block is left
    (a ``return`` inside it) and ``__exit__`` is about to be called. An exception raised there
    by a trace function skips ``__exit__`` (the lock of ``with lock:`` stays held for good);
    a real signal cannot land there (the eval loop checks for signals after the call)."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip()
    if not line.startswith(("with ", "async with ")):
        return False
    seen = _WITH_SEEN.setdefault(id(frame), set())
    if frame.f_lineno in seen:
        return True
    seen.add(frame.f_lineno)
    return False


#: ``with`` lines each frame has run (keyed by frame id; cleared per interrupt)
_WITH_SEEN: dict[int, set[int]] = {}


#: a read waiting for its message runs its wait loop (more lines the longer it waits): a
#: sweep goes back to k = 1 after this many lines even when no read completed
K_MAX = 600


def sweep(read: Callable[[], Any], handle: Callable[[Any], None], done: Callable[[], bool],
          after_interrupt: Callable[[], None] = lambda: None, sweeps: int = 3,
          max_reads: int = 4000) -> int:
    """Read until ``done()``. The first ``sweeps`` sweeps interrupt the reads at line k = 1, 2,
    ... (one read each) until a read completes without the interrupt (every checkpoint of
    that path was hit once); the reads after them are not interrupted. Returns the number
    of interrupts."""
    k = 1
    interrupts = 0
    for _ in range(max_reads):
        if done():
            return interrupts
        inj = Interrupt(k if sweeps > 0 else 0)
        try:
            with inj:
                got = read()
        except KeyboardInterrupt:
            if not inj.fired:
                raise
            interrupts += 1
            k = k + 1 if k < K_MAX else 1
            after_interrupt()
            continue
        except jssync.TimeoutError:
            got = None
        if inj.fired:  # fired in code that swallowed it: not a way out of the read
            k = k + 1 if k < K_MAX else 1
        elif sweeps > 0:
            k = 1
            sweeps -= 1
        if got is not None:
            handle(got)
    raise AssertionError(f"not done after {max_reads} reads ({interrupts} interrupts)")


def _clear_stale_handled_exception() -> None:
    """Forget an exception the injector left as "being handled" in this thread's base state.

    Raising from a trace function while CPython unwinds an ``except`` block can skip the
    restore of the thread's handled exception (a real signal cannot land there), so a
    ``queue.Empty`` stays as ``sys.exc_info()`` and becomes the ``__context__`` of every
    exception later tests raise in this thread. Called from a plain (non-generator) frame,
    so it clears the thread's own state."""
    ctypes.pythonapi.PyErr_SetHandledException.argtypes = [ctypes.py_object]
    ctypes.pythonapi.PyErr_SetHandledException.restype = None
    ctypes.pythonapi.PyErr_SetHandledException(None)


@pytest.fixture(autouse=True)
def _no_lock_left_held(request: pytest.FixtureRequest) -> Iterator[None]:
    """An interrupt leaves no lock of jssync's held (another thread could never fetch again),
    and the injector leaves no stale handled exception behind (see above)."""
    request.addfinalizer(_clear_stale_handled_exception)
    yield
    got: list[bool] = []

    def probe() -> None:
        if _pools_lock.acquire(timeout=2 * FACTOR):
            _pools_lock.release()
            got.append(True)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert got == [True], "the fetch inbox pool's lock was left held"


def _publish(js: Any, subject: str, n: int) -> None:
    for i in range(n):
        js.publish(subject, str(i + 1).encode())


def _seq(msg: Any) -> int:
    return int(msg.metadata.sequence.stream)


def _rest_now(js: Any, stream: str, durable: str, got: set[int]) -> set[int]:
    """Pull for a short time (far below AckWait): the messages the interrupts gave back or
    nak'ed are redelivered at once; a stranded one is not."""
    c = js.consumer(stream, durable)
    end = time.monotonic() + 3 * FACTOR
    while time.monotonic() < end and len(got) < N:
        for m in c.fetch(N, expires=0.5):
            got.add(_seq(m))
            m.ack()
    return got


def _pull_consumer(stream: Any) -> Any:
    return stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=ACK_WAIT)


def _check_all_acked(js: Any, stream_name: str, got: set[int], interrupts: int) -> None:
    got = _rest_now(js, stream_name, "D", got)
    missing = sorted(set(range(1, N + 1)) - got)
    assert not missing, f"stranded until AckWait after {interrupts} interrupts: {missing}"
    info = js.consumer(stream_name, "D").info()
    assert info.num_ack_pending == 0
    assert interrupts > 0


def test_consumer_next_loses_nothing_when_interrupted_anywhere(js, stream):
    _publish(js, f"{stream.name}.m", N)
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    got: set[int] = set()

    def handle(m: Any) -> None:
        got.add(_seq(m))
        m.ack()

    interrupts = sweep(lambda: c.next(timeout=1), handle, lambda: len(got) >= N)
    _check_all_acked(js, stream.name, got, interrupts)


@pytest.mark.parametrize("read", ["iterate", "next"])
def test_consume_loses_nothing_when_interrupted_anywhere(js, stream, read):
    """Interrupted, the consume goes on (the message given back comes first); at the end,
    leaving the ``with`` block naks what is still buffered."""
    _publish(js, f"{stream.name}.m", N)
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    got: set[int] = set()

    def handle(m: Any) -> None:
        got.add(_seq(m))
        m.ack()

    with c.consume(max_messages=5) as msgs:
        reader = (lambda: next(msgs)) if read == "iterate" else (lambda: msgs.next(timeout=5))
        interrupts = sweep(reader, handle, lambda: len(got) >= N - 3)
    _check_all_acked(js, stream.name, got, interrupts)


@pytest.mark.parametrize("kind", ["fetch", "fetch_bytes"])
def test_fetch_loop_loses_nothing_when_interrupted_anywhere(js, stream, kind):
    """A fetch loop left by the interrupt: the fetch is given up and what it holds nak'ed."""
    _publish(js, f"{stream.name}.m", N)
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    got: set[int] = set()
    state: dict[str, Any] = {"res": None}

    def read() -> Any:
        res = state["res"]
        if res is None:
            res = state["res"] = c.fetch(4, expires=2) if kind == "fetch" else c.fetch_bytes(4096, expires=2)
        for m in res:
            return m
        state["res"] = None
        return None

    def dropped() -> None:
        res = state["res"]
        state["res"] = None
        if res is not None:
            res.stop()

    def handle(m: Any) -> None:
        got.add(_seq(m))
        m.ack()

    interrupts = sweep(read, handle, lambda: len(got) >= N, after_interrupt=dropped)
    dropped()
    _check_all_acked(js, stream.name, got, interrupts)


def test_fetch_stopped_after_its_request_completed_naks_the_rest(js, stream):
    """fetch(10), take 1, stop(): the request is complete (all 10 arrived), and the 9 not
    taken are nak'ed at once (not left for AckWait)."""
    _publish(js, f"{stream.name}.m", 10)
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    res = c.fetch(10, expires=5)
    first = next(iter(res))
    deadline = time.monotonic() + 5 * FACTOR
    while res.received < 10 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the rest of the batch arrives
    assert res.received == 10
    first.ack()
    res.stop()
    got = _rest_now(js, stream.name, "D", {_seq(first)})
    assert got == set(range(1, 11))


def test_fetch_with_default_options_stopped_after_its_batch_arrived_naks_the_rest(js, stream):
    """The defaults (a durable with ack_wait 30 s, ``fetch(10)``): the batch arrived in full,
    one taken and acked, ``stop()``: the other 9 are redelivered at once, not after 30 s."""
    _publish(js, f"{stream.name}.m", 10)
    stream.create_consumer(durable_name="D")
    c = js.consumer(stream.name, "D")
    res = c.fetch(10)
    first = next(iter(res))
    deadline = time.monotonic() + 5 * FACTOR
    while res.received < 10 and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the rest of the batch arrives
    assert res.received == 10
    first.ack()
    res.stop()
    got = _rest_now(js, stream.name, "D", {_seq(first)})
    assert got == set(range(1, 11))


def test_fetch_loop_left_after_its_request_completed_naks_the_rest(js, stream):
    """``break`` out of a fetch loop whose request completed: the rest is nak'ed once the
    result is dropped."""
    _publish(js, f"{stream.name}.m", 10)
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    taken = []
    for m in c.fetch(10, expires=5):
        taken.append(m)
        m.ack()
        deadline = time.monotonic() + 5 * FACTOR
        while c.info(timeout=5).num_pending and time.monotonic() < deadline:
            time.sleep(0.01)  # poll: the whole batch was delivered
        break
    got = _rest_now(js, stream.name, "D", {_seq(m) for m in taken})
    assert got == set(range(1, 11))


def test_push_next_msg_loses_nothing_when_interrupted_anywhere(js, stream):
    _publish(js, f"{stream.name}.m", N)
    sub = js.subscribe(f"{stream.name}.>", durable="P", manual_ack=True,
                       config=jssync.ConsumerConfig(ack_wait=ACK_WAIT, max_ack_pending=4))
    got: set[int] = set()
    try:
        def handle(m: Any) -> None:
            got.add(_seq(m))
            m.ack()

        interrupts = sweep(lambda: sub.next_msg(timeout=5), handle, lambda: len(got) >= N)
    finally:
        sub.unsubscribe()
    assert got == set(range(1, N + 1))
    assert interrupts > 0


def _ordered_sweep(read_factory: Callable[[Any], Callable[[], Any]], js: Any, stream: Any) -> None:
    _publish(js, f"{stream.name}.m", N)
    oc = stream.ordered_consumer()
    seen: list[int] = []
    read = read_factory(oc)
    interrupts = sweep(read, lambda m: seen.append(_seq(m)), lambda: len(seen) >= N)
    assert seen == list(range(1, N + 1)), f"after {interrupts} interrupts: {seen}"
    assert interrupts > 0


def test_ordered_next_skips_nothing_when_interrupted_anywhere(js, stream):
    _ordered_sweep(lambda oc: (lambda: oc.next(timeout=5)), js, stream)


def test_ordered_fetch_skips_nothing_when_interrupted_anywhere(js, stream):
    def factory(oc: Any) -> Callable[[], Any]:
        state: dict[str, Any] = {"res": None}

        def read() -> Any:
            if state["res"] is None:
                state["res"] = oc.fetch(3, expires=2)
            for m in state["res"]:
                return m
            state["res"] = None
            return None

        return read

    _ordered_sweep(factory, js, stream)


def test_ordered_consume_skips_nothing_when_interrupted_anywhere(js, stream):
    _publish(js, f"{stream.name}.m", N)
    oc = stream.ordered_consumer()
    seen: list[int] = []
    with oc.consume(max_messages=4) as msgs:
        interrupts = sweep(lambda: msgs.next(timeout=5), lambda m: seen.append(_seq(m)),
                              lambda: len(seen) >= N // 2)
    # stopped with messages buffered: the next consume starts at the first not handed over
    with oc.consume(max_messages=4) as msgs:
        for m in msgs:
            seen.append(_seq(m))
            if len(seen) >= N:
                break
    assert seen == list(range(1, N + 1)), f"after {interrupts} interrupts: {seen}"
    assert interrupts > 0


# ------------------------------------------------------------------ real SIGINT at random moments

SIGNALS = 15
#: the real-SIGINT loops run when JSSYNC_SIGINT_LOOPS=1. Their stalls on 3.11 (an ordered
#: ``next`` "no message within 5 s", a consumer create's RequestTimeoutError) were a socket left
#: parked by a request interrupted around its caller-side read (fixed, and tested without
#: signals in tests/integration/core/test_request_interrupted_while_parked.py); 3.13's
#: unraisable KeyboardInterrupts in ``next`` came from FetchResult finalizers run by the
#: garbage collector (``next`` now ends its result itself). Still opt-in: on 3.13 one run in 5
#: ended the pytest session with a KeyboardInterrupt raised inside pytest's own unraisable hook
#: at the session's last gc.collect, and on 3.11 one run in 8 an ordered ``fetch(100, expires=2)``
#: iteration waited in FetchResult._wait past the test's timeout (causes not found yet)
_LOOPS = pytest.mark.skipif(
    not os.environ.get("JSSYNC_SIGINT_LOOPS"),
    reason="real-SIGINT loops at random moments (slow): opt in with JSSYNC_SIGINT_LOOPS=1; "
           "not yet green on every run on 3.13 (the deterministic sweeps above always run)")


def _sigint_loop(read: Callable[[], Any], handle: Callable[[Any], None], done: Callable[[], bool],
                 after_interrupt: Callable[[], None] = lambda: None) -> int:
    """Read until ``done()`` while a thread sends SIGINT at random moments (``SIGNALS`` of them)."""
    rng = random.Random(1234)
    stop = threading.Event()
    sent = [0]

    def killer() -> None:
        while sent[0] < SIGNALS and not stop.wait(rng.uniform(0.0005, 0.02)):
            os.kill(os.getpid(), signal.SIGINT)
            sent[0] += 1

    t = threading.Thread(target=killer, name="sigint-sender")
    interrupts = 0
    # the loop's own steps are calls too (a signal lands at any function's start): a message
    # read is kept in ``pending`` until ``handle`` (idempotent) returned, and what follows an
    # interrupt is done inside the ``try`` (a second signal lands there as often)
    pending: Any = None
    interrupted = False
    t.start()
    try:
        end = time.monotonic() + 60 * FACTOR
        # two levels: a signal landing at the inner loop's own jump back (outside its ``try``,
        # seen once in 5 runs) is caught by the outer one, and the inner loop goes on
        while True:
            try:
                while time.monotonic() < end:
                    try:
                        if interrupted:
                            after_interrupt()
                            interrupted = False
                        if pending is None:
                            if done():
                                break
                            pending = read()
                        if pending is not None:
                            handle(pending)
                            pending = None
                    except KeyboardInterrupt:
                        interrupts += 1
                        interrupted = True
                break
            except KeyboardInterrupt:
                interrupts += 1
                interrupted = True
    finally:
        stop.set()
        while t.is_alive():
            try:
                t.join()
            except KeyboardInterrupt:  # one sent as the loop ended
                interrupts += 1
        # a signal sent as the thread ended lands here, once at most
        for _ in range(50):
            try:
                time.sleep(0.001)  # nothing happens: lets a last pending SIGINT be delivered
                break
            except KeyboardInterrupt:
                interrupts += 1
    return interrupts


M = 3000


def _many(js: Any, subject: str) -> None:
    for _ in range(M):
        js.publish_async(subject, b"x")
    js.publish_async_completed(30)


def _check_sigint_rest(js: Any, stream: str, got: set[int]) -> None:
    c = js.consumer(stream, "D")
    end = time.monotonic() + 5 * FACTOR
    while time.monotonic() < end and len(got) < M:
        for m in c.fetch(500, expires=0.5):
            got.add(_seq(m))
            m.ack()
    missing = sorted(set(range(1, M + 1)) - got)
    assert not missing, f"stranded until AckWait: {missing[:20]}"


@_LOOPS
@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind", ["next", "consume", "fetch", "push"])
def test_real_sigint_during_a_read_loop_loses_nothing(js, stream, sigint, kind):
    _many(js, f"{stream.name}.m")
    got: set[int] = set()

    def handle(m: Any) -> None:
        got.add(_seq(m))
        m.ack()

    if kind == "push":
        sub = js.subscribe(f"{stream.name}.>", durable="D", manual_ack=True,
                           config=jssync.ConsumerConfig(ack_wait=ACK_WAIT))
        try:
            _sigint_loop(lambda: sub.next_msg(timeout=5), handle, lambda: len(got) >= M)
        finally:
            sub.unsubscribe()
        assert len(got) == M
        return
    _pull_consumer(stream)
    c = js.consumer(stream.name, "D")
    if kind == "next":
        _sigint_loop(lambda: c.next(timeout=5), handle, lambda: len(got) >= M)
    elif kind == "consume":
        cc = c.consume()
        try:
            _sigint_loop(lambda: cc.next(timeout=5), handle, lambda: len(got) >= M)
        finally:
            cc.stop()
            cc.wait(10 * FACTOR)
    else:
        state: dict[str, Any] = {"res": None}

        def read() -> Any:
            if state["res"] is None:
                state["res"] = c.fetch(100, expires=2)
            for m in state["res"]:
                return m
            state["res"] = None
            return None

        def dropped() -> None:
            res, state["res"] = state["res"], None
            if res is not None:
                res.stop()

        _sigint_loop(read, handle, lambda: len(got) >= M, dropped)
        dropped()
    _check_sigint_rest(js, stream.name, got)


@_LOOPS
@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind", ["next", "consume", "fetch"])
def test_real_sigint_during_an_ordered_read_loop_skips_nothing(js, stream, sigint, kind):
    _many(js, f"{stream.name}.m")
    oc = stream.ordered_consumer()
    seen: list[int] = []
    last: list[Any] = [None]

    def note(m: Any) -> None:  # idempotent: called again for the same message after an interrupt
        if last[0] is m:
            return
        s = _seq(m)
        last[0] = m
        seen.append(s)

    if kind == "next":
        _sigint_loop(lambda: oc.next(timeout=5), note, lambda: len(seen) >= M)
    elif kind == "consume":
        cc = oc.consume()
        try:
            _sigint_loop(lambda: cc.next(timeout=5), note, lambda: len(seen) >= M)
        finally:
            cc.stop()
            cc.wait(10 * FACTOR)
    else:
        state: dict[str, Any] = {"res": None}

        def read() -> Any:
            if state["res"] is None:
                state["res"] = oc.fetch(100, expires=2)
            for m in state["res"]:
                return m
            state["res"] = None
            return None

        _sigint_loop(read, note, lambda: len(seen) >= M)
    assert seen == list(range(1, M + 1)), f"first difference at {next(i for i, s in enumerate(seen) if s != i + 1)}"
