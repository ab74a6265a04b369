"""The jssync exception tree and the one place where nats-py errors are translated.

Everything a user can catch derives from :class:`Error`::

    Error
    ├── TimeoutError (also builtins.TimeoutError)
    ├── ValidationError (also ValueError)
    ├── ForkError
    ├── ConnectionClosedError
    ├── NoServersError
    ├── AuthorizationError
    ├── PermissionDeniedError
    ├── NoRespondersError
    ├── BadSubjectError (also ValueError)
    ├── BadHeaderError (also ValueError)
    ├── MaxPayloadError (also ValueError)
    ├── SlowConsumerError
    ├── SubscriptionClosedError
    ├── NotSupportedError (also ValueError)
    └── JetStreamError
        ├── APIError (.code, .err_code, .description)
        │   ├── NotFoundError
        │   │   ├── StreamNotFoundError
        │   │   ├── ConsumerNotFoundError
        │   │   └── MessageNotFoundError
        │   ├── StreamNameInUseError
        │   ├── ConsumerExistsError
        │   ├── WrongLastSequenceError
        │   ├── WrongLastMsgIdError
        │   ├── StreamNotMatchError
        │   └── ServiceUnavailableError
        ├── ConsumerDeletedError
        ├── ConsumerIsPushBasedError
        ├── NoHeartbeatError
        └── DirectGetNotAllowedError
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any


class Error(Exception):
    """Base class of every exception jssync raises on purpose."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """A blocking call ran out of time. Also a builtin :class:`TimeoutError`."""


class ValidationError(Error, ValueError):
    """An argument is not valid (raised before anything is sent). Also a :class:`ValueError`."""


class ForkError(Error):
    """A connection made in a parent process was used in a forked child."""


class ConnectionClosedError(Error):
    """The connection is closed (or closing) and cannot be used."""


class NoServersError(Error):
    """No server could be reached."""


class AuthorizationError(Error):
    """The server refused the credentials."""


class PermissionDeniedError(Error):
    """The server refused a publish or subscribe because of permissions.

    Attributes:
        operation: ``"publish"`` or ``"subscribe"`` when known, else None.
        subject: the refused subject when known (the server reports it lower-cased), else None.
    """

    def __init__(self, message: str = "permissions violation", *, operation: str | None = None,
                 subject: str | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.subject = subject


class NoRespondersError(Error):
    """A request was sent to a subject nobody listens on."""


class BadSubjectError(ValidationError):
    """A subject (or queue name) is not valid."""


class BadHeaderError(ValidationError):
    """A header name or value is not valid."""


class MaxPayloadError(ValidationError):
    """A payload is larger than the server's max_payload."""


class ReconnectBufferExceededError(Error):
    """A publish made while disconnected was refused: ``reconnect_buffer_size`` is used up.

    Raised by ``publish`` and ``request`` (and set on a ``publish_async`` Future) at once;
    nothing of it was queued.
    """


class SlowConsumerError(Error):
    """A subscription dropped messages because its pending limit was reached."""

    def __init__(self, subject: str, dropped: int) -> None:
        super().__init__(f"slow consumer on subject {subject!r}: {dropped} message(s) dropped so far")
        self.subject = subject
        self.dropped = dropped


class SubscriptionClosedError(Error):
    """The subscription was unsubscribed or its connection closed."""


class JetStreamError(Error):
    """Base class of JetStream errors."""


class NotSupportedError(ValidationError):
    """The call needs something the server (or the mapping onto JetStream) does not have.

    Raised before anything is sent when a call needs a newer server than the one behind
    the JetStream context (ADR-44 API level), and by :mod:`jssync.liftbridge` for options
    without a JetStream mapping.

    Attributes:
        feature: the feature, e.g. ``"consumer reset"`` (None for the Liftbridge cases).
        required_level, required_version: the JetStream API level and nats-server
            version it needs (e.g. 4, ``"2.14"``), or None.
        server_level: the server's API level, or None.
    """

    def __init__(self, message: str = "not supported", *, feature: str | None = None,
                 required_level: int | None = None, required_version: str | None = None,
                 server_level: int | None = None) -> None:
        super().__init__(message)
        self.feature = feature
        self.required_level = required_level
        self.required_version = required_version
        self.server_level = server_level


class APIError(JetStreamError):
    """An error reply of the JetStream API.

    Attributes:
        code: the status code (e.g. 404, 400, 503).
        err_code: the JetStream error code (e.g. 10059), or None.
        description: the server's text.
    """

    def __init__(self, code: int | None = None, err_code: int | None = None, description: str = "") -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        known = ", ".join(f"{k}={v}" for k, v in (("code", code), ("err_code", err_code)) if v is not None)
        super().__init__(f"{description or 'JetStream API error'}{f' ({known})' if known else ''}")


