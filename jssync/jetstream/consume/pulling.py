"""The runner of a consume's :class:`~.engine.PullEngine`.

The engine keeps ADR-37's counts, thresholds, status handling, heartbeats and states
(pure). :class:`PullRunner` starts it, feeds it what happens (statuses, the timer,
disconnects, the application taking messages) and carries out what it answers: pull
requests, the one timer, a new inbox when pulls were written off, a consumer lookup after
a 503, a lost pin (423), the end. Every engine event goes through ``_lock``, except the
per-message ones (``message`` on the I/O thread, ``taken`` of one message), which touch
counters only their own thread writes. Actions are carried out outside the lock.
"""

from __future__ import annotations

import logging
from typing import Any, Self, cast

from ...base.deadline import Deadline
from ...base.errors import ConsumerDeletedError, Error, NotFoundError, translating
from ...base.status import pull_request
from ...core import natspy as _natspy
from .common import _DISCARD, _on_loop, _unsubscribe_soon
from .engine import Action as EngineAction
from .engine import (
    ArmTimer,
    CheckConsumer,
    End,
    EngineState,
    NakBuffered,
    PinLost,
    Recreate,
    SendPull,
    SwapInbox,
    Unsubscribe,
    Warn,
)
from .intake import _WrittenOff
from .options import FETCH_GRACE
from .state import ConsumeState

__all__ = ["PullRunner"]

log = logging.getLogger("jssync")

#: Inboxes of written-off pull requests a consume keeps at most (each for ``expires`` + 1 s).
_MAX_OLD_INBOXES = 16


class PullRunner(ConsumeState):
    """Starts the engine, feeds it events, carries out its actions (any thread unless said)."""

    def _start(self) -> Self:
        conn = self._conn

        async def _sub() -> Any:
            with translating():
                return await _natspy.subscribe(conn.internal.nc, self._inbox, cast(_natspy.Receiver, self))

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
        self._sent_last = p  # (what _refill checks when an exception landed meanwhile)

    def _refill(self) -> None:
        """A pull if pending fell to the threshold (after the application took messages; any thread).

        The pull the engine counts is sent whatever happens: an exception (Ctrl-C) landing
        between the engine counting it and the pull being queued hands it to the I/O thread
        (where no signal handler runs), so no pull is ever counted and not sent (the consume
        would wait for messages nobody asked for).
        """
        acts: tuple[EngineAction, ...] = ()
        try:
            with self._lock:
                acts = self._eng.refill()
            if acts:
                self._do(acts)
        except BaseException:
            if acts and self._sent_last is not acts[0]:
                try:
                    self._conn.internal.loop.call_soon(self._do, acts)
                except Error:  # the connection is closed: nothing to pull for
                    pass
            raise

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
        if self._looking_up or self._eng.state is not EngineState.RUNNING:
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
                f"(pulls get no responders; {exc})", code=404, err_code=getattr(exc, "err_code", None),
                stream=self.stream, consumer=self.consumer)
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
                    _natspy.set_sub_queue(old, cast(_natspy.Receiver, self))
                    self._nsub = old
            elif self._winding_down:  # nothing was requested on it: the wind-down drains the old one
                _unsubscribe_soon(conn, nsub)
            else:
                _natspy.set_sub_queue(nsub, cast(_natspy.Receiver, self))
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

    def _report(self, exc: BaseException) -> None:
        if self._error_cb is None:
            self._conn.internal.report_error(exc)
        else:
            log.warning("consume %s/%s: %s: %s", self.stream, self.consumer, type(exc).__name__, exc)
            self._conn.internal.pool.submit(self._conn.internal.call_user_cb, self._error_cb, exc)
