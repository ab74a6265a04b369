"""The consumer behind a Liftbridge subscription: made, watched, dropped and made again.

A subscription reads one partition stream through an ephemeral push consumer with ack
policy none, flow control and idle heartbeats, delivered to a core subscription on a fresh
inbox (ADR-17's ordered-consumer pattern). :class:`PartitionConsumer` is the part of
:class:`jssync.liftbridge.Subscription` that creates that consumer (from the start position,
or from the next stream sequence after a failure), listens for its deletion advisory,
notices reconnects, and deletes and recreates it with jittered waits of 10-500 ms for up
to ``resubscribe_wait_time`` seconds. The reading and the handing out stay in
:mod:`.sub`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.backoff import Backoff, sleep_for
from ..base.deadline import Deadline
from ..base.errors import (
    APIError,
    ConnectionClosedError,
    Error,
    PermissionDeniedError,
    StreamNotFoundError,
    TimeoutError,
    worth_retrying,
)
from ..jetstream.consume.gaps import GapTracker
from ..jetstream.consume.heartbeat import HeartbeatMonitor
from .errors import NoSuchPartitionError, _Terminal
from .start import StartSpec

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg
    from ..core.subscription import Subscription as CoreSubscription
    from ..jetstream.context import JetStream

log = logging.getLogger("jssync")

#: Jittered wait between resubscribe attempts (the guide: 10 to 500 ms).
RETRY_MIN = 0.01
RETRY_MAX = 0.5
#: that wait: uniform between RETRY_MIN and RETRY_MAX, the same after every failure
RETRY_WAIT = Backoff(RETRY_MAX, RETRY_MAX, factor=1.0, jitter=1 - RETRY_MIN / RETRY_MAX)


class PartitionConsumer:
    """The consumer side of :class:`jssync.liftbridge.Subscription` (a mixin: the state is the subscription's).

    ``_create`` makes the consumer, ``_resubscribe`` makes it again after a failure,
    ``_drop_current`` lets it go; the deletion advisory and reconnects only flag the reader.
    """

    # set by Subscription.__init__
    _js: JetStream
    _conn: Connection
    stream: str
    partition: int
    jetstream_stream: str
    _start: StartSpec
    _hb: float
    _resub_wait: float
    _state_lock: threading.Lock
    _closed: bool
    _sub: CoreSubscription | None
    _consumer: str | None
    _advisory: CoreSubscription | None
    _tracker: GapTracker
    _hb_mon: HeartbeatMonitor
    _reconnected: bool
    _reset_reason: str | None
    _fail_since: float | None
    _attempt_at: float
    _last_error: BaseException | None
    _resubscribes: int

    def _create(self, deadline: Deadline) -> None:
        """Subscribe a fresh inbox and create an ephemeral ordered push consumer delivering to it."""
        conn = self._conn
        inbox = conn.new_inbox()
        sub = conn.subscribe(inbox)
        try:
            params: dict[str, Any] = dict(
                deliver_subject=inbox, ack_policy=api.AckPolicy.NONE, flow_control=True,
                idle_heartbeat=self._hb, mem_storage=True, num_replicas=1,
                inactive_threshold=max(5.0, 3 * self._hb), replay_policy=api.ReplayPolicy.INSTANT,
            )
            start = self._tracker.next_stream_seq
            if start > 0:
                params["deliver_policy"] = api.DeliverPolicy.BY_START_SEQUENCE
                params["opt_start_seq"] = start
            else:
                params["deliver_policy"] = self._start.policy
                if self._start.opt_start_seq is not None:
                    params["opt_start_seq"] = self._start.opt_start_seq
                if self._start.opt_start_time is not None:
                    params["opt_start_time"] = self._start.opt_start_time
            rem = deadline.remaining()
            cons = self._js.create_consumer(self.jetstream_stream, timeout=None if rem is None else max(rem, 0.05),
                                            **params)
        except BaseException:
            sub.unsubscribe()
            raise
        with self._state_lock:
            closed = self._closed
            if not closed:
                self._sub = sub
                self._consumer = cons.name
        if closed:
            sub.unsubscribe()
            self._delete_consumer(cons.name)
            return
        tracker = self._tracker
        tracker.last_consumer_seq = 0  # a new consumer starts at consumer sequence 1
        if tracker.next_stream_seq == 0:
            delivered = cons.cached_info.delivered
            tracker.next_stream_seq = (delivered.stream_seq if delivered is not None else 0) + 1
        self._hb_mon.resumed(time.monotonic())

    def _watch_deletions(self) -> None:
        """Listen for the server's consumer-deleted advisories on the partition stream.

        A push consumer's deliver subject gets nothing when its consumer or stream is
        deleted (nats-server 2.15: the heartbeats just stop); the advisory
        ``$JS.EVENT.ADVISORY.CONSUMER.DELETED.<stream>.<consumer>`` is sent at once. Its
        callback (on the worker pool) only flags the reader, which resubscribes within a
        0.1 s slice: the stream is gone (:class:`NoSuchPartitionError`) or a new consumer
        is made. Without permission to subscribe there, missed heartbeats still notice.
        """
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{self.jetstream_stream}.*"
        try:
            self._advisory = self._conn.subscribe(subject, callback=self._on_consumer_deleted)
        except PermissionDeniedError as exc:
            log.debug("jssync.liftbridge: no deletion advisories for %s (%s); heartbeats only", subject, exc)

    def _on_consumer_deleted(self, msg: Msg) -> None:
        name = msg.subject.rpartition(".")[2]
        if name and name == self._consumer and not self._closed:
            self._reset_reason = f"its consumer {name} was deleted (advisory)"

    def _unwatch_deletions(self) -> None:
        adv, self._advisory = self._advisory, None
        if adv is not None:
            try:
                adv.unsubscribe(timeout=1.0)
            except Error:
                pass

    def _delete_consumer(self, name: str | None) -> None:
        """Ask the server to delete a consumer, without waiting (its inactive threshold is the backstop)."""
        if name is None or self._conn.is_closed:
            return
        self._js._api_nowait(f"CONSUMER.DELETE.{self.jetstream_stream}.{name}")

    def _drop_current(self) -> None:
        with self._state_lock:
            sub, name = self._sub, self._consumer
            self._sub = None
            self._consumer = None
        if sub is not None:
            try:
                sub.unsubscribe(timeout=1.0)
            except Error:
                pass
        self._delete_consumer(name)

    def _on_reconnect(self) -> None:
        # on the I/O thread: only flag it; the reader tells the gap tracker and resubscribes
        if not self._closed:
            self._reconnected = True

    def _resubscribe(self, deadline: Deadline) -> None:
        """One resubscribe attempt (after its jittered wait, within ``deadline``)."""
        now = time.monotonic()
        if self._reset_reason is not None or self._sub is not None:
            reason = self._reset_reason or "reset"
            self._reset_reason = None
            log.info("jssync.liftbridge: resubscribing to %s partition %d from offset %s: %s", self.stream,
                     self.partition, (self._tracker.next_stream_seq or 1) - 1, reason)
            self._drop_current()
            if self._fail_since is None:
                self._fail_since = now
                self._attempt_at = now  # the first attempt goes at once
            self._last_error = Error(reason)
        assert self._fail_since is not None
        if now - self._fail_since > self._resub_wait:
            last = self._last_error
            raise _Terminal(TimeoutError(
                f"could not resubscribe to stream {self.stream!r} partition {self.partition} within "
                f"resubscribe_wait_time={self._resub_wait}s (last error: {last})"
            ))
        if now < self._attempt_at:
            _sleep(self._attempt_at - now, deadline)
            if deadline.expired():
                raise TimeoutError(
                    f"no message on stream {self.stream!r} partition {self.partition} within {deadline.timeout}s "
                    "(resubscribing)"
                )
            return
        if self._closed:
            return
        self._attempt_at = time.monotonic() + RETRY_WAIT.delay(0)
        budget = max(0.2, min(self._js.timeout, self._resub_wait - (now - self._fail_since)))
        rem = deadline.remaining()
        if rem is not None:
            budget = min(budget, max(1.0, rem))
        try:
            self._create(Deadline(budget))
            self._resubscribes += 1
        except StreamNotFoundError as exc:
            raise _Terminal(NoSuchPartitionError(
                404, 10059, f"stream {self.stream!r} partition {self.partition} was deleted"
            )) from exc
        except ConnectionClosedError as exc:
            raise _Terminal(exc) from exc
        except Error as exc:
            if worth_retrying(exc, timeouts=True):
                self._last_error = exc
            elif isinstance(exc, APIError):
                raise _Terminal(exc) from exc
            else:
                raise


def _sleep(seconds: float, deadline: Deadline) -> None:
    """Sleep ``seconds`` (at most what ``deadline`` leaves), in slices so Ctrl-C gets through."""
    sleep_for(seconds, deadline)
