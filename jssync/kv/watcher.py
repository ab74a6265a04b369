"""The watcher engine: an ordered, ack-none push consumer over a stream's subjects, re-created
on a gap, missed heartbeats or a reconnect (:class:`PushWatcher`), and the key watcher on it."""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from nats.js import api

from ..base.backoff import Backoff, retry
from ..base.deadline import Deadline
from ..base.errors import (
    Error,
    MessageNotFoundError,
    PermissionDeniedError,
    StreamNotFoundError,
    SubscriptionClosedError,
    TimeoutError,
    worth_retrying,
)
from ..base.status import CONFLICT, NOT_FOUND, PushAction, classify, decide_push
from ..jetstream.consume.gaps import DELIVER, SKIP, GapTracker, Reset
from ..jetstream.consume.heartbeat import HeartbeatMonitor
from .entries import Entry, KeyValueOp, operation_of
from .errors import (
    BucketNotFoundError,
)

if TYPE_CHECKING:
    from ..base.jsack import MsgMetadata
    from ..core.connection import Connection
    from ..core.msg import Msg
    from ..core.subscription import Subscription
    from ..jetstream.context import JetStream
    from .handle import KeyValue

log = logging.getLogger("jssync")

#: a watcher's first consumer, while the server does not answer: 0.1 s, doubling up to 1.6 s
_CREATE_RETRY = Backoff(0.1, 1.6)

#: A watcher's subscription ended (a sentinel, distinct from None: no message yet).
_CLOSED: Any = object()
T = TypeVar("T")

#: Watch consumers send a heartbeat this often when idle (seconds).
WATCH_HEARTBEAT = 5.0


class _SubHolder:
    """The current subscription of a watcher (shared with its finalizer)."""

    __slots__ = ("advisory", "sub")

    def __init__(self) -> None:
        self.sub: Subscription | None = None
        #: the subscription to the consumer-deleted advisories of the stream, if any
        self.advisory: Subscription | None = None


def _weak_listener(watcher: PushWatcher[Any]) -> Callable[[], None]:
    """A reconnect listener that calls ``watcher._on_reconnect`` while the watcher lives."""
    ref = weakref.ref(watcher)

    def listener() -> None:
        w = ref()
        if w is not None:
            w._on_reconnect()

    return listener


class _InitialEnd:
    """Whether a watch's initial values are all delivered, checked against the stream.

    The server's counts run ahead while keys are rewritten: a key's revision removed
    (replaced) before the consumer delivered it is counted as delivered, and a message's
    pending can read 0 early. So the end is confirmed by the last stream sequence of the
    watched subjects (``read``), read once the consumer's walk over its initial messages
    is over (``walked``: the count of those delivered is reached, or a bound read before
    was seen): every revision that replaced one of them was stored before that read, so
    is at or below it, and the marker waits until it has been seen. A read made before
    the walk was known to be over is made again once its sequence is seen. ``due``: read
    again (a failed read, or an idle heartbeat while the bound is not seen: it may be
    gone), at ``retry_at``.
    """

    __slots__ = ("bound", "due", "final", "max_seq", "retry_at", "walked")

    def __init__(self, max_seq: int) -> None:
        self.max_seq = max_seq  # the highest stream sequence seen (delivered or passed over)
        self.retry_at = 0.0
        self.new_consumer()

    def new_consumer(self) -> None:
        """A new consumer walks its initial messages again: what was read does not hold for it."""
        self.bound: int | None = None
        self.final = False  # bound was read after the walk was over
        self.walked = False
        self.due = False

    def done(self, walked: bool, read: Callable[[], int | None]) -> bool:
        if walked or (self.bound is not None and self.max_seq >= self.bound):
            self.walked = True
        if self.bound is not None and not self.due:
            if self.final:
                return self.max_seq >= self.bound
            if not self.walked:
                return False  # wait for the bound read to be seen
        bound = read()
        if bound is None:
            self.due = True
            self.retry_at = time.monotonic() + 0.2
            return False
        self.bound, self.due = bound, False
        # seen already before the read: the walk was over before it
        self.final = self.walked or self.max_seq >= bound
        return self.final and self.max_seq >= bound


def _last_seq(js: JetStream, stream: str, subjects: list[str], timeout: float) -> int:
    """The last stream sequence on any of ``subjects`` (wildcards allowed), 0 for none: one
    STREAM.MSG.GET ``last_by_subj`` per subject, through the stream leader (up to date).

    Raises:
        jssync.StreamNotFoundError: no such stream; jssync.Error: the request failed.
    """
    last = 0
    for subj in subjects:
        try:
            resp = js._api(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subj}, timeout)
        except MessageNotFoundError:
            continue
        last = max(last, int((resp.get("message") or {}).get("seq") or 0))
    return last


