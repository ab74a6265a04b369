"""Fast-ingest batch publishing with server flow control (ADR-50, "Fast-ingest Batch Publishing").

A fast-ingest batch streams messages into one stream (``allow_batched=True``; nats-server
2.14+, JetStream API level 4) without waiting for a PubAck per message. The batch's state
travels in each message's reply subject,
``<inbox>.<flow>.<gap>.<batch seq>.<operation>.$FI``, and the server answers on that
inbox (one subscription, ``<inbox>.>``, for the whole batch) with:

- a flow ack, ``{"type":"ack","seq":n,"msgs":m}``, every ``m`` messages: everything up to
  batch sequence ``n`` was handled, and the next ack comes ``m`` messages later (the server
  may lower ``m`` below the ``flow`` the client asked for, and raise it again, never above);
- a gap report, ``{"type":"gap","last_seq":a,"seq":b}``: messages ``a`` .. ``b - 1`` were
  lost; with gap mode ``fail`` the server then ends the batch;
- an error report, ``{"type":"err","seq":n,"error":{...}}``: message ``n`` failed a check
  (e.g. ``expected_last_seq``); with ``fail`` the batch ends there;
- one final PubAck (``batch``, ``count``, the last stream sequence) or an error reply, which
  ends the batch.

The publisher keeps at most ``flow x max_outstanding_acks`` messages beyond the last flow
ack in flight: :meth:`FastPublisher.add` waits (in short slices, up to its timeout) until
the server's acks open the window again. It pings the batch (operation 4) while it waits,
which makes the server resend its last flow ack (a lost ack cannot stall it) and keeps a
quiet batch from being abandoned after 10 s. :meth:`FastPublisher.close` ends the batch
without storing another message (operation 3, "EOB") and returns the final PubAck.

The pure part (reply subjects, reading the server's messages, the flow window and the
batch's bookkeeping) is :mod:`jssync.jetstream.fastbatch`; :class:`FastPublisher` here does
the I/O on top of it (its base class :class:`~jssync.jetstream.fastbatch.FastBatch`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout
from ..base.errors import TimeoutError, ValidationError, translating
from ..core import natspy as _natspy
from .fastbatch import (
    DEFAULT_FLOW,
    DEFAULT_MAX_OUTSTANDING_ACKS,
    OP_APPEND,
    OP_EOB,
    OP_PING,
    OP_START,
    FastBatch,
    check_options,
    parse_reply,
    reply_subject,
)

if TYPE_CHECKING:
    from types import TracebackType

    from .context import JetStream

log = logging.getLogger("jssync")


#: The longest time between pings while a call waits (the server drops a batch it hears
#: nothing of for 10 s).
PING_MAX = 2.0


class FastPubAck(NamedTuple):
    """What :meth:`FastPublisher.add` returns.

    Attributes:
        batch_seq: the batch sequence of the message just added (1, 2, ...).
        ack_seq: the highest batch sequence the server has acknowledged so far. With
            ``gap="fail"`` every message up to it is stored; with ``gap="ok"`` some of
            them may have been lost (see :attr:`FastPublisher.gaps`).
    """

    batch_seq: int
    ack_seq: int



# -- the publisher (I/O) -----------------------------------------------------------------------


class _Inbox(_natspy.Receiver):
    """The batch inbox's receiver: runs on the I/O thread, one short locked update per message."""

    __slots__ = ("fp",)

    def __init__(self, fp: FastPublisher) -> None:
        self.fp = fp

    def put_nowait(self, msg: Any) -> None:
        self.fp._on_reply(msg.subject, msg.data, msg.headers)


