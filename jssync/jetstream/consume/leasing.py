"""Leases of a consume: the in-progress acks (``+WPI``) of the messages it holds.

With an ack policy other than none, every message received and not yet acked, nak'ed or
terminated (in the buffer or being handled) gets a ``+WPI`` whenever half the consumer's
``ack_wait`` passed since its delivery or its last ``+WPI``, for at most
:data:`~jssync.jetstream.leases.MAX_EXTENSION` seconds after its receipt. A timer on the
I/O loop checks every ``ack_wait`` / 8; :func:`~jssync.jetstream.leases.plan_leases` (pure)
decides which are due. Everything here runs on the I/O thread; the intake appends each
message it buffers to ``_fresh``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ...base.errors import Error
from ...core.msg import Msg
from ..leases import MAX_EXTENSION, Lease, check_period, plan_leases
from .engine import EngineState
from .runner import LoopTimer
from .state import FRESH_PRUNE_AT, ConsumeState

if TYPE_CHECKING:
    from ...core.loop import IOLoop

__all__ = ["LeaseKeeper", "Leasing"]

log = logging.getLogger("jssync")


class Leasing:
    """The lease manager: renews the leases of the messages held (I/O thread).

    One for every reader that holds JetStream messages with explicit acks: the pull
    consume (:class:`LeaseKeeper`) and the push subscription
    (:class:`jssync.JetStreamSubscription`). The holder sets the fields below (the
    consumer's ``ack_wait`` in ``_lease_wait``, None: no leases), appends each message it
    buffers to ``_fresh`` (calling :meth:`_prune_fresh` when it reaches ``_fresh_cap``), starts
    :meth:`_lease_tick` on the I/O loop once, and says in :meth:`_leases_over` when no
    message it holds needs a lease any more.
    """

    _lease_wait: float | None
    _lease_timer: LoopTimer
    _fresh: list[Msg]
    _fresh_cap: int
    _leases: list[Lease]
    _lease_stamp: float

    def _init_leases(self, loop: IOLoop, ack_wait: float | None) -> None:
        """Set up the fields (``ack_wait``: the consumer's, seconds; None or <= 0: no leases)."""
        self._lease_wait = ack_wait if ack_wait is not None and ack_wait > 0 else None
        self._lease_timer = LoopTimer(loop, self._lease_tick)
        self._fresh = []
        self._fresh_cap = FRESH_PRUNE_AT
        self._leases = []
        self._lease_stamp = 0.0

    def _leases_over(self) -> bool:
        """True once nothing held needs a lease (the reader is done, or the connection closed)."""
        raise NotImplementedError

    def _lease_holder(self) -> str:
        """What holds the leases, for the log (``stream/consumer``)."""
        raise NotImplementedError

    def _lease_done(self, msg: Msg) -> bool:
        """Whether ``msg`` needs no lease any more (I/O thread): a terminal ack was sent."""
        return bool(msg._acked)

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
        self._fresh_cap = max(FRESH_PRUNE_AT, 2 * len(fresh))

    def _lease_tick(self) -> None:
        """Renew the leases of the messages held longer than half ack_wait (I/O thread).

        The messages received since the previous check count as received at that check
        (earlier than they were: renewed a little early, never late). Runs until the user
        side is over (after a drain, while the iterator or callback works through the
        buffer) or the connection closed; sends ``+WPI`` for each lease that
        :func:`plan_leases` says is due.
        """
        ack_wait = self._lease_wait
        if ack_wait is None or self._leases_over():
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
            self._fresh_cap = FRESH_PRUNE_AT
            leases.extend(Lease(m, stamp) for m in fresh if not m._acked)
        if leases:
            plan = plan_leases(leases, now, ack_wait, MAX_EXTENSION, self._lease_done)
            self._leases = plan.keep
            if plan.expired:
                log.warning("%s: %d message(s) held %ss without a terminal ack: "
                            "their ack wait is no longer extended", self._lease_holder(),
                            plan.expired, MAX_EXTENSION)
            for lease in plan.extend:
                try:
                    lease.item.in_progress()
                except Error:  # closed or closing: nothing more to extend
                    self._leases = []
                    return
                lease.renewed = now
        self._lease_timer.after(check_period(ack_wait))


class LeaseKeeper(Leasing, ConsumeState):
    """The pull consume's leases (its fields are set up by ``ConsumeState``)."""

    def _leases_over(self) -> bool:
        return self._closed.is_set() or self._eng.state is EngineState.CLOSED

    def _lease_holder(self) -> str:
        return f"consume {self.stream}/{self.consumer}"
