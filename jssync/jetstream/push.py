"""Push subscriptions following NATS ADR-15, "JetStream Subscribe Workflow".

:func:`subscribe` (used by :meth:`jssync.JetStream.subscribe`) finds the stream, looks
up or creates the consumer, runs the ADR-15 checks and returns a
:class:`JetStreamSubscription`. The subscription manages statuses on its own
("automatic status management"): flow control replies, idle heartbeat monitoring,
consumer sequence gap detection, error statuses, and, for ordered subscriptions,
recreating the consumer after a gap.

Status messages are sorted on the connection's I/O thread in
:meth:`JetStreamSubscription._deliver`, before anything reaches the user's queue, so that
a user message costs one string prefix test more than a core message.

Two rooms beside this one: :mod:`.push_checks` (the ADR-15 consumer-configuration checks,
pure) and :mod:`.push_resets` (the NATS subscriptions by generation and the ordered
subscription's consumer reset, a base class of :class:`JetStreamSubscription`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import DEFAULT, EXPIRED, Deadline, Default, resolve_timeout
from ..base.errors import (
    ConnectionClosedError,
    ConsumerConfigMismatchError,
    ConsumerExistsError,
    ConsumerIsPullBasedError,
    ConsumerNotFoundError,
    ConsumerSequenceMismatchError,
    DeliverGroupError,
    DuplicateSubscriptionError,
    Error,
    HeartbeatAlarmError,
    InvalidJSAckError,
    JetStreamError,
    MultipleStreamsMatchError,
    PushSubscribeError,
    QueueGroupOptionError,
    SlowConsumerError,
    StatusError,
    StreamNotFoundError,
    SubjectMismatchError,
    TimeoutError,
    ValidationError,
)
from ..base.status import PushAction, Status, classify, decide_push
from ..base.validate import MAX_I64, check_int
from ..core.hooks import HOOKS as _CORE
from ..core.msg import Msg
from ..core.subscription import _END, Subscription
from .consume.gaps import DELIVER, Gap, GapTracker, Reset
from .consume.heartbeat import HeartbeatMonitor
from .consume.runner import HeartbeatTimer
from .push_checks import _num, _user_config, _wire, check_consumer
from .push_resets import OrderedResets
from .push_watch import PushWatch

if TYPE_CHECKING:
    from ..core.connection import Connection
    from .context import JetStream

log = logging.getLogger("jssync")

__all__ = [
    "ConsumerConfigMismatchError",
    "ConsumerIsPullBasedError",
    "ConsumerSequenceMismatchError",
    "DeliverGroupError",
    "DuplicateSubscriptionError",
    "HeartbeatAlarmError",
    "InvalidJSAckError",
    "JetStreamSubscription",
    "MultipleStreamsMatchError",
    "PushSubscribeError",
    "QueueGroupOptionError",
    "StatusError",
    "SubjectMismatchError",
    "check_consumer",
    "subscribe",
]

#: Heartbeat alarm: this many idle heartbeat intervals without any message or status.
HEARTBEAT_ALARM_FACTOR = 3.0
#: Idle heartbeat of ordered subscriptions when none is given.
ORDERED_HEARTBEAT = 5.0

_ACK_PREFIX = "$JS.ACK."

_monotonic = time.monotonic


# -- the subscription ----------------------------------------------------------------------


class _FlowControl:
    """A flow control request on the user's queue: answered when the user reaches it."""

    __slots__ = ("reply",)

    def __init__(self, reply: str) -> None:
        self.reply = reply