class FastPublisher(FastBatch):
    """A fast-ingest batch (ADR-50): high-rate publishing into one stream, paced by the server.

    Made with :meth:`jssync.JetStream.fast_publisher`; use it as a context manager::

        with js.fast_publisher() as fp:
            for i in range(100_000):
                fp.add("METRICS.cpu", b"...")
        print(fp.ack.batch_size, fp.ack.seq)

    Unlike an atomic batch (:class:`jssync.BatchPublisher`), messages are sent as they are
    added and stored as the stream gets them, with no limit on the batch's size; the batch
    is not atomic. Every message must go to the same stream (the one capturing the first
    subject, which needs ``allow_batched=True``).

    - :meth:`add` sends one message. The first waits for the server's first reply (the
      stream refuses a batch it does not allow at once); after that it blocks only while
      ``flow x max_outstanding_acks`` messages are beyond the server's last flow ack.
    - :meth:`flush` pings the batch and waits for the answer: every ack, gap and error the
      server sent for the messages before it has then been processed.
    - :meth:`close` ends the batch (without storing another message) and returns its
      PubAck; a ``with`` block that ends normally calls it. A block left by an exception
      abandons the batch instead (the server drops it after 10 s; what was sent is stored).

    Gaps (messages lost on the way, e.g. across a reconnect or a stream leader change):
    with ``gap="fail"`` (the default) the server ends the batch at the first one, so what
    is stored is exactly the messages before it, in order; the next call raises
    :class:`jssync.FastPublishGapError`. With ``gap="ok"`` the batch goes on; each gap is
    added to :attr:`gaps`, logged to the ``jssync`` logger and handed to ``error_cb``.

    Thread-safe: several threads may add at once (each message gets the next batch
    sequence in the order it is sent).

    Attributes:
        batch_id: the batch's id (the inbox token the server reports in the PubAck).
        gap: ``"ok"`` or ``"fail"``.
        ack: the final PubAck once the batch ended (``batch_id``; ``seq``: the stream
            sequence of the last message stored; ``batch_size``: the batch's messages up to
            where the server ended it, lost, refused and de-duplicated ones included).
        gaps: the gap reports received (:class:`~jssync.jetstream.fastbatch.Gap`), in order.
        errors: the error reports received (:class:`~jssync.jetstream.fastbatch.FlowError`), in order.
        stalls: how many times :meth:`add` waited for the server's flow acks.
    """

    def __init__(self, js: JetStream, *, gap: str = "fail", flow: int = DEFAULT_FLOW,
                 max_outstanding_acks: int = DEFAULT_MAX_OUTSTANDING_ACKS,
                 timeout: float | None | Default = DEFAULT, error_cb: Any = None) -> None:
        check_options(gap, flow, max_outstanding_acks)
        if error_cb is not None and not callable(error_cb):
            raise ValidationError(f"error_cb must be callable, got {error_cb!r}")
        self._js = js
        self._conn = js.conn
        self.timeout = resolve_timeout(timeout, js.timeout)
        self._error_cb = error_cb
        self._inbox = self._conn.new_inbox()
        # the batch's state (FastBatch): guarded by _cond (the I/O thread updates it in _on_reply)
        super().__init__(self._inbox.rsplit(".", 1)[-1], gap, flow, max_outstanding_acks)
        self._prefix = f"{self._inbox}.{flow}.{gap}."
        self._cond = threading.Condition(threading.Lock())
        self._subject = ""  # the first message's subject: pings and the EOB go there
        self._nsub: Any = None
        self._send_lock = threading.Lock()  # one sender at a time: sequences go out in order

    def __repr__(self) -> str:
        return (f"<jssync.FastPublisher {self.batch_id} gap={self.gap} sent={self._sent} acked={self._acked} "
                f"{self._state}>")

    # -- properties ----------------------------------------------------------------------

    @property
    def sent(self) -> int:
        """Messages sent (the highest batch sequence)."""
        return self._sent

    @property
    def acked(self) -> int:
        """The highest batch sequence the server acknowledged (see :class:`FastPubAck`)."""
        return self._acked

    @property
    def flow(self) -> int:
        """The server's current flow: a flow ack comes every this many messages."""
        return self._flow

    @property
    def closed(self) -> bool:
        """The batch is over (closed, failed or abandoned): nothing more can be added."""
        return self._state in ("closed", "failed", "abandoned")

    # -- adding --------------------------------------------------------------------------

    def add(self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
            msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
            expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
            ttl: float | str | None = None, timeout: float | None | Default = DEFAULT) -> FastPubAck:
        """Send one message in the batch.

        The first call sends the first message and waits for the server's first reply:
        the stream's go-ahead with its flow, or its refusal. Later calls block only while
        the flow window is full (``flow x max_outstanding_acks`` messages beyond the
        server's last flow ack), waiting in slices of 0.1 s and pinging the batch so a
        lost ack cannot stall it. The message is sent after the wait: when this raises,
        it was not sent.

        Per-message options are those of :meth:`jssync.JetStream.publish` (checked by the
        server as for any publish; with ``gap="fail"`` a failed check ends the batch).

        Args:
            timeout: the longest wait for the window or the first reply (default: the
                publisher's ``timeout``; None: no limit).

        Returns:
            :class:`FastPubAck`: this message's batch sequence, and the highest the server
            acknowledged so far.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError,
                jssync.ValidationError: a bad message or option (nothing is sent).
            jssync.NotSupportedError: the server is older than 2.14 (nothing is sent), or
                it did not answer the first message as a fast batch.
            jssync.APIError: the stream refused the batch (err_code 10205: the stream does
                not allow it, ``allow_batched=True`` is needed), or ended it with an error.
            jssync.NoRespondersError: no stream captures the first subject.
            jssync.FastPublishGapError: ``gap="fail"`` and messages were lost: the batch
                ended before the gap (its PubAck is in the error and in :attr:`ack`).
            jssync.TimeoutError: the window did not open (or no first reply came) within
                ``timeout``; this message was not sent. After a timeout on the first
                message the batch is abandoned.
            jssync.ValidationError: the batch is closed.
            jssync.ConnectionClosedError: the connection is closed.
        """
        if headers and any(k.lower().startswith("nats-batch-") for k in headers):
            raise ValidationError("the Nats-Batch-* headers belong to atomic batches (js.batch_publish), "
                                  "not to a fast batch")
        payload, h = self._js._prepare_publish(subject, data, headers, msg_id, expected_stream, expected_last_seq,
                                               expected_last_subject_seq, expected_last_msg_id, ttl)
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        self._check_thread()
        self._lock_sender(deadline)
        try:
            if self._state == "new":
                return self._start(subject, payload, h, deadline)
            self._raise_if_over()
            self._wait_window(deadline)
            self._conn.internal.check_open()
            with self._cond:
                self._raise_if_over_locked()
                seq = self._sent + 1
                self._sent = seq
                acked = self._acked
            self._conn.internal.enqueue((subject, payload, reply_subject(self._prefix, seq, OP_APPEND), h))
            return FastPubAck(seq, acked)
        finally:
            self._send_lock.release()

    def _start(self, subject: str, payload: bytes, h: dict[str, str] | None, deadline: Deadline) -> FastPubAck:
        """Subscribe the inbox, send message 1 and wait for the server's first reply."""
        from .features import require

        require(self._js, "fast batch publish", timeout=deadline.left())
        conn = self._conn
        inbox, sink = f"{self._inbox}.>", _Inbox(self)

        async def _sub() -> Any:
            with translating():
                return await _natspy.subscribe(conn.internal.nc, inbox, sink)

        self._nsub = conn.run(_sub(), deadline, "subscribe")
        with self._cond:
            self._state = "open"
            self._subject = subject
            self._sent = 1
        try:
            conn.internal.enqueue((subject, payload, reply_subject(self._prefix, 1, OP_START), h))
        except BaseException:
            self._end("abandoned")
            raise
        try:
            while True:
                with self._cond:
                    if self._first_reply or self._error is not None:
                        break
                    if deadline.expired():
                        raise TimeoutError(f"no reply to the start of fast batch {self.batch_id} on {subject!r} "
                                           f"within {deadline.timeout}s")
                    self._cond.wait(deadline.slice())
                conn.internal.check_open()
            self._raise_if_over()
            with self._cond:
                return FastPubAck(1, self._acked)
        except BaseException:
            if self._state == "open":
                self._end("abandoned")
            raise

    def _wait_window(self, deadline: Deadline) -> None:
        """Block until the next message fits in the flow window (pinging while it waits)."""
        with self._cond:
            if self._fits():
                return
            self.stalls += 1
        interval = self._ping_interval(deadline)
        next_ping = time.monotonic() + interval
        while True:
            with self._cond:
                self._raise_if_over_locked()
                if self._fits():
                    return
                if deadline.expired():
                    why = (f"; no stream took {self._no_responders} of them (no responders: is there a stream "
                           "leader?)" if self._no_responders else "")
                    raise TimeoutError(
                        f"fast batch {self.batch_id}: the server acknowledged {self._acked} of {self._sent} "
                        f"messages and no flow ack opened the window within {deadline.timeout}s (this message "
                        f"was not sent){why}")
                self._cond.wait(min(deadline.slice(), max(0.0, next_ping - time.monotonic())))
            self._conn.internal.check_open()
            if time.monotonic() >= next_ping:
                self._ping()
                next_ping = time.monotonic() + interval

    # -- flush and close -----------------------------------------------------------------

    def flush(self, timeout: float | None | Default = DEFAULT) -> int:
        """Ping the batch and wait for the server's answer; return the highest acknowledged sequence.

        The server answers a ping after the messages sent before it, with its last flow
        ack: once this returns, every flow ack, gap and error report for those messages
        has been processed. (The server acknowledges every ``flow`` messages, so the ones
        after its last ack are only confirmed by :meth:`close`.) Does nothing before the
        first message.

        Raises:
            jssync.FastPublishGapError, jssync.APIError: the batch ended with a gap or an
                error (see :meth:`add`).
            jssync.TimeoutError: no answer within ``timeout`` (default: the publisher's).
            jssync.ValidationError: the batch is closed.
        """
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        self._check_thread()
        # a ping carries the highest sequence sent: taken with the sender's lock, so it never
        # goes out ahead of the message with that sequence (the server would see a gap)
        self._lock_sender(deadline)
        try:
            if self._state == "new":
                return 0
            self._raise_if_over()
            want = self._ping()
        finally:
            self._send_lock.release()
        interval = self._ping_interval(deadline)
        next_ping = time.monotonic() + interval
        while True:
            with self._cond:
                self._raise_if_over_locked()
                if self._pongs >= want:
                    return self._acked
                if deadline.expired():
                    raise TimeoutError(f"fast batch {self.batch_id}: no answer to a ping within {deadline.timeout}s")
                self._cond.wait(min(deadline.slice(), max(0.0, next_ping - time.monotonic())))
            self._conn.internal.check_open()
            if time.monotonic() >= next_ping:
                if self._send_lock.acquire(blocking=False):  # else an add is sending (and pings if it waits)
                    try:
                        self._ping()
                    finally:
                        self._send_lock.release()
                next_ping = time.monotonic() + interval

    def close(self, timeout: float | None | Default = DEFAULT) -> api.PubAck | None:
        """End the batch and return its final PubAck. Idempotent (returns the same PubAck).

        Sends the end-of-batch marker (ADR-50 operation 3: nothing more is stored) and
        waits for the PubAck, pinging while it waits; the PubAck's ``batch_size`` counts
        the messages stored and ``seq`` is the stream sequence of the last. A batch that
        had no message sends nothing and returns None.

        Raises:
            jssync.FastPublishGapError: ``gap="fail"`` and messages were lost; the batch
                ended before the gap (the PubAck is in the error and in :attr:`ack`).
            jssync.APIError: the server ended the batch with an error (e.g. 10208, the
                batch was unknown: it had been abandoned after 10 s without messages).
            jssync.TimeoutError: no PubAck within ``timeout`` (default: the publisher's);
                the batch is then abandoned.
        """
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        self._check_thread()
        self._lock_sender(deadline)
        try:
            with self._cond:
                state = self._state
                seq = self._sent + 1  # the end-of-batch marker's sequence
                if state == "new":
                    self._state = "closed"
                    return None
            if state == "closed" or (state == "abandoned" and self._error is None):
                return self.ack
            if state in ("failed", "abandoned"):
                self._raise_if_over()
            if state == "open":
                self._conn.internal.check_open()
                with self._cond:
                    self._state = "closing"
                # (never enqueue under _cond: a full publish queue waits for the I/O thread, which takes _cond)
                self._conn.internal.enqueue((self._subject, b"", reply_subject(self._prefix, seq, OP_EOB), None))
            interval = self._ping_interval(deadline)
            next_ping = time.monotonic() + interval
            while True:
                with self._cond:
                    if self._state != "closing":
                        break
                    if deadline.expired():
                        self._state = "abandoned"
                        self._error = TimeoutError(f"fast batch {self.batch_id}: no final PubAck within "
                                                   f"{deadline.timeout}s")
                        self._unsubscribe()
                        raise self._error
                    self._cond.wait(min(deadline.slice(), max(0.0, next_ping - time.monotonic())))
                self._conn.internal.check_open()
                if time.monotonic() >= next_ping:
                    if self._eob_lost:  # no stream leader took it (an election): send it again
                        self._eob_lost = False
                        self._conn.internal.enqueue((self._subject, b"", reply_subject(self._prefix, seq, OP_EOB),
                                                     None))
                    else:
                        self._ping()
                    next_ping = time.monotonic() + interval
            if self._error is not None:
                raise self._error
            return self.ack
        finally:
            self._send_lock.release()

    def abandon(self) -> None:
        """Stop without ending the batch: unsubscribe the inbox and refuse further calls.

        The server drops the batch after 10 s without messages; what was sent is stored.
        Idempotent; never blocks.
        """
        with self._cond:
            if self._state in ("closed", "failed", "abandoned"):
                return
        self._end("abandoned")

    def __enter__(self) -> FastPublisher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.abandon()
        else:
            self.close()

    # -- internals -----------------------------------------------------------------------

    def _check_thread(self) -> None:
        if self._conn.internal.loop.in_loop_thread():
            raise RuntimeError("a FastPublisher cannot block on the connection's I/O thread (it would deadlock)")

    def _lock_sender(self, deadline: Deadline) -> None:
        while not self._send_lock.acquire(timeout=deadline.slice()):
            if deadline.expired():
                raise TimeoutError(f"fast batch {self.batch_id}: another thread kept the publisher busy for "
                                   f"{deadline.timeout}s")

    def _ping_interval(self, deadline: Deadline) -> float:
        t = deadline.timeout
        return min(PING_MAX, max(0.05, (t if t is not None else 6.0) / 3))

    def _ping(self) -> int:
        """Send a ping (the highest sequence sent, operation 4); return its number.

        Called with ``_send_lock`` held (a ping must not overtake the message it names).
        """
        with self._cond:
            self._pings += 1
            n = self._pings
            seq = self._sent
        self._conn.internal.enqueue((self._subject, b"", reply_subject(self._prefix, seq, OP_PING), None))
        return n

    def _raise_if_over(self) -> None:
        with self._cond:
            self._raise_if_over_locked()

    def _end(self, state: str) -> None:
        with self._cond:
            self._state = state
            self._cond.notify_all()
        self._unsubscribe()

    def _unsubscribe(self) -> None:
        nsub, self._nsub = self._nsub, None
        if nsub is not None:
            from .pull import _unsubscribe_soon

            _unsubscribe_soon(self._conn, nsub)

    def _report(self, exc: BaseException) -> None:
        """Hand a gap or error report to ``error_cb`` on the worker pool (and log it with gap="ok":
        with "fail" the next call raises it)."""
        if self.gap == "ok":
            log.warning("%s", exc)
        cb = self._error_cb
        if cb is not None:
            self._conn.internal.pool.submit(self._conn.internal.call_user_cb, cb, exc)

    def _on_reply(self, subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        """One message from the server on the batch inbox (I/O thread)."""
        r = parse_reply(data, headers)
        with self._cond:
            over, report = self._take(subject[-5:-4], r)  # "<seq>.<op>.$FI"
            self._cond.notify_all()
        if report is not None:
            self._report(report)
        if over:
            self._unsubscribe()
