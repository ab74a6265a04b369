"""Pull consumers (ADR-37): fetch, fetch_bytes, fetch_no_wait, next; ``consume`` lives in
jetstream/consume/ (context.py and the rooms beside it) and is imported from here as before.

Messages reach the user without an event-loop hop per message: nats-py hands each one
(on the I/O thread) to an object standing in for its subscription queue
(``put_nowait``), which sorts it (user message or status, see :mod:`jssync.base.status`)
and puts user messages on a ``queue.SimpleQueue`` the user thread reads (or the
callback lane reads, on the worker pool). Pull requests and acks go out through the
connection's publish burst queue.

A fetch runs a single-pull :class:`~jssync.jetstream.consume.engine.PullEngine`: it sends
its one pull request and the engine says when the request is over.
"""

from __future__ import annotations

import _thread
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..base.deadline import EXPIRED, Deadline, wait_get
from ..base.errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    Error,
    NoHeartbeatError,
    NoRespondersError,
    NotFoundError,
    PullRequestError,
    TimeoutError,
    ValidationError,
    translating,
)
from ..base.status import classify, is_user_msg, message_size, pull_request
from ..core import hooks as _core_hooks
from ..core import natspy as _natspy
from ..core.hooks import HOOKS as _CORE
from ..core.msg import Msg
from .consume.common import _DISCARD as _DISCARD
from .consume.common import _END as _END
from .consume.common import _Control as _Control
from .consume.common import _on_loop as _on_loop
from .consume.common import _unsubscribe_soon as _unsubscribe_soon
from .consume.common import _wire_header_len as _wire_header_len
from .consume.context import ConsumeContext as ConsumeContext
from .consume.context import consume as consume
from .consume.engine import End, EngineState, PinLost, PullEngine
from .consume.options import _NS, MIN_FETCH_HEARTBEAT, _check_hb
from .consume.options import BYTES_ONLY_BATCH as BYTES_ONLY_BATCH
from .consume.options import DEFAULT_EXPIRES as DEFAULT_EXPIRES
from .consume.options import DEFAULT_MAX_MESSAGES as DEFAULT_MAX_MESSAGES
from .consume.options import FETCH_DEFAULT_HEARTBEAT as FETCH_DEFAULT_HEARTBEAT
from .consume.options import FETCH_GRACE as FETCH_GRACE
from .consume.options import FETCH_HEARTBEAT_AFTER as FETCH_HEARTBEAT_AFTER
from .consume.options import MAX_HEARTBEAT as MAX_HEARTBEAT
from .consume.options import MIN_EXPIRES as MIN_EXPIRES
from .consume.options import MIN_HEARTBEAT as MIN_HEARTBEAT
from .consume.options import NO_LIMIT_PULL as NO_LIMIT_PULL
from .consume.options import ConsumeOptions as ConsumeOptions
from .consume.options import _pos_float as _pos_float
from .consume.options import _pos_int as _pos_int
from .priority import Pins, PullPriority

if TYPE_CHECKING:
    from ..core.connection import Connection
    from .context import JetStream

log = logging.getLogger("jssync")

_monotonic = time.monotonic

#: Idle fetch inboxes kept per connection for reuse.
_POOL_MAX = 8
#: The states of a consume are its engine's (see jssync/jetstream/consume/engine.py).
_State = EngineState


# ----------------------------------------------------------------------------- fetch


class _Inbox:
    """A reply inbox for fetch requests: one core subscription, reused while clean."""

    __slots__ = ("subject", "nsub")

    def __init__(self, subject: str, nsub: Any) -> None:
        self.subject = subject
        self.nsub = nsub


_pools: weakref.WeakKeyDictionary[Connection, list[_Inbox]] = weakref.WeakKeyDictionary()
_pools_lock = threading.RLock()  # re-entrant: a FetchResult finalizer may run inside it