class _Raise:
    """An error status on the user's queue: raised by next_msg / iteration when reached."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


#: On a callback lane after a drain: delete the consumer once every callback ran.
_DELETE = object()



class JetStreamSubscription(PushWatch, OrderedResets):
    """A push subscription to a JetStream consumer (ADR-15). Made by :meth:`JetStream.subscribe`.

    Read it like a core :class:`jssync.Subscription` (``for msg in sub``,
    :meth:`next_msg`) or give ``callback=``. Status messages never reach the
    application: flow control requests are answered when the application reaches them,
    heartbeats are watched (an alarm goes to the error callback after 3x the idle
    heartbeat without traffic), gaps in the consumer sequence are reported to the error
    callback (not for queue subscriptions), 404 and 408 are ignored, and 409, 503 and
    unknown statuses are reported to the error callback and raised by :meth:`next_msg`
    (iterator form). :meth:`unsubscribe` and :meth:`drain` delete the consumer only when
    this subscription created it. Thread-safe.

    With the explicit ack policy, every message held (buffered, or in the callback) and not
    yet acked, nak'ed or terminated gets a ``+WPI`` whenever half ``ack_wait`` passed, for at
    most 600 s (the pull consume's lease manager, see :mod:`.push_watch`). With an idle
    heartbeat, a consumer or stream deleted ends the subscription after 1.5x the idle
    heartbeat of silence: :class:`jssync.ConsumerNotFoundError` /
    :class:`jssync.StreamNotFoundError`, raised by :meth:`next_msg` once the buffer was read,
    reported to the error callback.

    Attributes:
        stream_name: the stream.
        consumer_name: the consumer (for ephemerals, the name the server gave it).
        created_consumer: True when this subscription created the consumer (and deletes
            it on unsubscribe/drain).
        ordered: True for an ordered subscription.
        idle_heartbeat: the consumer's idle heartbeat in seconds, or None.
        heartbeat_alarm: seconds without traffic before the alarm, or None.
        alarms: how many heartbeat alarms were raised.
        resets: how many times an ordered subscription recreated its consumer.
        error: why the subscription ended by itself (its consumer or stream is gone), or None.
    """

    def __init__(
        self,
        js: JetStream,
        conn: Connection,
        deliver_subject: str,
        queue: str | None,
        callback: Callable[[Msg], Any] | None,
        pending_msgs_limit: int,
        *,
        stream: str,
        manual_ack: bool,
        ordered: bool,
        error_cb: Callable[[Exception], Any] | None,
    ) -> None:
        super().__init__(conn, deliver_subject, queue, callback, pending_msgs_limit)
        self._js = js
        self._init_watch()  # leases, the deleted-consumer check (push_watch.py)
        self.stream_name = stream
        self.consumer_name: str | None = None
        self.created_consumer = False
        self.ordered = ordered
        self.idle_heartbeat: float | None = None
        self.heartbeat_alarm: float | None = None
        self._auto_ack = callback is not None and not manual_ack
        self._error_cb = error_cb
        # the hand-over (jssync/base/ledger.py): the queue read without a signal check before
        # the store, and the front of the buffer (messages given back by an interrupted read)
        self._nowait = iter(self._q.get_nowait, None)
        self._front: list[Any] = []
        # I/O thread state: the generation of the NATS subscription in use and, unless this is a
        # queue subscription, the consumer sequence check (ordered: a gap resets; else: reported)
        self._ack_none = False
        self._gaps = queue is None
        self._tracker = GapTracker(recover=ordered, last_consumer_seq=None)
        # flow control
        self._fc_lock = threading.Lock()
        self._fc_last: str | None = None
        self._fc_replies = 0
        # heartbeat alarm: one timer on the I/O thread (made once the idle heartbeat is known)
        self._hb_timer: HeartbeatTimer | None = None
        self._hb_mon: HeartbeatMonitor | None = None  # the timer's monitor (told of each message)
        self.alarms = 0
        # ordered resets
        self._reset_lock = threading.Lock()
        self._reset_wanted = False
        self._draining = False
        self._delete_at_end = False  # iterator-form drain: delete the consumer when the reader is done
        self._ack_fence = ""  # the ack subject of the last JetStream message received
        # until subscribe() returns, resets wait (it acts as the running reset job)
        self._reset_running = True
        self._reset_idle = threading.Event()
        self._ordered_cfg: api.ConsumerConfig | None = None
        self._timeout: float | None = js.timeout  # the timeout subscribe() got (None: no limit)
        self.resets = 0

    def __repr__(self) -> str:
        q = f" queue={self.queue!r}" if self.queue else ""
        return (f"<jssync.JetStreamSubscription stream={self.stream_name!r} consumer={self.consumer_name!r}"
                f"{q} closed={self._closed}>")

    @property
    def deliver_subject(self) -> str:
        """The subject the consumer delivers to (changes when an ordered subscription resets)."""
        return self.subject

    @property
    def flow_control_replies(self) -> int:
        """How many flow control requests (or stalled heartbeats) this subscription answered."""
        return self._fc_replies

    def consumer_info(self, *, timeout: float | None | Default = DEFAULT) -> api.ConsumerInfo:
        """Fetch the consumer's info from the server.

        Blocks up to ``timeout`` (default: the JetStream context's timeout).

        Raises:
            jssync.ConsumerNotFoundError: the consumer is gone.
        """
        if self.consumer_name is None:
            raise ConsumerNotFoundError(404, 10014, "the subscription has no consumer yet")
        return self._js._consumer_info(self.stream_name, self.consumer_name, timeout)

    # -- I/O thread side ---------------------------------------------------------------------

    def _report(self, exc: Exception) -> None:
        """Hand ``exc`` to the subscription's error_cb, else the connection's (any thread)."""
        cb = self._error_cb
        if cb is None:
            self._conn.internal.report_error(exc)
            return
        log.warning("%s: %s", type(exc).__name__, exc)
        pool = self._conn.internal.pool
        if not pool._closed:
            pool.submit(self._conn.internal.call_user_cb, cb, exc)

    def _deliver(self, msg: Msg) -> None:
        mon = self._hb_mon
        if mon is not None:
            now = _monotonic()
            mon.seen(now)
            check = self._check_mon
            if check is not None:
                check.seen(now)
        if msg.reply.startswith(_ACK_PREFIX):
            self._ack_fence = msg.reply
            if self._ack_none:
                msg._ack_none = True
            if not self._gaps:
                self._accept(msg)
                if self._lease_wait is not None:
                    self._hold(msg)
                return
            try:
                seq = msg.metadata.sequence
            except Error as exc:
                self._report(InvalidJSAckError(str(exc)))
                self._accept(msg)
                return
            lane = self._lane
            tracker = self._tracker
            if (len(lane) if lane is not None else self._q.qsize()) >= self._limit:
                # dropped (reported as a slow consumer); the gap shows with the next message. Only
                # this thread adds to the queue, so a message that fits here is accepted below.
                self._act(tracker.dropped(tracker.generation))
                self._drop()
            act = tracker.message(seq.stream, seq.consumer, tracker.generation)
            if act is not DELIVER and not self._act(act):
                return  # a reset (or passed over): the new consumer sends it again
            Subscription._deliver(self, msg)
            if self._lease_wait is not None:
                self._hold(msg)
            return
        hdrs = msg.headers
        if hdrs is not None and not msg.data and "Status" in hdrs:
            st = classify(hdrs, msg.data, msg.reply)
            if st is not None:
                self._on_status(st)
                return
        self._accept(msg)  # not a JetStream message: passed on as it is

    def _accept(self, msg: Msg) -> None:
        lane = self._lane
        if (len(lane) if lane is not None else self._q.qsize()) >= self._limit:
            self._drop()
        Subscription._deliver(self, msg)

    def _drop(self) -> None:
        """Drop a message: the pending limit is reached (as the core subscription does)."""
        self._dropped += 1
        if not self._slow_reported:
            self._slow_reported = True
            self._report(SlowConsumerError(self.subject, self._dropped))
        raise asyncio.QueueFull  # nats-py reports it to its error callback, which ignores it

    def _on_status(self, st: Status) -> None:
        act = decide_push(st)
        if act is PushAction.FLOW_CONTROL:  # answered when the application gets to it
            item = _FlowControl(st.flow_control)
            if self._lane is not None:
                self._lane.put(item)
            else:
                self._q.put(item)
            return
        if act is PushAction.HEARTBEAT:
            if st.stalled:
                self._respond_fc(st.stalled)
            if self._gaps:
                tracker = self._tracker
                self._act(tracker.heartbeat(st.last_consumer, tracker.generation))
            return
        if act is PushAction.END:
            return
        exc = StatusError(st.code, st.description, self.subject)
        if act is PushAction.CONSUMER_DELETED:
            self._act(self._tracker.status_from(self._tracker.generation, "consumer deleted"))
        self._report(exc)
        if self._lane is None:
            self._q.put(_Raise(exc))

    def _act(self, act: object) -> bool:
        """Carry out what the gap tracker answered (I/O thread); True: deliver the message.

        A :class:`Reset` recreates the ordered consumer; a :class:`Gap` (not ordered) is
        reported once and the message delivered.
        """
        if type(act) is Reset:
            self._request_reset(act.reason)
            return False
        if type(act) is Gap:
            self._report(ConsumerSequenceMismatchError(self.subject, act.stream_seq, act.consumer_seq,
                                                       act.last_consumer_seq))
            return True
        return act is DELIVER

    def _respond_fc(self, subject: str) -> None:
        """Answer a flow control subject, once per subject (any thread)."""
        with self._fc_lock:
            if subject == self._fc_last:
                return
            self._fc_last = subject
            self._fc_replies += 1
        self._conn.internal.publish_raw(subject, b"")

    # -- heartbeat alarm (one timer on the I/O thread, see consume/runner.py) -------------

    def _start_alarm(self) -> None:
        alarm = self.heartbeat_alarm
        if alarm is not None and not self._closed:
            timer = HeartbeatTimer(self._conn.internal.loop, alarm, self._on_alarm)
            self._hb_timer = timer
            self._hb_mon = timer.monitor
            timer.start()

    def _on_alarm(self) -> None:
        """I/O thread: the heartbeat monitor reported a silent ``heartbeat_alarm`` period (once per period)."""
        if self._closed:
            return
        self.alarms += 1
        self._report(HeartbeatAlarmError(self.subject, self.idle_heartbeat or 0.0, self.heartbeat_alarm or 0.0))
        self._act(self._tracker.missed_heartbeat())

    def _stop_alarm(self) -> None:
        timer = self._hb_timer
        if timer is not None:
            timer.stop()
        self._stop_check()

    def _on_reconnect(self) -> None:
        # I/O thread: an ordered consumer (memory storage, R1) may not have survived
        self._act(self._tracker.reconnected())

    # -- user side -------------------------------------------------------------------------

    def _run_callback(self, item: Any) -> None:
        if type(item) is _FlowControl:
            self._respond_fc(item.reply)
            return
        if item is _DELETE:
            self._delete_after_drain()
            return
        assert self._callback is not None
        try:
            tracer = _CORE.tracer  # jssync.otel: a process span around the callback (None: off)
            if tracer is None:
                self._callback(item)
            else:
                tracer.process(self._callback, item, self._conn, self.queue)
        except Exception as exc:  # noqa: BLE001 - the callback's failure goes to the error callback
            log.debug("callback of JetStream subscription %s raised", self.subject, exc_info=True)
            self._report(exc)
            self._release(item)
            return  # not acked: the server redelivers it after ack_wait
        if self._auto_ack:
            try:
                item.ack()
            except ConnectionClosedError:
                pass  # closed while the callback ran: the server redelivers it after ack_wait

    def next_msg(self, timeout: float | None = 1.0) -> Msg:
        """Return the next message, blocking up to ``timeout`` seconds (None: no limit).

        A flow control request met on the way is answered, and the wait goes on for the
        next message within the same ``timeout``. An exception (Ctrl-C) landing while the
        message is handed over puts it back at the front: the next call returns it.

        Raises:
            jssync.TimeoutError: no message in time.
            jssync.SubscriptionClosedError: the subscription ended and no message is left.
            StatusError: the server sent an error status (409, 503, unknown) at this point.
            RuntimeError: the subscription has a callback.
        """
        if self._lane is not None:
            raise RuntimeError("next_msg() cannot be used on a subscription with a callback")
        q = self._q
        deadline = Deadline(timeout)
        front = self._front
        while True:
            item: Any = None
            try:  # the hand-over: an exception from the take to the return gives the message back
                if front:  # given back by an interrupted read: it comes first
                    item = front[-1]
                    del front[-1]
                else:
                    try:
                        for item in self._nowait:  # noqa: B007 - FOR_ITER: no signal check before the store
                            break
                    except Empty:
                        pass
                    if item is None:
                        # waits outside ``except Empty``: an error raised here has no queue.Empty as context
                        self._conn.internal.loop.check_fork()
                        item = deadline.get(q, front)
                        if item is EXPIRED:
                            item = None
                            raise TimeoutError(
                                f"no message on JetStream subscription {self.subject!r} within {timeout}s")
                if isinstance(item, Msg):
                    return item
            except BaseException:
                if isinstance(item, Msg):
                    front.append(item)
                raise
            if item is _END:
                q.put(_END)
                if self._delete_at_end:
                    self._delete_after_drain()
                raise self._ended_error()
            t = type(item)
            if t is _FlowControl:
                self._respond_fc(item.reply)
                continue
            if t is _Raise:
                raise item.exc
            return item  # type: ignore[no-any-return]

    def _end(self, error: Error | None = None) -> None:
        with self._reset_lock:
            super()._end(error)
        self._stop_alarm()
        listeners = self._conn.internal.reconnect_listeners
        if self._on_reconnect in listeners:
            try:
                listeners.remove(self._on_reconnect)
            except ValueError:
                pass

    def _ended_error(self) -> Error:
        """What reading past the end raises: why the subscription ended by itself (its consumer
        or stream is gone), else the connection's close error or SubscriptionClosedError."""
        gone = self._gone_error()
        return gone if gone is not None else super()._ended_error()

    def _delete_after_drain(self, deadline: Deadline | None = None) -> None:
        """The drained subscription was read to the end: write the acks, then delete the consumer.

        Runs on the thread that reached the end (the reader, or the callback lane after the
        last callback), so every ack the application sent before is queued already; they
        are flushed and fenced (see below) before the delete request. A failure goes to
        the error callback. ``deadline``: the drain's, when it deletes (default: the
        context's timeout).
        """
        self._delete_at_end = False
        if not self.created_consumer:
            return
        if deadline is None:
            deadline = Deadline(self._js.timeout)
        try:
            conn = self._conn
            if not conn.internal.closed and not conn.internal.closing:
                rem = deadline.remaining()
                conn.flush(timeout=self._js.timeout if rem is None else max(rem, 0.001))
                if self._ack_fence and not self._ack_none:
                    # The server applies acks in order, after the PONG: a +WPI (harmless: it
                    # only restarts one ack timer) answered by the consumer means every ack
                    # before it was applied, so deleting the consumer loses none of them.
                    try:
                        rem = deadline.remaining()
                        fence_t = 2.0 if rem is None else max(min(2.0, rem), 0.001)
                        conn.request(self._ack_fence, b"+WPI", timeout=fence_t)
                    except Error:
                        log.debug("no reply to the ack fence before deleting %s", self.consumer_name)
            self._delete_consumer(deadline)
        except Error as exc:
            self._report(exc)

    def _delete_consumer(self, deadline: Deadline) -> None:
        name = self.consumer_name
        if not self.created_consumer or name is None:
            return
        if self._conn.internal.closed or self._conn.internal.closing:
            log.debug("connection closed: consumer %s/%s is not deleted", self.stream_name, name)
            return
        self.created_consumer = False
        try:
            self._js.delete_consumer(self.stream_name, name, timeout=deadline.remaining())
        except ConsumerNotFoundError:
            if not self.ordered:
                raise
            # an ordered subscription's consumer is its own business: gone is fine

    def unsubscribe(self, timeout: float | None = 5.0) -> None:
        """Remove interest, then delete the consumer if this subscription created it. Idempotent.

        After :meth:`drain` (iterator form) with messages still buffered, it deletes the
        consumer at once instead of when the reader reaches the end.

        Messages already received stay readable, then iteration ends. Blocks until the
        UNSUB was handed over and the consumer deleted, at most ``timeout`` seconds (None:
        no limit).

        Raises:
            jssync.APIError (e.g. jssync.ConsumerNotFoundError): deleting the consumer failed.
            jssync.TimeoutError.
        """
        if self._closed:
            if self._delete_at_end:  # drained, not read to the end: give up the rest now
                self._delete_at_end = False
                self._delete_consumer(Deadline(timeout))
            return
        deadline = Deadline(timeout)
        self._end()
        self._wait_reset_idle(deadline)
        self._conn.internal.unsubscribe(self, drain=False, timeout=deadline)
        self._delete_consumer(deadline)

    def drain(self, timeout: float | None = 30.0) -> None:
        """Stop receiving, hand over what arrived already, then delete the consumer if this
        subscription created it.

        The UNSUB goes out and the server confirms it (PING/PONG) before the subscription is
        removed, so every message sent before it is handed over. The consumer is deleted
        only once the buffered messages were taken and their acks written: callback form,
        after the last callback returned (and its auto-ack); iterator form, when the reader
        reaches the end of the buffer (``next_msg`` raising SubscriptionClosedError, the
        ``for`` loop ending), or at once when nothing is buffered. Before deleting, the acks
        sent so far are flushed to the server. A failure to delete goes to the error
        callback (it is not raised).

        Blocks until every buffered message went through the callback (callback form) or
        until the server confirmed the unsubscribe (iterator form, where the rest stays
        readable), at most ``timeout`` (None: no limit).

        Raises:
            jssync.TimeoutError: the drain did not finish in time (the consumer is deleted
                once the callbacks are done).
        """
        if self._closed:
            return
        deadline = Deadline(timeout)
        self._stop_alarm()
        if self.ordered:  # no resets from here on
            with self._reset_lock:
                self._draining = True
                self._reset_wanted = False
            self._wait_reset_idle(deadline)
        try:
            self._conn.internal.unsubscribe(self, drain=True, timeout=deadline)
        except BaseException:
            self._unsubscribe_soon()  # the UNSUB still goes out (Ctrl-C, timeout)
            raise
        lane = self._lane
        if lane is not None and self.created_consumer:
            lane.put(_DELETE)
        elif self.created_consumer:
            self._delete_at_end = True
        self._end()
        if lane is not None:
            # from this subscription's own callback: the rest (and the delete) follow its return
            while not lane.in_handler() and not lane.idle.wait(deadline.slice()):
                deadline.check("JetStream subscription drain")
            return
        if self._delete_at_end and self.pending_msgs == 0:
            self._delete_after_drain(deadline)  # nothing buffered: nobody has to read to the end


# -- subscribe ------------------------------------------------------------------------------


def _find_stream(js: JetStream, subject: str, timeout: float | None) -> str:
    try:
        return js.find_stream_name_by_subject(subject, timeout=timeout)
    except StreamNotFoundError:
        raise
    except JetStreamError as exc:
        if type(exc) is not JetStreamError:
            raise
        many = str(exc)  # more than one stream
    raise MultipleStreamsMatchError(subject, f"{many}: pass stream= to choose one")


def _consumer_info_raw(js: JetStream, stream: str, name: str, timeout: float | None) -> dict[str, Any] | None:
    try:
        return js._api(f"CONSUMER.INFO.{stream}.{name}", None, timeout)
    except ConsumerNotFoundError:
        return None


def subscribe(
    js: JetStream,
    subject: str,
    *,
    durable: str | None = None,
    queue: str | None = None,
    stream: str | None = None,
    consumer: str | None = None,
    callback: Callable[[Msg], Any] | None = None,
    manual_ack: bool = False,
    ordered: bool = False,
    idle_heartbeat: float | None = None,
    flow_control: bool = False,
    config: api.ConsumerConfig | None = None,
    **options: Any,
) -> JetStreamSubscription:
    """Subscribe to a push consumer following ADR-15 (see :meth:`jssync.JetStream.subscribe`).

    Args:
        subject: the subject; it finds the stream when ``stream`` is not given, and it is
            the filter subject of a consumer this call creates. May be empty (``""``) only
            with ``stream``.
        durable: a durable consumer name: used when it exists, created when it does not.
        queue: a queue group; the consumer gets it as its deliver group. Without a
            consumer name, the queue name is the durable name, so that every member
            shares one consumer.
        stream: the stream; found from ``subject`` (``STREAM.NAMES``) when not given.
        consumer: bind to this existing consumer (an error when it does not exist).
        callback: run for each message on the worker pool; the message is acked after
            it returns unless ``manual_ack`` (or the consumer's ack policy is none).
        manual_ack: do not ack after the callback.
        ordered: an ordered subscription: an ephemeral consumer (ack none, flow control,
            heartbeats, memory storage, R1) recreated from the last stream sequence + 1
            on a gap, a missed heartbeat alarm or a reconnect.
        idle_heartbeat: seconds between the server's idle heartbeats (consumers this call
            creates; for an existing consumer it must match).
        flow_control: enable flow control (needs ``idle_heartbeat``).
        config: a :class:`ConsumerConfig` with the fields to set.
        **options: more :class:`ConsumerConfig` fields (``deliver_policy="new"``,
            ``ack_wait=30``, ``max_ack_pending=1000``, ``replay_policy="original"``,
            ...) and these subscription options: ``pending_msgs_limit`` (default 65536),
            ``heartbeat_alarm`` (seconds without traffic before the alarm; default 3x
            the idle heartbeat), ``error_cb`` (errors of this subscription; default: the
            connection's), ``timeout`` (for each API call; default: the context's).

    Blocks for the lookups and the consumer creation (each at most ``timeout``).

    Returns:
        The subscription.

    Raises:
        ValueError, TypeError, jssync.BadSubjectError: bad arguments (nothing is sent).
        QueueGroupOptionError: flow control or heartbeats with a queue group.
        jssync.StreamNotFoundError: no stream captures ``subject``.
        MultipleStreamsMatchError: more than one does.
        jssync.ConsumerNotFoundError: ``consumer`` does not exist.
        SubjectMismatchError, ConsumerIsPullBasedError, DuplicateSubscriptionError,
        DeliverGroupError, ConsumerConfigMismatchError: an ADR-15 check of an existing
            consumer failed.
        jssync.APIError: the consumer could not be created.
        jssync.TimeoutError.
    """
    from ..base.errors import BadSubjectError
    from ..base.validate import _SUBJECT_BAD, validate_subject
    from .params import validate_name

    conn = js.conn
    pending_msgs_limit = options.pop("pending_msgs_limit", 65536)
    heartbeat_alarm = options.pop("heartbeat_alarm", None)
    error_cb = options.pop("error_cb", None)
    timeout = options.pop("timeout", DEFAULT)

    # -- checks that need no server ---------------------------------------------------------
    if subject:
        validate_subject(subject)
    elif stream is None:
        raise BadSubjectError("a subject is required when no stream is given (it is how the stream is found)")
    else:
        subject = ""
    if stream is not None:
        validate_name(stream)
    if durable is not None:
        validate_name(durable, "durable name")
    if consumer is not None:
        validate_name(consumer, "consumer name")
    if durable is not None and consumer is not None and durable != consumer:
        raise ValidationError(f"durable={durable!r} and consumer={consumer!r} differ: give one")
    if queue is not None and (not isinstance(queue, str) or not queue or _SUBJECT_BAD.search(queue)):
        raise BadSubjectError(f"invalid queue group name: {queue!r}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {callback!r}")
    if error_cb is not None and not callable(error_cb):
        raise TypeError(f"error_cb must be callable, got {error_cb!r}")
    check_int(pending_msgs_limit, "pending_msgs_limit", maximum=MAX_I64, open_ended=True)
    if not isinstance(timeout, Default) and timeout is not None:
        _num(timeout, "timeout")
    timeout = resolve_timeout(timeout, js.timeout)  # left out: the context's; None: no limit
    user, given = _user_config(config, options, idle_heartbeat, flow_control)
    if user.deliver_group is not None and user.deliver_group != queue:
        raise ValidationError(f"config.deliver_group={user.deliver_group!r} must be given as queue=")
    if subject and user.filter_subject and user.filter_subject != subject:
        raise SubjectMismatchError(
            f"subject {subject!r} differs from config.filter_subject {user.filter_subject!r}",
            subject, user.filter_subject)
    if subject and user.filter_subjects:
        raise ValidationError("filter_subjects cannot be combined with a subject: subscribe with one subject")
    name = consumer or durable or user.durable_name or user.name
    if ordered:
        bad = [k for k, v in (("durable", durable), ("consumer", consumer), ("queue", queue),
                              ("durable_name", user.durable_name), ("name", user.name),
                              ("deliver_subject", user.deliver_subject)) if v is not None]
        if bad:
            raise ValidationError(f"an ordered subscription cannot have {', '.join(bad)}")
        if "ack_policy" in given and _wire(user.ack_policy) != "none":
            raise ValidationError(f"an ordered subscription has ack policy none, not {user.ack_policy!r}")
        if "max_deliver" in given and user.max_deliver != 1:
            raise ValidationError(f"an ordered subscription has max_deliver 1, not {user.max_deliver!r}")
    if queue is not None:
        if user.flow_control:
            raise QueueGroupOptionError("flow control is not supported with a queue group")
        if user.idle_heartbeat:
            raise QueueGroupOptionError("idle heartbeats are not supported with a queue group")
        if name is None:
            name = validate_name(queue, "durable name (the queue name is used as one)")
    if name is not None and user.durable_name is None and user.name is None:
        user.durable_name = name
    if name is not None:
        validate_name(name, "consumer name")
    if heartbeat_alarm is not None:
        heartbeat_alarm = _num(heartbeat_alarm, "heartbeat_alarm")

    # -- the stream, then the consumer (each API call gets ``timeout``) ----------------------
    if stream is None:
        stream = _find_stream(js, subject, timeout)
    sub = JetStreamSubscription(js, conn, "", queue, callback, pending_msgs_limit, stream=stream,
                                manual_ack=manual_ack, ordered=ordered, error_cb=error_cb)
    sub._timeout = timeout
    info: dict[str, Any] | None = None
    if name is not None and not ordered:
        info = _consumer_info_raw(js, stream, name, timeout)
        if info is None and consumer is not None:
            raise ConsumerNotFoundError(404, 10014, f"consumer {consumer!r} not found on stream {stream!r}")
    try:
        if info is not None:
            _bind(sub, info, subject, queue, user, given)
        else:
            _create(sub, js, stream, name, subject, queue, user, given, ordered, timeout)
    except BaseException:
        sub._end()
        with conn.internal.subs_lock:
            conn.internal.subs.discard(sub)
        try:
            sub._unsubscribe_nats(sub._nsub, Deadline(2.0))
        except Exception:  # noqa: BLE001 - the original error matters
            log.debug("could not remove the NATS subscription after a failed subscribe", exc_info=True)
        raise
    hb = sub.idle_heartbeat
    if hb:
        sub.heartbeat_alarm = heartbeat_alarm or HEARTBEAT_ALARM_FACTOR * hb
        sub._start_alarm()
        sub._start_check()
    sub._start_leases()
    if ordered:
        conn.internal.reconnect_listeners.append(sub._on_reconnect)
    sub._ready()
    return sub


def _register(sub: JetStreamSubscription) -> None:
    conn = sub._conn
    with conn.internal.subs_lock:
        conn.internal.subs.add(sub)


def _apply_consumer(sub: JetStreamSubscription, cfg: dict[str, Any]) -> None:
    """Take what the subscription needs from the consumer's (wire) configuration."""
    policy = _wire(cfg.get("ack_policy"))
    sub._ack_none = policy == "none"
    wait = cfg.get("ack_wait")
    sub._use_leases(policy == "explicit", wait / 1e9 if wait else None)
    hb = cfg.get("idle_heartbeat")
    sub.idle_heartbeat = hb / 1e9 if hb else None


def _bind(sub: JetStreamSubscription, info: dict[str, Any], subject: str, queue: str | None,
          user: api.ConsumerConfig, given: set[str]) -> None:
    """Use an existing consumer: the checks, then a NATS subscription on its deliver subject."""
    check_consumer(info, subject=subject, queue=queue, pull=False, config=user, compare=given)
    cfg = info.get("config") or {}
    _apply_consumer(sub, cfg)
    sub.consumer_name = str(info.get("name") or cfg.get("durable_name"))
    sub._subscribe(cfg["deliver_subject"], queue, sub._sub_deadline(), fresh=False)
    _register(sub)


def _create(sub: JetStreamSubscription, js: JetStream, stream: str, name: str | None, subject: str,
            queue: str | None, user: api.ConsumerConfig, given: set[str], ordered: bool,
            timeout: float | None) -> None:
    """Create the consumer: the NATS subscription first, then the consumer (ADR-15 order)."""
    conn = js.conn
    cfg = user.evolve()
    if subject:
        cfg.filter_subject = subject
    if queue is not None:
        cfg.deliver_group = queue
    if ordered:
        cfg.ack_policy = api.AckPolicy.NONE
        cfg.max_deliver = 1
        cfg.flow_control = True
        cfg.idle_heartbeat = cfg.idle_heartbeat or ORDERED_HEARTBEAT
        cfg.mem_storage = True
        cfg.num_replicas = 1
        sub._ordered_cfg = cfg.evolve()
    elif cfg.ack_policy is None:
        cfg.ack_policy = api.AckPolicy.EXPLICIT
    deliver = cfg.deliver_subject or conn.new_inbox()
    cfg.deliver_subject = deliver
    _apply_consumer(sub, cfg.as_dict())
    sub._subscribe(deliver, queue, sub._sub_deadline(), fresh=True)
    _register(sub)
    try:
        created = js._upsert_consumer(stream, cfg, "create", timeout)
    except ConsumerExistsError:
        if name is None:
            raise
        _lost_race(sub, js, stream, name, subject, queue, user, given, timeout)
        return
    sub.consumer_name = created.name  # for an ephemeral, the name the server gave it
    sub.created_consumer = True
    ack_wait = created.cached_info.config.ack_wait
    if sub._lease_wait is not None and ack_wait:
        sub._lease_wait = float(ack_wait)  # the server's (its default when not given)


def _lost_race(sub: JetStreamSubscription, js: JetStream, stream: str, name: str, subject: str,
               queue: str | None, user: api.ConsumerConfig, given: set[str], timeout: float | None) -> None:
    """The consumer was created by someone else since our lookup: look it up again, run the
    checks, and move the NATS subscription to its deliver subject (ADR-15)."""
    info = _consumer_info_raw(js, stream, name, timeout)
    if info is None:
        raise ConsumerNotFoundError(404, 10014, f"consumer {name!r} on stream {stream!r} was created and "
                                    "deleted while subscribing")
    check_consumer(info, subject=subject, queue=queue, pull=False, config=user, compare=given)
    if queue is None:
        raise DuplicateSubscriptionError(
            f"consumer {name!r} on stream {stream!r} was created by another subscriber at the same time")
    cfg = info.get("config") or {}
    old = sub._nsub
    sub._nsub = None
    sub._unsubscribe_nats(old, sub._sub_deadline())
    _apply_consumer(sub, cfg)
    sub.consumer_name = name
    sub._subscribe(cfg["deliver_subject"], queue, sub._sub_deadline(), fresh=False)
