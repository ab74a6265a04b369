"""Liftbridge subscriptions on JetStream: an ordered push consumer per partition, resubscribed on failure.

Each subscription reads one partition stream through an ephemeral push consumer with
ack policy none, flow control and idle heartbeats, delivered to a core subscription on a
fresh inbox (ADR-17's ordered-consumer pattern). The subscription tracks the consumer
sequence (gap detection) and the next stream sequence; on a gap, missed heartbeats, a
reconnect or a lost consumer it deletes the consumer and makes a new one from the next
stream sequence (the last offset + 1), with jittered waits of 10-500 ms, for up to
``resubscribe_wait_time`` seconds. Each message is delivered exactly once, in order.
A consumer-deleted advisory for its consumer (the stream or the consumer was deleted)
resubscribes at once, so a deleted stream ends the subscription promptly.

This module reads and hands out the messages (iterator or handler form) and closes the
subscription; :mod:`.consumer` makes, drops and remakes the consumer, and :mod:`.start`
turns the start options into a deliver policy.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..base.deadline import Deadline
from ..base.errors import (
    ConnectionClosedError,
    Error,
    StreamNotFoundError,
    SubscriptionClosedError,
    TimeoutError,
    worth_retrying,
)
from ..base.status import PushAction, classify, decide_push
from ..core.workers import SerialLane
from ..jetstream.consume.gaps import DELIVER, SKIP, GapTracker, Reset
from ..jetstream.consume.heartbeat import HeartbeatMonitor
from .codec import Message, message_from, public
from .consumer import RETRY_MAX, RETRY_MIN, RETRY_WAIT, PartitionConsumer
from .errors import NoSuchPartitionError, _Terminal
from .start import StartSpec, resolve_start

if TYPE_CHECKING:
    from ..core.msg import Msg
    from ..core.subscription import Subscription as CoreSubscription
    from ..jetstream.context import JetStream

__all__ = ["RETRY_MAX", "RETRY_MIN", "Handler", "StartSpec", "Subscription", "resolve_start"]

log = logging.getLogger("jssync")

_ids = itertools.count(1)

#: Messages handed to the handler lane before the reader waits for it to catch up.
HANDLER_HIGH_WATER = 1024

Handler = Callable[[Message | None, BaseException | None], Any]


class Subscription(PartitionConsumer):
    """A subscription to one partition of a Liftbridge stream.

    Made by :meth:`Client.subscribe`. Without a handler, iterate it (``for msg in sub``,
    ending when it is closed) or call :meth:`next`; with a handler, messages go to
    ``handler(msg, None)`` on the connection's worker pool, one at a time, in order, and
    a terminal error goes to ``handler(None, err)`` once. Close it with :meth:`close`
    (or a ``with`` block). Thread-safe; iterate from one thread at a time.

    Attributes:
        stream: the Liftbridge stream name.
        partition: the partition number.
        jetstream_stream: the JetStream stream read.
    """

    def __init__(self, js: JetStream, *, stream: str, partition: int, jetstream_stream: str, start: StartSpec,
                 handler: Handler | None, resubscribe_wait_time: float, idle_heartbeat: float,
                 on_close: Callable[[Subscription], None] | None = None) -> None:
        self._js = js
        self._conn = js.conn
        self.stream = stream
        self.partition = partition
        self.jetstream_stream = jetstream_stream
        self._start = start
        self._handler = handler
        self._resub_wait = resubscribe_wait_time
        self._hb = idle_heartbeat
        self._on_close = on_close
        self._id = next(_ids)
        self._lock = threading.Lock()  # the reader: one step at a time
        self._state_lock = threading.Lock()
        self._closed = False
        self._dropping = False
        self._error: BaseException | None = None
        self._sub: CoreSubscription | None = None
        self._consumer: str | None = None
        self._advisory: CoreSubscription | None = None
        #: the consumer sequence check and the next stream sequence (next_stream_seq 0: not known yet)
        self._tracker = GapTracker()
        self._last_offset: int | None = None
        #: 3 x the idle heartbeat without anything: resubscribe
        self._hb_mon = HeartbeatMonitor(3 * idle_heartbeat, time.monotonic())
        self._reconnected = False  # set on the I/O thread; the reader tells the gap tracker
        self._reset_reason: str | None = None  # set: the reader resubscribes
        self._fail_since: float | None = None
        self._attempt_at = 0.0
        self._last_error: BaseException | None = None
        self._resubscribes = 0
        self._thread: threading.Thread | None = None
        self._lane: SerialLane | None = None
        self._room = threading.Event()
        self._room.set()
        self._done = threading.Event()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<jssync.liftbridge.Subscription {self.stream!r} partition={self.partition} "
                f"last_offset={self._last_offset} {state}>")

    # -- starting ------------------------------------------------------------------------------

    def _begin(self, deadline: Deadline) -> None:
        """Create the first consumer (retrying transient failures until ``deadline``); start the handler."""
        self._watch_deletions()
        try:
            self._begin_consumer(deadline)
        except BaseException:
            self._unwatch_deletions()
            raise

    def _begin_consumer(self, deadline: Deadline) -> None:
        last: BaseException | None = None
        while True:
            try:
                self._create(deadline)
                break
            except StreamNotFoundError as exc:
                raise NoSuchPartitionError(
                    404, 10059, f"no such partition: stream {self.stream!r} partition {self.partition}"
                ) from exc
            except Error as exc:
                if not worth_retrying(exc, timeouts=True):
                    raise
                last = exc
            rem = deadline.remaining()
            if rem is not None and rem <= RETRY_MIN:
                raise TimeoutError(
                    f"could not subscribe to stream {self.stream!r} partition {self.partition} within "
                    f"{deadline.timeout}s: {last}"
                ) from last
            RETRY_WAIT.sleep(0, deadline)
        self._conn.internal.reconnect_listeners.append(self._on_reconnect)
        if self._handler is not None:
            self._lane = SerialLane(self._conn.internal.pool, self._run_handler)
            self._thread = threading.Thread(target=self._read_loop, name=f"jssync-lb-sub-{self._id}", daemon=True)
            self._thread.start()

    # -- reading -------------------------------------------------------------------------------

    def _step(self, deadline: Deadline) -> Message | None:
        """Return the next message; None when closed. Caller holds ``self._lock``.

        Raises:
            jssync.TimeoutError: ``deadline`` passed first.
            _Terminal: the subscription failed for good.
        """
        while True:
            if self._closed:
                return None
            if self._reconnected:  # one reset per reconnect
                self._reconnected = False
                act = self._tracker.reconnected()
                if type(act) is Reset:
                    self._reset_reason = f"the connection reconnected ({act.reason})"
            if self._reset_reason is not None or self._sub is None:
                self._resubscribe(deadline)
                continue
            sub = self._sub
            msg = None
            ended = False
            try:
                msg = sub.next_msg(timeout=deadline.slice())
            except TimeoutError:
                self._check_heartbeat()
            except SubscriptionClosedError:
                ended = True
            # raised outside the handlers: no internal exception as context
            if ended:
                if self._closed:
                    return None
                if self._conn.is_closed:
                    raise _Terminal(ConnectionClosedError("the connection closed"))
                self._reset_reason = "the inbox subscription ended"
                continue
            if msg is None:
                if deadline.expired():
                    raise TimeoutError(
                        f"no message on stream {self.stream!r} partition {self.partition} within "
                        f"{deadline.timeout}s"
                    )
                continue
            m = self._handle(msg, sub)
            if m is not None:
                return m

    def _check_heartbeat(self) -> None:
        """Nothing to read within a slice: resubscribe after 3 x the idle heartbeat of silence (once)."""
        if self._hb_mon.check(time.monotonic()):
            act = self._tracker.missed_heartbeat()
            if type(act) is Reset:
                self._reset_reason = f"no heartbeat within {3 * self._hb}s"

    def _handle(self, msg: Msg, sub: CoreSubscription) -> Message | None:
        self._hb_mon.seen(time.monotonic())
        tracker = self._tracker
        reply = msg.reply
        if reply.startswith("$JS.ACK."):
            parsed = _ack_numbers(reply)
            if parsed is None:
                meta = msg.metadata  # raises for a malformed ack subject
                parsed = (meta.sequence.stream, meta.sequence.consumer, meta.timestamp)
            sseq, cseq, ts = parsed
            step = tracker.message(sseq, cseq, tracker.generation)
            if step is not DELIVER:
                if step is SKIP:  # already delivered (cannot happen with one consumer; be safe)
                    self._fail_since = None
                elif type(step) is Reset:
                    self._reset_reason = step.reason
                return None
            self._fail_since = None
            self._last_offset = sseq - 1
            return message_from(msg.subject, msg.data, msg.headers, self.stream, self.partition, sseq, ts)
        h = msg.headers
        st = classify(h, msg.data, reply) if h is not None and "Status" in h else None
        if st is None:
            return None
        act = decide_push(st)
        if act is PushAction.FLOW_CONTROL:  # answer it now that we reached it
            self._fail_since = None
            self._conn.internal.publish_raw(st.flow_control, b"")
        elif act is PushAction.HEARTBEAT:
            self._fail_since = None
            if st.stalled:
                self._conn.internal.publish_raw(st.stalled, b"")
            hb = tracker.heartbeat(st.last_consumer, tracker.generation)
            if type(hb) is Reset:
                self._reset_reason = hb.reason
        else:
            gone = tracker.status_from(tracker.generation, f"status {st.code} {st.description}".strip())
            if type(gone) is Reset:
                self._reset_reason = gone.reason
        return None

    # -- iterator form -------------------------------------------------------------------------

    def next(self, timeout: float | None = 5.0) -> Message:
        """Return the next message, waiting up to ``timeout`` seconds (None: no limit).

        While the subscription resubscribes, the wait can run over ``timeout`` by the
        time one consumer creation takes (at most the client's timeout).

        Raises:
            jssync.TimeoutError: no message in time.
            jssync.SubscriptionClosedError: the subscription is closed.
            NoSuchPartitionError, jssync.TimeoutError, jssync.ConnectionClosedError ...:
                the error that ended the subscription (raised once; later calls raise
                SubscriptionClosedError).
            RuntimeError: the subscription has a handler.
        """
        if self._handler is not None:
            raise RuntimeError("next() cannot be used on a subscription with a handler")
        deadline = Deadline(timeout)
        while not self._lock.acquire(timeout=deadline.slice()):
            if self._closed:
                raise self._closed_error()
            deadline.check("waiting for the subscription")
        try:
            m = self._step(deadline)
        except _Terminal as t:
            self._lock.release()
            self._fail(t.exc)
            raise t.exc from t.exc.__cause__
        except BaseException:
            self._lock.release()
            raise
        self._lock.release()
        if m is None:
            raise self._closed_error()
        return m

    def _closed_error(self) -> SubscriptionClosedError:
        return SubscriptionClosedError(
            f"the subscription to stream {self.stream!r} partition {self.partition} is closed"
        )

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            return self.next(timeout=None)
        except SubscriptionClosedError:
            raise StopIteration from None

    # -- handler form --------------------------------------------------------------------------

    def _read_loop(self) -> None:
        lane = self._lane
        assert lane is not None
        err: BaseException | None = None
        while not self._closed:
            with self._lock:
                try:
                    m = self._step(Deadline(None))
                except _Terminal as t:
                    err = t.exc
                except BaseException as exc:  # noqa: BLE001 - anything else ends the subscription
                    err = exc
            if err is not None or m is None:
                break
            if len(lane) >= HANDLER_HIGH_WATER:
                self._room.clear()
                while len(lane) >= HANDLER_HIGH_WATER // 2 and not self._closed:
                    self._room.wait(0.1)
            lane.put(m)
        if err is not None:
            with self._state_lock:
                report = not self._closed
            if report:
                lane.put(err)  # after the messages already queued
            self._fail(err)

    def _run_handler(self, item: Any) -> None:
        assert self._handler is not None and self._lane is not None
        if isinstance(item, BaseException):
            self._handler(None, item)
        elif not self._dropping:
            self._handler(item, None)
        if not self._room.is_set() and len(self._lane) < HANDLER_HIGH_WATER // 2:
            self._room.set()

    # -- closing -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once closed (by :meth:`close`, the client, or an error)."""
        return self._closed

    @property
    def error(self) -> BaseException | None:
        """The error that ended the subscription, or None."""
        return self._error

    @property
    def last_offset(self) -> int | None:
        """The offset of the last message delivered, or None before the first."""
        return self._last_offset

    @property
    def resubscribes(self) -> int:
        """How many times the consumer was recreated after a failure."""
        return self._resubscribes

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the subscription and delete its consumer. Idempotent.

        Messages not yet handed out are dropped; a handler call in progress finishes.
        Blocks until the reader stopped (at most ``timeout``; None: no limit); never raises for a closed
        subscription.
        """
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            self._dropping = True
        self._shutdown(Deadline(timeout))

    def unsubscribe(self, timeout: float | None = 5.0) -> None:
        """Same as :meth:`close` (``timeout`` None: no limit)."""
        self.close(timeout)

    def _fail(self, exc: BaseException) -> None:
        """End the subscription with ``exc`` (kept as :attr:`error`)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            self._error = exc
        log.warning("jssync.liftbridge: subscription to %s partition %d ended: %s", self.stream, self.partition, exc)
        self._shutdown(Deadline(5.0))

    def _shutdown(self, deadline: Deadline) -> None:
        """Stop the reader and release the consumer (once)."""
        with self._state_lock:
            if self._done.is_set():
                return
            self._done.set()
        sub = self._sub
        if sub is not None:
            sub._end()  # wakes a reader waiting on it
        me = threading.current_thread()
        t = self._thread
        if t is not None and t is not me:
            while t.is_alive() and not deadline.expired():
                t.join(deadline.slice())
        got = False
        if t is not me:
            while not (got := self._lock.acquire(timeout=deadline.slice())):
                if deadline.expired():
                    break
        try:
            self._drop_current()
        finally:
            if got:
                self._lock.release()
        self._unwatch_deletions()
        try:
            self._conn.internal.reconnect_listeners.remove(self._on_reconnect)
        except ValueError:
            pass
        if self._lane is not None and self._dropping:
            self._lane.clear()
        self._room.set()
        if self._on_close is not None:
            self._on_close(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the subscription is closed (handler form); True if it is.

        Blocks up to ``timeout`` seconds (None: no limit), in 0.1 s slices.
        """
        deadline = Deadline(timeout)
        while not self._done.wait(deadline.slice()):
            if deadline.expired():
                return False
        return True

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


public(Subscription)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _ack_numbers(reply: str) -> tuple[int, int, _dt.datetime | None] | None:
    """(stream sequence, consumer sequence, timestamp) from a JetStream ack subject (v1 or v2).

    The lean per-message path; None when the subject does not have the expected shape
    (the caller then uses the full parser, which raises a clear error).
    """
    toks = reply.split(".")
    n = len(toks)
    if n == 9:
        s, c, t = toks[5], toks[6], toks[7]
    elif n >= 11:
        s, c, t = toks[7], toks[8], toks[9]
    else:
        return None
    if not (s.isdigit() and c.isdigit() and t.isdigit() and s.isascii() and c.isascii() and t.isascii()):
        return None
    secs, nanos = divmod(int(t), 1_000_000_000)
    try:
        ts: _dt.datetime | None = _EPOCH + _dt.timedelta(seconds=secs, microseconds=nanos // 1000)
    except OverflowError:  # a timestamp past year 9999: keep the message, drop the time
        ts = None
    return int(s), int(c), ts
