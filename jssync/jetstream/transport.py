"""The JetStream API transport: the one call every ``$JS.API`` request goes through.

Like httpx's transports (``handle_request``: one request in, one response out), the JetStream
context sends each API request through one call, :meth:`APITransport.request`: the full
subject, the JSON payload as bytes, the headers (only ``Nats-Required-Api-Level``) and the
time allowed; it returns the reply's bytes. Everything above it (building the request,
reading the reply, mapping the server's error codes, paging, the stream and consumer models,
KV bucket configuration, the ADR-15 checks of a push consumer) is pure and runs the same over
:class:`ConnectionTransport` (the real one, over a :class:`jssync.Connection`) as over a
transport that plays back server replies recorded earlier (tests/unit/jetstream/replies/).

No module but this one sends a JetStream API request by any other means
(tests/unit/architecture/test_jetstream_api_seam.py checks it); the pull requests
(``CONSUMER.MSG.NEXT``) and Direct Get (``DIRECT.GET``), answered with stored messages rather
than JSON, are data paths of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..base.errors import NoRespondersError
from ..core.request_errors import jetstream_unavailable

if TYPE_CHECKING:
    from ..core.connection import Connection


class APITransport(Protocol):
    """Sends one JetStream API request and returns the reply's bytes (the seam's one call)."""

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float | None) -> bytes:
        """Send ``data`` on ``subject`` and return the reply's payload.

        Blocks until the reply arrives, at most ``timeout`` seconds (None: no limit).

        Raises:
            jssync.ServiceUnavailableError: nothing answered (no JetStream leader, restarting;
                retriable), jssync.JetStreamNotEnabledError when the server runs without
                JetStream (not retriable).
            jssync.RequestTimeoutError (a jssync.TimeoutError): no reply in time.
            jssync.RequestCancelledError (a ConnectionClosedError): closed or drained meanwhile.
        """
        ...


class ConnectionTransport:
    """The real :class:`APITransport`: requests over a connection's request multiplexer.

    Thread-safe (as :meth:`jssync.Connection.request` is); holds no state of its own.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __repr__(self) -> str:
        return f"<jssync JetStream API transport over {self._conn!r}>"

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float | None) -> bytes:
        """See :meth:`APITransport.request`."""
        try:
            msg = self._conn.internal.request(subject, data, headers, timeout)
        except NoRespondersError as exc:
            raise jetstream_unavailable(self._conn, subject) from exc
        return msg.data


def send_nowait(conn: Connection, subject: str) -> None:
    """Send an empty JetStream API request whose reply nobody waits for (never blocks).

    For clean-ups that must not wait (a consumer delete on close); nothing is sent once
    ``conn`` is closed.
    """
    conn.internal.publish_raw(subject, b"")