def _acquire_inbox(conn: Connection, sink: _natspy.Receiver, deadline: Deadline) -> _Inbox:
    """An idle inbox of ``conn`` pointed at ``sink``; subscribes a new one when none is idle."""
    with _pools_lock:
        pool = _pools.get(conn)
        while pool:
            box = pool.pop()
            if not _natspy.sub_closed(box.nsub):
                _natspy.set_sub_queue(box.nsub, sink)
                return box
    subject = conn.new_inbox()

    async def _sub() -> Any:
        with translating():
            return await _natspy.subscribe(conn.internal.nc, subject, sink)

    return _Inbox(subject, conn.run(_sub(), deadline, "subscribe"))


def _release_inbox(conn: Connection, box: _Inbox, reuse: bool) -> None:
    """Give an inbox back: pooled when its pull request is over on the server, else unsubscribed."""
    _natspy.set_sub_queue(box.nsub, _DISCARD)
    if reuse and not conn.internal.closed and not _natspy.sub_closed(box.nsub):
        with _pools_lock:
            pool = _pools.setdefault(conn, [])
            if len(pool) < _POOL_MAX:
                pool.append(box)
                return
    _unsubscribe_soon(conn, box.nsub)


class _FetchState(_natspy.Receiver):
    """The I/O-thread side of one fetch: the inbox's receiver, the runner of a single-pull
    :class:`~jssync.jetstream.consume.engine.PullEngine` (which says when the request is over)."""

    __slots__ = ("q", "front", "nowait", "batch", "max_bytes", "ack_none", "received", "done", "finished", "eng",
                 "clean", "reuse", "error", "raise_error", "check", "stream", "consumer", "last_sseq", "conn",
                 "pins", "group", "sent_pin", "__weakref__")

    def __init__(self, batch: int, max_bytes: int, ack_none: bool, stream: str, consumer: str,
                 check: Callable[[Msg], bool | None] | None = None, conn: Connection | None = None,
                 pins: Pins | None = None, group: str = "", sent_pin: str | None = None,
                 heartbeat: float = 0.0) -> None:
        self.conn = conn
        # pinned_client (ADR-42): the handle's pin ids, this pull's group and the id it carried
        self.pins = pins
        self.group = group
        self.sent_pin = sent_pin
        self.q: SimpleQueue[Any] = SimpleQueue()
        # the hand-over (jssync/base/ledger.py): the queue read without a signal check before
        # the store, and the front of the buffer (messages given back by an interrupted read)
        self.nowait = iter(self.q.get_nowait, None)
        self.front: list[Any] = []
        #: messages this request can still hand out (one less for each the check passes over)
        self.batch = batch
        self.max_bytes = max_bytes
        self.ack_none = ack_none
        self.received = 0
        # the one pull's engine: it counts what arrives and ends the request; after stop()
        # (the iteration was given up while the request may be open) what still arrives is
        # nak'ed at once
        self.eng = PullEngine(max_messages=batch, max_bytes=max_bytes, expires=0.0, heartbeat=heartbeat or 0.0,
                              stream=stream, consumer=consumer, single=True)
        self.eng.start(_monotonic())
        self.eng.pull_sent(batch, max_bytes)
        self.done = False
        #: _finish_fetch ran (it runs once: from the finalizer or, interrupted there, from _end)
        self.finished = False
        self.clean = False
        self.reuse = False
        self.error: BaseException | None = None
        self.raise_error = False
        self.check = check
        self.stream = stream
        self.consumer = consumer

    def put_nowait(self, msg: Msg) -> None:  # the Receiver hook (I/O thread)
        eng = self.eng
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            if eng.state is not EngineState.RUNNING:  # over (given up, or ended): nobody takes it
                self.not_taken(msg)  # nak'ed: redelivered at once, never held until AckWait
                return
            if self.check is not None:
                ok = self.check(msg)
                if not ok:
                    if ok is None:
                        self._passed_over(msg)
                    else:
                        eng.closed(None)
                        self._end(False)
                    return
            if self.ack_none:
                msg._ack_none = True
            if self.pins is not None:
                self.pins.seen(self.group, h)
            self.q.put(msg)
            self.received += 1
            if self.max_bytes:
                acts = eng.message(message_size(msg.subject, msg.reply, h, msg.data,
                                                -1 if self.conn is None else _wire_header_len(self.conn, msg)))
            else:
                acts = eng.message()
            if acts:
                self._filled()
            return
        st = classify(h, msg.data, msg.reply)
        if st is None:  # pragma: no cover - classify agrees with the test above
            return
        for a in eng.status(st.code, st.description, st.pending_msgs, st.pending_bytes):
            if type(a) is PinLost:
                if self.pins is not None:  # 423: this pull's pin id is stale; the next pull goes without one
                    self.pins.lost(self.group, self.sent_pin)
            elif type(a) is End:
                if a.error is not None:
                    self.error = a.error
                    self.raise_error = a.fatal
                self._end(True)  # a status is the last thing the server sends for a request

    def _filled(self) -> None:
        """The engine says the request got all it asked for (its batch or its max_bytes)."""
        eng = self.eng
        if self.max_bytes and eng.rx_b >= self.max_bytes:
            self._end(eng.rx >= eng.max_messages, False)
        else:
            # with max_bytes the server follows a full batch with 409 Batch Completed: that
            # inbox is not reused, so the status can never end a later fetch (without
            # max_bytes nothing follows a full batch, and the inbox is reused)
            self._end(True, not self.max_bytes)

    def not_taken(self, msg: Msg) -> None:
        """A message of an abandoned request that nobody will take: nak it, so the server
        redelivers it at once instead of after AckWait (statuses and ack-none: nothing; any thread)."""
        h = msg.headers
        if self.ack_none or not (h is None or msg.data or "Status" not in h or is_user_msg(msg.reply)):
            return
        msg._nak_quiet()

    def abandon(self) -> None:
        """No more messages are taken from this request (any thread): the rest is nak'ed."""
        self.eng.stop()
        self.done = True

    def nak_front(self) -> None:
        """Nak the messages given back to the front of the buffer (any thread)."""
        front = self.front
        while front:
            item = front.pop()
            if item.__class__ is not _Control:
                self.not_taken(item)

    def nak_queued(self) -> None:
        """Nak every message still buffered and not taken, the front first (on the I/O thread,
        after the inbox is gone, or once the request is over: nothing is queued meanwhile)."""
        self.nak_front()
        q = self.q
        ctl: list[Any] = []
        while True:
            try:
                item = q.get_nowait()
            except Empty:
                break
            if item.__class__ is _Control:
                ctl.append(item)  # put back: a reader may be waiting for the end
            else:
                self.not_taken(item)
        for item in ctl:
            q.put(item)

    def _passed_over(self, msg: Msg) -> None:
        """A message the check passes over: not handed out, but it took its place in the request."""
        self.batch -= 1
        size = message_size(msg.subject, msg.reply, msg.headers, msg.data,
                            -1 if self.conn is None else _wire_header_len(self.conn, msg)) if self.max_bytes else 0
        if self.eng.skipped(size):
            self._filled()

    def _end(self, clean: bool, reuse: bool | None = None) -> None:
        """The request is over for us; ``reuse``: nothing more can arrive on its inbox (default ``clean``)."""
        self.done = True
        self.clean = clean
        self.reuse = clean if reuse is None else reuse
        self.q.put(_END)


