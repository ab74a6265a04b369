"""What a push subscription watches besides its messages: leases, and a consumer that is gone.

A base of :class:`jssync.JetStreamSubscription` (not used alone), two jobs:

* **Leases.** With the explicit ack policy, every message received and not yet acked,
  nak'ed or terminated (waiting in the buffer, or in a slow callback) gets an in-progress
  ack (``+WPI``) whenever half the consumer's ``ack_wait`` passed since its delivery or its
  last ``+WPI``, for at most :data:`~jssync.jetstream.leases.MAX_EXTENSION` (600 s) after its
  receipt: the lease manager of the pull consume (:class:`~.consume.leasing.Leasing`), the
  same code. The I/O thread appends each message it buffers (:meth:`PushWatch._hold`).
* **A consumer (or stream) deleted.** The server sends nothing to a push subscription
  when its consumer or stream is deleted; the heartbeats just stop. So once 1.5 x the idle
  heartbeat passed without a message or a heartbeat, the subscription asks the server
  (``CONSUMER.INFO``, on the worker pool, one at a time); when the answer is
  :class:`jssync.ConsumerNotFoundError` the subscription ends with
  :class:`jssync.ConsumerDeletedError` (a ConsumerNotFoundError too, what the pull consume
  raises), when it is :class:`jssync.StreamNotFoundError`, with that: the iterator raises it
  once the buffered messages were read
  (as the ordered pull consume does with StreamNotFoundError), the callback form reports it
  to the error callback. An ordered subscription recreates a deleted consumer at once (it
  would at its heartbeat alarm), and ends only when its stream is gone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..base.errors import ConsumerDeletedError, ConsumerNotFoundError, Error, StreamNotFoundError
from ..core.msg import Msg
from .consume.gaps import GapTracker
from .consume.heartbeat import HeartbeatMonitor
from .consume.leasing import Leasing
from .consume.runner import HeartbeatTimer

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.workers import SerialLane
    from .context import JetStream

log = logging.getLogger("jssync")

#: Without a message or heartbeat for this many idle heartbeats (one heartbeat missed), the
#: consumer is looked up.
CHECK_FACTOR = 1.5
#: The server's default ack wait (seconds): the lease period until the consumer's is known.
SERVER_ACK_WAIT = 30.0


class PushWatch(Leasing):
    """The leases and the deleted-consumer check of a push subscription (see the module)."""

    _conn: Connection
    _js: JetStream
    _lane: SerialLane | None
    stream_name: str
    consumer_name: str | None
    ordered: bool
    idle_heartbeat: float | None
    created_consumer: bool
    _timeout: float | None
    _tracker: GapTracker

    if TYPE_CHECKING:

        @property
        def pending_msgs(self) -> int: ...
        @property
        def is_closed(self) -> bool: ...
        def _report(self, exc: Exception) -> None: ...
        def unsubscribe(self, timeout: float | None = 5.0) -> None: ...
        def _act(self, act: object) -> bool: ...

    def _init_watch(self) -> None:
        self._init_leases(self._conn.internal.loop, None)
        self._lease_on = False  # the lease timer was started
        self._released: set[Msg] = set()  # messages whose callback raised: no lease any more
        self._check_timer: HeartbeatTimer | None = None
        self._check_mon: HeartbeatMonitor | None = None  # told of each message (I/O thread)
        self._checking = False
        #: why the subscription ended by itself (the consumer or stream is gone), else None
        self.error: Error | None = None

    # -- leases ------------------------------------------------------------------------------

    def _use_leases(self, explicit: bool, ack_wait: float | None) -> None:
        """The consumer's ack policy is known: keep leases when it is explicit (``ack_wait``:
        its ack wait in seconds; None or 0: the server's default)."""
        if not explicit:
            self._lease_wait = None
            return
        self._lease_wait = ack_wait if ack_wait else SERVER_ACK_WAIT

    def _start_leases(self) -> None:
        """Start the lease checks on the I/O loop (once; nothing without leases)."""
        if self._lease_wait is None or self._lease_on:
            return
        self._lease_on = True
        try:
            self._conn.internal.loop.call_soon(self._lease_tick)
        except Error:  # the connection closed meanwhile
            self._lease_on = False

    def _hold(self, msg: Msg) -> None:
        """A JetStream message was buffered (I/O thread): keep its lease."""
        fresh = self._fresh
        fresh.append(msg)
        if len(fresh) >= self._fresh_cap:
            self._prune_fresh()

    def _release(self, msg: Msg) -> None:
        """The callback raised for ``msg`` (not acked): give up its lease, so that the server
        redelivers it after ack_wait as before (any thread)."""
        if self._lease_wait is not None:
            self._released.add(msg)

    def _lease_done(self, msg: Msg) -> bool:
        if msg._acked:
            return True
        released = self._released
        if released and msg in released:
            released.discard(msg)
            return True
        return False

    def _leases_over(self) -> bool:
        conn = self._conn.internal
        if conn.closed or conn.closing:
            return True
        if not self.is_closed:
            return False
        lane = self._lane
        return self.pending_msgs == 0 and (lane is None or lane.idle.is_set())

    def _lease_holder(self) -> str:
        return f"JetStream subscription {self.stream_name}/{self.consumer_name}"

    # -- is the consumer still there? ---------------------------------------------------------

    def _start_check(self) -> None:
        """Watch for silence (twice the idle heartbeat) and then look the consumer up."""
        hb = self.idle_heartbeat
        if not hb or self.is_closed:
            return
        timer = HeartbeatTimer(self._conn.internal.loop, CHECK_FACTOR * hb, self._on_silence)
        self._check_timer = timer
        self._check_mon = timer.monitor
        timer.start()

    def _stop_check(self) -> None:
        timer = self._check_timer
        if timer is not None:
            timer.stop()

    def _restart_check(self) -> None:
        timer = self._check_timer
        if timer is not None:
            timer.restart()

    def _on_silence(self) -> None:
        """I/O thread: no message or heartbeat for 1.5x the idle heartbeat: ask the server."""
        if self.is_closed or self._checking or not self._conn.is_connected:
            return  # (disconnected: the heartbeats stop for that reason; the alarm tells)
        self._checking = True
        try:
            self._conn.internal.pool.submit(self._look_up)
        except Exception:  # noqa: BLE001 - the pool is closed: the connection is closing
            self._checking = False

    def _look_up(self) -> None:
        """On the worker pool: end the subscription when its consumer or stream is gone."""
        try:
            name = self.consumer_name
            gen = self._tracker.generation
            if name is None or self.is_closed:
                return
            try:
                self._js._consumer_info(self.stream_name, name, timeout=self._js.timeout)
            except StreamNotFoundError as exc:
                self._gone(exc)
            except ConsumerNotFoundError as exc:
                if not self.ordered:
                    gone = ConsumerDeletedError(
                        f"consumer {name!r} on stream {self.stream_name!r} was deleted under the "
                        f"subscription ({exc})", code=exc.code, err_code=exc.err_code,
                        stream=self.stream_name, consumer=name)
                    gone.__cause__ = exc
                    self._gone(gone)
                elif self.consumer_name == name:  # (not reset meanwhile) recreate it now
                    self._conn.internal.loop.call_soon(self._consumer_lost, gen)
            except Exception:  # noqa: BLE001 - no leader, timeout, closed: the next silence asks again
                log.debug("push subscription: consumer info lookup failed", exc_info=True)
        finally:
            self._checking = False

    def _consumer_lost(self, gen: int) -> None:
        """I/O thread: the ordered consumer of generation ``gen`` is gone: reset (unless done already)."""
        self._act(self._tracker.status_from(gen, "consumer not found"))

    def _gone(self, exc: Error) -> None:
        """The consumer or its stream no longer exists: end with ``exc`` (any thread but the I/O
        thread; blocks for the UNSUB, at most the context's timeout)."""
        if self.is_closed:
            return
        log.warning("JetStream subscription %s/%s ends: %s", self.stream_name, self.consumer_name, exc)
        self.error = exc
        self.created_consumer = False  # nothing left to delete
        self._report(exc)
        try:
            self.unsubscribe(timeout=self._timeout)
        except Error:
            log.debug("could not unsubscribe after the consumer was gone", exc_info=True)

    def _gone_error(self) -> Error | None:
        """What reading past the end raises when the subscription ended by itself."""
        return self.error
