"""Pull consumers (ADR-37): fetch, fetch_bytes, fetch_no_wait, next and consume.

Messages reach the user without an event-loop hop per message: nats-py hands each one
(on the I/O thread) to an object standing in for its subscription queue
(``put_nowait``), which sorts it (user message or status, see :mod:`jssync.base.status`)
and puts user messages on a ``queue.SimpleQueue`` the user thread reads (or the
callback lane reads, on the worker pool). Pull requests and acks go out through the
connection's publish burst queue.

``consume`` keeps ADR-37's counts without a per-message lock: the pull lock guards
only the counters that change when a pull request is sent or a status arrives; the
user thread counts the messages it took (``itertools.count``, atomic) and sends the
next pull request when the pending count falls to the threshold.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..base.deadline import DEFAULT, EXPIRED, Deadline, Default, wait_get
from ..base.errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    Error,
    NoHeartbeatError,
    NotFoundError,
    PullRequestError,
    TimeoutError,
    ValidationError,
    translating,
)
from ..base.status import classify, is_user_msg, message_size, pull_request
from ..base.validate import MAX_I64, check_int, check_number
from ..core import hooks as _core_hooks
from ..core import natspy as _natspy
from ..core.hooks import HOOKS as _CORE
from ..core.msg import Msg
from .consume.engine import Action as EngineAction
from .consume.engine import (
    ArmTimer,
    CheckConsumer,
    End,
    EngineState,
    Nak,
    NakBuffered,
    PinLost,
    PullEngine,
    Recreate,
    SendPull,
    SwapInbox,
    Unsubscribe,
    Warn,
)
from .consume.runner import LoopTimer
from .leases import MAX_EXTENSION, Lease, check_period, plan_leases
from .priority import Pins, PullPriority

if TYPE_CHECKING:
    from ..core.connection import Connection
    from .context import JetStream

log = logging.getLogger("jssync")

_monotonic = time.monotonic

#: Batch size of pull requests limited by bytes only (ADR-37: "a large number").
BYTES_ONLY_BATCH = 1_000_000
#: consume defaults (ADR-37 "Defaults and constraints").
DEFAULT_MAX_MESSAGES = 500
DEFAULT_EXPIRES = 30.0
#: ``next(timeout=None)`` (no limit): the expiry of each of its pulls.
NO_LIMIT_PULL = DEFAULT_EXPIRES
MIN_EXPIRES = 1.0
MIN_HEARTBEAT = 0.5
MAX_HEARTBEAT = 30.0
#: fetch turns heartbeats on by default for requests that expire later than this.
FETCH_HEARTBEAT_AFTER = 30.0
FETCH_DEFAULT_HEARTBEAT = 5.0
#: How long a fetch waits past its expiry for the server's end-of-request status.
FETCH_GRACE = 1.0
#: drain/stop: the pulls in flight count as done sending once nothing arrived for this long.
_QUIET = 0.5
#: Idle fetch inboxes kept per connection for reuse.
_POOL_MAX = 8
#: Inboxes of written-off pull requests a consume keeps at most (each for ``expires`` + 1 s).
_MAX_OLD_INBOXES = 16
#: Messages a callback lane handles before it yields its worker to other jobs.
_LANE_BUDGET = 512
_NS = 1_000_000_000


class _Control:
    """An item on a message queue that is not a message: the end, or an error to raise."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException | None = None) -> None:
        self.exc = exc


_END = _Control()


def _on_loop(conn: Connection, make_coro: Callable[[], Any]) -> None:
    """Run ``make_coro()`` on the I/O thread without waiting (from any thread, even that one)."""
    loop = conn.internal.loop
    try:
        if loop.in_loop_thread():
            loop.loop.create_task(make_coro())
        else:
            loop.call_soon(lambda: loop.loop.create_task(make_coro()))
    except Exception:  # the loop is gone: the connection closed
        log.debug("could not schedule on the I/O loop", exc_info=True)


def _unsubscribe_soon(conn: Connection, nsub: Any) -> None:
    """Send UNSUB for a nats-py subscription without waiting."""
    if nsub is None:
        return

    async def _unsub() -> None:
        if _natspy.sub_closed(nsub) or conn.internal.nc.is_closed:
            return
        try:
            await nsub.unsubscribe()
        except Exception:
            log.debug("unsubscribe failed", exc_info=True)

    _on_loop(conn, _unsub)


#: A consume prunes the acked messages from those received since its last lease check when
#: this many have piled up (see ConsumeContext._prune_fresh).
_FRESH_PRUNE_AT = 1024


def _terminally_acked(msg: Msg) -> bool:
    return bool(msg._acked)


def _thread_alive(ident: int) -> bool:
    """Whether the thread with this ident still runs."""
    return any(t.ident == ident for t in threading.enumerate())


def _check_hb(hb: float, expires: float, what: str) -> None:
    if not MIN_HEARTBEAT <= hb <= MAX_HEARTBEAT:
        raise ValidationError(
            f"{what} idle_heartbeat must be between {MIN_HEARTBEAT} and {MAX_HEARTBEAT} seconds, got {hb!r}"
        )
    if hb > expires / 2:
        raise ValidationError(f"{what} idle_heartbeat ({hb!r}) must be at most half of expires ({expires!r})")


def _pos_int(v: Any, what: str) -> int:
    return check_int(v, what, maximum=MAX_I64, open_ended=True)  # a count: int64 on the wire


def _pos_float(v: Any, what: str) -> float:
    return check_number(v, what, unit="seconds")


# ----------------------------------------------------------------------------- fetch


def _wire_header_len(conn: Connection, msg: Msg) -> int:
    """The length of ``msg``'s header block as it came over the wire, or -1 when unknown.

    On the I/O thread, inside nats-py's hand-off of ``msg`` (a subscription queue's
    ``put_nowait``). nats-py keeps only the parsed headers (a dict: a repeated name keeps
    one value), so the exact length is read from its parser, which still holds the
    HMSG/MSG line's total length (headers + payload) while it hands the message over.
    This is the one place that reads that nats-py internal; any doubt gives -1 (the size
    is then rebuilt from the dict).
    """
    if msg.headers is None:
        return 0
    try:
        n = _natspy.parser_needed(conn.internal.nc) - len(msg.data)
    except Exception:  # pragma: no cover - another nats-py version
        return -1
    return n if n.__class__ is int and n > 10 else -1