class _AbandonedFetch:
    """An abandoned fetch whose inbox is being drained, among the connection's open
    subscriptions until it is: ``close`` and ``drain`` wait for it (its naks go out
    before the socket closes; a message the server sent before the UNSUB is not lost)."""

    __slots__ = ("_conn", "_state", "_done")

    def __init__(self, conn: Connection, state: _FetchState) -> None:
        self._conn = conn
        self._state = state
        self._done = threading.Event()

    def register(self) -> None:
        """Join the connection's open subscriptions (any thread; skipped, logged, when the
        lock is held for a second: a finalizer run by the collector inside the lock's holder)."""
        internal = self._conn.internal
        if internal.subs_lock.acquire(timeout=1.0):
            try:
                internal.subs.add(self)  # type: ignore[arg-type]  # closed/drained with the connection
            finally:
                internal.subs_lock.release()
        else:  # pragma: no cover - needs the collector inside the lock
            log.debug("an abandoned fetch's drain is not waited for by close")

    def finished(self) -> None:
        """The inbox is drained (or the connection ended): nothing to wait for (any thread)."""
        self._done.set()
        internal = self._conn.internal
        if internal.subs_lock.acquire(timeout=1.0):
            try:
                internal.subs.discard(self)  # type: ignore[arg-type]
            finally:
                internal.subs_lock.release()

    def _wait(self, deadline: Deadline) -> bool:
        while not self._done.wait(deadline.slice()):
            if deadline.expired():
                return False
        return True

    def _before_close(self, deadline: Deadline, drain: bool) -> None:
        """``Connection.close``/``drain``: wait (until ``deadline``) for the naks to go out."""
        self._wait(deadline)

    def drain(self, timeout: float | None = None) -> None:
        """``Connection.drain``: wait up to ``timeout`` for the drain; raises TimeoutError."""
        if not self._wait(Deadline(timeout)):
            st = self._state
            raise TimeoutError(f"the stopped fetch from {st.consumer!r} on stream {st.stream!r} "
                               "did not hand back its messages in time")

    def _end(self, error: Error | None = None) -> None:
        """The connection closed: nothing more can be nak'ed."""
        self.finished()


