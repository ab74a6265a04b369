"""The one status routine: pure classification of status messages (no I/O).

Every place that gets a message which may be a server status (a pull inbox, a push or
ordered/KV-watch/Liftbridge delivery subject, a Direct Get reply, a request or publish
reply) sorts it here: :func:`classify` tells a user message (None) from a :class:`Status`
and parses the status's headers once. What a status means is then said by :func:`decide`
for pull requests (ADR-37 "Status handling": heartbeat, ``404 No Messages``,
``408 Request Timeout``, the ``409`` family, ``400 Bad Request``, ``423`` pin id mismatch,
``503`` no responders) and by :func:`decide_push` for push deliveries (ADR-15: flow
control requests, idle heartbeats, consumer deleted). :func:`is_no_responders` is the
``503`` check of a request reply. Other modules never read the ``Status`` header themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import IntEnum
from typing import NamedTuple

from .errors import (
    APIError,
    ConsumerDeletedError,
    ConsumerIsPushBasedError,
    JetStreamError,
    NoRespondersError,
    PullRequestError,
)

HDR_STATUS = "Status"
HDR_DESCRIPTION = "Description"
HDR_PENDING_MSGS = "Nats-Pending-Messages"
HDR_PENDING_BYTES = "Nats-Pending-Bytes"
HDR_LAST_CONSUMER = "Nats-Last-Consumer"
HDR_LAST_STREAM = "Nats-Last-Stream"
HDR_STALLED = "Nats-Consumer-Stalled"

#: Status codes the callers compare :attr:`Status.code` with.
HEARTBEAT = 100  # idle heartbeat, or a flow control request when it has a reply subject
END_OF_BATCH = 204  # Direct Get batch: no more messages (EOB)
NOT_FOUND = 404
REQUEST_TIMEOUT = 408
TOO_MANY_SUBJECTS = 413  # Direct Get multi_last: too many subjects match
CONFLICT = 409
NO_RESPONDERS = 503

#: Length of the ``NATS/1.0\r\n`` header line and the closing ``\r\n``.
_HDR_FRAME = len("NATS/1.0\r\n") + 2


class Action(IntEnum):
    """What a status means for the pull request it belongs to."""

    #: Heartbeat (100): the request goes on; only resets the heartbeat timer.
    HEARTBEAT = 0
    #: The request ended normally (404, 408, 409 Message Size Exceeds MaxBytes, 409 Batch Completed).
    DONE = 1
    #: The request ended with a warning (409 Exceeded ..., other 409s): consume goes on.
    WARNING = 2
    #: The request ended with an error (400): fetch raises; consume reports it and goes on.
    ERROR = 3
    #: The consumer is gone or unusable (409 Consumer Deleted, 409 Consumer is push based):
    #: fetch and consume both end by raising.
    TERMINAL = 4
    #: The consumer's leader changed (409 Leadership Change): consume resets its counts.
    RESET = 5
    #: Nobody answered the pull (503): the consumer does not exist or has no leader.
    NO_RESPONDERS = 6
    #: 423 (ADR-42 pinned_client): the pull carried a pin id that is no longer the pinned one.
    #: The client forgets that id and pulls again without one (a standby candidate).
    PIN_LOST = 7


class PushAction(IntEnum):
    """What a status means on a push delivery subject (push, ordered push, KV watch, Liftbridge)."""

    #: ``100 FlowControl Request`` (a 100 with a reply subject): answer the reply with an
    #: empty message once the application reached it.
    FLOW_CONTROL = 0
    #: ``100 Idle Heartbeat``: may carry :attr:`Status.stalled` (answer it),
    #: :attr:`Status.last_consumer` and :attr:`Status.last_stream` (gap check).
    HEARTBEAT = 1
    #: 404 / 408: the end of a pull request; nothing for a push subscription.
    END = 2
    #: 409 with "deleted" in its description (``409 Consumer Deleted``).
    CONSUMER_DELETED = 3
    #: Any other status.
    OTHER = 4


class Status(NamedTuple):
    """A status message: its code (0 when unreadable), description and status headers."""

    code: int
    description: str
    pending_msgs: int
    pending_bytes: int
    #: The reply subject of a ``100`` flow control request ("" otherwise).
    flow_control: str = ""
    #: ``Nats-Consumer-Stalled`` of a ``100`` heartbeat: a flow control subject to answer ("").
    stalled: str = ""
    #: ``Nats-Last-Consumer`` / ``Nats-Last-Stream`` of a ``100`` heartbeat (-1: absent or malformed).
    last_consumer: int = -1
    last_stream: int = -1


def _int_header(headers: Mapping[str, str], name: str) -> int:
    v = headers.get(name)
    if not v:
        return 0
    try:
        n = int(v.strip())
    except ValueError:
        return 0
    return n if n > 0 else 0


def _seq_header(headers: Mapping[str, str], name: str) -> int:
    v = headers.get(name)
    if v is None or not v.isdigit():
        return -1
    return int(v)


def is_user_msg(reply: str) -> bool:
    """True for a message with a JetStream ack subject: a stored message, never a status.

    A status from the server has no reply subject; a message a user stored (even an empty
    one with a ``Status`` header) is delivered with a ``$JS.ACK.`` reply.
    """
    return reply.startswith("$JS.ACK.")


def classify(headers: Mapping[str, str] | None, data: bytes, reply: str = "") -> Status | None:
    """Return the :class:`Status` of a message, or None for a user message.

    A message with a payload, without headers, without a ``Status`` header, or with a
    ``$JS.ACK.`` reply subject is a user message. Pending counts come from
    ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes`` on any status (0 when absent or
    malformed). A ``100`` also carries what flow control needs: ``flow_control`` (its
    reply subject, for a flow control request), ``stalled``, ``last_consumer`` and
    ``last_stream`` (from an idle heartbeat's headers).

    Hot paths test ``h is None or data or "Status" not in h`` inline first and call this only
    for what passes (a candidate status).
    """
    if not headers or data or is_user_msg(reply):
        return None
    raw = headers.get(HDR_STATUS)
    if not raw:
        return None
    raw = raw.strip()
    try:
        code = int(raw[:3])
    except ValueError:
        code = 0
    desc = headers.get(HDR_DESCRIPTION) or ""
    pm = _int_header(headers, HDR_PENDING_MSGS)
    pb = _int_header(headers, HDR_PENDING_BYTES)
    if code != HEARTBEAT:
        return Status(code, desc, pm, pb)
    return Status(code, desc, pm, pb, reply, headers.get(HDR_STALLED) or "",
                  _seq_header(headers, HDR_LAST_CONSUMER), _seq_header(headers, HDR_LAST_STREAM))


def is_no_responders(headers: Mapping[str, str] | None, data: bytes) -> bool:
    """True for the ``503`` no-responders status a request or publish gets when nobody listens."""
    if not headers or data:
        return False
    st = classify(headers, data)
    return st is not None and st.code == NO_RESPONDERS


def decide_push(status: Status) -> PushAction:
    """Say what a status on a push delivery subject means (see :class:`PushAction`)."""
    code = status.code
    if code == HEARTBEAT:
        return PushAction.FLOW_CONTROL if status.flow_control else PushAction.HEARTBEAT
    if code in (NOT_FOUND, REQUEST_TIMEOUT):
        return PushAction.END
    if code == CONFLICT and "deleted" in status.description.lower():
        return PushAction.CONSUMER_DELETED
    return PushAction.OTHER


def decide(status: Status) -> Action:
    """Say what a status means for its pull request (see :class:`Action`)."""
    code = status.code
    if code == 100:
        return Action.HEARTBEAT
    if code in (404, 408):
        return Action.DONE
    if code == 503:
        return Action.NO_RESPONDERS
    if code == 400:
        return Action.ERROR
    if code == 423:
        return Action.PIN_LOST
    if code == 409:
        d = status.description.lower()
        if "message size exceeds maxbytes" in d or "batch completed" in d:
            return Action.DONE
        if "consumer deleted" in d or "consumer is push based" in d:
            return Action.TERMINAL
        if "leadership change" in d:
            return Action.RESET
        return Action.WARNING
    return Action.WARNING


def status_error(status: Status, stream: str, consumer: str) -> JetStreamError | APIError | NoRespondersError:
    """The exception that stands for a (non-DONE) status of a pull on ``stream``/``consumer``."""
    d = status.description
    where = f"consumer {consumer!r} on stream {stream!r}"
    if status.code == 409:
        low = d.lower()
        if "consumer deleted" in low:
            return ConsumerDeletedError(f"{where} was deleted ({status.code} {d})", stream=stream, consumer=consumer)
        if "consumer is push based" in low:
            return ConsumerIsPushBasedError(
                f"{where} is a push consumer: it cannot be pulled from ({status.code} {d})"
            )
    if status.code == 503:
        return NoRespondersError(
            f"no responders for the pull request to {where}: it does not exist or has no leader"
        )
    return PullRequestError(status.code, None, f"pull request to {where} ended: {status.code} {d}".rstrip())


def message_size(subject: str, reply: str, headers: Mapping[str, str] | None, data: bytes,
                 header_len: int = -1) -> int:
    """A delivered message's size as the server counts it against ``max_bytes`` (ADR-37).

    Subject + reply subject + header block + payload. ``header_len`` is the header block's
    length as it came over the wire (exact); without it (-1) the block is rebuilt from the
    parsed headers (``NATS/1.0\\r\\n`` + ``Name: value\\r\\n`` lines + ``\\r\\n``), which is
    short when a header name repeats or the sender spaced it differently.
    """
    n = len(subject) + len(reply) + len(data)
    if header_len >= 0:
        return n + header_len
    if headers:
        n += _HDR_FRAME
        for k, v in headers.items():
            n += len(k) + len(v) + 4
    return n


def pull_request(batch: int, *, expires_ns: int = 0, max_bytes: int = 0, heartbeat_ns: int = 0,
                 no_wait: bool = False, group: str | None = None, min_pending: int = 0,
                 min_ack_pending: int = 0, priority: int = 0, pin_id: str | None = None) -> bytes:
    """Encode a ``CONSUMER.MSG.NEXT`` request body.

    ``group`` and the rest are ADR-42's priority group fields (validated by the caller:
    a group name is ``[A-Za-z0-9-_/=]``, so it needs no escaping); ``pin_id`` is the
    ``Nats-Pin-Id`` the server gave (sent as ``id``).
    """
    parts = [b'{"batch":%d' % batch]
    if expires_ns > 0:
        parts.append(b',"expires":%d' % expires_ns)
    if max_bytes > 0:
        parts.append(b',"max_bytes":%d' % max_bytes)
    if heartbeat_ns > 0:
        parts.append(b',"idle_heartbeat":%d' % heartbeat_ns)
    if no_wait:
        parts.append(b',"no_wait":true')
    if group is not None:
        parts.append(b',"group":"%s"' % group.encode())
        if min_pending > 0:
            parts.append(b',"min_pending":%d' % min_pending)
        if min_ack_pending > 0:
            parts.append(b',"min_ack_pending":%d' % min_ack_pending)
        if priority > 0:
            parts.append(b',"priority":%d' % priority)
        if pin_id:
            parts.append(b',"id":' + json.dumps(pin_id).encode())
    parts.append(b"}")
    return b"".join(parts)