class _Discard(_natspy.Receiver):
    """A receiver that drops everything (an idle or abandoned inbox)."""

    __slots__ = ()

    def put_nowait(self, msg: Msg) -> None:
        return None


_DISCARD = _Discard()


class _WrittenOff(_natspy.Receiver):
    """The receiver of a consume inbox whose pull requests were written off.

    Whatever still arrives there comes from requests the counts no longer include (see
    :meth:`ConsumeContext._reset_pending`); the server tells the inboxes apart by the
    subscription id of each message.
    """

    __slots__ = ("cc",)

    def __init__(self, cc: ConsumeContext) -> None:
        self.cc = cc

    def put_nowait(self, msg: Msg) -> None:
        self.cc._written_off_msg(msg)


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

    __slots__ = ("q", "batch", "max_bytes", "ack_none", "received", "done", "eng",
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
            if eng.state is not EngineState.RUNNING:  # over: dropped, or nak'ed when given up
                if eng.state is EngineState.STOPPED:
                    self.not_taken(msg)
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

    def nak_queued(self) -> None:
        """Nak every message still queued and not taken (on the I/O thread, or after the inbox is gone)."""
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


def _abandon_inbox(conn: Connection, box: _Inbox, state: _FetchState) -> None:
    """Give up an inbox whose pull request may still be open on the server (any thread).

    What is queued and not taken, and whatever still arrives until the server processed
    the UNSUB, is nak'ed (redelivered at once, never left for AckWait): the inbox is
    drained (UNSUB, PING/PONG, removal), not dropped, so nothing on the wire is lost.
    """
    state.abandon()

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

    try:
        conn.internal.loop.check()
    except Error:  # the connection is gone: nothing can be nak'ed
        return
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
    if box is not None:
        if state.done and state.reuse:
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


class FetchResult:
    """The messages of one pull request, as they arrive.

    Iterate it: each message is yielded as soon as it arrives; the iteration ends when the
    request ends (batch complete, expired, no messages for ``fetch_no_wait``). Afterwards
    :attr:`error` says why it ended when that was not normal (None otherwise). Errors
    ADR-37 calls errors (400 Bad Request, 409 Consumer Deleted, 409 Consumer is push
    based) and a pull nobody answered (503) are raised by the iteration too; warnings
    (409 Exceeded ...), missed heartbeats and a client-side timeout are only on
    :attr:`error`. Not meant to be iterated by several threads at once.
    """

    def __init__(self, conn: Connection, state: _FetchState, box: _Inbox, deadline: Deadline,
                 heartbeat: float | None, on_end: Callable[[_FetchState], None] | None = None,
                 lost_on_reconnect: bool = False) -> None:
        self._conn = conn
        self._state = state
        self._deadline = deadline
        self._hb = heartbeat
        self._ended = False
        # a pull of a call without a limit: a reconnect may have lost it (server restart), so
        # the iteration ends then with a TimeoutError and the caller pulls again
        self._reconnects = _reconnects(conn) if lost_on_reconnect else None
        self._finalizer = weakref.finalize(self, _finish_fetch, conn, box, state, on_end)

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
        if tracer is not None and tracer.wants():
            st = self._state
            return tracer.receive("fetch", self.__next__, self._conn, st.stream, st.consumer)
        try:
            item = self._state.q.get_nowait()
        except Empty:
            item = None
        if item is None:  # wait outside the except block: what it raises carries no queue.Empty context
            try:
                item = self._wait()
            except BaseException:  # Ctrl-C, ...: the request is given up; what it still brings is nak'ed
                self.stop()
                raise
        if item.__class__ is _Control:
            self._end()
            st = self._state
            if st.raise_error and st.error is not None:
                st.raise_error = False
                raise st.error
            raise StopIteration
        if self._ended:  # stop() from another thread meanwhile: not handed over
            self._state.not_taken(item)
            raise StopIteration
        return item  # type: ignore[no-any-return]

    def _wait(self) -> Any:
        st = self._state
        q = st.q
        deadline = self._deadline
        eng = st.eng if self._hb else None
        while True:
            item = wait_get(q, deadline.slice())
            if item is not EXPIRED:
                return item
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

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._finalizer()

    def stop(self) -> None:
        """Stop iterating, at once, from any thread; idempotent, never blocks.

        A thread blocked in the iteration wakes and its iteration ends (without an error).
        Messages received and not taken, and those the request still delivers until its
        inbox is unsubscribed, are nak'ed, so the server redelivers them at once (not after
        AckWait; nothing for ack policy none).
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
    conn.internal.enqueue((f"{js.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, box.subject, None))
    return res


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
        _check_hb(_pos_float(idle_heartbeat, "idle_heartbeat"), expires, "fetch")
    return batch, mb


# --------------------------------------------------------------------------- consume


#: The states of a consume are its engine's (see jssync/jetstream/consume/engine.py).
_State = EngineState


class ConsumeOptions:
    """Validated consume options (ADR-37 defaults and constraints)."""

    __slots__ = ("max_messages", "max_bytes", "expires", "idle_heartbeat", "threshold_messages",
                 "threshold_bytes", "bytes_mode")

    def __init__(self, max_messages: int | None = None, max_bytes: int | None = None,
                 expires: float = DEFAULT_EXPIRES, idle_heartbeat: float | None = None,
                 threshold_messages: int | None = None, threshold_bytes: int | None = None) -> None:
        if max_messages is not None and max_bytes is not None:
            raise ValidationError(
                f"max_messages ({max_messages!r}) and max_bytes ({max_bytes!r}) are exclusive: set one of them"
            )
        self.bytes_mode = max_bytes is not None
        if self.bytes_mode:
            self.max_bytes = _pos_int(max_bytes, "max_bytes")
            self.max_messages = BYTES_ONLY_BATCH
        else:
            self.max_bytes = 0
            self.max_messages = DEFAULT_MAX_MESSAGES if max_messages is None else _pos_int(
                max_messages, "max_messages")
        expires = _pos_float(expires, "expires")
        if expires < MIN_EXPIRES:
            raise ValidationError(f"expires must be at least {MIN_EXPIRES}s, got {expires!r}")
        self.expires = expires
        if idle_heartbeat is None:
            idle_heartbeat = max(MIN_HEARTBEAT, min(expires / 2, MAX_HEARTBEAT))
        else:
            _check_hb(_pos_float(idle_heartbeat, "idle_heartbeat"), expires, "consume")
        self.idle_heartbeat = float(idle_heartbeat)
        if threshold_messages is not None:
            if self.bytes_mode:
                raise ValidationError("threshold_messages goes with max_messages, not with max_bytes")
            self.threshold_messages = check_int(threshold_messages, "threshold_messages (at most max_messages)",
                                                minimum=0, maximum=self.max_messages)
        else:
            self.threshold_messages = self.max_messages // 2
        if threshold_bytes is not None:
            if not self.bytes_mode:
                raise ValidationError("threshold_bytes goes with max_bytes, not with max_messages")
            self.threshold_bytes = check_int(threshold_bytes, "threshold_bytes (at most max_bytes)",
                                             minimum=0, maximum=self.max_bytes)
        else:
            self.threshold_bytes = self.max_bytes // 2


class ConsumeContext(_natspy.Receiver):
    """A running ``consume``: the iterator (without a callback) and the handle.

    Iterator form: ``for msg in messages`` yields messages as they come; ``stop()`` ends
    it at once (every message received and not handed over is nak'ed, so the server
    redelivers it at once), ``drain()`` stops pulling and ends once every message the
    server sent was handed over. Callback form: the callback runs on the connection's
    worker pool, one message at a time, in order, never before ``consume()`` returned;
    ``stop``/``drain`` as above, ``wait()`` blocks until it is over.

    Leases: with an ack policy other than none, every message received and not yet acked,
    nak'ed or terminated (waiting in the buffer or being handled) gets an in-progress ack
    (+WPI) whenever half the consumer's ``ack_wait`` (read from its info) passed since its
    delivery or its last +WPI, for at most ``jssync.jetstream.leases.MAX_EXTENSION`` (600 s)
    after its receipt: time in the buffer or in a slow handler causes no redelivery.

    Terminal conditions (consumer deleted, push consumer) end the iteration by raising
    :class:`jssync.ConsumerDeletedError` / :class:`jssync.ConsumerIsPushBasedError`
    (callback form: passed to ``error_cb``, and kept on :attr:`error`). Warnings
    (missed heartbeats, exceeded limits) go to ``error_cb`` (default: the connection's)
    and the ``jssync`` logger. Thread-safe.
    """

    # The runner of a PullEngine (jetstream/consume/engine.py): the engine keeps ADR-37's
    # counts, thresholds, status handling, heartbeats and states; this class feeds it what
    # arrives and what the application takes, and carries out its actions (pulls, naks, the
    # one timer, unsubscribing, the end). Every engine event goes through ``_lock``, except
    # the per-message ones (``message`` on the I/O thread, ``taken`` of one message), which
    # touch counters only their own thread writes.

    #: the ordered consume: the engine answers ``Recreate`` where a consume re-pulls or ends
    _RECREATE = False

    def __init__(self, js: JetStream, stream: str, consumer: str, opts: ConsumeOptions,
                 callback: Callable[[Msg], Any] | None = None,
                 error_cb: Callable[[BaseException], Any] | None = None, ack_none: bool = False,
                 prio: PullPriority | None = None, pins: Pins | None = None,
                 ack_wait: float | None = None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        if error_cb is not None and not callable(error_cb):
            raise TypeError(f"error_cb must be callable, got {type(error_cb).__name__}")
        conn = js.conn
        conn.internal.check_open()
        self._js = js
        self._conn = conn
        self.stream = stream
        self.consumer = consumer
        self._next_subject = f"{js.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = conn.new_inbox()
        self._opts = opts
        self._cb = callback
        self._error_cb = error_cb
        self._ack_none = ack_none
        self._bytes_mode = opts.bytes_mode
        self._hb = opts.idle_heartbeat
        self._expires_ns = int(opts.expires * _NS)
        self._hb_ns = int(opts.idle_heartbeat * _NS)
        self._eng = PullEngine(
            max_messages=opts.max_messages, max_bytes=opts.max_bytes, threshold_messages=opts.threshold_messages,
            threshold_bytes=opts.threshold_bytes, expires=opts.expires, heartbeat=opts.idle_heartbeat,
            stream=stream, consumer=consumer, recreate=self._RECREATE)
        self._q: SimpleQueue[Any] = SimpleQueue()
        self._lock = threading.Lock()  # every engine event but the per-message ones
        # the engine's one timer (heartbeat checks, retries) and the lease checks' timer
        self._timer = LoopTimer(conn.internal.loop, self._on_timer)
        self._lease_timer = LoopTimer(conn.internal.loop, self._lease_tick)
        # subscriptions of inboxes whose pull requests were written off, with the time each is
        # drained at (their requests have expired by then; I/O thread)
        self._old: list[tuple[Any, float]] = []
        # max_bytes mode: the wire size of each buffered message, in queue order (I/O thread appends)
        self._sizes: deque[int] = deque()
        # callback lane
        self._running = False
        self._cb_thread: int | None = None
        self._lane_lock = threading.Lock()
        self._closed = threading.Event()
        self._server_done = threading.Event()  # the inbox is unsubscribed: nothing more arrives
        self._winding_down = False
        self._unsubscribed = False  # under _lock: the inbox is gone, naks go out at once
        self._nak_later: list[Msg] = []  # under _lock: after stop(), nak'ed once unsubscribed
        self._iter_thread: int | None = None  # iterator form: the thread that last asked for a message
        self._looking_up = False
        self.error: BaseException | None = None
        self._nsub: Any = None
        self._on_disc = self._disconnected
        self._on_reconn = self._reconnected
        # priority groups (ADR-42): the pull's options; pinned_client: the handle's pin ids and
        # the last id a pull carried, until a 423 (which makes the pulls in flight with it stale)
        self._prio = prio
        self._pins = pins if prio is not None and prio.pinned else None
        self._group = prio.group if prio is not None else ""
        self._sent_pin: str | None = None
        # leases (see jetstream/leases.py; I/O thread only): the consumer's ack_wait when
        # acks count, the messages received since the last lease check, the leases watched
        self._lease_wait = ack_wait if not ack_none and ack_wait is not None and ack_wait > 0 else None
        self._fresh: list[Msg] = []
        self._fresh_cap = _FRESH_PRUNE_AT
        self._leases: list[Lease] = []
        self._lease_stamp = 0.0

    @property
    def _state(self) -> EngineState:
        """Where the consume is (its engine's state)."""
        return self._eng.state

    @property
    def _rx(self) -> int:
        """Messages received so far."""
        return self._eng.rx

    # -- start / the I/O thread side ------------------------------------------------------

    def _start(self) -> ConsumeContext:
        conn = self._conn

        async def _sub() -> Any:
            with translating():
                return await _natspy.subscribe(conn.internal.nc, self._inbox, self)

        # callback form: nothing is handed to the callback before consume() returned (the lane
        # counts as running until then), so the callback can use the context it returned
        self._running = self._cb is not None
        self._nsub = conn.run(_sub(), Deadline(conn.internal.timeout + 5), "subscribe")
        conn.internal.disconnect_listeners.append(self._on_disc)
        conn.internal.reconnect_listeners.append(self._on_reconn)
        with conn.internal.subs_lock:
            conn.internal.subs.add(self)  # type: ignore[arg-type]  # ended with the connection
        with self._lock:
            acts = self._eng.start(self._timer.now(), conn.is_connected)
        self._do(acts)
        if self._lease_wait is not None:
            conn.internal.loop.call_soon(self._lease_tick)
        return self

    def _started(self) -> None:
        """consume() is returning: let the callback lane run (it waited since _start)."""
        if self._cb is None:
            return
        with self._lane_lock:
            self._running = False
        if not self._q.empty():
            self._kick_lane()

    def put_nowait(self, msg: Msg) -> None:
        """Called by nats-py on the I/O thread for every message on the inbox (the Receiver hook)."""
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            if self._pins is not None:
                self._pins.seen(self._group, h)
            if self._bytes_mode:
                size = message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(self._conn, msg))
                self._sizes.append(size)
                acts = self._eng.message(size)
            else:
                acts = self._eng.message()
            if acts:
                self._not_buffered(msg, acts)
                return
            # buffered (the body of _buffer, inline: the per-message path)
            if self._ack_none:
                msg._ack_none = True
            elif self._lease_wait is not None:
                fresh = self._fresh
                fresh.append(msg)
                if len(fresh) >= self._fresh_cap:
                    self._prune_fresh()
            self._q.put(msg)
            if self._cb is not None and not self._running:
                self._kick_lane()
            return
        self._status(msg, False)

    def _buffer(self, msg: Msg) -> None:
        """Hand a received message to the application (the queue the iterator or lane reads)."""
        if self._ack_none:
            msg._ack_none = True
        elif self._lease_wait is not None:
            fresh = self._fresh
            fresh.append(msg)
            if len(fresh) >= self._fresh_cap:
                self._prune_fresh()
        self._q.put(msg)
        if self._cb is not None and not self._running:
            self._kick_lane()

    def _not_buffered(self, msg: Msg, acts: tuple[EngineAction, ...]) -> None:
        """The engine said Nak (stopped) or Drop (closed) for a message just received."""
        if acts[0].__class__ is Nak:
            self._not_handed_over(msg)

    def _status(self, msg: Msg, written_off: bool) -> None:
        st = classify(msg.headers, msg.data, msg.reply)
        if st is None:  # pragma: no cover
            return
        with self._lock:
            acts = self._eng.status(st.code, st.description, st.pending_msgs, st.pending_bytes,
                                    self._timer.now(), written_off)
        if acts:
            self._do(acts)

    def _written_off_msg(self, msg: Msg) -> None:
        """A message for a written-off pull request (I/O thread): it was alive after all.

        A user message was counted as never to come: now it counts as requested and
        received (pending one more, in flight unchanged), then goes to the buffer like any
        other. A status ends or heartbeats a request no longer counted: only a terminal one
        (consumer deleted, push based) matters.
        """
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            if self._bytes_mode:
                size = message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(self._conn, msg))
                self._sizes.append(size)
                acts = self._eng.message(size, written_off=True)
            else:
                acts = self._eng.message(written_off=True)
            if acts:
                self._not_buffered(msg, acts)
            else:
                self._buffer(msg)
            return
        self._status(msg, True)

    # -- carrying out the engine's actions ---------------------------------------------------

    def _do(self, acts: tuple[EngineAction, ...]) -> None:
        """Carry out the engine's actions, in order (any thread; never under ``_lock``)."""
        for a in acts:
            if type(a) is SendPull:
                self._send_pull(a)
            elif type(a) is ArmTimer:
                self._timer.arm(a.at)
            elif type(a) is Warn:
                self._report(a.error)
            elif type(a) is SwapInbox:
                self._swap_inbox()
            elif type(a) is NakBuffered:
                self._nak_buffered()
            elif type(a) is End:
                self._ended(a.error)
            elif type(a) is Unsubscribe:
                self._detach()
                self._wind_down(wait=a.wait)
            elif type(a) is CheckConsumer:
                self._look_up_consumer()
            elif type(a) is PinLost:
                self._pin_lost(a.description)
            elif type(a) is Recreate:
                self._recreate(a)

    def _send_pull(self, p: SendPull) -> None:
        """Send the pull request the engine counted (any thread)."""
        prio = self._prio
        if prio is None:
            body = pull_request(p.batch, expires_ns=self._expires_ns, max_bytes=p.max_bytes,
                                heartbeat_ns=self._hb_ns)
        else:
            pin = None
            if self._pins is not None:
                pin = self._pins.get(prio.group)
                if pin is not None:
                    self._sent_pin = pin
            body = pull_request(p.batch, expires_ns=self._expires_ns, max_bytes=p.max_bytes,
                                heartbeat_ns=self._hb_ns, group=prio.group, min_pending=prio.min_pending,
                                min_ack_pending=prio.min_ack_pending, priority=prio.priority, pin_id=pin)
        self._conn.internal.enqueue((self._next_subject, body, self._inbox, None))

    def _refill(self) -> None:
        """A pull if pending fell to the threshold (after the application took messages; any thread)."""
        with self._lock:
            acts = self._eng.refill()
        if acts:
            self._do(acts)

    def _on_timer(self) -> None:
        """The engine's timer fired (I/O thread): heartbeat check, retries; old inboxes drained."""
        now = self._timer.now()
        with self._lock:
            acts = self._eng.tick(now)
        if self._old:
            self._drop_old(now)
        if acts:
            self._do(acts)

    def _pin_lost(self, description: str) -> None:
        """423 (pinned_client): the server pinned another client; on the I/O thread.

        The pin id the pulls carried is forgotten; the pulls in flight that carried it are
        written off (the server answers each with 423) and a new pull goes out at once
        without an id, so this consume stays a standby candidate. A 423 for a pull whose id
        was already forgotten changes nothing.
        """
        sent = self._sent_pin
        if sent is None:
            return
        if self._pins is not None:
            self._pins.lost(self._group, sent)
        self._sent_pin = None
        log.debug("consume %s/%s: pin lost (423 %s)", self.stream, self.consumer, description)
        with self._lock:
            acts = self._eng.pin_lost()
        self._do(acts)

    def _recreate(self, act: Recreate) -> None:
        """The engine wants a new consumer (only the ordered consume has engines that do)."""
        with self._lock:
            acts = self._eng.recreate_skipped()
        self._do(acts)

    def _look_up_consumer(self) -> None:
        """After a 503: ask (off the I/O thread, one lookup at a time) whether the consumer still
        exists; when its info says it (or its stream) is gone, the consume ends with
        :class:`jssync.ConsumerDeletedError`."""
        if self._looking_up or self._eng.state is not _State.RUNNING:
            return
        self._looking_up = True
        try:
            self._conn.internal.pool.submit(self._consumer_gone)
        except Exception:  # the pool is closed: the connection is closing
            self._looking_up = False

    def _consumer_gone(self) -> None:
        """On the worker pool: end the consume when the consumer's info says it is gone."""
        try:
            self._js._consumer_info(self.stream, self.consumer, timeout=self._js.timeout)
        except NotFoundError as exc:
            gone = ConsumerDeletedError(
                f"consumer {self.consumer!r} on stream {self.stream!r} no longer exists "
                f"(pulls get no responders; {exc})")
            gone.__cause__ = exc
            try:
                self._conn.internal.loop.call_soon(self._terminal, gone)
            except Exception:  # the connection closed meanwhile
                log.debug("consume: could not end after the consumer was deleted", exc_info=True)
        except Exception:  # no leader, timeout, closed: pulls go on and the next 503 asks again
            log.debug("consume: consumer info lookup failed", exc_info=True)
        finally:
            self._looking_up = False

    def _swap_inbox(self) -> None:
        """The engine wrote off pull requests that may still be alive on the server (a paused
        server, a stalled connection): the next ones go to a new inbox (I/O thread).

        The old inbox's subscription hands what still arrives to :meth:`_written_off_msg`
        (a message counts as requested and received, no status twice). It is drained
        ``expires`` + 1 s later, when the requests sent to it have expired. The engine sends
        no pull until :meth:`PullEngine.inbox_swapped` (when no new inbox can be made, the
        old one stays in use).
        """
        old = self._nsub
        if old is None or len(self._old) >= _MAX_OLD_INBOXES or self._winding_down:
            with self._lock:
                acts = self._eng.inbox_swapped(False)
            self._do(acts)
            return
        _natspy.set_sub_queue(old, _WrittenOff(self))
        entry = (old, float("inf"))
        self._old.append(entry)
        self._nsub = None
        conn = self._conn
        inbox = conn.new_inbox()

        async def _swap() -> None:
            nsub: Any = None
            try:
                with translating():
                    nsub = await _natspy.subscribe(conn.internal.nc, inbox, _DISCARD)
            except Exception:  # the connection is closing or draining
                log.debug("consume %s/%s: new inbox failed", self.stream, self.consumer, exc_info=True)
            ok = False
            if nsub is None:  # keep the old inbox (what it still receives counts as usual again)
                if entry in self._old:
                    self._old.remove(entry)
                    _natspy.set_sub_queue(old, self)
                    self._nsub = old
            elif self._winding_down:  # nothing was requested on it: the wind-down drains the old one
                _unsubscribe_soon(conn, nsub)
            else:
                _natspy.set_sub_queue(nsub, self)
                self._inbox = inbox
                self._nsub = nsub
                if entry in self._old:
                    self._old[self._old.index(entry)] = (old, self._timer.now() + self._opts.expires + FETCH_GRACE)
                ok = True
            with self._lock:
                acts = self._eng.inbox_swapped(ok)
            self._do(acts)

        _on_loop(conn, _swap)

    def _drop_old(self, now: float) -> None:
        """On the loop: drain the written-off inboxes whose requests have expired by ``now``."""
        if self._winding_down:
            return  # the wind-down drains them
        due = [n for n, at in self._old if at <= now]
        if not due:
            return
        self._old = [(n, at) for n, at in self._old if at > now]
        conn = self._conn

        async def _drain() -> None:
            for nsub in due:
                try:
                    if not conn.internal.nc.is_closed:
                        await conn.internal.drain_nsub(nsub, 5.0)
                except Exception:
                    log.debug("consume: draining an old inbox failed", exc_info=True)

        _on_loop(conn, _drain)

    def _disconnected(self) -> None:
        with self._lock:
            acts = self._eng.disconnected(self._timer.now())
        self._do(acts)

    def _reconnected(self) -> None:
        with self._lock:
            acts = self._eng.reconnected(self._timer.now())
        self._do(acts)

    # leases: a timer on the I/O loop, every ack_wait / 8 (see jetstream/leases.py)

    def _prune_fresh(self) -> None:
        """Drop the acked messages from the ones received since the last lease check (I/O thread).

        A fast consumer receives many thousands of messages between two checks, almost all
        acked at once: keeping them all until the check would hold them in memory for up to
        ``MAX_PERIOD`` seconds. The list is pruned whenever it reaches ``_fresh_cap``, which
        doubles while most of what it holds is still unacked (a slow handler), so that each
        message is looked at a bounded number of times.
        """
        fresh = [m for m in self._fresh if not m._acked]
        self._fresh = fresh
        self._fresh_cap = max(_FRESH_PRUNE_AT, 2 * len(fresh))

    def _lease_tick(self) -> None:
        """Renew the leases of the messages held longer than half ack_wait (I/O thread).

        The messages received since the previous check count as received at that check
        (earlier than they were: renewed a little early, never late). Runs until the user
        side is over (after a drain, while the iterator or callback works through the
        buffer) or the connection closed; sends ``+WPI`` for each lease that
        :func:`plan_leases` says is due.
        """
        ack_wait = self._lease_wait
        if ack_wait is None or self._closed.is_set() or self._eng.state is _State.CLOSED:
            self._fresh = []
            self._leases = []
            return
        now = self._lease_timer.now()
        stamp = self._lease_stamp or now
        self._lease_stamp = now
        leases = self._leases
        fresh = self._fresh
        if fresh:
            self._fresh = []
            self._fresh_cap = _FRESH_PRUNE_AT
            leases.extend(Lease(m, stamp) for m in fresh if not m._acked)
        if leases:
            plan = plan_leases(leases, now, ack_wait, MAX_EXTENSION, _terminally_acked)
            self._leases = plan.keep
            if plan.expired:
                log.warning("consume %s/%s: %d message(s) held %ss without a terminal ack: "
                            "their ack wait is no longer extended", self.stream, self.consumer,
                            plan.expired, MAX_EXTENSION)
            for lease in plan.extend:
                try:
                    lease.item.in_progress()
                except Error:  # closed or closing: nothing more to extend
                    self._leases = []
                    return
                lease.renewed = now
        self._lease_timer.after(check_period(ack_wait))

    # -- terminal, stop, drain ---------------------------------------------------------------

    def _report(self, exc: BaseException) -> None:
        if self._error_cb is None:
            self._conn.internal.report_error(exc)
        else:
            log.warning("consume %s/%s: %s: %s", self.stream, self.consumer, type(exc).__name__, exc)
            self._conn.internal.pool.submit(self._conn.internal.call_user_cb, self._error_cb, exc)

    def _detach(self) -> None:
        """Stop pulling for good: no connection listeners, no engine timer (any thread).

        The context stays in the connection's subscriptions until its inbox is unsubscribed
        (:meth:`_server_finished`), so closing the connection meanwhile still ends it.
        """
        conn = self._conn
        for lst, fn in ((conn.internal.disconnect_listeners, self._on_disc),
                        (conn.internal.reconnect_listeners, self._on_reconn)):
            try:
                lst.remove(fn)
            except ValueError:
                pass
        self._timer.arm(None)

    def _ended(self, error: BaseException | None) -> None:
        """The engine's End: stopped (the user side ends at once), a terminal error (kept on
        :attr:`error`, raised after the buffer; callback form: reported at once) or closed."""
        state = self._eng.state
        if state is _State.STOPPED:
            self._q.put(_END)
            if self._cb is None:
                self._user_finished()
            elif not self._running:
                self._kick_lane()
        elif state is _State.DRAINING and error is not None:
            self.error = error
            if self._cb is not None:
                self._report(error)

    # The end of a consume has two sides: the server side is over once the inbox is
    # unsubscribed (_server_done: nothing more arrives, and after stop() the rest was
    # nak'ed), the user side once the iterator reached its end or the callback lane ended
    # (_closed). After drain() or a terminal error the end marker is queued only once the
    # server side is over, so the user side ends last; after stop() it ends at once.

    def _wind_down(self, wait: bool) -> None:
        """Unsubscribe the inbox without losing what is on the wire (drain, stop, terminal; any thread).

        On the I/O thread. With ``wait``, the pulls in flight first finish sending: until
        none is left (each got all its messages or its ending status), nothing arrived for
        ``_QUIET`` seconds, the connection is lost, or their expiry passed. Then the shared
        drain routine (``Connection._drain_nsub``: UNSUB, PING/PONG, remove). Messages
        arriving meanwhile are buffered (drain) or nak'ed (stop, see :meth:`put_nowait`).
        """
        with self._lock:
            if self._winding_down:
                return
            self._winding_down = True
        conn = self._conn

        async def _run() -> None:
            try:
                if wait:
                    await self._pulls_done_sending()
                # the current inbox and those of written-off requests (none is added from now on)
                subs = [n for n in (self._nsub, *(o for o, _ in self._old)) if n is not None]
                self._old = []
                if not conn.internal.nc.is_closed:
                    for res in await asyncio.gather(*(conn.internal.drain_nsub(n, 5.0) for n in subs),
                                                    return_exceptions=True):
                        if isinstance(res, BaseException):
                            raise res
            except Exception:  # not confirmed (disconnected, timed out): the inbox is removed anyway
                log.debug("consume %s/%s: unsubscribe failed", self.stream, self.consumer, exc_info=True)
            finally:
                self._server_finished()

        try:
            conn.internal.loop.check()
            _on_loop(conn, _run)
        except Error:
            self._server_finished()

    async def _pulls_done_sending(self) -> None:
        """On the loop: wait until the pulls in flight sent what they will send now."""
        loop = asyncio.get_running_loop()
        conn = self._conn
        eng = self._eng
        end = loop.time() + self._opts.expires + FETCH_GRACE
        act = eng.activity
        quiet_since = loop.time()
        while conn.internal.nc.is_connected and self.error is None and eng.state is not _State.CLOSED:
            if eng.in_flight <= 0:
                return
            now = loop.time()
            if now >= end:
                return
            if eng.activity != act:
                act = eng.activity
                quiet_since = now
            elif now - quiet_since >= _QUIET:
                return
            await asyncio.sleep(0.02)

    def _server_finished(self) -> None:
        """The inbox is unsubscribed (or the connection is gone): end the user side after the buffer."""
        conn = self._conn
        with conn.internal.subs_lock:
            conn.internal.subs.discard(self)  # type: ignore[arg-type]
        with self._lock:
            self._unsubscribed = True
            later = self._nak_later
            self._nak_later = []
            stopped = self._eng.state is _State.STOPPED
        if stopped:
            # nak what stop() did not hand over, now that no pull can take it back
            for msg in later:
                msg._nak_quiet()
            self._nak_buffered()
            self._q.put(_END)
        elif self._cb is None and self.error is not None:
            self._q.put(_Control(self.error))
        else:
            self._q.put(_END)
        self._server_done.set()
        if self._cb is not None and not self._running:
            self._kick_lane()

    def _user_finished(self) -> None:
        """The iterator reached its end or the callback lane ended (any thread)."""
        self._closed.set()

    def _terminal(self, exc: BaseException) -> None:
        """The consumer is gone: end after the buffered messages by raising ``exc`` (any thread).

        Callback form: ``exc`` goes to the error callback at once, and the lane ends after
        the buffered messages.
        """
        with self._lock:
            acts = self._eng.fail(exc)
        self._do(acts)

    def stop(self) -> None:
        """Stop at once: no more messages or callbacks. Idempotent.

        Every message received and not handed to the application is nak'ed, so the server
        redelivers it at once: the buffered ones now, and those still arriving until the
        server processed the unsubscribe (the pulls in flight finish sending first, as for
        :meth:`drain`). Returns without waiting (a callback that is running, or that the
        lane had already decided to call, finishes; no further one starts; :meth:`wait`
        returns once the rest was nak'ed and the lane ended).
        """
        with self._lock:
            acts = self._eng.stop()
        self._do(acts)

    def _nak_buffered(self) -> None:
        q = self._q
        while True:
            try:
                item = q.get_nowait()
            except Empty:
                return
            if item.__class__ is not _Control:
                self._not_handed_over(item)

    def _not_handed_over(self, msg: Msg) -> None:
        """A message received and, after stop(), never handed over: nak it (any thread).

        The nak waits until the inbox is unsubscribed: sent earlier, the server would
        redeliver the message to a pull of this consume still open, which would only nak
        it again (counting a delivery each time, towards max_deliver).
        """
        if self._ack_none:
            return
        with self._lock:
            if not self._unsubscribed:
                self._nak_later.append(msg)
                return
        msg._nak_quiet()

    def drain(self, timeout: float | None | Default = DEFAULT) -> None:
        """Stop pulling and end once every message the server sent was delivered. Idempotent.

        No new pull request is sent; the pulls in flight finish sending (until each got all
        its messages or its ending status, or nothing arrived for 0.5 s), then the inbox is
        unsubscribed (UNSUB, PING/PONG, removal): every message the server sent before it
        processed the UNSUB is handed to the application (iterator: before the iteration
        ends; callback form: through the callback). Acking them is the application's job.

        Without ``timeout`` it starts the drain and returns (use :meth:`wait`). With ``timeout``
        it blocks until the inbox is unsubscribed and, in callback form, every message went
        through the callback (``timeout=None``: no limit). Called from this consume's own
        callback it does not wait (the rest follows once the callback returns).

        Raises:
            jssync.TimeoutError: ``timeout`` passed first (the drain goes on).
        """
        with self._lock:
            acts = self._eng.drain()
        self._do(acts)
        if not isinstance(timeout, Default):
            if self._cb is not None and self._cb_thread == threading.get_ident():
                return  # called from our own callback: the lane ends once the callback returns
            deadline = Deadline(timeout)
            ev = self._closed if self._cb is not None else self._server_done
            while not ev.wait(deadline.slice()):
                deadline.check("consume drain")

    def _before_close(self, deadline: Deadline, drain: bool) -> None:
        """The connection is about to close, and still accepts acks (user thread; see
        ``Connection.close`` / ``Connection.drain``). Blocks until ``deadline`` at most.

        After :meth:`stop`: waits until the inbox is unsubscribed (its naks then went out),
        and naks what is still parked when ``deadline`` comes first, so the close writes
        every nak stop() promised before the socket goes. ``drain`` (``nc.drain()``, after
        it drained this consume): the iterator hands out the rest of the buffer first (the
        messages it hands out can be acked), unless no other thread iterates (nobody could
        take them: the thread that iterated is the one draining the connection, or it
        ended), and what is still buffered then, or at ``deadline``, is nak'ed (:meth:`stop`).
        """
        if self._state is _State.CLOSED:
            return
        if drain and self._cb is None and self._state is not _State.STOPPED:
            it = self._iter_thread
            if it is not None and it != threading.get_ident():
                while not self._closed.wait(deadline.slice()):
                    if deadline.expired() or not _thread_alive(it):
                        break
            if not self._closed.is_set():
                self.stop()
        if self._state is not _State.STOPPED:
            return
        while not self._server_done.wait(deadline.slice()):
            if deadline.expired():
                break
        with self._lock:
            self._unsubscribed = True  # from now on a message not handed over is nak'ed at once
            later = self._nak_later
            self._nak_later = []
        for msg in later:
            msg._nak_quiet()

    def _end(self, error: Error | None = None) -> None:
        """The connection closed (any thread): iterators and the callback lane end at once
        (the buffered messages are dropped; the server redelivers them after ack_wait).

        Quietly after ``close()``; with ``error`` (the connection gave up reconnecting) the
        iterator raises it, and the consume's own ``error_cb`` gets it (the connection's
        ``error_cb`` had it already).
        """
        with self._lock:
            acts = self._eng.closed(error)
            if not acts:
                return
            if error is not None:
                self.error = error
        self._detach()
        with self._conn.internal.subs_lock:
            self._conn.internal.subs.discard(self)  # type: ignore[arg-type]
        self._server_done.set()
        q = self._q
        while True:  # the buffered messages are dropped (their acks could only fail)
            try:
                q.get_nowait()
            except Empty:
                break
        if error is not None and self._cb is None:
            q.put(_Control(ConnectionClosedError(str(error))))
        else:
            q.put(_END)
        if error is not None and self._error_cb is not None:
            self._report(ConnectionClosedError(str(error)))
        self._closed.set()

    # -- the handle -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once no more messages are handed to the application: stopped (iterator: at
        once; callback form: once the running callback returned), drained and every message
        delivered, or ended by an error."""
        return self._closed.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until consuming is over, at most ``timeout`` seconds (None: no limit).

        Over means :attr:`closed` and the inbox unsubscribed: after :meth:`stop`, every
        message received and not handed over was nak'ed by then.

        Raises:
            jssync.TimeoutError: still running after ``timeout``.
            RuntimeError: called from this consume's own callback.
        """
        if self._cb is not None and self._cb_thread == threading.get_ident() and not self._closed.is_set():
            raise RuntimeError("wait() was called from this consume's own callback: it would never return")
        deadline = Deadline(timeout)
        for ev in (self._closed, self._server_done):
            while not ev.wait(deadline.slice()):
                if deadline.expired():
                    raise TimeoutError(f"consume of {self.consumer!r} still running after {timeout}s")

    @property
    def pending_messages(self) -> int:
        """Messages requested and not yet handed to the application (buffered or in flight)."""
        return self._eng.pending_messages

    @property
    def pending_bytes(self) -> int:
        """Bytes requested and not yet handed to the application (``max_bytes`` mode)."""
        return self._eng.pending_bytes

    @property
    def pull_requests(self) -> int:
        """Pull requests sent so far."""
        return self._eng.pulls

    def __enter__(self) -> ConsumeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<jssync.ConsumeContext {self.stream}/{self.consumer} {self._eng.state.name.lower()}>"

    # -- iterator form ------------------------------------------------------------------------

    def __iter__(self) -> ConsumeContext:
        if self._cb is not None:
            raise TypeError("a consume with a callback cannot be iterated")
        return self

    def __next__(self) -> Msg:
        tracer = _CORE.tracer  # jssync.otel: a receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("consume", self.__next__, self._conn, self.stream, self.consumer)
        self._iter_thread = threading.get_ident()
        try:
            msg = self._q.get_nowait()
        except Empty:
            msg = None
        if msg is None:  # wait outside the except block: what it raises carries no queue.Empty context
            msg = self._wait_msg()
        if msg.__class__ is _Control:
            self._q.put(_END)  # other iterating threads end too
            self._user_finished()
            exc = msg.exc
            if exc is not None:
                msg.exc = None
                raise exc
            raise StopIteration
        if self._bytes_mode:
            self._take_bytes(msg)
        elif self._eng.taken():
            self._refill()
        return msg  # type: ignore[no-any-return]

    def next(self, timeout: float | None = None) -> Msg:
        """Return the next message, blocking up to ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: no message in time.
            StopIteration: consuming is over.
            jssync.ConsumerDeletedError, jssync.ConsumerIsPushBasedError.
        """
        if self._cb is not None:
            raise TypeError("next() cannot be used on a consume with a callback")
        tracer = _CORE.tracer  # jssync.otel: a receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("consume", self.next, self._conn, self.stream, self.consumer, timeout)
        self._iter_thread = threading.get_ident()
        try:
            msg = self._q.get_nowait()
        except Empty:
            msg = None
        if msg is None:
            msg = self._wait_msg(Deadline(timeout))
        if msg.__class__ is _Control:
            self._q.put(msg)
            return self.__next__()
        if self._bytes_mode:
            self._take_bytes(msg)
        elif self._eng.taken():
            self._refill()
        return msg  # type: ignore[no-any-return]

    def _take_bytes(self, msg: Msg) -> None:
        try:
            size = self._sizes.popleft()
        except IndexError:  # pragma: no cover - every buffered message's size was appended
            size = message_size(msg.subject, msg.reply, msg.headers, msg.data)
        with self._lock:
            need = self._eng.taken(1, size)
        if need:
            self._refill()

    def _wait_msg(self, deadline: Deadline | None = None) -> Any:
        q = self._q
        if deadline is None:
            deadline = Deadline(None)  # its slices also notice a cancelled asyncio task (Ctrl-C)
        while True:
            item = wait_get(q, deadline.slice())
            if item is not EXPIRED:
                return item
            if deadline.expired():
                raise TimeoutError(f"no message from consumer {self.consumer!r} within {deadline.timeout}s")
            if self._eng.state is _State.RUNNING:
                self._refill()  # (it pulls only at the threshold)

    # -- callback form: a lane on the worker pool -------------------------------------------

    def _kick_lane(self) -> None:
        with self._lane_lock:
            if self._running:
                return
            self._running = True
        self._conn.internal.pool.submit(self._lane)

    def _lane(self) -> None:
        q = self._q
        cb = self._cb
        assert cb is not None
        eng = self._eng
        budget = _LANE_BUDGET
        while True:
            budget -= 1
            if not budget:
                # give the worker back now and then, so other callbacks on the pool get a turn
                self._conn.internal.pool.submit(self._lane)
                return
            try:
                msg = q.get_nowait()
            except Empty:
                self._running = False
                if q.empty():
                    return
                with self._lane_lock:
                    if self._running:
                        return
                    self._running = True
                continue
            if msg.__class__ is _Control:
                self._user_finished()
                return  # _running stays True: nothing runs the lane again
            if self._bytes_mode:
                self._take_bytes(msg)
            elif eng.taken():
                self._refill()
            self._cb_thread = threading.get_ident()
            # the state is read last, right before the call: a stop() that returned before it
            # (even while this lane sent the next pull) keeps the message from the callback
            state = eng.state
            if state is not _State.RUNNING and state is not _State.DRAINING:
                self._cb_thread = None
                if state is _State.STOPPED:
                    self._not_handed_over(msg)
                continue  # (closed: dropped)
            try:
                tracer = _CORE.tracer  # jssync.otel: a process span around the callback (None: off)
                if tracer is None:
                    cb(msg)
                else:
                    tracer.process(cb, msg, self._conn)
            except BaseException as exc:  # noqa: BLE001 - reported, consuming goes on
                log.debug("consume callback raised", exc_info=True)
                self._report(exc)
            finally:
                self._cb_thread = None




def consume(js: JetStream, stream: str, consumer: str, callback: Callable[[Msg], Any] | None,
            error_cb: Callable[[BaseException], Any] | None, opts: ConsumeOptions,
            ack_none: bool, prio: PullPriority | None = None, pins: Pins | None = None,
            ack_wait: float | None = None) -> ConsumeContext:
    """Start consuming (see :class:`ConsumeContext`). ``ack_wait``: the consumer's (seconds),
    for the leases of the messages held (None: none kept)."""
    cc = ConsumeContext(js, stream, consumer, opts, callback, error_cb, ack_none, prio, pins, ack_wait)._start()
    cc._started()
    return cc


# Msg.ack_next() (core) calls this through its hook: core does not import the JetStream layer.
_core_hooks.HOOKS.ack_next = ack_next