def _abandon_inbox(conn: Connection, box: _Inbox, state: _FetchState) -> None:
    """Give up an inbox whose pull request may still be open on the server (any thread).

    What is queued and not taken, and whatever still arrives until the server processed
    the UNSUB, is nak'ed (redelivered at once, never left for AckWait): the inbox is
    drained (UNSUB, PING/PONG, removal), not dropped, so nothing on the wire is lost.
    Closing the connection meanwhile waits for that (:class:`_AbandonedFetch`).
    """
    state.abandon()
    pending = _AbandonedFetch(conn, state)

    async def _drain() -> None:
        state.nak_queued()  # on the I/O thread: no message is being queued meanwhile
        try:
            if not _natspy.sub_closed(box.nsub) and not conn.internal.nc.is_closed:
                await conn.internal.drain_nsub(box.nsub, 5.0)
        except Exception:  # disconnected or timed out: the subscription is removed anyway
            log.debug("draining an abandoned fetch inbox failed", exc_info=True)
        finally:
            _natspy.set_sub_queue(box.nsub, _DISCARD)
            state.nak_queued()
            pending.finished()

    try:
        conn.internal.loop.check()
    except Error:  # the connection is gone: nothing can be nak'ed
        return
    pending.register()
    _on_loop(conn, _drain)


def _reconnects(conn: Connection) -> int:
    """How many times the connection reconnected so far."""
    try:
        return int(conn.internal.nc.stats["reconnects"])
    except Exception:  # pragma: no cover - another nats-py version
        return 0


def pull_lost(err: BaseException | None) -> bool:
    """True when ``err`` ended a pull for a reason unrelated to the pull itself: its client-side
    deadline passed, heartbeats stopped, a reconnect, the server shut down (409 Server Shutdown).
    A call without a limit pulls again after these."""
    if isinstance(err, TimeoutError | NoHeartbeatError):
        return True
    return (isinstance(err, PullRequestError) and err.code == 409
            and "server shutdown" in (err.description or "").lower())