#: The name issue 3 and some users know it by.
JetStreamAPIError = APIError


class NotFoundError(APIError):
    """Something the call named does not exist."""


class StreamNotFoundError(NotFoundError):
    """The stream does not exist (err_code 10059).

    Attributes:
        stream: the stream's name when known, else None (the message names it too).
    """

    stream: str | None = None


class ConsumerNotFoundError(NotFoundError):
    """The consumer does not exist (err_code 10014).

    Attributes:
        stream, consumer: their names when known, else None (the message names them too).
    """

    stream: str | None = None
    consumer: str | None = None


class MessageNotFoundError(NotFoundError):
    """No message matches (err_code 10037, or 404 from Direct Get)."""


class StreamNameInUseError(APIError):
    """A stream of that name exists with another configuration (err_code 10058)."""


class ConsumerExistsError(APIError):
    """A consumer of that name exists with another configuration (err_code 10148)."""


class WrongLastSequenceError(APIError):
    """An expected-last-sequence publish check failed (err_code 10071)."""


class WrongLastMsgIdError(APIError):
    """An expected-last-msg-id publish check failed (err_code 10070)."""


class StreamNotMatchError(APIError):
    """The expected stream did not match (err_code 10060)."""


class ServiceUnavailableError(APIError):
    """JetStream is not available (503), e.g. while a leader is elected."""


class ConsumerDeletedError(JetStreamError):
    """The consumer was deleted while being consumed."""


class ConsumerIsPushBasedError(JetStreamError):
    """A pull operation was made on a push consumer."""


class NoHeartbeatError(JetStreamError):
    """No heartbeat or message arrived in time (2x the idle heartbeat for pull consumers, ADR-37;
    3x for push subscriptions, ADR-15)."""


class DirectGetNotAllowedError(JetStreamError):
    """Direct Get was used on a stream without allow_direct."""


class NoAckStreamError(JetStreamError):
    """A publish waited for a PubAck from a stream configured with ``no_ack``.

    Such a stream stores messages without ever answering, so this is not a failed
    publish: the message was sent, and the stream stores it unless a limit refuses it
    (nothing confirms either way). Publish to it with ``ack=False``.

    Attributes:
        stream: the stream's name.
        subject: the subject published on.
    """

    def __init__(self, stream: str, subject: str, description: str) -> None:
        self.stream = stream
        self.subject = subject
        super().__init__(description)


_BY_ERR_CODE: dict[int, type[APIError]] = {
    10059: StreamNotFoundError,
    10014: ConsumerNotFoundError,
    10149: ConsumerNotFoundError,  # "consumer does not exist" (update of a missing consumer)
    10037: MessageNotFoundError,
    10058: StreamNameInUseError,
    10148: ConsumerExistsError,
    10013: ConsumerExistsError,
    10071: WrongLastSequenceError,
    10070: WrongLastMsgIdError,
    10060: StreamNotMatchError,
}


def api_error(code: int | None, err_code: int | None, description: str) -> APIError:
    """Build the most specific :class:`APIError` for a JetStream error reply."""
    cls: type[APIError] = APIError
    if err_code is not None and err_code in _BY_ERR_CODE:
        cls = _BY_ERR_CODE[err_code]
    elif code == 404:
        cls = NotFoundError
    elif code == 503:
        cls = ServiceUnavailableError
    return cls(code, err_code, description)


#: API subject operations (after STREAM./CONSUMER.) that take two tokens.
_TWO_TOKEN_OPS = {"MSG", "LEADER", "DURABLE", "PEER"}


def name_missing(exc: APIError, suffix: str) -> None:
    """Put the stream (and consumer) that an API request named into a not-found error.

    ``suffix`` is the API subject after the prefix, e.g. ``CONSUMER.INFO.ORDERS.worker``.
    The server's reply says only "stream not found"; the message then reads
    ``stream 'ORDERS' not found`` (``.description`` keeps the server's text).
    """
    tokens = suffix.split(".")
    if len(tokens) < 3 or tokens[0] not in ("STREAM", "CONSUMER"):
        return
    at = 3 if tokens[1] in _TWO_TOKEN_OPS else 2
    if len(tokens) <= at or tokens[1] in ("LIST", "NAMES"):
        return
    stream = tokens[at]
    consumer = tokens[at + 1] if tokens[0] == "CONSUMER" and len(tokens) > at + 1 else None
    known = ", ".join(f"{k}={v}" for k, v in (("code", exc.code), ("err_code", exc.err_code)) if v is not None)
    tail = f" ({known})" if known else ""
    if isinstance(exc, StreamNotFoundError):
        exc.stream = stream
        exc.args = (f"stream {stream!r} not found{tail}",)
    elif isinstance(exc, ConsumerNotFoundError):
        exc.stream, exc.consumer = stream, consumer
        what = f"consumer {consumer!r} of stream {stream!r}" if consumer else f"a consumer of stream {stream!r}"
        exc.args = (f"{what} not found{tail}",)


