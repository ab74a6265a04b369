"""A write task's publisher: rows published with a reply subject per row, PubAcks counted in bulk.

Each row goes out as a plain publish on the connection's outgoing queue with the reply
subject ``<inbox>.<row>``; one core subscription on ``<inbox>.*`` (no callback: its queue)
receives every PubAck. The publishing thread reads the queue now and then, in bulk, and
counts: stored, duplicates, the lowest and highest stream sequence. There is no Future,
no reply-table entry and no I/O-thread work per row beyond handing the reply to the
queue; what a row needs afterwards (its subject, payload and headers, for a resend after
a 503 and for the error text) is one dict entry, dropped when its PubAck comes.

What it keeps of ``publish_async``: at most ``max_pending`` rows without a PubAck (a
publish waits, never drops), a PubAck timeout per row (``timeout`` after the row was
published, measured in chunks of 256 rows), the resends while no stream answers (503,
``retry_attempts`` times after ``retry_wait``, 2 x ``retry_wait``, ... within the timeout),
and the error of a failed PubAck (``_parse_pub_ack``'s), raised as :class:`_RowFailed`
naming the row.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from ..base.errors import SubscriptionClosedError, TimeoutError
from ..base.status import is_no_responders
from ..jetstream.replies import _parse_pub_ack
from .errors import _RowFailed

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg

#: A plain PubAck as the server writes it (a duplicate's with a space before ``true``): the
#: sequence, and whether it is a duplicate. Anything else goes through ``_parse_pub_ack``.
_PLAIN_ACK = re.compile(rb'\{"stream":"[^"\\]+","seq":(\d+)(,"duplicate": ?true)?\}\Z')

#: Rows per timestamp of the PubAck timeout (the timeout of a row is counted from its chunk's start).
_CHUNK_SHIFT = 8


class RowPublisher:
    """Publish checked rows with per-row reply subjects and count their PubAcks (one thread).

    Not thread-safe: the task's publishing thread makes every call. ``stored``,
    ``duplicates``, ``first_seq`` and ``last_seq`` count the PubAcks read so far;
    ``pending`` is the number of rows still without one.
    """

    __slots__ = ("_conn", "_sub", "_inbox", "_plen", "enqueue", "rows", "_times", "_resends", "_tries",
                 "max_pending", "_low", "timeout", "retry_attempts", "retry_wait",
                 "stored", "duplicates", "first_seq", "last_seq")

    def __init__(self, conn: Connection, max_pending: int, timeout: float, retry_attempts: int = 2,
                 retry_wait: float = 0.25) -> None:
        """Subscribe the reply inbox (blocks for the server's confirmation of the SUB).

        Raises:
            jssync.PermissionDeniedError: the server refused the subscription.
        """
        self._conn = conn
        self._inbox = conn.new_inbox()
        self._plen = len(self._inbox) + 1
        # every PubAck of the window fits in the queue (more would be dropped as a slow consumer)
        self._sub = conn.subscribe(self._inbox + ".*", pending_msgs_limit=max(65536, 2 * max_pending))
        # without a reconnect buffer limit a row goes straight on the outgoing queue (what
        # Connection.publish does after its checks, which the caller has made); with one,
        # through Connection.publish, which counts it against the limit while disconnected
        #: The connection's enqueue, or None: publish through Connection.publish.
        self.enqueue: Any = conn.internal.enqueue if conn.internal.offline_limit is None else None
        #: row -> (subject, data, headers) of every row still without a PubAck, oldest first.
        self.rows: dict[int, tuple[str, bytes, dict[str, str] | None]] = {}
        self._times: dict[int, float] = {}  # row >> _CHUNK_SHIFT -> when its first row was published
        self._resends: list[tuple[float, int]] = []  # (when, row) after a 503
        self._tries: dict[int, int] = {}  # row -> resends so far
        self.max_pending = max_pending
        self._low = max_pending - max(1, max_pending // 4)
        self.timeout = timeout
        self.retry_attempts = retry_attempts
        self.retry_wait = retry_wait
        self.stored = 0
        self.duplicates = 0
        self.first_seq: int | None = None
        self.last_seq: int | None = None

    @property
    def pending(self) -> int:
        return len(self.rows)

    @property
    def reply_prefix(self) -> str:
        """``<inbox>.``: a row's reply subject is this plus the row number."""
        return self._inbox + "."

    def publish(self, row: int, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        """Publish one checked row (rows are numbered 0, 1, ... in order); may wait for room.

        The caller calls :meth:`mark` with the row number before the first row of each
        Arrow batch (the start of the row's PubAck timeout); every 256th row marks itself.

        Raises:
            _RowFailed: a PubAck read while waiting for room failed.
            jssync.ConnectionClosedError, jssync.ReconnectBufferExceededError.
        """
        if not row & ((1 << _CHUNK_SHIFT) - 1):
            self._times[row >> _CHUNK_SHIFT] = time.monotonic()
        if len(self.rows) >= self.max_pending:
            self.wait_room()
        self.rows[row] = (subject, data, headers)
        self.send(row, subject, data, headers)

    def send(self, row: int, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        """Hand a row to the connection (its entry in :attr:`rows` made by the caller)."""
        if self.enqueue is not None:
            self.enqueue((subject, data, f"{self._inbox}.{row}", headers))
        else:
            self._conn.publish(subject, data, reply=f"{self._inbox}.{row}", headers=headers)

    def mark(self, row: int) -> None:
        """Start the PubAck timeout of row ``row``'s chunk of 256 rows now."""
        self._times[row >> _CHUNK_SHIFT] = time.monotonic()

    # -- reading the PubAcks ---------------------------------------------------------------

    def poll(self) -> None:
        """Count the PubAcks received so far, resend what is due, check the oldest row's timeout.

        Raises:
            _RowFailed: a PubAck failed, or the oldest row's did not come within the timeout.
        """
        sub = self._sub
        n = sub.pending_msgs
        if n:
            self._count(sub, n)
        if self._resends:
            self._resend_due()
        self._check_timeout()

    def _count(self, sub: Any, n: int) -> None:
        pending = self.rows
        plen = self._plen
        match = _PLAIN_ACK.match
        stored = self.stored
        dups = self.duplicates
        lo = self.first_seq
        hi = self.last_seq
        nxt = sub.next_msg
        try:
            for _ in range(n):
                m = nxt(0)
                row = int(m.subject[plen:])
                ack = match(m.data) if m.headers is None else None
                if ack is None:  # it counts into the attributes: hand them the counts so far, then take them back
                    self.stored, self.duplicates, self.first_seq, self.last_seq = stored, dups, lo, hi
                    self._slow(m, row)  # may raise _RowFailed (the finally keeps the same counts)
                    stored, dups, lo, hi = self.stored, self.duplicates, self.first_seq, self.last_seq
                    continue
                if pending.pop(row, None) is None:
                    continue  # a second reply (resent after a 503) or a row already failed
                if ack[2] is not None:
                    dups += 1
                    continue
                stored += 1
                seq = int(ack[1])
                if lo is None or seq < lo:
                    lo = seq
                if hi is None or seq > hi:
                    hi = seq
        finally:
            self.stored = stored
            self.duplicates = dups
            self.first_seq = lo
            self.last_seq = hi

    def _slow(self, m: Msg, row: int) -> None:
        """A reply other than a plain PubAck: a 503 (resend), a PubAck with a domain, or an error."""
        entry = self.rows.get(row)
        if entry is None:
            return
        if m.headers and not m.data and is_no_responders(m.headers, m.data):
            n = self._tries.get(row, 0)
            delay = self.retry_wait * (n + 1)
            start = self._times.get(row >> _CHUNK_SHIFT, time.monotonic())
            if n < self.retry_attempts and time.monotonic() + delay < start + self.timeout:
                self._tries[row] = n + 1
                self._resends.append((time.monotonic() + delay, row))
                return
        try:
            ack = _parse_pub_ack(m)
        except Exception as exc:  # noqa: BLE001 - the row's error
            del self.rows[row]
            raise _RowFailed(row, entry[0], exc) from None
        del self.rows[row]
        if ack.duplicate:
            self.duplicates += 1
            return
        self.stored += 1
        self.first_seq = ack.seq if self.first_seq is None else min(self.first_seq, ack.seq)
        self.last_seq = ack.seq if self.last_seq is None else max(self.last_seq, ack.seq)

    def _resend_due(self) -> None:
        now = time.monotonic()
        due = [r for t, r in self._resends if t <= now]
        if not due:
            return
        self._resends = [(t, r) for t, r in self._resends if t > now]
        for row in due:
            entry = self.rows.get(row)
            if entry is not None:  # not failed meanwhile
                self.send(row, *entry)

    def _oldest_overdue(self) -> int | None:
        row = next(iter(self.rows), None)
        if row is None:
            return None
        start = self._times.get(row >> _CHUNK_SHIFT)
        if start is not None and time.monotonic() >= start + self.timeout:
            return row
        return None

    def _check_timeout(self) -> None:
        row = self._oldest_overdue()
        if row is None:
            return
        subject = self.rows.pop(row)[0]
        state = self._conn.internal.link_state()
        raise _RowFailed(row, subject, TimeoutError(
            f"no PubAck for the publish on {subject!r} within the publish timeout of {self.timeout}s"
            + (f": {state}" if state else "")))

    def _wait_one(self, seconds: float) -> None:
        """Wait up to ``seconds`` (in slices of at most 0.1 s) for a reply, then count what came."""
        sub = self._sub
        try:
            m = sub.next_msg(timeout=max(0.0, min(0.1, seconds)))
        except TimeoutError:
            self.poll()
            return
        except SubscriptionClosedError:
            self._conn.internal.check_open()  # the connection's error, if it closed
            raise
        self._count_one_then_rest(m)

    def _count_one_then_rest(self, first: Msg) -> None:
        # put the message back in line by counting it alone, then the rest in bulk
        row = int(first.subject[self._plen:])
        ack = _PLAIN_ACK.match(first.data) if first.headers is None else None
        if ack is None:
            self._slow(first, row)
        elif self.rows.pop(row, None) is not None:
            if ack[2] is not None:
                self.duplicates += 1
            else:
                seq = int(ack[1])
                self.stored += 1
                self.first_seq = seq if self.first_seq is None else min(self.first_seq, seq)
                self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
        self.poll()

    def wait_room(self) -> None:
        """Wait until at most 3/4 of ``max_pending`` rows are without a PubAck (never drops).

        Raises:
            _RowFailed: a PubAck failed or timed out meanwhile.
        """
        self.poll()
        while len(self.rows) > self._low:
            self._wait_one(0.1)

    def wait_all(self, timeout: float) -> None:
        """Wait until every row has its PubAck, at most ``timeout`` seconds.

        Raises:
            _RowFailed: a PubAck failed or a row's timed out meanwhile.
            jssync.TimeoutError: rows are still without a PubAck after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        self.poll()
        while self.rows:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(self.rows)} PubAck(s) still missing after {timeout}s")
            self._wait_one(left)

    def settle_quietly(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the PubAcks still missing, counting them; failures only drop
        their row (for the counts of a failed or stopped task). Never raises."""
        deadline = time.monotonic() + timeout
        while self.rows:
            try:
                self.poll()
                left = deadline - time.monotonic()
                if not self.rows or left <= 0:
                    return
                self._wait_one(left)
            except _RowFailed:
                continue
            except Exception:  # noqa: BLE001 - a closed connection: what is left stays unsettled
                return

    def close(self) -> None:
        """Remove the reply subscription (the connection's close does it too). Never raises."""
        try:
            self._sub.unsubscribe(timeout=1.0)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