def _finish_fetch(conn: Connection, box: _Inbox | None, state: _FetchState,
                  on_end: Callable[[_FetchState], None] | None) -> None:
    if state.finished:
        return
    state.finished = True
    if box is not None:
        if state.done and state.reuse:
            # the request is over (nothing more arrives): what was not taken is nak'ed now
            if not state.ack_none and (state.front or not state.q.empty()):
                state.nak_queued()
            _release_inbox(conn, box, True)
        elif state.ack_none:
            _release_inbox(conn, box, False)  # nothing to nak
        else:
            _abandon_inbox(conn, box, state)
    if on_end is not None:
        try:
            on_end(state)
        except Exception:  # pragma: no cover - a bug in the hook must not break iteration
            log.exception("fetch end hook failed")


def _finish_dropped_fetch(conn: Connection, box: _Inbox | None, state: _FetchState,
                          on_end: Callable[[_FetchState], None] | None) -> None:
    """The finalizer of a result dropped before its end (run by the garbage collector, in
    whatever thread allocated): a Ctrl-C landing in it goes to the main thread
    (``_thread.interrupt_main``) instead of being printed as unraisable and lost."""
    try:
        _finish_fetch(conn, box, state, on_end)
    except KeyboardInterrupt:
        _thread.interrupt_main()


