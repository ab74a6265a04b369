"""Messages: core fields, JetStream metadata and acknowledgements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ._errors import ValidationError
from ._jsack import MsgMetadata, NotJSMessageError, parse_ack_subject

if TYPE_CHECKING:
    from ._connection import Connection

_ACK = b"+ACK"
_NAK = b"-NAK"
_WPI = b"+WPI"
_TERM = b"+TERM"


class Msg:
    """A message received (or a reply to a request).

    Attributes:
        subject: the subject it was published on.
        reply: the reply subject, or ``""``.
        data: the payload.
        headers: the headers, or None.

    JetStream messages also have :attr:`metadata` and the ack methods. Acks are
    fire-and-forget: they are handed to the I/O thread in bursts and never block, except
    :meth:`ack_sync`. After a terminal ack (ack, nak, term) further acks are ignored.
    Thread-safe.
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
        self._acked = False
        self._meta: MsgMetadata | None = None
        self._ack_none = False

    # nats-py compatibility (its internals read .header)
    @property
    def header(self) -> dict[str, str] | None:
        return self.headers

    def __repr__(self) -> str:
        return f"<jssync.Msg subject={self.subject!r} reply={self.reply!r} data={self.data[:32]!r}...>"

    def respond(self, data: bytes = b"", *, headers: dict[str, str] | None = None) -> None:
        """Publish ``data`` to this message's reply subject (buffered, returns at once).

        Raises:
            jssync.Error: the message has no reply subject.
        """
        from ._errors import Error

        if not self.reply:
            raise Error("the message has no reply subject to respond to")
        self._conn.publish(self.reply, data, headers=headers)

    # -- JetStream -----------------------------------------------------------------------

    @property
    def metadata(self) -> MsgMetadata:
        """The JetStream metadata from the ack subject.

        Raises:
            jssync.Error: this is not a JetStream message.
        """
        meta = self._meta
        if meta is None:
            from ._errors import Error

            why = ""
            try:
                meta = self._meta = parse_ack_subject(self.reply)
            except NotJSMessageError as exc:
                why = str(exc)
            if meta is None:  # raised here, not in the except: no internal error as its context
                raise Error(f"not a JetStream message: {why}")
        return meta

    def _send_ack(self, payload: bytes, terminal: bool) -> None:
        if self._acked or self._ack_none:
            return
        if not self.reply:
            from ._errors import Error

            raise Error("the message has no reply subject: it cannot be acknowledged")
        conn = self._conn
        if conn._loop.forked:
            from ._errors import ForkError

            # the parent's publish queue is never sent from here: the ack would be lost
            raise ForkError(
                "this message was received by a connection of the parent process and cannot be "
                "acknowledged after os.fork(); acknowledge it in the parent (or consume in the child)"
            )
        if terminal:
            self._acked = True
        conn._publish_raw(self.reply, payload)

    def ack(self) -> None:
        """Acknowledge (+ACK). Buffered: returns at once.

        Raises:
            jssync.ForkError: called in a forked child on a message the parent received.
        """
        self._send_ack(_ACK, True)

    def nak(self, delay: float | None = None) -> None:
        """Negatively acknowledge (-NAK), optionally asking for redelivery after ``delay`` seconds."""
        if delay is None:
            self._send_ack(_NAK, True)
        else:
            if delay < 0:
                raise ValidationError(f"nak delay must be >= 0, got {delay!r}")
            self._send_ack(b'-NAK {"delay": %d}' % int(delay * 1e9), True)

    def in_progress(self) -> None:
        """Tell the server work is in progress (+WPI): resets the ack wait. Not terminal."""
        self._send_ack(_WPI, False)

    def term(self, reason: str | None = None) -> None:
        """Terminate (+TERM): the message is never redelivered."""
        if reason:
            self._send_ack(_TERM + b" " + reason.encode(), True)
        else:
            self._send_ack(_TERM, True)

    def ack_sync(self, timeout: float = 5.0) -> None:
        """Acknowledge and wait until the server confirmed it (double ack).

        Blocks until the confirmation arrives or ``timeout`` seconds pass.

        Raises:
            jssync.TimeoutError: no confirmation in time (the ack may still have been applied).
        """
        if self._acked or self._ack_none:
            return
        if not self.reply:
            from ._errors import Error

            raise Error("the message has no reply subject: it cannot be acknowledged")
        self._conn.request(self.reply, _ACK, timeout=timeout)
        self._acked = True

    @property
    def is_acked(self) -> bool:
        return self._acked
