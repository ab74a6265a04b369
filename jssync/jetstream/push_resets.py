"""The NATS subscriptions behind a push subscription, and the ordered subscription's reset.

Each NATS subscription a :class:`jssync.JetStreamSubscription` makes gets a generation (the
gap tracker's); :class:`_PushInbound` hands its messages to the JetStream subscription and
drops those of an old generation. An ordered subscription recreates its consumer after a
gap, missed heartbeats, a reconnect or a lost consumer: :class:`OrderedResets` runs that
reset on the worker pool (one job at a time; ``subscribe()`` acts as the running job until
it returns), from the last stream sequence delivered + 1 on a fresh inbox.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import Deadline
from ..base.errors import Error, JetStreamError, StreamNotFoundError, translating
from ..core import natspy as _natspy
from ..core.msg import Msg
from ..core.subscription import Subscription, _Inbound
from .consume.gaps import GapTracker
from .consume.runner import HeartbeatTimer

if TYPE_CHECKING:
    from .context import JetStream

log = logging.getLogger("jssync")

#: Pause between attempts to recreate an ordered subscription's consumer.
_RESET_RETRY_WAIT = 1.0

_monotonic = time.monotonic


class _PushInbound(_Inbound):
    """Hands messages of one NATS subscription to the JetStream subscription.

    Each NATS subscription of a JetStream subscription has a generation; after an ordered
    reset, messages still arriving on the old one are dropped here.
    """

    __slots__ = ("_gen",)

    def __init__(self, sub: OrderedResets, gen: int) -> None:
        super().__init__(sub)
        self._gen = gen

    def put_nowait(self, msg: Msg) -> None:
        sub = self._sub
        if sub._tracker.generation == self._gen:  # type: ignore[attr-defined]
            sub._deliver(msg)


class OrderedResets(Subscription):
    """The NATS subscriptions and the ordered resets of :class:`jssync.JetStreamSubscription`.

    A base of it, not used alone: the state below is set by ``JetStreamSubscription.__init__``.
    """

    _js: JetStream
    stream_name: str
    consumer_name: str | None
    ordered: bool
    resets: int
    _gaps: bool
    _tracker: GapTracker
    _hb_timer: HeartbeatTimer | None
    _reset_lock: threading.Lock
    _reset_wanted: bool
    _reset_running: bool
    _reset_idle: threading.Event
    _draining: bool
    _ordered_cfg: api.ConsumerConfig | None
    _timeout: float | None
    _report: Callable[[Exception], None]
    _gone: Callable[[Error], None]

    # -- NATS subscriptions ------------------------------------------------------------------

    async def _nats_subscribe(self, subject: str, queue: str | None, gen: int, fresh: bool) -> Any:
        """On the loop: subscribe ``subject`` for generation ``gen``.

        ``fresh``: the consumer about to be created starts at consumer sequence 1.
        """
        conn = self._conn
        await conn.internal.sync_pubs()
        if self._gaps and gen == self._tracker.generation:
            # a consumer about to be created starts at 1; an existing one: its first message tells
            self._tracker.last_consumer_seq = 0 if fresh else None
        with translating():
            return await _natspy.subscribe(conn.internal.nc, subject, _PushInbound(self, gen), queue)

    def _sub_deadline(self) -> Deadline:
        return Deadline(None if self._timeout is None else self._timeout + 5.0)

    def _subscribe(self, subject: str, queue: str | None, deadline: Deadline, fresh: bool) -> None:
        self.subject = subject
        self._nsub = self._conn.run(self._nats_subscribe(subject, queue, self._tracker.generation, fresh), deadline,
                                    "subscribe")

    def _unsubscribe_nats(self, nsub: Any, deadline: Deadline) -> None:
        conn = self._conn
        if nsub is None or conn.internal.closed:
            return

        async def _unsub() -> None:
            if _natspy.sub_closed(nsub) or conn.internal.nc.is_closed:
                return
            with translating():
                await nsub.unsubscribe()

        conn.run(_unsub(), deadline, "unsubscribe")

    # -- ordered resets --------------------------------------------------------------------

    def _request_reset(self, reason: str) -> None:
        """Recreate the ordered consumer (I/O thread, no wait): the gap tracker started a new
        generation, so whatever the old consumer still sends is dropped from now on."""
        with self._reset_lock:
            if self._closed or self._draining:
                return
            log.debug("ordered subscription on %s: reset (%s)", self.stream_name, reason)
            self._reset_wanted = True
            if self._reset_running:
                return
            self._reset_running = True
            self._reset_idle.clear()
        self._conn.internal.pool.submit(self._reset_job)

    def _ready(self) -> None:
        """subscribe() is done: let resets run (one may be waiting)."""
        with self._reset_lock:
            if not self._reset_wanted or self._closed:
                self._reset_running = False
                self._reset_idle.set()
                return
            self._reset_idle.clear()
        self._conn.internal.pool.submit(self._reset_job)

    def _wait_reset_idle(self, deadline: Deadline) -> None:
        """Wait (in slices) until no reset is running, so the current consumer is known."""
        if not self.ordered or self._conn.internal.pool.in_worker():
            return  # on the pool, the reset job may be queued behind this thread: do not wait
        while not self._reset_idle.wait(deadline.slice()):
            if deadline.expired():
                return

    def _reset_job(self) -> None:
        """On the worker pool: reset until it worked or the subscription ended."""
        failures = 0
        while True:
            with self._reset_lock:
                if self._closed or self._conn.internal.closed or not self._reset_wanted:
                    self._reset_running = False
                    self._reset_idle.set()
                    return
                self._reset_wanted = False
                gen = self._tracker.generation
            try:
                self._reset_once(gen)
                failures = 0
            except StreamNotFoundError as exc:  # nothing left to read: the subscription ends
                with self._reset_lock:
                    self._reset_running = False
                    self._reset_idle.set()
                self._gone(exc)
                return
            except Exception as exc:  # noqa: BLE001 - retried, reported once per streak
                failures += 1
                if failures == 1:
                    self._report(exc if isinstance(exc, Error) else JetStreamError(
                        f"could not reset ordered subscription: {exc}"))
                else:
                    log.debug("ordered reset failed again: %s", exc)
                with self._reset_lock:
                    self._reset_wanted = True
                end = _monotonic() + _RESET_RETRY_WAIT
                while _monotonic() < end and not self._closed and not self._conn.internal.closed:
                    time.sleep(0.05)

    def _reset_once(self, gen: int) -> None:
        js = self._js
        conn = self._conn
        base = self._ordered_cfg
        assert base is not None
        old_nsub = self._nsub
        old_name = self.consumer_name
        self._unsubscribe_nats(old_nsub, Deadline(self._timeout))
        # After a slow consumer drop, wait for room: a new consumer would only overflow again.
        while self.pending_msgs >= max(1, self._limit // 2):
            if self._closed or conn.internal.closed:
                return
            time.sleep(0.01)
        deadline = Deadline(self._timeout)
        inbox = conn.new_inbox()
        nsub = conn.run(self._nats_subscribe(inbox, None, gen, True), deadline, "subscribe")
        cfg = base.evolve(deliver_subject=inbox)
        start = self._tracker.next_stream_seq  # the last stream sequence delivered + 1 (0: none yet)
        if start > 0:
            cfg.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = start
            cfg.opt_start_time = None
        try:
            consumer = js._upsert_consumer(self.stream_name, cfg, "create", deadline.remaining())
        except BaseException:
            self._unsubscribe_nats(nsub, Deadline(1.0))
            raise
        with self._reset_lock:  # unsubscribe() sets _closed under this lock: install, or clean up
            closed = self._closed
            if not closed:
                self._nsub = nsub
                self.subject = inbox
                self.consumer_name = consumer.name
                self.resets += 1
        if closed:
            self._unsubscribe_nats(nsub, Deadline(1.0))
            self._try_delete(consumer.name)
            return
        if self._hb_timer is not None:
            self._hb_timer.restart()
        log.debug("ordered subscription reset to consumer %s from stream sequence %s",
                  consumer.name, cfg.opt_start_seq or cfg.deliver_policy)
        if old_name and old_name != consumer.name:
            self._try_delete(old_name)

    def _try_delete(self, name: str) -> None:
        try:
            self._js.delete_consumer(self.stream_name, name, timeout=1.0)
        except Error as exc:
            log.debug("could not delete old ordered consumer %s: %s", name, exc)