class FetchResult:
    """The messages of one pull request, as they arrive.

    Iterate it: each message is yielded as soon as it arrives; the iteration ends when the
    request ends (batch complete, expired, no messages for ``fetch_no_wait``). Afterwards
    :attr:`error` says why it ended when that was not normal (None otherwise). Errors
    ADR-37 calls errors (400 Bad Request, 409 Consumer Deleted, 409 Consumer is push
    based) and a pull nobody answered (503) are raised by the iteration too; warnings
    (409 Exceeded ...), missed heartbeats and a client-side timeout are only on
    :attr:`error`. Not meant to be iterated by several threads at once.

    Every way out settles what was received and not handed over: :meth:`stop`, leaving the
    loop (``break``, an exception, Ctrl-C) and dropping the result nak it at once (the
    server redelivers it now, not after AckWait), whether the request was still open or
    over. An exception (Ctrl-C) landing while a message is handed over puts it back at the
    front: iterating again returns it first.
    """

    def __init__(self, conn: Connection, state: _FetchState, box: _Inbox, deadline: Deadline,
                 heartbeat: float | None, on_end: Callable[[_FetchState], None] | None = None,
                 lost_on_reconnect: bool = False) -> None:
        self._conn = conn
        self._state = state
        self._deadline = deadline
        self._hb = heartbeat
        self._ended = False
        #: a pull nobody answered (503) looks the consumer up through it (see _deleted_or)
        self._js: JetStream | None = None
        # a pull of a call without a limit: a reconnect may have lost it (server restart), so
        # the iteration ends then with a TimeoutError and the caller pulls again
        self._reconnects = _reconnects(conn) if lost_on_reconnect else None
        self._box = box
        self._on_end = on_end
        self._finalizer = weakref.finalize(self, _finish_dropped_fetch, conn, box, state, on_end)

    def __repr__(self) -> str:
        s = self._state
        return f"<jssync.FetchResult {s.stream}/{s.consumer} received={s.received} done={self._ended}>"

    @property
    def error(self) -> BaseException | None:
        """Why the request ended, when it was not a normal end; None otherwise."""
        return self._state.error

    @property
    def received(self) -> int:
        """Messages received so far."""
        return self._state.received

    def __iter__(self) -> Iterator[Msg]:
        return self

    def __next__(self) -> Msg:
        if self._ended:
            raise StopIteration
        tracer = _CORE.tracer  # jssync.otel: a receive span (None: off)
        st = self._state
        if tracer is not None and tracer.wants():
            return tracer.receive("fetch", self.__next__, self._conn, st.stream, st.consumer)
        # the hand-over (jssync/base/ledger.py): from the take to the return, an exception
        # gives the message back to the front of the buffer (the way out then naks it)
        item: Any = None
        try:
            front = st.front
            if front:  # given back by an interrupted read: it comes first
                item = front[-1]
                del front[-1]
            else:
                try:
                    for item in st.nowait:  # noqa: B007 - FOR_ITER: no signal check before the store
                        break
                except Empty:
                    pass
                if item is None:  # wait outside the except block: what it raises carries no queue.Empty context
                    try:
                        item = self._wait()
                    except BaseException:  # Ctrl-C, ...: the request is given up; the rest is nak'ed
                        self.stop()
                        raise
            if item.__class__ is not _Control:
                if self._ended:  # stop() from another thread meanwhile: not handed over
                    held, item = item, None
                    st.not_taken(held)
                    raise StopIteration
                return item  # type: ignore[no-any-return]
        except BaseException:
            if item is not None and item.__class__ is not _Control:
                st.front.append(item)
                if self._ended:  # the way out ran already: nak it now
                    st.nak_front()
            raise
        self._end()
        if st.raise_error and st.error is not None:
            st.raise_error = False
            if type(st.error) is NoRespondersError and self._js is not None:
                st.error = _deleted_or(self._js, st.stream, st.consumer, st.error)
            raise st.error
        raise StopIteration

    def _wait(self) -> Any:
        st = self._state
        q = st.q
        deadline = self._deadline
        eng = st.eng if self._hb else None
        while True:
            item: Any = EXPIRED
            try:
                item = wait_get(q, deadline.slice(), st.front)
                if item is not EXPIRED:
                    return item
            except BaseException:
                if item is not EXPIRED:  # returned to this frame and not passed on
                    st.front.append(item)
                raise
            gone = self._conn.internal.close_error
            if gone is not None:  # it gave up reconnecting: the iteration raises why
                st.error = ConnectionClosedError(str(gone))
                st.raise_error = True
                return _END
            if self._conn.internal.closed:
                st.error = ConnectionClosedError("the connection closed during the fetch")
                return _END
            if deadline.expired():
                st.error = TimeoutError(
                    f"the pull request to {st.consumer!r} on stream {st.stream!r} did not end in time"
                )
                return _END
            if self._reconnects is not None and _reconnects(self._conn) != self._reconnects:
                st.error = TimeoutError(
                    f"the pull request to {st.consumer!r} on stream {st.stream!r} may have been lost in a reconnect"
                )
                return _END
            if eng is not None:
                for a in eng.tick(_monotonic()):  # the engine's heartbeat check: 2 x idle_heartbeat
                    if type(a) is End:
                        st.error = a.error
                        return _END

    def _give_back(self, msg: Msg) -> None:
        """A message this iteration returned and the caller did not (an exception landed in
        between): back to the front of the buffer (nak'ed at once when the iteration is over)."""
        st = self._state
        st.front.append(msg)
        if self._ended:
            st.nak_front()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            try:
                # detached, then run here: a result ended in the caller's thread leaves no
                # finalizer for the garbage collector to run, where a Ctrl-C landing in it
                # (3.13 checks for signals at a function's start and after its C calls) was
                # printed as unraisable and lost to the program
                self._finalizer.detach()
                _finish_fetch(self._conn, self._box, self._state, self._on_end)
            except BaseException:
                # Ctrl-C inside detach or the end: the end (naks, the inbox given back)
                # still happens, once
                _finish_fetch(self._conn, self._box, self._state, self._on_end)
                raise

    def stop(self) -> None:
        """Stop iterating, at once, from any thread; idempotent, never blocks.

        A thread blocked in the iteration wakes and its iteration ends (without an error).
        Messages received and not taken are nak'ed, so the server redelivers them at once
        (not after AckWait; nothing for ack policy none): whether the request is still open
        (then also those it still delivers until its inbox is unsubscribed) or over (its
        batch complete, expired). The same happens when the iteration is left (``break``,
        an exception, Ctrl-C) and the result is dropped.
        """
        if not self._ended:
            st = self._state
            if not st.done:
                st.abandon()
            st.q.put(_END)  # wakes a reader waiting in the iteration
            self._end()

    def __enter__(self) -> FetchResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _deleted_or(js: JetStream, stream: str, consumer: str, err: NoRespondersError) -> BaseException:
    """A single pull got no responders (503): when the consumer's info says it (or its stream)
    is gone, a :class:`ConsumerDeletedError` (as a consume ends); else ``err`` as it is (no
    leader, say). Blocks on one CONSUMER.INFO request (at most the context's timeout)."""
    try:
        js._consumer_info(stream, consumer, timeout=js.timeout)
    except NotFoundError as exc:
        gone = ConsumerDeletedError(
            f"consumer {consumer!r} on stream {stream!r} no longer exists (the pull got no responders; {exc})",
            code=404, err_code=getattr(exc, "err_code", None), stream=stream, consumer=consumer)
        gone.__cause__ = err
        return gone
    except Exception:  # noqa: BLE001 - no leader, a timeout: the 503 is what the caller gets
        log.debug("fetch: consumer info lookup after no responders failed", exc_info=True)
    return err


