"""The pull engine's bookkeeping of written-off pulls around an inbox swap. Pure: no I/O.

When the engine writes off pulls that may still be alive on the server, the runner moves the
next pulls to a new inbox (``SwapInbox``) and whatever the old ones still send comes marked
``written_off``. When the swap fails (the connection is closing, too many old inboxes), the
old inbox stays in use: the statuses of the written-off pulls then come there, unmarked, and
the engine cannot tell them from the statuses of its live pulls. Their pending counts were
taken off once already (by the write-off), so :class:`WriteOffs` keeps them as a *ghost*
budget: a status on the inbox in use takes its ``Nats-Pending-*`` counts from the budget
first (:meth:`WriteOffs.absorb`). A live pull's status taken for a ghost's leaves the count
too high (fewer messages asked for, never more than ``max_messages`` / ``max_bytes``; the
heartbeat check heals it). A status marked ``written_off`` during the swap is not taken off
the budget: it may be one of an older swap's pulls, and a budget too big only errs on the
safe side. The budget is forgotten once the written-off pulls have expired
on the server (``expires`` + 1 s after the failed swap, at the next tick).
"""

from __future__ import annotations

__all__ = ["WriteOffs"]

#: the budget is kept this long past a pull's expiry (the server's last status may be late)
_GRACE = 1.0


class WriteOffs:
    """Written-off pulls whose statuses may still come: during an inbox swap, and after a failed one."""

    __slots__ = ("swaps", "wo_n", "wo_b", "ghost_n", "ghost_b", "ghost_until")

    def __init__(self) -> None:
        #: pulls written off by the write-off whose swap is under way (open again if it fails)
        self.swaps = 0
        #: messages / bytes that write-off took off (what their statuses may still report)
        self.wo_n = 0
        self.wo_b = 0
        #: after a failed swap: what the written-off pulls' statuses on the inbox in use may report
        self.ghost_n = 0
        self.ghost_b = 0
        self.ghost_until: float | None = None

    def __repr__(self) -> str:
        return f"<WriteOffs swaps={self.swaps} wo={self.wo_n}/{self.wo_b} ghost={self.ghost_n}/{self.ghost_b}>"

    def started(self, pulls: int, gone_n: int, gone_b: int) -> None:
        """A swap starts: ``pulls`` open pulls written off, ``gone_n`` / ``gone_b`` taken off."""
        self.swaps = pulls
        self.wo_n = max(0, gone_n)
        self.wo_b = max(0, gone_b)

    def more(self, gone_n: int, gone_b: int) -> None:
        """Written off again while the swap is under way."""
        if self.swaps:
            self.wo_n += max(0, gone_n)
            self.wo_b += max(0, gone_b)

    def arrived(self, size: int) -> None:
        """A message of a written-off pull arrived after all (it counts as requested again)."""
        if self.wo_n:
            self.wo_n -= 1
            self.wo_b = max(0, self.wo_b - size)

    def swapped(self, ok: bool) -> int:
        """The swap is over; returns how many written-off pulls count as open again (failed:
        their statuses come on the inbox in use, and what they may report joins the budget)."""
        reopen = 0
        if not ok and self.swaps:
            reopen = self.swaps
            self.ghost_n += self.wo_n
            self.ghost_b += self.wo_b
            self.ghost_until = None  # counted from the next tick
        self.swaps = self.wo_n = self.wo_b = 0
        return reopen

    def absorb(self, pending_msgs: int, pending_bytes: int) -> tuple[int, int]:
        """A status on the inbox in use: the part of its counts that is not a ghost's."""
        g = min(pending_msgs, self.ghost_n)
        self.ghost_n -= g
        gb = min(pending_bytes, self.ghost_b)
        self.ghost_b -= gb
        return pending_msgs - g, pending_bytes - gb

    def tick(self, now: float, expires: float) -> None:
        """The engine's timer at ``now``: the budget is forgotten once the ghosts expired."""
        if self.ghost_until is not None:
            if now >= self.ghost_until:
                self.clear()
        elif self.ghost_n or self.ghost_b:
            self.ghost_until = now + expires + _GRACE

    def clear(self) -> None:
        """No written-off pull can report anything any more (expired, a new consumer)."""
        self.ghost_n = self.ghost_b = 0
        self.ghost_until = None
