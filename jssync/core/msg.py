"""Messages: core fields, JetStream metadata and acknowledgements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..base.deadline import check_timeout
from ..base.deadline import no_wait as _zero_is_no_wait
from ..base.errors import ConnectionClosedError, Error, ForkError, NotJSMessageError, ValidationError
from ..base.jsack import MsgMetadata, parse_ack_subject
from ..base.reprs import Rows, SummaryRepr
from .hooks import HOOKS

if TYPE_CHECKING:
    from .connection import Connection

_ACK = b"+ACK"
_NAK = b"-NAK"
_WPI = b"+WPI"
_TERM = b"+TERM"
#: ADR-15 "JSAck": only a message whose reply subject starts with this is a JetStream message.
_JS_ACK_PREFIX = "$JS.ACK."

#: ``Msg._acked``: no terminal ack yet; a terminal double ack waits for its confirmation;
#: a terminal ack was written (see ``Outbound.send_ack``, core/outbound.py).
ACK_NONE = 0
ACK_WAITING = 1
ACK_SENT = 2


def _nak_payload(delay: float | None) -> bytes:
    if delay is None:
        return _NAK
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise ValidationError(f"nak delay must be a number of seconds >= 0, got {delay!r}")
    return b'-NAK {"delay": %d}' % int(delay * 1e9)


def _term_payload(reason: str | None) -> bytes:
    return _TERM + b" " + reason.encode() if reason else _TERM


class Msg(SummaryRepr):
    """A message received (or a reply to a request).

    Attributes:
        subject: the subject it was published on.
        reply: the reply subject, or ``""``.
        data: the payload.
        headers: the headers, or None.

    JetStream messages also have :attr:`metadata` and the ack methods. A message whose
    reply subject is not a ``$JS.ACK`` subject (a core request, a plain publish) is not a
    JetStream message: every ack kind raises :class:`jssync.NotJSMessageError` and sends
    nothing (use :meth:`respond` to answer a request). Acks are
    fire-and-forget: they join the connection's outgoing queue (handed to the I/O thread
    in bursts; ``close`` writes that queue first) and never block; the ``*_sync`` kinds
    wait for the server's confirmation, :meth:`ack_next` for the next messages. An ack on
    a closed or closing connection raises ``jssync.ConnectionClosedError`` and changes
    nothing. After a terminal ack (ack, nak, term, ack_next) further acks are ignored;
    the ack state changes under a lock, so of concurrent acks exactly one terminal ack is
    sent. Thread-safe.
    """

    __slots__ = ("subject", "reply", "data", "headers", "_sid", "_acked", "_meta", "_ack_none")

    #: Set on the per-connection subclass: the connection that received the message.
    _conn: ClassVar[Connection]

    def __init__(
        self,
        subject: str = "",
        reply: str = "",
        data: bytes = b"",
        headers: dict[str, str] | None = None,
        _client: Any = None,
        _sid: int | None = None,
    ) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self.headers = headers
        self._sid = _sid
        self._acked = ACK_NONE
        self._meta: MsgMetadata | None = None
        self._ack_none = False

    # nats-py compatibility (its internals read .header)
    @property
    def header(self) -> dict[str, str] | None:
        return self.headers

    def __repr__(self) -> str:
        return f"<jssync.Msg subject={self.subject!r} reply={self.reply!r} data={self.data[:32]!r}...>"

    _repr_pretty_ = SummaryRepr._repr_pretty_  # here, not only inherited: IPython takes the nearest __repr__

    def _summary(self) -> tuple[str, Rows]:
        """The notebook summary: subject, size, the first bytes, header names (never their values:
        they may hold tokens), and the JetStream metadata of a JetStream message."""
        rows: list[tuple[str, object]] = [("subject", self.subject), ("size", f"{len(self.data):,} B"),
                                          ("data", repr(self.data[:48]) + ("..." if len(self.data) > 48 else ""))]
        if self.headers:
            rows.append(("headers", sorted(self.headers)))
        try:
            meta = self.metadata if self.reply.startswith("$JS.ACK.") else None
        except NotJSMessageError:
            meta = None
        if meta is not None:
            rows += [("stream", meta.stream), ("consumer", meta.consumer), ("stream seq", meta.sequence.stream),
                     ("consumer seq", meta.sequence.consumer), ("delivered", meta.num_delivered),
                     ("pending", meta.num_pending), ("time", meta.timestamp)]
        elif self.reply:
            rows.append(("reply", self.reply))
        return "jssync.Msg", rows

    def respond(self, data: bytes = b"", *, headers: dict[str, str] | None = None) -> None:
        """Publish ``data`` to this message's reply subject (buffered, returns at once).

        Raises:
            jssync.Error: the message has no reply subject.
        """
        if not self.reply:
            raise Error("the message has no reply subject to respond to")
        tracer = HOOKS.tracer  # jssync.otel: a send span linked to the request (None: off)
        if tracer is not None and tracer.wants():
            return tracer.respond(self._conn, self, data, headers)
        self._conn.publish(self.reply, data, headers=headers)

    # -- JetStream -----------------------------------------------------------------------

    @property
    def metadata(self) -> MsgMetadata:
        """The JetStream metadata from the ack subject.

        Raises:
            jssync.NotJSMessageError: this is not a JetStream message.
        """
        meta = self._meta
        if meta is None:
            why = ""
            try:
                meta = self._meta = parse_ack_subject(self.reply)
            except NotJSMessageError as exc:
                why = str(exc)
            if meta is None:  # raised here, not in the except: no internal error as its context
                raise NotJSMessageError(f"not a JetStream message: {why}")
        return meta

    def _ack_target(self) -> Connection | None:
        """The connection to ack on, or None when acks are ignored (ack policy none).

        Raises:
            jssync.NotJSMessageError: the reply subject is not a ``$JS.ACK`` subject.
            jssync.ForkError: a message of the parent process, in a forked child.
        """
        if self._ack_none:
            return None
        if not self.reply.startswith(_JS_ACK_PREFIX):
            raise NotJSMessageError(
                f"not a JetStream message (reply subject {self.reply!r} is not a $JS.ACK subject): "
                "it cannot be acknowledged; nothing was sent"
            )
        conn = self._conn
        if conn._loop.forked:
            # the parent's publish queue is never sent from here: the ack would be lost
            raise ForkError(
                "this message was received by a connection of the parent process and cannot be "
                "acknowledged after os.fork(); acknowledge it in the parent (or consume in the child)"
            )
        return conn

    def _send_ack(self, payload: bytes, terminal: bool) -> None:
        if self._acked or self._ack_none:
            return
        conn = self._conn
        tracer = HOOKS.tracer  # jssync.otel: a settle span (None: off)
        if tracer is not None and tracer.wants():
            tracer.settle(self._send_ack, self, conn, payload, terminal)
            return
        if conn._loop.forked or not self.reply.startswith(_JS_ACK_PREFIX):
            self._ack_target()  # raises
        conn._send_ack(self, payload, terminal)

    def _send_ack_sync(self, payload: bytes, terminal: bool, timeout: float | None) -> None:
        """Send an ack as a request and wait for the server's confirmation (double ack)."""
        check_timeout(timeout)
        if self._acked or self._ack_none:
            return
        _zero_is_no_wait(timeout, "a synchronous ack (it waits for the server's confirmation)")
        conn = self._ack_target()
        if conn is None:
            return
        tracer = HOOKS.tracer  # jssync.otel: a settle span (None: off)
        if tracer is not None and tracer.wants():
            tracer.settle(self._send_ack_sync, self, conn, payload, terminal, timeout)
            return
        with conn._close_lock:  # the ack lock (see Outbound.send_ack)
            if self._acked:
                return
            if conn._closing or conn._closed or conn._nc.is_closed:
                raise ConnectionClosedError("the connection is closed: the ack was not sent")
            if terminal:
                self._acked = ACK_WAITING  # other acks are ignored while this one waits
        try:
            conn._request(self.reply, payload, None, timeout)
        except BaseException:
            if terminal:
                with conn._close_lock:
                    self._acked = ACK_NONE  # not confirmed: the caller may ack again
            raise
        if terminal:
            self._acked = ACK_SENT

    def ack(self) -> None:
        """Acknowledge (+ACK). Buffered: returns at once.

        Once a message is acked (or nak'd or term'd), a second ``ack()`` is silent: it sends
        nothing and does not raise (nats-py raises ``MsgAlreadyAckdError``; see
        docs/migrating.md).

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing (nothing sent,
                the message stays unacknowledged).
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
            jssync.ForkError: called in a forked child on a message the parent received.
        """
        # _send_ack's steps written out (the per-message path of a consume with acks)
        if self._acked or self._ack_none:
            return
        conn = self._conn
        if HOOKS.tracer is not None or conn._loop.forked or not self.reply.startswith(_JS_ACK_PREFIX):
            self._send_ack(_ACK, True)  # a span, or what raises
            return
        conn._send_ack(self, _ACK, True)

    def nak(self, delay: float | None = None) -> None:
        """Negatively acknowledge (-NAK), optionally asking for redelivery after ``delay`` seconds.

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing.
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
        """
        self._send_ack(_nak_payload(delay), True)

    def _nak_quiet(self) -> None:
        """nak for jssync's own use (stop): on a closed connection the message is left to
        the server's ack wait instead of raising."""
        try:
            self._send_ack(_NAK, True)
        except ConnectionClosedError:
            pass

    def in_progress(self) -> None:
        """Tell the server work is in progress (+WPI): resets the ack wait. Not terminal.

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing.
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
        """
        self._send_ack(_WPI, False)

    def term(self, reason: str | None = None) -> None:
        """Terminate (+TERM): the message is never redelivered.

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing.
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
        """
        self._send_ack(_term_payload(reason), True)

    def ack_sync(self, timeout: float | None = 5.0) -> None:
        """Acknowledge and wait until the server confirmed it (double ack).

        Blocks until the confirmation arrives or ``timeout`` seconds pass (None: no limit). Once it returns
        the server will never deliver this message again.

        Raises:
            jssync.TimeoutError: no confirmation in time (the ack may still have been
                applied; the message is not marked acked, so it may be acked again).
            jssync.ConnectionClosedError: the connection is closed or closing.
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
        """
        self._send_ack_sync(_ACK, True, timeout)

    def nak_sync(self, delay: float | None = None, timeout: float | None = 5.0) -> None:
        """Like :meth:`nak`, and wait until the server confirmed it (double ack), at most
        ``timeout`` seconds (None: no limit)."""
        self._send_ack_sync(_nak_payload(delay), True, timeout)

    def term_sync(self, reason: str | None = None, timeout: float | None = 5.0) -> None:
        """Like :meth:`term`, and wait until the server confirmed it (double ack), at most
        ``timeout`` seconds (None: no limit)."""
        self._send_ack_sync(_term_payload(reason), True, timeout)

    def in_progress_sync(self, timeout: float | None = 5.0) -> None:
        """Like :meth:`in_progress`, and wait until the server confirmed it: the ack wait
        has started again when it returns. Not terminal. At most ``timeout`` seconds
        (None: no limit)."""
        self._send_ack_sync(_WPI, False, timeout)

    def ack_next(self, batch: int = 1, *, no_wait: bool = False, timeout: float | None = 5.0) -> list[Msg]:
        """Acknowledge and ask for the next messages in one go (+NXT, pull consumers only).

        Sends ``+NXT {"batch": batch, "expires": timeout}`` (with ``"no_wait": true`` and
        no expiry when ``no_wait``) to the ack subject, with a reply inbox: the server acks
        this message and delivers up to ``batch`` more messages of its consumer to the
        inbox, like a pull request. Blocks until ``batch`` messages arrived or the request
        ended (``timeout`` seconds passed; with ``no_wait``, as soon as the server has sent
        what it has; None: no limit, requests of 30 s follow one another, also after one
        was lost in a reconnect, until ``batch`` messages came) and returns them: ordinary
        messages, to be acked. There is no double ack for +NXT. After a terminal ack (or
        with ack policy none) nothing is sent and the result is ``[]``.

        Raises:
            ValueError: a bad argument (nothing is sent).
            jssync.ConnectionClosedError: the connection is closed or closing (nothing sent).
            jssync.NotJSMessageError: not a JetStream message (no ``$JS.ACK`` reply; nothing sent).
            jssync.ConsumerIsPushBasedError: the message came from a push consumer (the
                server applied the ack but delivers nothing).
            jssync.ConsumerDeletedError, jssync.PullRequestError: as for ``fetch``.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValidationError(f"batch must be an int >= 1, got {batch!r}")
        check_timeout(timeout)
        if self._acked or self._ack_none:
            return []
        _zero_is_no_wait(timeout, "ack_next (it waits for the server's messages)")
        conn = self._ack_target()
        if conn is None:
            return []
        tracer = HOOKS.tracer  # jssync.otel: a settle and a receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.ack_next(HOOKS.ack_next, conn, self, batch, bool(no_wait), timeout)
        return HOOKS.ack_next(conn, self, batch, bool(no_wait), None if timeout is None else float(timeout))

    @property
    def is_acked(self) -> bool:
        """True once a terminal ack (ack, nak, term, ack_next) was written: accepted into the
        connection's outgoing queue while it was open (close writes that queue), or, for a
        double ack, confirmed by the server."""
        return self._acked == ACK_SENT
