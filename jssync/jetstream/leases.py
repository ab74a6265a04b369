"""Lease keeping for ``consume`` (pure): which messages need a ``+WPI`` now.

A consume pulls up to ``max_messages`` messages ahead, and the server's ``ack_wait`` runs for
each from the moment it was delivered, also while it waits in the consume's buffer or in a
slow handler. Without help, a message that waits longer than ``ack_wait`` is redelivered
while the first copy is still to be handled: a redelivery storm with a slow handler. So a
consume keeps a lease on every message it received and that has no terminal ack yet, and
sends an in-progress ack (``+WPI``, which restarts the server's ack wait) for each one whose
ack wait is half over, until the message was acked, nak'ed or terminated, or until
:data:`MAX_EXTENSION` seconds after it was received (then the server's ack wait runs out
as usual and it is redelivered: a message forgotten by the application is not held
forever).

This module only decides; it reads no clock and sends nothing. The consume's timer (on
the I/O loop, see ``ConsumeContext._lease_tick``) feeds it the leases and the time, and
sends the in-progress acks it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

#: The longest a consume keeps a message's lease, counted from its receipt (seconds).
MAX_EXTENSION = 600.0
#: A lease is renewed once this share of ``ack_wait`` has passed since it was last started.
RENEW_AT = 0.5
#: The lease check runs every ``ack_wait`` x this (see :func:`check_period`): with the
#: coarse receipt times (see ``ConsumeContext._lease_tick``) a renewal goes out at most
#: ``RENEW_AT + 2 x PERIOD_SHARE`` = 75 % of ``ack_wait`` after the previous one started.
PERIOD_SHARE = 0.125
#: Bounds of the check period (seconds).
MIN_PERIOD = 0.05
MAX_PERIOD = 5.0


class Lease:
    """One message watched by the leaser: ``received`` and ``renewed`` are loop times (seconds)."""

    __slots__ = ("item", "received", "renewed")

    def __init__(self, item: Any, received: float) -> None:
        self.item = item
        self.received = received
        self.renewed = received  # when the server's ack wait (last) started

    def __repr__(self) -> str:
        return f"Lease({self.item!r}, received={self.received}, renewed={self.renewed})"


class LeasePlan(NamedTuple):
    """What :func:`plan_leases` decided."""

    #: renew these now (send ``+WPI``; then set ``renewed`` to the time of the check)
    extend: list[Lease]
    #: the leases to watch from now on (``extend`` is part of it)
    keep: list[Lease]
    #: how many leases were given up because they reached ``max_extension``
    expired: int


def check_period(ack_wait: float) -> float:
    """How often the lease check should run for a consumer with this ``ack_wait`` (seconds)."""
    return min(MAX_PERIOD, max(MIN_PERIOD, ack_wait * PERIOD_SHARE))


def plan_leases(leases: Sequence[Lease], now: float, ack_wait: float, max_extension: float,
                done: Callable[[Any], bool]) -> LeasePlan:
    """Decide which leases to renew now, which to keep watching, and which to give up.

    Args:
        leases: the leases watched so far.
        now: the time of this check (the same clock as the leases' times).
        ack_wait: the consumer's ack wait (seconds, > 0).
        max_extension: leases received this long ago or longer are given up (not renewed).
        done: whether a lease's item needs no lease any more (a terminal ack was sent).

    Returns:
        A :class:`LeasePlan`: a lease whose item is ``done`` is dropped; one received
        ``max_extension`` or more ago is dropped and counted in ``expired``; one whose ack
        wait started ``RENEW_AT x ack_wait`` or more ago is in ``extend`` (and ``keep``);
        the rest are in ``keep``.
    """
    renew_after = ack_wait * RENEW_AT
    give_up_before = now - max_extension
    extend: list[Lease] = []
    keep: list[Lease] = []
    expired = 0
    for lease in leases:
        if done(lease.item):
            continue
        if lease.received <= give_up_before:
            expired += 1
            continue
        if now - lease.renewed >= renew_after:
            extend.append(lease)
        keep.append(lease)
    return LeasePlan(extend, keep, expired)
