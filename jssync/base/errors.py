"""The jssync exception tree and the one place where nats-py errors are translated.

The core tree is defined here; each feature layer defines its own errors, under this tree, in
its ``errors.py`` (jssync/kv/errors.py, jssync/objectstore/errors.py, jssync/liftbridge/errors.py,
jssync/spark/errors.py, jssync/pcgroups/errors.py); no other module defines an exception (tests/unit/base/test_errors.py
checks it). The modules that raise them import them from there (and still offer them under
their old names, e.g. ``jssync.kv.keyvalue.KeyNotFoundError``). This module imports nothing from
jssync at run time. Everything a user can catch derives from :class:`Error`
(``A > B``: B derives from A)::

    Error (.retriable, decided by retriable())
    ├── TimeoutError (also builtins.TimeoutError) > RequestTimeoutError
    ├── RequestError (.reason, .subject: why a request failed) > RequestTimeoutError (.disconnected),
    │       RequestCancelledError (closed / drained), NoRespondersError, APIError
    ├── ValidationError (also ValueError: a bad argument; nothing was sent)
    │   ├── BadSubjectError, BadHeaderError, MaxPayloadError
    │   ├── NotSupportedError > jssync.liftbridge.NotSupportedError
    │   ├── InvalidAckError (Liftbridge)
    │   └── also: InvalidBucketNameError, InvalidKeyError, InvalidValueError, KeyHistoryTooLargeError,
    │       BadObjectMetaError, QueueGroupOptionError (each also under its family below)
    ├── ForkError, ConnectionClosedError > RequestCancelledError, NoServersError, ReconnectBufferExceededError
    ├── AuthorizationError, PermissionDeniedError (.operation, .subject)
    ├── NoRespondersError, SlowConsumerError (.subject, .dropped), SubscriptionClosedError
    ├── LoopStalledError (.seconds, .running)
    ├── jssync.micro.ServiceError (.code, .description, .data)
    └── JetStreamError
        ├── APIError (.code, .err_code, .description) = JetStreamAPIError
        │   ├── NotFoundError
        │   │   ├── StreamNotFoundError (10059, .stream) > BucketNotFoundError, NoSuchPartitionError
        │   │   ├── ConsumerNotFoundError (10014, .stream, .consumer)
        │   │   ├── MessageNotFoundError (10037)
        │   │   ├── KeyNotFoundError > KeyDeletedError
        │   │   └── ObjectNotFoundError
        │   ├── StreamNameInUseError (10058) > BucketExistsError, StreamExistsError
        │   ├── ConsumerExistsError (10148)
        │   ├── WrongLastSequenceError (10071) > KeyWrongLastSequenceError > KeyExistsError
        │   ├── WrongLastMsgIdError (10070), StreamNotMatchError (10060)
        │   ├── ServiceUnavailableError (503) > JetStreamNotEnabledError (10039, 10076)
        │   └── BadRequestError, TooManySubjectsError (Direct Get), PullRequestError
        ├── ConsumerDeletedError, ConsumerIsPushBasedError, DirectGetNotAllowedError
        ├── NoHeartbeatError > HeartbeatAlarmError
        ├── NoAckStreamError (.stream, .subject)
        ├── FastPublishGapError (.first_missing, .seq, .ack)
        ├── PushSubscribeError > ConsumerConfigMismatchError, ConsumerIsPullBasedError,
        │       DeliverGroupError, DuplicateSubscriptionError, MultipleStreamsMatchError,
        │       QueueGroupOptionError, SubjectMismatchError
        ├── ConsumerSequenceMismatchError, InvalidJSAckError, StatusError
        ├── NotJSMessageError (also ValueError: an ack of a message without a $JS.ACK reply)
        ├── KeyValueError > BadBucketError, InvalidBucketNameError, InvalidKeyError, InvalidValueError,
        │       KeyHistoryTooLargeError, KeyValueDecodeError, and BucketNotFoundError, BucketExistsError,
        │       KeyNotFoundError, KeyWrongLastSequenceError (above)
        ├── ObjectStoreError > BadObjectMetaError, DigestMismatchError, ObjectAlreadyExistsError,
        │       ObjectChangedError, ObjectNotFoundError
        ├── ConsumerGroupError (jssync.pcgroups) > ConsumerGroupNotFoundError, NotAMemberError,
        │       ConsumerGroupChangedError, and ConsumerGroupConfigError (also a ValidationError)
        └── jssync.spark.SparkWriteError, jssync.spark.DataLossError

Outside that tree: ``jssync.server.ServerError`` (a RuntimeError: no nats-server binary, or it did not start),
and the internal control-flow exceptions at the end (``_Terminal``, ``_Changed``,
``_OffLoopError``, ``_ConfigError``, ``_Stop``), which never reach a user.
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
    """Base class of every exception jssync raises on purpose.

    ``.retriable`` says whether sending the same (idempotent) request again may succeed:
    :func:`retriable` decides it, for every class, in one place.
    """

    @property
    def retriable(self) -> bool:
        """True when the failure is transient (see :func:`jssync.retriable`)."""
        return retriable(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled as its class, its args and its attributes, without calling __init__ (whose
        # signature differs by class: APIError(code, err_code, description), KeyDeletedError(entry))
        return (_rebuild, (type(self), self.args), self.__dict__ or None)


def _rebuild(cls: type[Error], args: tuple[Any, ...]) -> Error:
    """Unpickle an :class:`Error`: ``cls`` with ``args``; pickle then restores its attributes."""
    exc = cls.__new__(cls)
    exc.args = args
    return exc


class RequestError(Error):
    """A request failed, and why: the base of the request failures below.

    Raised by ``Connection.request``, ``request_many``, every JetStream API call (stream and
    consumer management, KV, object store) and ``JetStream.publish`` waiting for its PubAck.
    Each failure is also the error it was before this class existed (a timeout is still a
    :class:`jssync.TimeoutError` and a builtin :class:`TimeoutError`; a close is still a
    :class:`ConnectionClosedError`), so existing ``except`` clauses keep working.

    Attributes:
        reason: why, one of ``"timeout"``, ``"no_responders"``, ``"closed"``, ``"drained"``,
            ``"not_enabled"``, ``"server_error"``.
        subject: the subject the request was sent to, when known, else None.
        retriable: whether the same request may succeed when sent again (see each class).
    """

    reason: str = "error"
    subject: str | None = None


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """A blocking call ran out of time. Also a builtin :class:`TimeoutError`."""


class RequestTimeoutError(RequestError, TimeoutError):
    """No reply came within the request's timeout (``reason == "timeout"``). Not retriable.

    The request may have been carried out (only the reply is missing), so whether to send
    it again is the caller's decision. A :class:`jssync.TimeoutError` (and a builtin one).

    Attributes:
        disconnected: True when the connection was not connected when the time ran out
            (the server restarted or the link is down: the request or its reply may have
            been lost, and the message says to which server it is reconnecting).
    """

    reason = "timeout"

    def __init__(self, message: str = "the request timed out", *, subject: str | None = None,
                 disconnected: bool = False) -> None:
        super().__init__(message)
        self.subject = subject
        self.disconnected = disconnected


class ValidationError(Error, ValueError):
    """An argument is not valid (raised before anything is sent). Also a :class:`ValueError`."""


class UnknownOptionError(ValidationError, TypeError):
    """A keyword a config call does not take (``create_stream(subject=...)``); names the closest one.

    Also a :class:`TypeError`, what Python raises for an unexpected keyword argument.
    """


class ForkError(Error):
    """A connection made in a parent process was used in a forked child."""


class ConnectionClosedError(Error):
    """The connection is closed (or closing) and cannot be used."""


class RequestCancelledError(RequestError, ConnectionClosedError):
    """The connection was closed (``reason == "closed"``) or drained (``"drained"``) while the
    request waited for its reply. Not retriable on this connection.

    Also a :class:`ConnectionClosedError`. Whether the request was carried out is unknown.
    """

    def __init__(self, message: str = "the connection closed while the request waited", *,
                 subject: str | None = None, reason: str = "closed") -> None:
        super().__init__(message)
        self.subject = subject
        self.reason = reason


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


class NoRespondersError(RequestError):
    """A request was sent to a subject nobody listens on (``reason == "no_responders"``).

    Retriable: a responder (a service, a stream's leader) may be there on the next try.
    """

    reason = "no_responders"

    def __init__(self, message: str = "no responders are available for the request", *,
                 subject: str | None = None) -> None:
        super().__init__(message)
        self.subject = subject


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


class LoopStalledError(Error):
    """The connection's I/O thread did not run for more than a second (reported to ``error_cb``).

    Something blocked the I/O loop (a callback scheduled on it that blocks, a C extension
    holding the GIL); messages, acks and heartbeats of that connection waited meanwhile.
    Reported once per stall, by the connection's timer thread. ``.seconds``: how long it
    had not run when reported; ``.running``: what it was running (``function (file:line)``).
    """

    def __init__(self, thread: str, seconds: float, running: str) -> None:
        super().__init__(f"the I/O thread {thread} has not run for {seconds:.1f} s; it is running {running}")
        self.seconds = seconds
        self.running = running


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


class APIError(JetStreamError, RequestError):
    """An error reply of the JetStream API (``reason == "server_error"``).

    Retriable when the server says it is transient (503, no leader yet, ...): see
    :func:`jssync.retriable`.

    Attributes:
        code: the status code (e.g. 404, 400, 503).
        err_code: the JetStream error code (e.g. 10059), or None.
        description: the server's text.
    """

    reason = "server_error"

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
    """JetStream is not available (503), e.g. while a leader is elected. Retriable (unless a
    :class:`JetStreamNotEnabledError`)."""


class JetStreamNotEnabledError(ServiceUnavailableError):
    """JetStream is not enabled on the server or for the account (``reason == "not_enabled"``).

    A JetStream API request had no responders on a server whose INFO says it runs without
    JetStream, or the server answered 503 with err_code 10039 / 10076. Not retriable.
    Also a :class:`ServiceUnavailableError`.
    """

    reason = "not_enabled"


class ConsumerDeletedError(ConsumerNotFoundError):
    """The consumer was deleted while being consumed: what every reader whose consumer was
    deleted under it ends with (the pull consume, ``fetch``, a push subscription's iterator
    and callback). A :class:`ConsumerNotFoundError` too, so one ``except
    jssync.ConsumerNotFoundError`` catches a consumer missing at the start and one deleted
    while being read.

    Attributes:
        code: 409 for the server's "409 Consumer Deleted" status, else 404 (found gone).
        err_code: 10014 when the consumer's info said it is not found, else None.
        stream, consumer: their names when known, else None (the message names them too).
    """

    def __init__(self, message: str = "the consumer was deleted", *, code: int | None = 409,
                 err_code: int | None = None, stream: str | None = None, consumer: str | None = None) -> None:
        self.code = code
        self.err_code = err_code
        self.description = message
        self.stream = stream
        self.consumer = consumer
        Exception.__init__(self, message)


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


# -- pull requests (jssync.base.status) ------------------------------------------------------------


class PullRequestError(APIError):
    """A pull request was ended by the server with a status that is not a normal end.

    ``.code`` is the status (400, 409, ...), ``.description`` the server's text, e.g.
    ``Exceeded MaxRequestBatch of 10``. ``consume`` reports these as warnings through
    ``error_cb``; ``fetch`` puts them on ``.error``.
    """


# -- Direct Get (jssync.jetstream.direct) ---------------------------------------------------------------


class BadRequestError(APIError):
    """The server refused a Direct Get request as malformed or contradictory (status 408)."""


class TooManySubjectsError(APIError):
    """A multi-subject Direct Get matched more than 1024 subjects (status 413)."""


# -- push subscriptions, ADR-15 (jssync.jetstream.push) -------------------------------------------------


class PushSubscribeError(JetStreamError):
    """A push subscription could not be made: a check of the ADR-15 workflow failed."""


class MultipleStreamsMatchError(PushSubscribeError):
    """More than one stream captures the subject, so the stream must be named.

    Attributes:
        subject: the subject looked up.
    """

    def __init__(self, subject: str, message: str) -> None:
        super().__init__(message)
        self.subject = subject


class DuplicateSubscriptionError(PushSubscribeError):
    """The consumer already has a (non queue) subscriber on its deliver subject."""


class DeliverGroupError(PushSubscribeError):
    """The queue group of the subscription and the consumer's deliver group do not agree.

    Attributes:
        queue: the subscription's queue group, or None.
        deliver_group: the consumer's deliver group, or None.
    """

    def __init__(self, message: str, queue: str | None, deliver_group: str | None) -> None:
        super().__init__(message)
        self.queue = queue
        self.deliver_group = deliver_group


class SubjectMismatchError(PushSubscribeError):
    """The subject does not match the existing consumer's filter subject.

    Attributes:
        subject: the subject subscribed to.
        filter_subject: the consumer's filter subject(s).
    """

    def __init__(self, message: str, subject: str, filter_subject: str | list[str]) -> None:
        super().__init__(message)
        self.subject = subject
        self.filter_subject = filter_subject


class ConsumerIsPullBasedError(PushSubscribeError):
    """A push subscription was made for a pull consumer (it has no deliver subject)."""


class ConsumerConfigMismatchError(PushSubscribeError):
    """The configuration asked for differs from the existing consumer's; nothing was changed.

    Attributes:
        field: the configuration field (wire name, e.g. ``max_ack_pending``).
        requested: the value asked for.
        actual: the consumer's value.
    """

    def __init__(self, field: str, requested: Any, actual: Any) -> None:
        super().__init__(
            f"the subscription asks for {field}={requested!r}, but the existing consumer has "
            f"{field}={actual!r}; an existing consumer's configuration is not changed by subscribe"
        )
        self.field = field
        self.requested = requested
        self.actual = actual


class QueueGroupOptionError(PushSubscribeError, ValidationError):
    """Flow control or idle heartbeats were combined with a queue group (ADR-15 forbids it)."""


class StatusError(JetStreamError):
    """The server sent an error status (409, 503, or one jssync does not know) to the subscription.

    Attributes:
        code: the status code.
        description: the status text.
    """

    def __init__(self, code: int, description: str, subject: str) -> None:
        super().__init__(f"status {code} {description!r} on JetStream subscription {subject!r}".strip())
        self.code = code
        self.description = description


class FastPublishGapError(JetStreamError):
    """A fast-ingest batch with ``gap="fail"`` lost messages, so the server ended it (ADR-50).

    The messages before the gap are stored, in order; nothing from ``first_missing`` on is.

    Attributes:
        first_missing: the batch sequence of the first message the server did not get.
        seq: the batch sequence of the message that arrived after the gap.
        ack: the batch's final PubAck (``batch_size``: the messages stored; ``seq``: the
            stream sequence of the last one), or None if it did not arrive.
    """

    def __init__(self, message: str, *, first_missing: int, seq: int, ack: Any = None) -> None:
        super().__init__(message)
        self.first_missing = first_missing
        self.seq = seq
        self.ack = ack


class HeartbeatAlarmError(NoHeartbeatError):
    """Neither a message nor a heartbeat arrived within the heartbeat alarm time.

    Attributes:
        idle_heartbeat: the consumer's idle heartbeat, in seconds.
        alarm: the time without traffic that raised the alarm, in seconds.
    """

    def __init__(self, subject: str, idle_heartbeat: float, alarm: float) -> None:
        super().__init__(
            f"no message or heartbeat on JetStream subscription {subject!r} for {alarm:g}s "
            f"(idle heartbeat {idle_heartbeat:g}s)"
        )
        self.idle_heartbeat = idle_heartbeat
        self.alarm = alarm


class ConsumerSequenceMismatchError(JetStreamError):
    """A gap in the consumer sequence: messages were missed (by the server's count).

    Attributes:
        stream_resume_sequence: the stream sequence to resume from (last seen + 1).
        consumer_sequence: the consumer sequence the server reported.
        last_consumer_sequence: the last consumer sequence this subscription received.
    """

    def __init__(self, subject: str, stream_resume_sequence: int, consumer_sequence: int,
                 last_consumer_sequence: int) -> None:
        super().__init__(
            f"consumer sequence gap on JetStream subscription {subject!r}: expected "
            f"{last_consumer_sequence + 1}, server is at {consumer_sequence}; resume from stream "
            f"sequence {stream_resume_sequence}"
        )
        self.stream_resume_sequence = stream_resume_sequence
        self.consumer_sequence = consumer_sequence
        self.last_consumer_sequence = last_consumer_sequence


class InvalidJSAckError(JetStreamError):
    """A message's reply subject starts with ``$JS.ACK`` but is not a valid JSAck."""


# -- ack subjects (jssync.base.jsack) --------------------------------------------------------------


class NotJSMessageError(JetStreamError, ValueError):
    """The message is not a JetStream message: its reply subject is not a ``$JS.ACK`` subject.

    Raised (nothing sent) by every ack kind of :class:`jssync.Msg` on, e.g., a core request
    (ADR-15 "JSAck": only a message with a ``$JS.ACK`` reply is a JetStream message), by
    :attr:`jssync.Msg.metadata`, and by ``parse_ack_subject``. Also a :class:`ValueError`.
    """


# -- services (jssync.micro) -------------------------------------------------------------------


class ServiceError(Error):
    """A service error: raise it in a handler to answer with ``code`` and ``description``.

    Also what :func:`check_response` raises for an error reply.
    """

    def __init__(self, code: int | str, description: str, data: bytes = b"") -> None:
        super().__init__(f"service error {code}: {description}")
        self.code = str(code)
        self.description = description
        self.data = data


ServiceError.__module__ = "jssync.micro"  # its public home


# -- test servers (jssync.server) --------------------------------------------------------------


class ServerError(RuntimeError):
    """The server binary is missing, or a server did not start."""


ServerError.__module__ = "jssync.server"  # its public home


# -- internal: connection ----------------------------------------------------------------------


class _OffLoopError(Exception):
    """nats-py reported an error while a caller's thread ran its code (see _parse_reply_headers)."""


# -- internal: command line --------------------------------------------------------------------


class _ConfigError(ValueError):
    """A setting, an environment variable or a context file cannot be used (exit code 2)."""


class _Stop(Exception):
    """A signal asked ``jssync server`` to stop."""


# -- translation -------------------------------------------------------------------------------

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
    10039: JetStreamNotEnabledError,  # "jetstream not enabled"
    10076: JetStreamNotEnabledError,  # "jetstream not enabled for account"
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


#: err_codes of error replies that go away by themselves: no meta/stream leader yet (10008
#: "temporarily unavailable", 10009 "can not handle request", 10007 "not assigned"),
#: incomplete cluster results (10004), no suitable peers for placement (10005, a peer down).
_TRANSIENT_ERR_CODES = frozenset({10004, 10005, 10007, 10008, 10009})
#: 503 replies that no retry changes: JetStream not enabled (for the account), clustering
#: required, not supported in clustered mode, account not found.
_PERMANENT_503 = frozenset({10010, 10035, 10036, 10039, 10076})
_TRANSIENT_TEXT = ("no suitable peers", "temporarily unavailable", "not ready", "no leader",
                   "leader not", "still recovering")


def retriable(exc: BaseException) -> bool:
    """True when ``exc`` is transient, so an idempotent request may be sent again.

    The one decision every retry loop of jssync uses (pure). Transient: no responders,
    a 503 reply (except JetStream not enabled and the like), and the replies of a leader
    election or of a peer being away (no suitable peers, JetStream not ready), whatever
    their status code. JetStream answers permanent refusals with 500 too (replicas > 1
    on one server, 10074; insufficient resources, 10028/10047): those are not retriable,
    nor is any other error. A :class:`TimeoutError` is not either: whether a request
    that may have been carried out can be sent again is the caller's decision; nor is a
    :class:`RequestCancelledError` (the connection is gone) or a :class:`JetStreamNotEnabledError`.
    Every :class:`Error` says the same as its ``.retriable``.
    """
    if isinstance(exc, NoRespondersError):
        return True
    if not isinstance(exc, APIError) or isinstance(exc, JetStreamNotEnabledError):
        return False
    if exc.err_code in _TRANSIENT_ERR_CODES:
        return True
    if exc.code == 503:
        return exc.err_code not in _PERMANENT_503
    text = exc.description.lower()
    return any(t in text for t in _TRANSIENT_TEXT)


def worth_retrying(exc: BaseException, *, timeouts: bool = False) -> bool:
    """The one decision of jssync's retry loops: may the call that raised ``exc`` be tried again?

    True when :func:`retriable` says so (no responders, a 503, a leader election, ...); with
    ``timeouts=True`` also for a :class:`TimeoutError` (for idempotent calls whose loop retries
    what the server may not have seen: a lookup, a consumer create, a Liftbridge publish
    with its de-duplication id). Never for a closed or drained connection, nor for any
    other error. Pure.
    """
    if isinstance(exc, ConnectionClosedError):
        return False
    if timeouts and isinstance(exc, TimeoutError):
        return True
    return retriable(exc)


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