def _weak_deleted(watcher: PushWatcher[Any]) -> Callable[[Msg], None]:
    """An advisory callback that calls ``watcher._on_consumer_deleted`` while the watcher lives."""
    ref = weakref.ref(watcher)

    def deleted(msg: Msg) -> None:
        w = ref()
        if w is not None:
            w._on_consumer_deleted(msg.subject.rpartition(".")[2])

    return deleted


def _abandon_watcher(conn: Connection, holder: _SubHolder, listener: Callable[[], None]) -> None:
    """Finalizer of a watcher dropped without stop(): no lock, no wait, never raises.

    It runs wherever the garbage collector runs. The subscription's UNSUB is handed to the
    I/O thread; the ephemeral consumer, left without interest, is removed by the server
    after its inactive threshold.
    """
    try:
        conn.internal.reconnect_listeners.remove(listener)
    except ValueError:
        pass
    sub, adv = holder.sub, holder.advisory
    holder.sub = holder.advisory = None
    if sub is not None:
        sub._unsubscribe_soon()
    if adv is not None:
        adv._unsubscribe_soon()


class PushWatcher(Generic[T]):
    """Watches subjects of a stream through an ordered, ack-none push consumer it owns.

    Yields items made by :meth:`_item` from each message: first the stored ones (the last
    per subject, or all with ``include_history``), then ``None`` once those are done,
    then new ones as they are stored. On a gap in the consumer sequence, missed
    heartbeats or a reconnect, the consumer is re-created from the stream sequence after
    the last message seen, so nothing is lost or repeated; while initial values that are
    the last per subject are still being read, it is re-created with the last per subject
    again (the ones up to the last seen are skipped), so an older message never arrives
    as if it were the last. Subclasses say what an item is.
    """

    _what = "watcher"

    def __init__(self, js: JetStream, stream_name: str, subjects: list[str], *, include_history: bool,
                 updates_only: bool, meta_only: bool, resume_from: int | None,
                 deadline: Deadline | None = None) -> None:
        self._js = js
        self._conn = js.conn
        self._stream_name = stream_name
        self._subjects = subjects
        self._include_history = include_history
        self._updates_only = updates_only
        self._meta_only = meta_only
        #: the initial values are the latest per subject: until they are all read, a new
        #: consumer starts again with the latest per subject (not from a sequence)
        self._last_per_subject = not include_history and not updates_only and resume_from is None
        self._lock = threading.RLock()
        self._ready: collections.deque[T | None] = collections.deque()
        self._stopped = False
        self._reset_needed = False  # a consumer must be (re-)created by the reader
        self._reconnected = False  # set on the I/O thread; the reader tells the gap tracker
        self._init_done = False
        self._init_pending = 0
        self._received = 0
        #: when the initial values are all delivered (checked against the stream)
        self._end = _InitialEnd((resume_from - 1) if resume_from else 0)
        #: the stream was deleted (noticed when re-creating the consumer): next() raises
        self._gone: StreamNotFoundError | None = None
        #: the deadline of the reader's call in progress (the requests a reader makes keep to it)
        self._call_deadline: Deadline | None = None
        #: the consumer sequence check and the next stream sequence (ordered delivery, resets)
        self._tracker = GapTracker(next_stream_seq=resume_from or 0)
        #: The current subscription, in a holder the finalizer shares (it must not keep us alive).
        self._holder = _SubHolder()
        self._consumer: str | None = None
        self._retry_at = 0.0
        self._hb = WATCH_HEARTBEAT
        #: 2 x the idle heartbeat without anything: the consumer is re-created (ADR-37)
        self._hb_mon = HeartbeatMonitor(2 * self._hb, time.monotonic())
        # The connection must not keep an abandoned watcher alive (a watcher dropped without
        # stop() would keep its subscription and server-side consumer as long as the
        # connection lives): the listener holds it weakly, and a finalizer cleans up.
        self._listener = _weak_listener(self)
        self._conn.internal.reconnect_listeners.append(self._listener)
        self._finalizer = weakref.finalize(self, _abandon_watcher, self._conn, self._holder, self._listener)
        self._call_deadline = deadline if deadline is not None else Deadline(js.timeout)
        try:
            info = self._create_first(deadline)
            if updates_only:
                self._mark_init_done()
                if self._tracker.next_stream_seq == 0 and info is not None and info.delivered is not None:
                    self._tracker.next_stream_seq = int(info.delivered.stream_seq or 0) + 1
            else:
                self._count_initial(info)
            if deadline is None and self._watches_deletions:
                self._watch_deletions()
        except StreamNotFoundError as exc:
            self._stop_quietly()
            raise self._not_found(exc) from exc
        except BaseException:
            self._stop_quietly()
            raise
        finally:
            self._call_deadline = None

    def __repr__(self) -> str:
        return (f"<jssync.{type(self).__name__} stream={self._stream_name!r} subjects={self._subjects} "
                f"stopped={self._stopped}>")

    @property
    def _sub(self) -> Subscription | None:
        return self._holder.sub

    @_sub.setter
    def _sub(self, sub: Subscription | None) -> None:
        self._holder.sub = sub

    def _not_found(self, exc: StreamNotFoundError) -> BaseException:
        return exc

    def _item(self, msg: Msg, meta: MsgMetadata) -> T | None:
        """The item for a message, or None to skip it."""
        raise NotImplementedError

    # -- consumer plumbing ----------------------------------------------------------------------

    _watches_deletions = False  # a long-lived watcher listens for its consumer's deletion

    def _watch_deletions(self) -> None:
        """Listen for the consumer-deleted advisories of the stream (blocks for the SUB's PING/PONG).

        The deliver subject gets nothing when the consumer or its stream is deleted (the
        heartbeats just stop); ``$JS.EVENT.ADVISORY.CONSUMER.DELETED.<stream>.<consumer>``
        comes at once. Its callback flags the reader, which re-creates the consumer (or
        finds the stream gone). Without permission there, missed heartbeats notice.
        """
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{self._stream_name}.*"
        try:
            self._holder.advisory = self._conn.subscribe(subject, callback=_weak_deleted(self))
        except Error as exc:  # not allowed (PermissionDeniedError), or the link failed meanwhile
            log.debug("%s on %s: no deletion advisories (%s); heartbeats only", self._what,
                      self._stream_name, exc)

    def _on_consumer_deleted(self, name: str) -> None:
        # on the worker pool: only set flags
        if name and name == self._consumer and not self._stopped:
            self._reset_needed = True
            self._retry_at = 0.0

    def _on_reconnect(self) -> None:
        # on the I/O thread: only set flags; the reader tells the gap tracker and re-creates the consumer
        self._reconnected = True
        self._reset_needed = True

    def _create_first(self, deadline: Deadline | None) -> api.ConsumerInfo | None:
        """Create the first consumer: once within the context's timeout, or, with a
        ``deadline`` (a listing's own timeout), retried while the server does not answer
        (waiting :data:`_CREATE_RETRY` between attempts, never past ``deadline``)."""
        if deadline is None:
            return self._create(first=True, timeout=self._js.timeout)

        def once(_failures: int) -> api.ConsumerInfo | None:
            left = deadline.remaining()
            return self._create(first=True, timeout=self._js.timeout if left is None
                                else max(0.001, min(self._js.timeout, left)))

        def worth(exc: Exception) -> bool:
            # the request lost with the connection, or JetStream not answering yet
            return isinstance(exc, Error) and not self._stopped and worth_retrying(exc, timeouts=True)

        return retry(once, _CREATE_RETRY, deadline, worth_retrying=worth,
                     on_retry=lambda exc: log.debug("%s on %s: creating the consumer failed (%s), retrying",
                                                    self._what, self._stream_name, exc))

    def _count_initial(self, info: api.ConsumerInfo | None) -> None:
        """While the initial values are not all read: how many messages of the consumer just
        created are still initial (all it has pending now; the marker follows the last)."""
        if self._init_done or info is None:
            return
        self._received = 0
        pending = int(info.num_pending or 0) + int(getattr(info.delivered, "consumer_seq", 0) or 0)
        self._init_pending = pending
        self._end.new_consumer()
        if pending == 0:
            self._initial_sent(True)

    _checks_bound = False  # the end of the initial values is checked against the stream (_InitialEnd)

    def _initial_sent(self, walked: bool) -> None:
        """The consumer's counts (``walked``: all it had pending is delivered) or its pending
        0 say the initial values are done: mark them so (with ``_checks_bound``: once the
        stream confirms it, see :class:`_InitialEnd`)."""
        if not self._init_done and (not self._checks_bound or self._end.done(walked, self._read_bound)):
            self._mark_init_done()

    def _read_bound(self) -> int | None:
        """The last stream sequence among the watched subjects (0: none), or None when the
        read failed (retried later). Keeps to the reader's call deadline."""
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None and left <= 0:
            return None
        try:
            return _last_seq(self._js, self._stream_name, self._subjects,
                             self._js.timeout if left is None else max(0.001, min(self._js.timeout, left)))
        except StreamNotFoundError as exc:
            self._stream_gone(exc)
            return None
        except PermissionDeniedError as exc:
            # not allowed to read it: the consumer's counts alone say when they are done
            log.debug("%s on %s: cannot read the last sequence (%s); the end of the initial values "
                     "is the server's count", self._what, self._stream_name, exc)
            self._checks_bound = False
            return self._end.max_seq
        except Error as exc:
            log.debug("%s on %s: reading the last sequence failed (%s), retrying", self._what,
                      self._stream_name, exc)
            return None

    def _stream_gone(self, exc: StreamNotFoundError) -> None:
        """The stream was deleted: the reader raises the error once its queue is empty."""
        if self._gone is None:
            log.info("%s on %s: the stream is gone (%s)", self._what, self._stream_name, exc)
            self._gone = exc

    def _config(self, deliver_subject: str, first: bool) -> api.ConsumerConfig:
        cfg = api.ConsumerConfig(
            deliver_subject=deliver_subject,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            replay_policy=api.ReplayPolicy.INSTANT,
            flow_control=True,
            idle_heartbeat=self._hb,
            headers_only=True if self._meta_only else None,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=300.0,
        )
        if len(self._subjects) == 1:
            cfg.filter_subject = self._subjects[0]
        else:
            cfg.filter_subjects = list(self._subjects)
        if self._last_per_subject and not self._init_done:
            # (again) the latest per subject; the gap tracker skips those delivered already
            cfg.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        elif self._tracker.next_stream_seq > 0:
            cfg.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = self._tracker.next_stream_seq
        elif self._updates_only:
            cfg.deliver_policy = api.DeliverPolicy.NEW
        elif self._include_history:
            cfg.deliver_policy = api.DeliverPolicy.ALL
        else:
            cfg.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        return cfg

    def _create(self, *, first: bool, timeout: float) -> api.ConsumerInfo | None:
        """Subscribe on a fresh inbox and create the consumer delivering to it.

        The first subscription checks the permissions (a PING/PONG); the ones of a reset
        (the same inbox prefix) do not wait for the server, so that a stalled link costs
        only the create request's ``timeout``. The create gets at most what is left of the
        call in progress (``_call_deadline``) after the subscription.
        """
        conn = self._conn
        if first:
            sub = conn.subscribe(conn.new_inbox(), pending_msgs_limit=1 << 20)
        else:
            sub = conn.internal.make_subscription(conn.new_inbox(), None, None, 1 << 20, check_permissions=False)
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None:
            timeout = max(0.001, min(timeout, left))
        try:
            consumer = self._js.create_consumer(self._stream_name, self._config(sub.subject, first),
                                                timeout=timeout)
        except BaseException:
            sub.unsubscribe()
            raise
        self._sub = sub
        self._consumer = consumer.name
        self._tracker.last_consumer_seq = 0  # a new consumer starts at consumer sequence 1
        self._hb_mon.resumed(time.monotonic())
        return consumer.cached_info

    def _drop_consumer(self, wait: bool = True) -> None:
        """Unsubscribe and delete the consumer: waiting for the reply (at most 2 s), or,
        without ``wait`` (a reset, inside a reader's timeout), only sending the request."""
        sub, name = self._sub, self._consumer
        self._sub = None
        self._consumer = None
        if sub is not None:
            try:
                sub.unsubscribe()
            except Error:
                pass
        if name is not None and not self._conn.is_closed:
            try:
                if wait:
                    self._js.delete_consumer(self._stream_name, name, timeout=min(self._js.timeout, 2.0))
                else:
                    self._js._api_nowait(f"CONSUMER.DELETE.{self._stream_name}.{name}")
            except Error:
                pass  # ephemeral: it goes away by itself once inactive

    def _reset(self, why: str) -> None:
        """Re-create the consumer, within what is left of the reader's call (at most the
        context's timeout, at most 5 s); when nothing is left, at the reader's next turn."""
        log.debug("%s on %s: re-creating the consumer (%s)", self._what, self._stream_name, why)
        self._reset_needed = False
        self._drop_consumer(wait=False)
        if self._stopped:
            return
        timeout = min(self._js.timeout, 5.0)
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None:
            if left <= 0.001:
                # the reader's call is over (it raises its TimeoutError): its next one does it
                self._reset_needed = True
                self._retry_at = time.monotonic() + 0.01
                self._hb_mon.resumed(time.monotonic())
                return
            timeout = min(timeout, left)
        try:
            info = self._create(first=False, timeout=timeout)
        except StreamNotFoundError as exc:
            self._stream_gone(exc)
            return
        except Error as exc:
            # keep trying while the reader waits (leader elections, reconnects)
            log.info("%s on %s could not re-create its consumer: %s", self._what, self._stream_name,
                     exc)
            self._reset_needed = True
            self._retry_at = time.monotonic() + 0.5
            self._hb_mon.resumed(time.monotonic())
            return
        self._count_initial(info)

    def _mark_init_done(self) -> None:
        if not self._init_done:
            self._init_done = True
            self._ready.append(None)

    def _handle(self, msg: Msg) -> None:
        self._hb_mon.seen(time.monotonic())
        tracker = self._tracker
        hdrs = msg.headers
        st = classify(hdrs, msg.data, msg.reply) if hdrs and not msg.data and "Status" in hdrs else None
        if st is not None:
            act = decide_push(st)
            if act is PushAction.FLOW_CONTROL or act is PushAction.HEARTBEAT:
                if st.flow_control:  # flow control request
                    self._conn.internal.publish_raw(st.flow_control, b"")
                if st.stalled:
                    self._conn.internal.publish_raw(st.stalled, b"")
                hb = tracker.heartbeat(st.last_consumer, tracker.generation)
                if type(hb) is Reset:
                    self._reset(hb.reason)
                elif act is PushAction.HEARTBEAT and self._checks_bound and not self._init_done:
                    # idle, the initial values not confirmed: some may be gone (an expired
                    # value, a purge) and never come; ask the stream (again)
                    self._end.due = True
                    self._initial_sent(False)
                return
            if st.code in (CONFLICT, NOT_FOUND):
                gone = tracker.status_from(tracker.generation, f"status {st.code} {st.description}")
                if type(gone) is Reset:
                    self._reset(gone.reason)
            return
        try:
            meta = msg.metadata
        except Error:
            return
        sseq = meta.sequence.stream
        step = tracker.message(sseq, meta.sequence.consumer, tracker.generation)
        if step is DELIVER:
            item = self._item(msg, meta)
            if item is not None:
                self._ready.append(item)
        elif step is not SKIP:
            # a gap: re-created from the next stream sequence
            self._reset(step.reason if type(step) is Reset else "out of order")
            return
        # SKIP: a consumer re-created during the initial values delivers the latest per
        # subject again; those before the last one delivered were delivered already
        end = self._end
        if sseq > end.max_seq:
            end.max_seq = sseq
        if not self._init_done:
            self._received += 1
            walked = self._received >= self._init_pending
            if walked or meta.num_pending == 0 or end.bound is not None:
                self._initial_sent(walked)

    # -- reading -----------------------------------------------------------------------------

    def next(self, timeout: float | None = None) -> T | None:
        """Return the next entry, or None for the end-of-initial-values marker.

        Blocks until one arrives, at most ``timeout`` seconds (None: until stopped).

        Raises:
            jssync.TimeoutError: nothing arrived in time.
            StopIteration: the watcher was stopped (or its connection closed).
            jssync.BucketNotFoundError (a jssync.StreamNotFoundError; the stream's own
                not-found error for a plain stream watcher): the bucket was deleted,
                raised once the entries already received were read, and on every call after.
        """
        deadline = Deadline(timeout)
        # another thread may be reading (it holds the lock while it waits): wait for it in
        # slices, so this call's own timeout (and stop()) still count
        lock = self._lock
        while not lock.acquire(timeout=deadline.slice()):
            if self._stopped or self._conn.is_closed:
                raise StopIteration
            if deadline.expired():
                raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
        self._call_deadline = deadline
        try:
            while True:
                if self._ready:
                    return self._ready.popleft()
                if self._stopped or self._conn.is_closed:
                    raise StopIteration
                if self._gone is not None:
                    raise self._not_found(self._gone)
                if self._end.due and not self._init_done and time.monotonic() >= self._end.retry_at:
                    self._initial_sent(False)
                    continue
                if self._reset_needed and time.monotonic() >= self._retry_at:
                    why = "retry"
                    if self._reconnected:  # one reset per reconnect
                        self._reconnected = False
                        act = self._tracker.reconnected()
                        why = act.reason if type(act) is Reset else "reconnected"
                    self._reset(why)
                    continue
                sub = self._sub
                if sub is None:
                    if deadline.expired():
                        raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
                    time.sleep(deadline.slice(0.1))
                    continue
                got: Any = None
                try:
                    got = sub.next_msg(timeout=deadline.slice())
                except TimeoutError:
                    if self._hb_mon.check(time.monotonic()):
                        missed = self._tracker.missed_heartbeat()
                        self._reset(missed.reason if type(missed) is Reset else "missed heartbeats")
                except SubscriptionClosedError:
                    got = _CLOSED
                # raised outside the handlers: no internal context
                if got is None:
                    if deadline.expired():
                        raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
                    continue
                if got is _CLOSED:
                    if self._stopped or self._conn.is_closed:
                        raise StopIteration
                    continue
                self._handle(got)
        finally:
            self._call_deadline = None
            lock.release()

    # nats-py's name for it
    def updates(self, timeout: float | None = 5.0) -> T | None:
        """Like :meth:`next` (nats-py's name), with a default wait of 5 seconds."""
        return self.next(timeout=timeout)

    def __iter__(self) -> Iterator[T | None]:
        return self

    def __next__(self) -> T | None:
        return self.next(timeout=None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Stop watching: delete the consumer and end iteration (idempotent, any thread).

        Blocks for the consumer delete request, at most 2 seconds.
        """
        if self._stopped:
            return
        self._stopped = True
        sub = self._sub
        if sub is not None:
            try:
                sub.unsubscribe()  # wakes a reader blocked in next()
            except Error:
                pass
        self._stop_quietly()

    def _stop_quietly(self) -> None:
        self._stopped = True
        try:
            self._conn.internal.reconnect_listeners.remove(self._listener)
        except ValueError:
            pass
        adv, self._holder.advisory = self._holder.advisory, None
        if adv is not None:
            try:
                adv.unsubscribe()
            except Error:
                pass
        with self._lock:
            self._drop_consumer()
        self._finalizer.detach()


class KeyWatcher(PushWatcher[Entry]):
    """An iterator over the entries of watched keys; ``None`` marks the end of the initial values.

    Iterating blocks until the next entry (``for e in watcher`` ends when the watcher
    is stopped or its connection closes); :meth:`next` waits at most ``timeout``.
    Underneath is an ephemeral push consumer (ack none, flow control, heartbeats)
    delivering in order; when a gap, a missed heartbeat or a reconnect is noticed it is
    re-created, so no entry is lost or repeated: from the revision after the last one
    seen, or, while the initial values are being read (without ``include_history`` or
    ``resume_from_revision``), with the latest value per key again, skipping the keys
    whose latest revision was delivered already. So every initial value is the latest
    of its key when it is read (ADR-8), never an older revision, and each key comes once.
    :meth:`next`'s timeout bounds the whole call, a re-created consumer included. When
    the bucket is deleted, reading raises :class:`BucketNotFoundError` within a moment.
    Thread-safe; :meth:`stop` may be called from any thread and wakes a blocked reader.
    """

    _what = "key watcher"
    _checks_bound = True
    _watches_deletions = True

    def __init__(self, kv: KeyValue, subjects: list[str], *, include_history: bool, ignore_deletes: bool,
                 updates_only: bool, meta_only: bool, resume_from: int | None,
                 deadline: Deadline | None = None) -> None:
        self._kv = kv
        self._ignore_deletes = ignore_deletes
        super().__init__(kv._js, kv.stream_name, subjects, include_history=include_history,
                         updates_only=updates_only, meta_only=meta_only, resume_from=resume_from,
                         deadline=deadline)

    def _not_found(self, exc: StreamNotFoundError) -> BaseException:
        return BucketNotFoundError(exc.code, exc.err_code, f"bucket {self._kv.bucket!r} not found")

    def _item(self, msg: Msg, meta: MsgMetadata) -> Entry | None:
        pre = self._kv._pre
        key = msg.subject[len(pre):] if msg.subject.startswith(pre) else msg.subject
        op = operation_of(msg.headers)
        if self._ignore_deletes and op is not KeyValueOp.PUT:
            return None
        value = b"" if self._meta_only else msg.data
        return Entry(self._kv.bucket, key, value, meta.sequence.stream, meta.num_pending, meta.timestamp, op)