def check_api_response(data: bytes) -> dict[str, Any]:
    """Parse a JetStream API reply; raise the matching :class:`APIError` on an error reply.

    Raises:
        APIError: the reply holds an ``error``, or is not a JSON object.
    """
    try:
        resp = json.loads(data)
    except (ValueError, TypeError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise APIError(None, None, f"malformed JetStream API reply: {bytes(data[:100])!r}") from exc
    if not isinstance(resp, dict):
        raise APIError(None, None, f"malformed JetStream API reply: {bytes(data[:100])!r}")
    err = resp.get("error")
    if err:
        if not isinstance(err, dict):
            raise APIError(None, None, str(err)[:200])
        raise api_error(_int_or_none(err.get("code")), _int_or_none(err.get("err_code")),
                        str(err.get("description", ""))[:1000])
    return resp


def _int_or_none(value: Any) -> int | None:
    """``value`` if it is an int (not a bool), else None: error replies may be malformed."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_PERMISSION = re.compile(
    r'permissions violation for (publish|subscription) (?:with reply of |to )"((?:[^"\\]|\\.)*)"', re.IGNORECASE
)


def permission_error(text: str) -> PermissionDeniedError:
    """Build a :class:`PermissionDeniedError` from the server's ``-ERR`` text.

    ``operation`` and ``subject`` are filled in when the text names them, e.g.
    ``Permissions Violation for Subscription to "foo" using queue "q"``.
    """
    text = text.strip()
    if text.startswith("nats: "):
        text = text[6:]
    m = _PERMISSION.search(text)
    if m is None:
        return PermissionDeniedError(text)
    op = "publish" if m.group(1).lower() == "publish" else "subscribe"
    return PermissionDeniedError(text, operation=op, subject=_go_unquote(m.group(2)))


_GO_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_GO_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _go_unquote(text: str) -> str:
    """Undo the escapes of Go's ``%q`` (the server quotes subjects that way)."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if len(e) > 1:
            try:
                return chr(int(e[1:], 16))
            except (ValueError, OverflowError):  # past U+10FFFF
                return m.group(0)
        return _GO_SIMPLE.get(e, e)

    return _GO_ESCAPE.sub(one, text) if "\\" in text else text


def translate(exc: BaseException) -> BaseException:
    """Map a nats-py (or asyncio) exception to the jssync one; others are returned as they are."""
    if isinstance(exc, Error):
        return exc
    import nats.errors as ne
    import nats.js.errors as jse

    if isinstance(exc, jse.APIError):
        new: BaseException = api_error(exc.code, exc.err_code, exc.description or "")
    elif isinstance(exc, ne.NoRespondersError | jse.NoStreamResponseError):
        new = NoRespondersError("no responders are available for the request")
    elif isinstance(exc, ne.TimeoutError | asyncio.TimeoutError):
        new = TimeoutError("timed out")
    elif isinstance(exc, ne.ConnectionClosedError | ne.ConnectionDrainingError):
        new = ConnectionClosedError(str(exc) or "the connection is closed")
    elif isinstance(exc, ne.NoServersError):
        new = NoServersError(str(exc) or "no servers available")
    elif isinstance(exc, ne.AuthorizationError) or (
        isinstance(exc, ne.Error) and "authorization violation" in str(exc).lower()
    ):
        new = AuthorizationError(str(exc) or "authorization violation")
    elif isinstance(exc, ne.BadSubjectError):
        new = BadSubjectError(str(exc) or "bad subject")
    elif isinstance(exc, ne.MaxPayloadError):
        new = MaxPayloadError(str(exc) or "maximum payload exceeded")
    elif isinstance(exc, ne.Error) and "permissions violation" in str(exc).lower():
        new = permission_error(str(exc))
    elif isinstance(exc, ne.Error):
        new = Error(str(exc) or type(exc).__name__)
    else:
        return exc
    new.__cause__ = exc
    return new


@contextlib.contextmanager
def translating() -> Iterator[None]:
    """Re-raise nats-py exceptions as jssync ones, chained from the original."""
    try:
        yield
    except Exception as exc:
        new = translate(exc)
        if new is exc:
            raise
        raise new from exc
