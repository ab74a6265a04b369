"""The pull consuming engine: ADR-37's ``consume`` as a pure state machine.

Pure (sans-I/O): no threads, no asyncio, no clock reads, no queues, nothing sent. The
runner (:class:`jssync.jetstream.pull.ConsumeContext`) feeds it what happens (events) and
carries out what it answers (actions); the time comes with the events that need it.

Events: :meth:`PullEngine.start`, :meth:`~PullEngine.pull_sent`, :meth:`~PullEngine.message`
(a user message), :meth:`~PullEngine.status`, :meth:`~PullEngine.tick`,
:meth:`~PullEngine.disconnected`, :meth:`~PullEngine.reconnected`, :meth:`~PullEngine.taken`
(the application took messages out of the buffer), :meth:`~PullEngine.stop`,
:meth:`~PullEngine.drain`, :meth:`~PullEngine.closed`, and for the runner's own I/O:
:meth:`~PullEngine.refill`, :meth:`~PullEngine.inbox_swapped`, :meth:`~PullEngine.pin_lost`,
:meth:`~PullEngine.recreated`.

Actions (each a small immutable object, in :mod:`~jssync.jetstream.consume.actions`; an
event with nothing to do returns the shared empty tuple :data:`NOTHING`): :class:`SendPull`,
:class:`Nak` (the message just given),
:class:`Drop` (the message just given), :class:`NakBuffered`, :class:`Unsubscribe`,
:class:`End`, :class:`Warn`, :class:`ArmTimer`, :class:`SwapInbox`, :class:`CheckConsumer`,
:class:`PinLost`, :class:`Recreate`.

It owns, for ``consume`` (ADR-37 "Consume specification"):

* the accounting: messages and bytes requested, received, taken by the application and
  written off ("pending" = requested - taken - written off; "in flight" = requested -
  received - written off), with the pending reconciliation from ``Nats-Pending-Messages``
  / ``Nats-Pending-Bytes`` of every status that ends a pull;
* the thresholds and the size of each pull (it fills the buffer; in ``max_bytes`` mode it
  never asks for fewer bytes than the biggest message seen, see "409 Message Size Exceeds
  MaxBytes");
* status handling through :func:`jssync.base.status.decide` (the one status table):
  which statuses end a pull normally, which are warnings, which are terminal (all but the
  plain end of a pull in :mod:`~jssync.jetstream.consume.statuses`, with the single pull's
  end and the missed heartbeat's error);
* heartbeats through one :class:`~jssync.jetstream.consume.heartbeat.HeartbeatMonitor`
  (a warning after 2 x idle_heartbeat of silence; the pulls in flight are written off and
  a new one goes out), paused while disconnected;
* the re-pull rules (after every status that ends a pull, a missed heartbeat, a reconnect;
  a short pause after a warning or 503) and the stop / drain / close states.

The states::

                 start()                  drain()
      (new) ------------> RUNNING ---------------------> DRAINING --+
                          |  ^  \\  terminal status                    |  closed(err)
          disconnected()  |  |   +----------------------> DRAINING(err)|  (any state)
                          v  |  reconnected()                         v
                         (paused)                                   CLOSED
                          |
                          |  stop() (any state but CLOSED)
                          +--------------------------------> STOPPED --+

    RUNNING:  pulls go out at the threshold; heartbeats watched (not while paused)
    DRAINING: no new pulls; the pulls in flight finish (Unsubscribe(wait=True)), the buffer
              is handed out, then the end (with the terminal error, if any)
    STOPPED:  no new pulls; the buffer and whatever still arrives is nak'ed
    CLOSED:   the connection is gone: nothing more; the buffer is dropped

Thread-safety: not thread-safe, with one exception the runner relies on to keep the
per-message path free of locks: :meth:`message` (I/O thread) and :meth:`taken` with
``size == 0`` (the application's threads; the count is an atomic ``itertools.count``)
touch disjoint counters; every other event goes through one lock of the runner.
"""

from __future__ import annotations