def fetch(js: JetStream, stream: str, consumer: str, batch: int, *, max_bytes: int = 0,
          expires: float | None = DEFAULT_EXPIRES, idle_heartbeat: float | None = None, no_wait: bool = False,
          ack_none: bool = False, check: Callable[[Msg], bool | None] | None = None,
          grace: float = FETCH_GRACE, on_end: Callable[[_FetchState], None] | None = None,
          prio: PullPriority | None = None, pins: Pins | None = None,
          lost_on_reconnect: bool = False) -> FetchResult:
    """Send one pull request and return the iterator over its messages (see :class:`FetchResult`).

    ``prio``: the pull's priority group options (ADR-42); ``pins``: the handle's pin ids
    (pinned_client), sent with the pull and updated from what arrives. ``lost_on_reconnect``:
    a reconnect ends the iteration with a TimeoutError on ``error`` (the pull may be lost).
    Blocks only to subscribe a reply inbox when no idle one can be reused.
    """
    conn = js.conn
    conn.internal.check_open()
    hb: float | None = None
    if no_wait:
        exp_ns = 0
        deadline = Deadline(js.timeout)
    else:
        assert expires is not None
        if idle_heartbeat is None:
            if expires > FETCH_HEARTBEAT_AFTER:
                hb = FETCH_DEFAULT_HEARTBEAT
        else:
            hb = idle_heartbeat
        exp_ns = int(expires * _NS)
        deadline = Deadline(expires + grace)
    if prio is None:
        state = _FetchState(batch, max_bytes, ack_none, stream, consumer, check, conn, heartbeat=hb or 0.0)
        body = pull_request(batch, expires_ns=exp_ns, max_bytes=max_bytes,
                            heartbeat_ns=int(hb * _NS) if hb else 0, no_wait=no_wait)
    else:
        if not prio.pinned:
            pins = None
        pin = pins.get(prio.group) if pins is not None else None
        state = _FetchState(batch, max_bytes, ack_none, stream, consumer, check, conn, pins, prio.group, pin,
                            heartbeat=hb or 0.0)
        body = pull_request(batch, expires_ns=exp_ns, max_bytes=max_bytes,
                            heartbeat_ns=int(hb * _NS) if hb else 0, no_wait=no_wait, group=prio.group,
                            min_pending=prio.min_pending, min_ack_pending=prio.min_ack_pending,
                            priority=prio.priority, pin_id=pin)
    box = _acquire_inbox(conn, state, Deadline(conn.internal.timeout + 5))
    res = FetchResult(conn, state, box, deadline, hb, on_end, lost_on_reconnect)
    res._js = js
    try:
        conn.internal.enqueue((f"{js.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, box.subject, None))
        return res
    except BaseException:  # (Ctrl-C) the pull may be on its way: given up now, what it brings nak'ed
        res.stop()
        raise


def ack_next(conn: Connection, msg: Msg, batch: int, no_wait: bool, timeout: float | None) -> list[Msg]:
    """``Msg.ack_next``: ack ``msg`` with +NXT and collect what the server delivers to the inbox.

    The +NXT body is a pull request (deep dive "Acknowledgement Models"), so the answer is
    read like a fetch's: messages, then the end-of-request status (404/408), or an error
    status (409 Consumer is push based, ...). ``timeout`` None: no limit (requests of 30 s
    follow one another until ``batch`` messages came, see :func:`_ack_next_no_limit`).
    """
    conn.internal.check_open()
    meta = msg.metadata
    if timeout is None and not no_wait:
        return _ack_next_no_limit(conn, msg, batch)
    if timeout is None:
        exp_ns = 0
        deadline = Deadline(None)
    elif no_wait:
        exp_ns = 0
        deadline = Deadline(timeout)
    else:
        exp_ns = int(timeout * _NS)
        deadline = Deadline(timeout + min(FETCH_GRACE, 0.1 + timeout * 0.1))
    state = _FetchState(batch, 0, False, meta.stream, meta.consumer)
    box = _acquire_inbox(conn, state, Deadline(conn.internal.timeout + 5))
    res = FetchResult(conn, state, box, deadline, None)
    body = b"+NXT " + pull_request(batch, expires_ns=exp_ns, no_wait=no_wait)
    try:
        sent = conn.internal.send_ack(msg, body, True, box.subject)
    except BaseException:
        res.stop()
        raise
    if not sent:  # a terminal ack won the race: nothing was sent
        res.stop()
        return []
    return list(res)


def _ack_next_no_limit(conn: Connection, msg: Msg, batch: int) -> list[Msg]:
    """``ack_next(timeout=None)``: +NXT requests of 30 s follow one another until ``batch`` came.

    The first one acks ``msg``; the later ones go to the same ack subject (the ack is applied
    already, so they only pull). A pull ended by a reconnect (a server restart may have lost
    it), its client-side deadline or 409 Server Shutdown is followed by another; a warning
    ends the call with what came so far.
    """
    meta = msg.metadata
    got: list[Msg] = []
    first = True
    while True:
        want = batch - len(got)
        state = _FetchState(want, 0, False, meta.stream, meta.consumer)
        box = _acquire_inbox(conn, state, Deadline(conn.internal.timeout + 5))
        res = FetchResult(conn, state, box, Deadline(NO_LIMIT_PULL + FETCH_GRACE), None,
                          lost_on_reconnect=True)
        body = b"+NXT " + pull_request(want, expires_ns=int(NO_LIMIT_PULL * _NS))
        try:
            if first:
                first = False
                if not conn.internal.send_ack(msg, body, True, box.subject):
                    res.stop()  # a terminal ack won the race: nothing was sent
                    return []
            else:
                conn.internal.check_open()
                conn.internal.enqueue((msg.reply, body, box.subject, None))
        except BaseException:
            res.stop()
            raise
        got.extend(res)
        if len(got) >= batch:
            return got
        err = res.error
        if err is not None and not pull_lost(err):
            return got


def validate_fetch(max_messages: int | None, max_bytes: int | None, expires: float,
                   idle_heartbeat: float | None) -> tuple[int, int]:
    """Check fetch arguments; return (batch, max_bytes) as sent. Raises ValueError naming the bad value."""
    if max_messages is None and max_bytes is None:
        raise ValidationError("fetch needs max_messages (and/or max_bytes)")
    batch = BYTES_ONLY_BATCH if max_messages is None else _pos_int(max_messages, "max_messages")
    mb = 0 if max_bytes is None else _pos_int(max_bytes, "max_bytes")
    expires = _pos_float(expires, "expires")
    if idle_heartbeat is not None:
        _check_hb(_pos_float(idle_heartbeat, "idle_heartbeat"), expires, "fetch", MIN_FETCH_HEARTBEAT)
    return batch, mb


# Msg.ack_next() (core) calls this through its hook: core does not import the JetStream layer.
_core_hooks.HOOKS.ack_next = ack_next
