"""A write task's publisher: rows published with a reply subject per row, PubAcks counted as they come.

Each row goes out as a plain publish on the connection's outgoing queue with the reply
subject ``<inbox>.<row>``; one subscription on ``<inbox>.*`` receives every PubAck. Its
receiver (:class:`_Acks`, a :class:`jssync.core.natspy.Receiver`) counts a plain PubAck
on the I/O thread as nats-py hands it over: the row's entry dropped, stored or duplicate
counted, the lowest and highest stream sequence kept. There is no queue, Future or
reply-table entry per row, and the publishing thread is woken only when it waits (for
room in the window, or for the last PubAcks) and the wait is over. Any other reply (a
503, an error, a PubAck with a domain) is handed to the publishing thread, which looks at
it the next time it polls. What a row needs afterwards (its subject, payload and headers,
for a resend after a 503 and for the error text) is one dict entry, dropped when its
PubAck comes.

What it keeps of ``publish_async``: at most ``max_pending`` rows without a PubAck (a
publish waits, never drops), a PubAck timeout per row (``timeout`` after the row was
published, measured in chunks of 256 rows), the resends of a reply worth retrying
(:func:`jssync.base.errors.worth_retrying`: no stream answered, 503) on publish_async's
schedule (:func:`jssync.jetstream.resend.resend_delay`: ``retry_attempts`` times after
``retry_wait``, 2 x ``retry_wait``, ... within the timeout), and the error of a failed
PubAck (``_parse_pub_ack``'s), raised as :class:`_RowFailed` naming the row.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ..base.errors import TimeoutError, translating, worth_retrying
from ..core import natspy as _natspy
from ..jetstream.consume.common import _unsubscribe_soon
from ..jetstream.replies import _parse_pub_ack
from ..jetstream.resend import resend_delay
from .errors import _RowFailed

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg

#: A plain PubAck as the server writes it (a duplicate's with a space before ``true``): the
#: sequence, and whether it is a duplicate. Anything else goes through ``_parse_pub_ack``.
_PLAIN_ACK = re.compile(rb'\{"stream":"[^"\\]+","seq":(\d+)(,"duplicate": ?true)?\}\Z')

#: Rows per timestamp of the PubAck timeout (the timeout of a row is counted from its chunk's start).
_CHUNK_SHIFT = 8

#: Above any stream sequence (a uint64): the lowest sequence before the first PubAck.
_NO_SEQ = 1 << 64


class _Acks(_natspy.Receiver):
    """The reply inbox's receiver: counts plain PubAcks on the I/O thread, hands on the rest.

    A plain PubAck (``{"stream":"S","seq":N}``, or a duplicate's) drops its row's entry
    from ``rows`` and is counted here; the I/O thread is the only writer of the counts.
    The PubAck of a row without an entry (failed meanwhile, or answered already) is not
    counted; the row is dropped before its PubAck is counted (which decides between the
    receiver and a publishing thread failing the row), so the publishing thread reads the
    counts after :meth:`settled`. Every other reply goes on ``odd`` for the publishing
    thread. While the publishing thread waits (``want`` >= 0) the receiver sets ``ready``
    once the rows without a PubAck are down to ``want``, or a reply went on ``odd``.
    """

    __slots__ = ("rows", "plen", "head", "hlen", "stored", "duplicates", "lo", "hi", "odd", "want", "ready", "busy")

    def __init__(self, rows: dict[int, Any], plen: int) -> None:
        self.rows = rows
        self.plen = plen  # len("<inbox>.")
        # the PubAck up to its sequence, b'{"stream":"S","seq":', learned from the first
        # plain PubAck (a stream's next ones need no regular expression)
        self.head = b"\x00"
        self.hlen = 1
        self.stored = 0
        self.duplicates = 0
        self.lo = _NO_SEQ
        self.hi = -1
        self.odd: deque[Msg] = deque()
        self.want = -1
        self.ready = threading.Event()
        self.busy = False  # between dropping a row and counting its PubAck

    def put_nowait(self, msg: Msg) -> None:
        # (I/O thread) the common PubAck: the learned head, digits, "}"
        d = msg.data
        if msg.headers is None and d.startswith(self.head) and d.endswith(b"}"):
            tail = d[self.hlen:-1]
            if tail.isdigit():
                try:
                    row = int(msg.subject[self.plen:])
                except ValueError:
                    pass
                else:
                    self.busy = True
                    try:
                        rows = self.rows
                        if rows.pop(row, None) is not None:
                            seq = int(tail)
                            self.stored += 1
                            if seq > self.hi:
                                self.hi = seq
                            if seq < self.lo:
                                self.lo = seq
                            if len(rows) <= self.want:
                                self.want = -1
                                self.ready.set()
                    finally:
                        self.busy = False
                    return
        self._other(msg)

    def _other(self, msg: Msg) -> None:
        # (I/O thread) a plain PubAck of another stream, a duplicate's; else the publishing thread's
        m = _PLAIN_ACK.match(msg.data) if msg.headers is None else None
        if m is not None:
            try:
                row = int(msg.subject[self.plen:])
            except ValueError:
                row = -1
            if row >= 0:
                if m[2] is None:
                    self.head = msg.data[:m.start(1)]
                    self.hlen = len(self.head)
                self.busy = True
                try:
                    rows = self.rows
                    if rows.pop(row, None) is not None:
                        if m[2] is not None:
                            self.duplicates += 1
                        else:
                            seq = int(m[1])
                            self.stored += 1
                            if seq > self.hi:
                                self.hi = seq
                            if seq < self.lo:
                                self.lo = seq
                        if len(rows) <= self.want:
                            self.want = -1
                            self.ready.set()
                finally:
                    self.busy = False
                return
        self.odd.append(msg)
        if self.want >= 0:
            self.want = -1
            self.ready.set()

    def settled(self) -> _Acks:
        """(Publishing thread) wait until the receiver is not between dropping a row and
        counting its PubAck (the counts then include every row gone from ``rows``)."""
        end = time.monotonic() + 1.0
        while self.busy and time.monotonic() < end:
            time.sleep(0.0001)  # (lets the I/O thread finish: a few bytecodes)
        return self


class RowPublisher:
    """Publish checked rows with per-row reply subjects and count their PubAcks.

    Not thread-safe: the task's publishing thread makes every call (the I/O thread counts
    the plain PubAcks, see :class:`_Acks`). ``stored``, ``duplicates``, ``first_seq`` and
    ``last_seq`` count the PubAcks received so far; ``pending`` is the number of rows
    still without one; ``resent`` the resends made after a reply worth retrying.
    """

    __slots__ = ("_conn", "_nsub", "_acks", "_inbox", "_plen", "enqueue", "rows", "_times", "_resends", "_tries",
                 "max_pending", "_low", "timeout", "retry_attempts", "retry_wait", "_oldest", "_stored",
                 "_duplicates", "_lo", "_hi", "resent")

    def __init__(self, conn: Connection, max_pending: int, timeout: float, retry_attempts: int = 2,
                 retry_wait: float = 0.25) -> None:
        """Subscribe the reply inbox (blocks for the server's confirmation of the SUB).

        Raises:
            jssync.PermissionDeniedError: the server refused the subscription.
        """
        self._conn = conn
        self._inbox = conn.new_inbox()
        self._plen = len(self._inbox) + 1
        #: row -> the row as queued, (subject, data, reply subject, headers), of every row
        #: still without a PubAck (rows are added in order; the I/O thread drops a row when
        #: its PubAck comes; a resend queues the same tuple again).
        self.rows: dict[int, tuple[str, bytes, str, dict[str, str] | None]] = {}
        self._acks = _Acks(self.rows, self._plen)
        subject = self._inbox + ".*"
        # the server's answer to a SUB of the inbox (a refusal raises here); the receiving
        # subscription made next is the same SUB without the round trip
        conn.subscribe(subject).unsubscribe()
        acks = self._acks

        async def _sub() -> Any:
            with translating():
                return await _natspy.subscribe(conn.internal.nc, subject, acks)

        self._nsub: Any = conn.run(_sub(), (conn.internal.timeout or 5.0) + 5.0, "subscribe")
        # without a reconnect buffer limit a row goes straight on the outgoing queue (what
        # Connection.publish does after its checks, which the caller has made); with one,
        # through Connection.publish, which counts it against the limit while disconnected
        #: The connection's enqueue, or None: publish through Connection.publish.
        self.enqueue: Any = conn.internal.enqueue if conn.internal.offline_limit is None else None
        self._times: dict[int, float] = {}  # row >> _CHUNK_SHIFT -> when its first row was published
        self._resends: list[tuple[float, int]] = []  # (when, row) after a reply worth retrying
        self._tries: dict[int, int] = {}  # row -> resends so far
        self.max_pending = max_pending
        self._low = max_pending - max(1, max_pending // 4)
        self.timeout = timeout
        self.retry_attempts = retry_attempts
        self.retry_wait = retry_wait
        self._oldest = 0  # no row below it is without a PubAck
        # what the publishing thread counts (the replies the receiver hands on)
        self._stored = 0
        self._duplicates = 0
        self._lo = _NO_SEQ
        self._hi = -1
        self.resent = 0

    @property
    def pending(self) -> int:
        return len(self.rows)

    @property
    def stored(self) -> int:
        """Rows whose PubAck says stored (every row gone from :attr:`rows` with a PubAck is counted)."""
        return self._acks.settled().stored + self._stored

    @property
    def duplicates(self) -> int:
        """Rows whose PubAck says duplicate."""
        return self._acks.settled().duplicates + self._duplicates

    @property
    def first_seq(self) -> int | None:
        """The lowest stream sequence of a stored row, or None."""
        lo = min(self._acks.settled().lo, self._lo)
        return None if lo == _NO_SEQ else lo

    @property
    def last_seq(self) -> int | None:
        """The highest stream sequence of a stored row, or None."""
        hi = max(self._acks.settled().hi, self._hi)
        return None if hi < 0 else hi

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
        item = self.rows[row] = (subject, data, f"{self._inbox}.{row}", headers)
        self.send(item)

    def send(self, item: tuple[str, bytes, str, dict[str, str] | None]) -> None:
        """Hand a row as queued, ``(subject, data, reply subject, headers)``, to the connection
        (its entry in :attr:`rows` made by the caller)."""
        if self.enqueue is not None:
            self.enqueue(item)
        else:
            self._conn.publish(item[0], item[1], reply=item[2], headers=item[3])

    def mark(self, row: int) -> None:
        """Start the PubAck timeout of row ``row``'s chunk of 256 rows now."""
        self._times[row >> _CHUNK_SHIFT] = time.monotonic()

    # -- the replies the receiver hands on, resends, timeouts -------------------------------

    def poll(self) -> None:
        """Look at the replies other than plain PubAcks, resend what is due, check the oldest row's timeout.

        Raises:
            _RowFailed: a PubAck failed, or the oldest row's did not come within the timeout.
        """
        if self._acks.odd:
            self._take_odd()
        if self._resends:
            self._resend_due()
        self._check_timeout()

    def _take_odd(self) -> None:
        odd = self._acks.odd
        plen = self._plen
        while odd:
            m = odd.popleft()
            try:
                row = int(m.subject[plen:])
            except ValueError:
                continue  # not a row's reply
            self._slow(m, row)  # may raise _RowFailed (the rest waits for the next poll)

    def _slow(self, m: Msg, row: int) -> None:
        """A reply other than a plain PubAck: resent when worth retrying, else a PubAck (with a domain...)
        or the row's error."""
        entry = self.rows.get(row)
        if entry is None:
            return  # failed meanwhile, or answered already
        try:
            ack = _parse_pub_ack(m)
        except Exception as exc:  # noqa: BLE001 - the row's error
            if worth_retrying(exc):
                n = self._tries.get(row, 0)
                now = time.monotonic()
                start = self._times.get(row >> _CHUNK_SHIFT, now)
                delay = resend_delay(n, self.retry_attempts, self.retry_wait, now, start + self.timeout)
                if delay is not None:
                    self._tries[row] = n + 1
                    self._resends.append((now + delay, row))
                    return
            if self.rows.pop(row, None) is None:
                return
            raise _RowFailed(row, entry[0], exc) from None
        if self.rows.pop(row, None) is None:
            return
        if ack.duplicate:
            self._duplicates += 1
            return
        self._stored += 1
        self._lo = min(self._lo, ack.seq)
        self._hi = max(self._hi, ack.seq)

    def _resend_due(self) -> None:
        now = time.monotonic()
        due = [r for t, r in self._resends if t <= now]
        if not due:
            return
        self._resends = [(t, r) for t, r in self._resends if t > now]
        for row in due:
            entry = self.rows.get(row)
            if entry is not None:  # not failed meanwhile
                self.resent += 1
                self.send(entry)

    def _oldest_overdue(self) -> int | None:
        # rows are added in order and only dropped: the oldest row without a PubAck is the
        # first one at or after the last oldest still in ``rows`` (the I/O thread may drop
        # rows meanwhile, so every step looks whether any is left)
        rows = self.rows
        if not rows:
            return None
        now = time.monotonic()
        start = self._times.get(self._oldest >> _CHUNK_SHIFT)
        if start is not None and now < start + self.timeout:
            # the oldest row waiting is at or after _oldest, and a later chunk's clock
            # started no earlier: nothing is overdue (no need to look for it)
            return None
        row = self._oldest
        while row not in rows:
            if not rows:
                self._oldest = row
                return None
            row += 1
        self._oldest = row
        start = self._times.get(row >> _CHUNK_SHIFT)
        if start is not None and now >= start + self.timeout:
            return row
        return None

    def _check_timeout(self) -> None:
        row = self._oldest_overdue()
        if row is None:
            return
        entry = self.rows.pop(row, None)
        if entry is None:
            return  # its PubAck came just now
        subject = entry[0]
        state = self._conn.internal.link_state()
        raise _RowFailed(row, subject, TimeoutError(
            f"no PubAck for the publish on {subject!r} within the publish timeout of {self.timeout}s"
            + (f": {state}" if state else "")))

    def _wait(self, level: int, seconds: float) -> None:
        """Wait up to ``seconds`` (at most 0.1 s) until at most ``level`` rows are without a
        PubAck or another reply came, then :meth:`poll`.

        Raises:
            _RowFailed: from :meth:`poll`.
            jssync.ConnectionClosedError: the connection closed.
        """
        acks = self._acks
        ready = acks.ready
        ready.clear()
        acks.want = level  # (set before looking: a PubAck after the look sets ``ready``)
        if len(self.rows) > level and not acks.odd:
            ready.wait(max(0.0, min(0.1, seconds)))
        acks.want = -1
        internal = self._conn.internal
        if internal.closed or internal.close_error is not None:
            internal.check_open()  # the connection's error
        self.poll()

    def wait_room(self) -> None:
        """Wait until at most 3/4 of ``max_pending`` rows are without a PubAck (never drops).

        Raises:
            _RowFailed: a PubAck failed or timed out meanwhile.
            jssync.ConnectionClosedError: the connection closed.
        """
        self.poll()
        low = self._low
        while len(self.rows) > low:
            self._wait(low, 0.1)

    def wait_all(self, timeout: float) -> None:
        """Wait until every row has its PubAck, at most ``timeout`` seconds.

        Raises:
            _RowFailed: a PubAck failed or a row's timed out meanwhile.
            jssync.TimeoutError: rows are still without a PubAck after ``timeout``.
            jssync.ConnectionClosedError: the connection closed.
        """
        deadline = time.monotonic() + timeout
        self.poll()
        while self.rows:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(self.rows)} PubAck(s) still missing after {timeout}s")
            self._wait(0, left)

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
                self._wait(0, left)
            except _RowFailed:
                continue
            except Exception:  # noqa: BLE001 - a closed connection: what is left stays unsettled
                return

    def close(self) -> None:
        """Remove the reply subscription (the connection's close does it too). Never raises."""
        nsub, self._nsub = self._nsub, None
        try:
            _unsubscribe_soon(self._conn, nsub)
        except Exception:  # noqa: BLE001 - closing anyway
            pass