import itertools
from typing import Final

from ...base.status import Action as StatusAction
from ...base.status import Status, decide, status_error
from ...base.validate import MAX_I64, check_int, check_number
from .actions import (
    NOTHING,
    Action,
    ArmTimer,
    CheckConsumer,
    Drop,
    End,
    EngineState,
    Nak,
    NakBuffered,
    PinLost,
    Recreate,
    SendPull,
    SwapInbox,
    Unsubscribe,
    Warn,
)
from .heartbeat import HeartbeatMonitor
from .statuses import end_with, no_heartbeat, single_status, single_tick, start_recreate, status_verdict
from .writeoffs import WriteOffs

__all__ = [
    "NOTHING", "Action", "ArmTimer", "CheckConsumer", "Drop", "End", "EngineState", "Nak", "NakBuffered",
    "PinLost", "PullEngine", "Recreate", "SendPull", "SwapInbox", "Unsubscribe", "Warn",
]

#: Batch size of pulls limited by bytes only (ADR-37: "a large number (e.g. 1 000 000)").
BYTES_ONLY_BATCH = 1_000_000
#: The heartbeat check runs this many times per idle_heartbeat (a miss is reported 2x to 2.1x late).
TICKS = 10

_NAK: Final[tuple[Action, ...]] = (Nak(),)
_DROP: Final[tuple[Action, ...]] = (Drop(),)
_CANCEL: Final[tuple[Action, ...]] = (ArmTimer(None),)
_FILLED: Final[tuple[Action, ...]] = (End(None),)

_RUNNING = EngineState.RUNNING
_DRAINING = EngineState.DRAINING
_STOPPED = EngineState.STOPPED
_CLOSED = EngineState.CLOSED


class PullEngine:
    """ADR-37 ``consume`` without I/O: feed it events, carry out the actions it returns.

    Args:
        max_messages: messages buffered + requested at most (``BYTES_ONLY_BATCH`` in bytes mode).
        max_bytes: bytes buffered + requested at most (0: not limited by bytes).
        threshold_messages: a pull goes out once pending messages fall to this.
        threshold_bytes: a pull goes out once pending bytes fall to this (bytes mode).
        expires: each pull's expiry (seconds).
        heartbeat: each pull's idle heartbeat (seconds; a miss is 2 x this of silence).
        stream, consumer: named in the errors it makes.
        recreate: the ordered consume: a missed heartbeat, a reconnect, a terminal status or
            a 503 answer :class:`Recreate` (a new consumer) instead of a re-pull or the end.
        single: one pull (``fetch``, ``next``, ``ack_next``): the engine sends nothing (the
            runner sends the pull and tells :meth:`pull_sent`); the pull ends, with
            :class:`End`, when ``max_messages`` or ``max_bytes`` was received, at any status
            but a heartbeat (errors fatal, warnings not), or at a missed heartbeat (the
            runner's reader calls :meth:`tick`); ``heartbeat`` 0: none watched, ``expires``
            0: no_wait. Then the engine is CLOSED (what still arrives is dropped) or, after
            :meth:`stop` (given up while the pull may be open), STOPPED (it is nak'ed).
        grouped: the pulls name a priority group (ADR-42): :meth:`stop` unsubscribes at once
            (``Unsubscribe(wait=False)``), since a pull left waiting on the server would take
            the group's messages, and the pin after an unpin, from the live members.
        early: (priority groups but pinned_client) a message counts off the pending count when
            it is received, not when the application takes it, so a pull stays waiting on the
            server while the application works through its buffer (the group's other members,
            at a lower priority or by overflow, get nothing meanwhile). What is requested and
            not received stays within ``max_messages`` / ``max_bytes``; the buffer may hold up
            to as much again (pending = in flight + what the buffer holds past the limit).
            The runner asks :meth:`due` after buffering a message and then calls :meth:`refill`.
        stop_after: (``consume(stop_after=N)``) no pull asks for more than what is left of N (less
            what is requested and not written off); :attr:`reached` once N were taken. 0: no end.

    Raises:
        jssync.ValidationError: a limit is not an int >= 1 (max_messages) / >= 0, or a
            threshold exceeds its limit, or expires / heartbeat is not > 0.
    """

    __slots__ = (
        "max_messages", "max_bytes", "thr", "thr_b", "expires", "heartbeat", "stream", "consumer", "recreate",
        "bytes_mode", "state", "paused", "hold", "resetting", "error",
        "req", "req_b", "rx", "rx_b", "disc", "disc_b", "taken_n", "taken_b", "_count", "open", "pulls",
        "activity", "last_act", "monitor", "_tick_n", "retry_at", "big_b", "min_pull_b", "last_pull_b",
        "rx_at_pull", "last_warning", "size_warned", "nr_outage", "wo", "single", "grouped", "early",
        "stop_after",
    )

    def __init__(self, *, max_messages: int, max_bytes: int = 0, threshold_messages: int | None = None,
                 threshold_bytes: int | None = None, expires: float, heartbeat: float, stream: str = "",
                 consumer: str = "", recreate: bool = False, single: bool = False, grouped: bool = False,
                 early: bool = False, stop_after: int = 0) -> None:
        check_int(max_messages, "max_messages", maximum=MAX_I64, open_ended=True)
        check_int(max_bytes, "max_bytes", minimum=0, maximum=MAX_I64, open_ended=True)
        for name, f in (("expires", expires), ("heartbeat", heartbeat)):
            # (a single pull may have expires 0 / no heartbeat)
            check_number(f, name, above=None if single else 0.0, minimum=0.0 if single else None, unit="seconds")
        thr = max_messages // 2 if threshold_messages is None else threshold_messages
        thr_b = max_bytes // 2 if threshold_bytes is None else threshold_bytes
        check_int(thr, "threshold_messages", minimum=0, maximum=max_messages)
        check_int(thr_b, "threshold_bytes", minimum=0, maximum=max_bytes)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.thr = thr
        self.thr_b = thr_b
        self.expires = float(expires)
        self.heartbeat = float(heartbeat)
        self.stream = stream
        self.consumer = consumer
        self.recreate = recreate
        self.single = single
        self.grouped = grouped
        self.early = early
        self.stop_after = check_int(stop_after, "stop_after", minimum=0, maximum=MAX_I64, open_ended=True)
        self.bytes_mode = max_bytes > 0
        self.state = EngineState.NEW
        #: disconnected: no pulls, no heartbeat misses
        self.paused = False
        #: bytes mode: the next message does not fit in max_bytes; retried every heartbeat / 2
        self.hold = False
        #: no pull until the runner's inbox swap / recreation is done
        self.resetting = False
        #: the terminal error the consume ends with (after the buffer)
        self.error: BaseException | None = None
        # ADR-37 counts: pending = req - taken - disc; in flight = req - rx - disc
        self.req = 0
        self.req_b = 0
        self.rx = 0
        self.rx_b = 0
        self.disc = 0
        self.disc_b = 0
        self.taken_n = 0
        self.taken_b = 0
        self._count = itertools.count(1)
        #: pulls sent to the current inbox and not ended by a status (a filled one stays counted)
        self.open = 0
        #: pulls sent so far
        self.pulls = 0
        #: anything arrived (messages, statuses, heartbeats): the monitor hears of it at the next tick
        self.activity = 0
        self.last_act = 0
        self.monitor = HeartbeatMonitor(2 * self.heartbeat if self.heartbeat else 1.0, 0.0)
        self._tick_n = 0
        self.retry_at: float | None = None
        # bytes mode ("409 Message Size Exceeds MaxBytes", not telegraphed): never ask for fewer
        # bytes than the biggest message received needs, nor for fewer than a pull the next
        # message did not fit in (until a message arrives)
        self.big_b = 0
        self.min_pull_b = 0
        self.last_pull_b = 0
        self.rx_at_pull = 0
        self.last_warning = ""
        self.size_warned = False
        #: a 503 was reported and no message arrived since (one report per outage)
        self.nr_outage = False
        #: written-off pulls whose statuses may still come (an inbox swap; a failed one)
        self.wo = WriteOffs()

    def __repr__(self) -> str:
        return (f"<PullEngine {self.state.name.lower()} pending={self.pending_messages}/{self.pending_bytes} "
                f"in_flight={self.in_flight} pulls={self.pulls}>")

    # -- what the runner reads -------------------------------------------------------------

    @property
    def pending_messages(self) -> int:
        """Messages requested and not yet taken by the application (buffered or in flight)."""
        return max(0, self.req - self.taken_n - self.disc)

    @property
    def pending_bytes(self) -> int:
        """Bytes requested and not yet taken (bytes mode)."""
        return max(0, self.req_b - self.taken_b - self.disc_b)

    def due(self) -> bool:
        """(early engines) a pull is due now: what is in flight, and what the buffer holds past
        the limit, fell to the threshold (read-only; the runner then calls :meth:`refill`)."""
        if self.state is not _RUNNING:
            return False
        if self.bytes_mode:
            return self._pend_b() <= self.thr_b
        return self._pend() <= self.thr

    def _pend(self) -> int:
        if self.early:
            return self.req - self.rx - self.disc + max(0, self.rx - self.taken_n - self.max_messages)
        return self.req - self.taken_n - self.disc

    def _pend_b(self) -> int:
        if self.early:
            return self.req_b - self.rx_b - self.disc_b + max(0, self.rx_b - self.taken_b - self.max_bytes)
        return self.req_b - self.taken_b - self.disc_b

    @property
    def in_flight(self) -> int:
        """Messages (bytes, in bytes mode) requested and neither received nor written off."""
        if self.bytes_mode:
            return self.req_b - self.rx_b - self.disc_b
        return self.req - self.rx - self.disc

    @property
    def reached(self) -> bool:
        """``stop_after`` messages were taken by the application (never with ``stop_after`` 0)."""
        return 0 < self.stop_after <= self.taken_n

    @property
    def buffered(self) -> int:
        """Messages received and not yet taken."""
        return self.rx - self.taken_n

    # -- events ------------------------------------------------------------------------------

    def start(self, now: float, connected: bool = True) -> tuple[Action, ...]:
        """Start consuming at ``now``: the first pull (unless disconnected) and the heartbeat timer."""
        if self.state is not EngineState.NEW:
            return NOTHING
        self.state = _RUNNING
        self.paused = not connected
        self.monitor.resumed(now)
        if self.single:
            return NOTHING
        if self.paused:
            self.monitor.paused(now)
            return NOTHING
        return self._with_pull((ArmTimer(self._next_tick(now)),))

    def pull_sent(self, batch: int, max_bytes: int = 0) -> None:
        """A pull the runner sent on its own (not asked for by :class:`SendPull`) counts as requested."""
        self.req += batch
        self.req_b += max_bytes
        self.open += 1
        self.pulls += 1
        self.rx_at_pull = self.rx

    def message(self, size: int = 0, now: float | None = None, written_off: bool = False) -> tuple[Action, ...]:
        """A user message of ``size`` bytes (as the server counts it) arrived.

        Returns :data:`NOTHING` (buffer it), ``(Nak(),)`` (after stop) or ``(Drop(),)`` (closed).
        ``written_off``: it came for a pull the counts no longer include (it was alive after
        all): it counts as requested and received. ``now``: when known, the heartbeat
        monitor hears of it at once (else at the next tick).
        """
        self.activity += 1
        self.rx += 1
        if written_off:
            self.unwrite(size)
        if size:
            self.rx_b += size
            self.min_pull_b = 0
            if size > self.big_b:
                self.big_b = size
        if now is not None:
            self.monitor.seen(now)
        self.nr_outage = False
        state = self.state
        if state is _RUNNING:
            return self._filled() if self.single else NOTHING
        if state is _DRAINING:
            return NOTHING
        if state is _STOPPED:
            return _NAK
        return _DROP

    def heard(self) -> None:
        """Something arrived that counts only as traffic (for the heartbeat monitor)."""
        self.activity += 1

    def unwrite(self, size: int = 0) -> None:
        """A message of a written-off pull arrived after all: it counts as requested again
        (the runner passes it on to :meth:`message` or :meth:`skipped`)."""
        self.disc -= 1
        self.disc_b -= size
        self.wo.arrived(size)

    def skipped(self, size: int = 0) -> tuple[Action, ...]:
        """A message that took its place in a pull but is never handed out (ordered: delivered
        already): received, and counted as taken at once (never buffered; a later write-off
        or recreation, which counts what was received, keeps it out of pending). A single
        pull may be filled by it. Under the runner's lock."""
        self.activity += 1
        self.rx += 1
        self.rx_b += size
        self.taken_n = next(self._count)
        self.taken_b += size
        if self.single and self.state is _RUNNING:
            return self._filled()
        return NOTHING

    def taken(self, n: int = 1, size: int = 0) -> bool:
        """The application took ``n`` messages (``size`` bytes) out of the buffer.

        Returns True when a pull is due (pending fell to the threshold): the runner then
        calls :meth:`refill` (under its lock). Lock-free for ``n == 1, size == 0``.
        """
        if n == 1 and not size:
            t = self.taken_n = next(self._count)
        else:
            for _ in range(n):
                t = self.taken_n = next(self._count)
            self.taken_b += size
        if self.early:
            return self.due()
        if self.bytes_mode:
            return self.req_b - self.taken_b - self.disc_b <= self.thr_b
        return self.req - t - self.disc <= self.thr

    def refill(self) -> tuple[Action, ...]:
        """Send a pull if the pending count is at or below the threshold (after :meth:`taken`)."""
        p = self._pull()
        return NOTHING if p is None else (p,)

    def status(self, code: int, description: str = "", pending_msgs: int = 0, pending_bytes: int = 0,
               now: float = 0.0, written_off: bool = False) -> tuple[Action, ...]:
        """A status arrived on the inbox (``written_off``: on the inbox of written-off pulls).

        ADR-37 "Status handling": a heartbeat only counts as traffic; any other status ends
        one pull, and its ``Nats-Pending-*`` counts are subtracted from pending. 404, 408 and
        409 Message Size Exceeds MaxBytes / Batch Completed end it normally (re-pull); 409
        Consumer Deleted / is push based end the consume; 409 Exceeded ... and 400 are
        warned about (once until the description changes or a pull ends normally), the pulls
        in flight written off and a new one sent after a short pause; 409 Leadership Change
        writes off and re-pulls; 503 is warned about once per outage, writes off, looks the
        consumer up and re-pulls after a pause; 423 loses the pin id.
        """
        self.activity += 1
        st = Status(code, description, pending_msgs, pending_bytes)
        act = decide(st)
        if act is StatusAction.HEARTBEAT:
            return NOTHING
        if self.single:
            return single_status(self, act, st)
        if written_off:  # a pull the counts do not include any more: only the end matters
            if act is StatusAction.TERMINAL:
                return end_with(self, status_error(st, self.stream, self.consumer))
            return NOTHING
        self.open -= 1
        if self.wo.ghost_n or self.wo.ghost_b:  # it may end a written-off pull: counted off already
            pending_msgs, pending_bytes = self.wo.absorb(pending_msgs, pending_bytes)
        self.disc += pending_msgs
        self.disc_b += pending_bytes
        if act is StatusAction.DONE:
            self.last_warning = ""
            if (self.bytes_mode and code == 409 and self.rx == self.rx_at_pull
                    and "size" in description.lower()):
                # the last pull got nothing: the next message needs more than it asked for
                if self.last_pull_b < self.max_bytes:
                    self.min_pull_b = self.last_pull_b + 1  # a top-up: the next pull asks for more
                    return self.refill()
                self.hold = True  # it does not fit in max_bytes at all: no loop of pulls
                if not self.size_warned:
                    self.size_warned = True
                    return (Warn(status_error(st, self.stream, self.consumer)),)
                return NOTHING
            return self.refill()
        return status_verdict(self, act, st, now)

    def pin_lost(self) -> tuple[Action, ...]:
        """The runner forgot the pin id its pulls carried (after :class:`PinLost`): the pulls
        in flight with it are written off, a new one goes out without an id."""
        return (*self.write_off(), *self.refill())

    def tick(self, now: float) -> tuple[Action, ...]:
        """The timer fired at ``now``: heartbeat check, retries, a pull when none is in flight.

        A single pull: only the heartbeat check (its reader calls this while it waits)."""
        if self.paused or self.state is not _RUNNING:
            return NOTHING
        if self.single:
            return single_tick(self, now)
        out: list[Action] = []
        self.wo.tick(now, self.expires)
        act = self.activity
        in_flight = self.in_flight
        if act != self.last_act or in_flight <= 0 or self.resetting:
            self.last_act = act
            self.monitor.seen(now)
        elif self.monitor.check(now):  # 2 x idle_heartbeat without anything (ADR-37): not terminal
            if self.recreate:
                err = no_heartbeat(self)
                return (*start_recreate(self, "missed heartbeat", err), ArmTimer(self._next_tick(now)))
            out.append(Warn(no_heartbeat(self)))
            out.extend(self.write_off())
            in_flight = self.in_flight
        self._tick_n += 1
        retry = self.retry_at
        if retry is not None:
            if now < retry - 1e-3:
                out.append(ArmTimer(self._next_tick(now)))  # a refused pull waits its pause out
                return tuple(out)
            self.retry_at = None
        if self.hold:
            if self._tick_n % (TICKS // 2) == 0:  # retry a message too big for max_bytes every hb / 2
                self.hold = False
                out.extend(self.refill())
        elif in_flight <= 0 or retry is not None:
            out.extend(self.refill())  # never sit at or below the threshold with nothing in flight
        out.append(ArmTimer(self._next_tick(now)))
        return tuple(out)

    def disconnected(self, now: float) -> tuple[Action, ...]:
        """The connection is lost: no pulls, the heartbeat timer paused (ADR-37 "Server reconnects")."""
        self.paused = True
        self.monitor.paused(now)
        return _CANCEL

    def reconnected(self, now: float) -> tuple[Action, ...]:
        """The connection is back: the timer reset, the pulls in flight written off, a new pull."""
        self.paused = False
        self.monitor.resumed(now)
        self.last_act = self.activity
        if self.state is not _RUNNING:
            return NOTHING
        arm = ArmTimer(self._next_tick(now))
        if self.recreate:
            return (*start_recreate(self, "reconnected", None), arm)
        return (*self.write_off(), *self.refill(), arm)

    def inbox_swapped(self, ok: bool) -> tuple[Action, ...]:
        """The runner's new inbox is ready (``ok``) or could not be made: the old one stays,
        and the pulls written off on it count as open again (their statuses still come there)."""
        self.resetting = False
        self.open += self.wo.swapped(ok)
        return self.refill()

    def recreated(self) -> tuple[Action, ...]:
        """(recreate engines) the new consumer and its inbox are ready: everything in flight
        for the old one is written off, a pull goes out."""
        self.resetting = False
        self.open = 0
        self.wo.clear()
        self.disc = self.req - self.rx
        self.disc_b = self.req_b - self.rx_b
        return self.refill()

    def recreate_skipped(self) -> tuple[Action, ...]:
        """(recreate engines) the runner did not recreate after all (its gap tracker said no)."""
        self.resetting = False
        return self.refill()

    def gap(self) -> tuple[Action, ...]:
        """(recreate engines) the runner's gap tracker found a gap: the consumer is made again."""
        return start_recreate(self, "gap", None)

    def fail(self, error: BaseException) -> tuple[Action, ...]:
        """End the consume with ``error`` after the buffer (e.g. the consumer lookup after a
        503 found it deleted; an ordered consume that cannot make its consumer again)."""
        self.resetting = False
        return end_with(self, error)

    def stop(self) -> tuple[Action, ...]:
        """Stop at once: no more pulls; the buffer and what still arrives is nak'ed."""
        state = self.state
        if self.single:  # given up while the pull may be open: what still arrives is nak'ed
            self.state = _STOPPED
            return NOTHING
        if state is _STOPPED or state is _CLOSED:
            return NOTHING
        self.state = _STOPPED
        return (ArmTimer(None), NakBuffered(), End(None), Unsubscribe(wait=not self.grouped))

    def drain(self) -> tuple[Action, ...]:
        """Stop pulling; end once the pulls in flight finished and the buffer was handed out."""
        if self.state is not _RUNNING and self.state is not EngineState.NEW:
            return NOTHING
        self.state = _DRAINING
        return (ArmTimer(None), Unsubscribe(wait=True))

    def closed(self, error: BaseException | None = None) -> tuple[Action, ...]:
        """The connection closed (``error``: it gave up reconnecting): the end, at once."""
        if self.state is _CLOSED or (self.single and self.state is _STOPPED):
            return NOTHING
        self.state = _CLOSED
        if error is not None:
            self.error = error
        return (End(error),) if self.single else (ArmTimer(None), End(error))

    # -- inside ------------------------------------------------------------------------------

    def _filled(self) -> tuple[Action, ...]:
        """A single pull got all it asked for (its batch, or its max_bytes)."""
        if self.rx >= self.max_messages or (self.max_bytes and self.rx_b >= self.max_bytes):
            self.state = _CLOSED
            return _FILLED
        return NOTHING

    def _next_tick(self, now: float) -> float:
        return now + self.heartbeat / TICKS

    def _pull(self) -> SendPull | None:
        if self.state is not _RUNNING or self.paused or self.hold or self.resetting:
            return None
        left = self.stop_after - (self.req - self.disc) if self.stop_after else 0  # stop_after: what is left
        if self.stop_after and left <= 0:
            return None
        if self.bytes_mode:
            pend_b = self._pend_b()
            if pend_b > self.thr_b:
                return None
            max_bytes = self.max_bytes - max(pend_b, 0)
            if max_bytes <= 0 or max_bytes < min(self.max_bytes, max(self.big_b, self.min_pull_b)):
                return None  # it could not take the next message: wait until more was taken
            batch = BYTES_ONLY_BATCH
            self.req_b += max_bytes
            self.last_pull_b = max_bytes
        else:
            pend = self._pend()
            if pend > self.thr:
                return None
            batch = self.max_messages - max(pend, 0)
            if batch <= 0:
                return None
            max_bytes = 0
        if left:
            batch = min(batch, left)
        self.req += batch
        self.rx_at_pull = self.rx
        self.pulls += 1
        self.open += 1
        self.retry_at = None
        return SendPull(batch, max_bytes, self.expires, self.heartbeat)

    def _with_pull(self, rest: tuple[Action, ...]) -> tuple[Action, ...]:
        p = self._pull()
        return rest if p is None else (p, *rest)

    def write_off(self) -> tuple[Action, ...]:
        """The pulls in flight count as gone on the server; when one may still be open, the
        next ones go to a new inbox (:class:`SwapInbox`, no pull until :meth:`inbox_swapped`)."""
        alive = self.req - self.rx - self.disc > 0 and self.open > 0
        gone_n = self.req - self.rx - self.disc
        gone_b = self.req_b - self.rx_b - self.disc_b
        self.disc = self.req - self.rx
        self.disc_b = self.req_b - self.rx_b
        if self.resetting:  # (more written off while the swap is under way)
            self.wo.more(gone_n, gone_b)
        if alive and not self.resetting and self.state is _RUNNING:
            self.wo.started(self.open, gone_n, gone_b)
            self.open = 0
            self.resetting = True
            return (SwapInbox(),)
        return NOTHING
