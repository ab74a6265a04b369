"""Pure parts of the Liftbridge client on JetStream: names, headers, envelopes, acks, partitioners.

Nothing here does I/O. The public names are re-exported by :mod:`jssync.liftbridge`.

The mapping (documented in ``docs/liftbridge.md``):

* a Liftbridge stream ``name`` with base subject ``foo`` and ``n`` partitions is ``n``
  JetStream streams ``name-0`` ... ``name-(n-1)``; partition ``p`` captures exactly the
  subject ``foo`` (p = 0) or ``foo.p``;
* a Liftbridge offset is the JetStream stream sequence minus one;
* the Liftbridge envelope fields travel as NATS headers (:data:`HDR_KEY` ...); the guide's
  ``LIFT`` envelope (:func:`new_message`) is read as well.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import enum
import json
import re
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    BadHeaderError,
    Error,
    NoRespondersError,
    ValidationError,
    check_api_response,
)
from ..base.status import NO_RESPONDERS, classify
from ..base.times import server_time_or_none
from ..base.validate import (
    MAX_I64,
    check_int,
    validate_headers,
    validate_subject,
)
from .errors import InvalidAckError
from .errors import LiftbridgeNotSupportedError as NotSupportedError  # noqa: F401 (re-exported)
from .errors import NoSuchPartitionError as NoSuchPartitionError
from .errors import StreamExistsError as StreamExistsError

if TYPE_CHECKING:
    from ..core.msg import Msg
    from .meta import Metadata

_PUBLIC = "jssync.liftbridge"

# The errors are defined in jssync.base.errors (shown as jssync.liftbridge's, as public() does below).


def public(*objs: Any) -> None:
    """Show ``objs`` as members of :mod:`jssync.liftbridge` (their public home)."""
    for obj in objs:
        obj.__module__ = _PUBLIC


# -- names and subjects ------------------------------------------------------------------------

#: NATS header carrying the message key, base64 (standard alphabet, padded).
HDR_KEY = "Lift-Key"
#: NATS header carrying the ack inbox the publisher asked for.
HDR_ACK_INBOX = "Lift-Ack-Inbox"
#: NATS header carrying the correlation id.
HDR_CORRELATION_ID = "Lift-Correlation-Id"
#: NATS header carrying the ack policy the message was published with (LEADER, ALL, NONE).
HDR_ACK_POLICY = "Lift-Ack-Policy"
#: Headers starting with this are the envelope's own and are not user headers.
HDR_PREFIX = "Lift-"
#: A user header whose value is not header-safe text travels base64 under this prefix + its name.
HDR_B64_PREFIX = "Lift-B64-"
#: The correlation id, base64 of its UTF-8, when it is not header-safe text (CR, LF, edge whitespace).
HDR_CORRELATION_ID_B64 = "Lift-Correlation-Id-B64"
#: ``Nats-Msg-Id`` values the client sets (for safe publish retries) start with this.
MSG_ID_PREFIX = "lift-"
#: Says whose the message's ``Nats-Msg-Id`` is: ``"true"`` the client's own (left out of the
#: user headers on read), ``"false"`` the user's (kept, whatever it looks like).
HDR_OWN_MSG_ID = "Lift-Own-Msg-Id"
#: The client's own ids on messages written before :data:`HDR_OWN_MSG_ID` (still left out).
_LEGACY_OWN_MSG_ID = re.compile(r"lift-[0-9a-f]{32}\Z")
#: The four bytes in front of a serialized ``Message`` protobuf (the guide's envelope cookie).
ENVELOPE_COOKIE = b"LIFT"

#: Stream metadata keys on every partition stream.
META_STREAM = "liftbridge.stream"
META_SUBJECT = "liftbridge.subject"
META_PARTITION = "liftbridge.partition"
META_PARTITIONS = "liftbridge.partitions"
META_CREATED = "liftbridge.created"

_PART_NAME = re.compile(r"^(.+)-(0|[1-9][0-9]*)\Z")
#: Characters a NATS header value cannot carry as they are (parsers strip edge whitespace).
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def partition_subject(subject: str, partition: int) -> str:
    """The NATS subject of ``partition`` of a stream with base ``subject``: ``foo``, ``foo.1``, ..."""
    return subject if partition == 0 else f"{subject}.{partition}"


def partition_stream_name(name: str, partition: int) -> str:
    """The JetStream stream holding ``partition`` of the Liftbridge stream ``name``: ``name-partition``."""
    return f"{name}-{partition}"


def parse_partition_stream_name(js_name: str) -> tuple[str, int] | None:
    """``("name", p)`` for a JetStream stream named ``name-p``; None for other names."""
    m = _PART_NAME.match(js_name)
    if m is None:
        return None
    return m.group(1), int(m.group(2))


# -- enums -------------------------------------------------------------------------------------


class AckPolicy(enum.IntEnum):
    """When :meth:`Client.publish` returns (values as in the Liftbridge protobuf).

    * ``LEADER``: when the JetStream PubAck arrives. For a replicated partition (R > 1)
      JetStream sends it once a Raft quorum stored the message, which is stronger than
      Liftbridge's leader-only ack; for R1 it means the one server stored it.
    * ``ALL``: the PubAck, then confirmation that every in-sync replica stored it.
    * ``NONE``: a plain NATS publish; no ack, :meth:`Client.publish` returns None.
    """

    LEADER = 0
    ALL = 1
    NONE = 2


class StartPosition(enum.IntEnum):
    """Where a subscription starts (values as in the Liftbridge protobuf).

    ``NEW_ONLY`` (the default) waits for messages published after subscribing;
    ``EARLIEST`` starts at the oldest message kept; ``LATEST`` at the last one;
    ``OFFSET`` and ``TIMESTAMP`` need ``start_at_offset`` / ``start_at_time``.
    """

    NEW_ONLY = 0
    OFFSET = 1
    EARLIEST = 2
    LATEST = 3
    TIMESTAMP = 4


public(AckPolicy, StartPosition)

# -- value types -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    """The acknowledgement of a published message (the Liftbridge ``Ack``).

    Attributes:
        stream: the Liftbridge stream name (the JetStream stream name when it is not a
            partition stream made by this module).
        partition: the partition number.
        partition_subject: the NATS subject the message was stored under (``foo.1``).
        msg_subject: the subject given to ``publish`` (before partitioning), when known.
        offset: the message's offset in the partition (JetStream sequence - 1).
        key: the message key, when known.
        ack_inbox: the ack inbox the publisher asked for, or None.
        correlation_id: the correlation id, or None.
        ack_policy: the ack policy it was published with, when known.
        commit_timestamp: when the client received the ack (JetStream's PubAck has no
            time; the stored time is on the message). Aware UTC.
        jetstream_stream: the JetStream stream that stored it.
        sequence: its JetStream stream sequence.
        duplicate: True when JetStream recognised a retried publish as a duplicate.
    """

    stream: str
    partition: int
    partition_subject: str | None
    msg_subject: str | None
    offset: int
    key: bytes | None
    ack_inbox: str | None
    correlation_id: str | None
    ack_policy: AckPolicy | None
    commit_timestamp: _dt.datetime
    jetstream_stream: str
    sequence: int
    duplicate: bool = False


@dataclass(frozen=True)
class Message:
    """A message read from a partition (the Liftbridge ``Message``).

    Attributes:
        stream: the Liftbridge stream name.
        partition: the partition number.
        offset: its offset in the partition (JetStream sequence - 1).
        value: the payload.
        key: the key, or None.
        timestamp: when JetStream stored it (aware UTC).
        subject: the NATS subject it was stored under.
        headers: user headers, values as bytes (the envelope's ``Lift-*`` headers and
            the client's own ``Nats-Msg-Id`` are left out).
        ack_inbox: the ack inbox the publisher asked for, or None.
        correlation_id: the correlation id, or None.
        ack_policy: the ack policy it was published with, or None (plain NATS publish).
        sequence: its JetStream stream sequence.
    """

    stream: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None
    timestamp: _dt.datetime | None
    subject: str
    headers: dict[str, bytes] = field(default_factory=dict)
    ack_inbox: str | None = None
    correlation_id: str | None = None
    ack_policy: AckPolicy | None = None
    sequence: int = 0

    def __repr__(self) -> str:
        return (f"Message(stream={self.stream!r}, partition={self.partition}, offset={self.offset}, "
                f"key={self.key!r}, value={self.value[:32]!r})")


@dataclass(frozen=True)
class OutgoingMessage:
    """A message as given to :meth:`Client.publish`, before partitioning.

    This is what a :class:`Partitioner` sees.
    """

    subject: str
    value: bytes
    key: bytes | None = None
    headers: Mapping[str, str | bytes] | None = None
    ack_inbox: str | None = None
    correlation_id: str | None = None
    ack_policy: AckPolicy = AckPolicy.LEADER


@dataclass(frozen=True)
class NatsMessage:
    """What to hand to a plain NATS publish (the result of :func:`new_message`).

    ``nc.publish(m.subject, m.data, headers=m.headers, reply=m.reply)``; ``reply`` is
    where JetStream sends its PubAck (None: no ack).
    """

    subject: str
    data: bytes
    headers: dict[str, str]
    reply: str | None = None

    def publish_kwargs(self) -> dict[str, Any]:
        """``{"headers": ..., "reply": ...}`` for ``Connection.publish(subject, data, **kwargs)``."""
        return {"headers": self.headers, "reply": self.reply}


public(Ack, Message, OutgoingMessage, NatsMessage)

# -- validation --------------------------------------------------------------------------------


def check_bytes(value: Any, what: str, *, optional: bool = False) -> bytes | None:
    """``value`` as bytes (bytes, bytearray, memoryview); ``TypeError`` naming ``what`` otherwise."""
    if value is None and optional:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, got {type(value).__name__}")


def check_ack_policy(ack_policy: Any) -> AckPolicy:
    """``ack_policy`` as an :class:`AckPolicy` (the member, its name or value); ValueError otherwise."""
    if isinstance(ack_policy, AckPolicy):
        return ack_policy
    if isinstance(ack_policy, str) and ack_policy.upper() in AckPolicy.__members__:
        return AckPolicy[ack_policy.upper()]
    if isinstance(ack_policy, int) and not isinstance(ack_policy, bool):
        try:
            return AckPolicy(ack_policy)
        except ValueError:
            pass
    raise ValidationError(f"ack_policy must be AckPolicy.LEADER, ALL or NONE, got {ack_policy!r}")


def check_partition(partition: Any, what: str = "partition") -> int:
    return check_int(partition, what, minimum=0, maximum=MAX_I64, open_ended=True)


def header_text(raw: bytes) -> str | None:
    """``raw`` as a NATS header value when it survives the trip as it is; None otherwise.

    It must be UTF-8 without control characters (a tab is fine) and without leading or
    trailing whitespace (header parsers strip it).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _UNSAFE_CHARS.search(text) or text != text.strip():
        return None
    return text


def user_headers(headers: Mapping[str, str | bytes] | None) -> dict[str, str]:
    """Check user headers and return them as NATS headers (str values).

    Values are opaque bytes, as in Liftbridge (a str value means its UTF-8): a value that
    is header-safe text (:func:`header_text`) travels as it is, any other one base64
    under ``Lift-B64-<name>``. Values of ``Nats-*`` headers (read by the server, e.g.
    ``Nats-Msg-Id``) must be header-safe text.

    Raises:
        jssync.BadHeaderError: a bad name, a reserved ``Lift-*`` name, a value that is not
            str or bytes, or a ``Nats-*`` value that is not header-safe text.
    """
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise BadHeaderError(f"headers must be a dict, got {type(headers).__name__}")
    out: dict[str, str] = {}
    for k, v in headers.items():
        if not isinstance(k, str):
            raise BadHeaderError(f"invalid header name: {k!r}")
        if k.lower().startswith(HDR_PREFIX.lower()):
            raise BadHeaderError(f"header name {k!r} is reserved (the {HDR_PREFIX}* headers carry the envelope)")
        if isinstance(v, str):
            raw = v.encode("utf-8", "surrogatepass")
        elif isinstance(v, bytes | bytearray | memoryview):
            raw = bytes(v)
        else:
            raise BadHeaderError(f"header {k!r} value must be str or bytes, got {type(v).__name__}")
        text = header_text(raw)
        if text is not None:
            out[k] = text
        elif k.lower().startswith("nats-"):
            raise BadHeaderError(f"header {k!r} is read by the server: its value must be text without CR, LF, "
                                 f"control characters or edge whitespace, got {raw[:40]!r}")
        else:
            out[f"{HDR_B64_PREFIX}{k}"] = base64.b64encode(raw).decode("ascii")
    validate_headers(out)
    return out


def encode_key(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


def decode_key(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text.encode("utf-8")  # written by something else: take it as it is


def envelope_headers(
    *,
    key: bytes | None,
    headers: dict[str, str],
    ack_inbox: str | None,
    correlation_id: str | None,
    ack_policy: AckPolicy,
    msg_id: str | None = None,
) -> dict[str, str]:
    """The NATS headers of a message: the user's, then the envelope's ``Lift-*`` ones.

    ``msg_id`` is set as ``Nats-Msg-Id`` unless the user's headers have one (the user's
    id is JetStream's de-duplication key and is kept).
    """
    h = dict(headers)
    if key is not None:
        h[HDR_KEY] = encode_key(key)
    if ack_inbox:
        h[HDR_ACK_INBOX] = ack_inbox
    if correlation_id is not None:
        raw = correlation_id.encode("utf-8", "surrogatepass")
        if header_text(raw) is not None:
            h[HDR_CORRELATION_ID] = correlation_id
        else:
            h[HDR_CORRELATION_ID_B64] = base64.b64encode(raw).decode("ascii")
    h[HDR_ACK_POLICY] = ack_policy.name
    if "Nats-Msg-Id" in h:
        h[HDR_OWN_MSG_ID] = "false"
    elif msg_id is not None:
        h["Nats-Msg-Id"] = msg_id
        h[HDR_OWN_MSG_ID] = "true"
    return h


def check_correlation_id(correlation_id: Any) -> str | None:
    """Any str is a correlation id (as in Liftbridge); None means none."""
    if correlation_id is None or isinstance(correlation_id, str):
        return correlation_id
    raise TypeError(f"correlation_id must be a str, got {type(correlation_id).__name__}")


def check_ack_inbox(ack_inbox: Any) -> str | None:
    if ack_inbox is None:
        return None
    if not isinstance(ack_inbox, str):
        raise TypeError(f"ack_inbox must be a str (a NATS subject), got {type(ack_inbox).__name__}")
    validate_subject(ack_inbox, "ack_inbox", wildcards=False)
    return ack_inbox


# -- the envelope protobuf (the guide's Message and Ack, proto3 wire format) --------------------

# Message: offset=1 int64, key=2 bytes, value=3 bytes, timestamp=4 int64 (ns), subject=5,
# reply=6, headers=7 map<string, bytes>, ackInbox=8, correlationId=9, ackPolicy=10 enum.
_VARINT, _LEN = 0, 2


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # negative int64: two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_field(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | _LEN) + _varint(len(data)) + data


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValidationError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, pos


def _fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of every field; ValueError when malformed."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if num == 0:
            raise ValidationError("field number 0")
        val: int | bytes
        if wt == _VARINT:
            val, pos = _read_varint(buf, pos)
        elif wt == _LEN:
            n, pos = _read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValidationError("truncated field")
            val, pos = buf[pos:pos + n], pos + n
        elif wt in (1, 5):
            size = 8 if wt == 1 else 4
            if pos + size > len(buf):
                raise ValidationError("truncated field")
            val, pos = buf[pos:pos + size], pos + size
        else:
            raise ValidationError(f"wire type {wt}")
        out.append((num, wt, val))
    return out


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def encode_envelope(*, value: bytes, key: bytes | None, headers: Mapping[str, bytes], ack_inbox: str | None,
                    correlation_id: str | None, ack_policy: AckPolicy) -> bytes:
    """``LIFT`` + a serialized ``Message`` protobuf (fields in number order, defaults left out)."""
    parts = [ENVELOPE_COOKIE]
    if key:
        parts.append(_len_field(2, key))
    if value:
        parts.append(_len_field(3, value))
    for name, v in headers.items():
        entry = _len_field(1, name.encode("utf-8", "surrogatepass")) + (_len_field(2, v) if v else b"")
        parts.append(_len_field(7, entry))
    if ack_inbox:
        parts.append(_len_field(8, ack_inbox.encode("utf-8")))
    if correlation_id:
        parts.append(_len_field(9, correlation_id.encode("utf-8", "surrogatepass")))
    if ack_policy:
        parts.append(_varint(10 << 3 | _VARINT) + _varint(int(ack_policy)))
    return b"".join(parts)


def decode_envelope(data: bytes) -> dict[str, Any] | None:
    """The fields of a ``LIFT`` envelope, or None when ``data`` is not one."""
    if not data.startswith(ENVELOPE_COOKIE):
        return None
    try:
        fields = _fields(data[4:])
        out: dict[str, Any] = {"offset": 0, "key": None, "value": b"", "timestamp": 0, "subject": "",
                               "reply": "", "headers": {}, "ack_inbox": None, "correlation_id": None,
                               "ack_policy": AckPolicy.LEADER}
        for num, wt, val in fields:
            if num in (1, 4, 10):
                if wt != _VARINT:
                    return None
                assert isinstance(val, int)
                if num == 10:
                    out["ack_policy"] = AckPolicy(val) if val in (0, 1, 2) else None
                else:
                    out["offset" if num == 1 else "timestamp"] = _int64(val)
            elif num in (2, 3, 5, 6, 7, 8, 9):
                if wt != _LEN:
                    return None
                assert isinstance(val, bytes)
                if num == 2:
                    out["key"] = val
                elif num == 3:
                    out["value"] = val
                elif num == 7:
                    hk, hv = "", b""
                    for enum_, ewt, ev in _fields(val):
                        if ewt != _LEN:
                            return None
                        assert isinstance(ev, bytes)
                        if enum_ == 1:
                            hk = ev.decode("utf-8", "surrogatepass")
                        elif enum_ == 2:
                            hv = ev
                    out["headers"][hk] = hv
                else:
                    text = val.decode("utf-8", "surrogatepass")
                    out[{5: "subject", 6: "reply", 8: "ack_inbox", 9: "correlation_id"}[num]] = text
            # unknown fields are skipped, as protobuf does
    except (ValueError, UnicodeDecodeError):
        return None
    if out["ack_inbox"] == "":
        out["ack_inbox"] = None
    return out


# -- low-level helpers (NewMessage, UnmarshalMessage, UnmarshalAck) -----------------------------


def new_message(
    value: bytes = b"",
    *_old_form: Any,
    key: bytes | None = None,
    headers: Mapping[str, str | bytes] | None = None,
    ack_inbox: str | None = None,
    correlation_id: str | None = None,
    ack_policy: AckPolicy | str = AckPolicy.LEADER,
) -> bytes:
    """A Liftbridge message envelope, ready to publish with any NATS client (the ``NewMessage``).

    The four bytes ``LIFT`` (the envelope cookie) followed by the serialized ``Message``
    protobuf of the Liftbridge API (key, value, headers, ack inbox, correlation id, ack
    policy). Publish it on the partition subject (``nc.publish("foo.1", data)``);
    :meth:`Client.subscribe` and :func:`unmarshal_message` decode it. JetStream does not
    read the envelope: nothing sends an ack to ``ack_inbox`` for such a publish (see
    ``docs/liftbridge.md``). Header values are opaque bytes (a str means its UTF-8).
    Pure: no I/O.

    Raises:
        TypeError, ValueError: a bad argument (named in the message).
        jssync.BadSubjectError: a bad ``ack_inbox``.
    """
    if isinstance(value, str) or _old_form:
        raise TypeError(
            "new_message(value, ...) takes the value bytes and returns the LIFT envelope (the guide's NewMessage);"
            f" got {value!r:.40} first. For a NATS message with Lift-* headers and a subject, use "
            "new_nats_message(subject, value, ...)"
        )
    data = check_bytes(value, "value")
    assert data is not None
    k = check_bytes(key, "key", optional=True)
    pol = check_ack_policy(ack_policy)
    cid = check_correlation_id(correlation_id)
    inbox = check_ack_inbox(ack_inbox)
    hdrs: dict[str, bytes] = {}
    if headers is not None:
        if not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a dict, got {type(headers).__name__}")
        for name, v in headers.items():
            if not isinstance(name, str):
                raise TypeError(f"header names must be str, got {name!r}")
            if isinstance(v, str):
                hdrs[name] = v.encode("utf-8", "surrogatepass")
            else:
                b = check_bytes(v, f"header {name!r} value")
                assert b is not None
                hdrs[name] = b
    return encode_envelope(value=data, key=k, headers=hdrs, ack_inbox=inbox, correlation_id=cid, ack_policy=pol)


def new_nats_message(
    subject: str,
    value: bytes = b"",
    *,
    key: bytes | None = None,
    headers: Mapping[str, str | bytes] | None = None,
    ack_inbox: str | None = None,
    correlation_id: str | None = None,
    ack_policy: AckPolicy | str = AckPolicy.LEADER,
    partition: int | None = None,
) -> NatsMessage:
    """A message for a plain NATS publish in jssync's own form: ``Lift-*`` NATS headers.

    The value stays the payload (any NATS client reads it as it is); key, ack inbox,
    correlation id and ack policy become ``Lift-*`` headers, as :meth:`Client.publish`
    writes them. With ``ack_inbox`` and an ack policy other than NONE the reply subject
    is ``ack_inbox``, so JetStream sends its PubAck there (a PubAck has no correlation
    id, and no ALL confirmation: that needs the client). ``partition`` derives the
    partition subject (``foo.2``). Pure: no I/O.

    Raises:
        ValueError, TypeError: a bad argument (named in the message).
        jssync.BadSubjectError, jssync.BadHeaderError.
    """
    validate_subject(subject, wildcards=False)
    data = check_bytes(value, "value")
    assert data is not None
    k = check_bytes(key, "key", optional=True)
    pol = check_ack_policy(ack_policy)
    cid = check_correlation_id(correlation_id)
    inbox = check_ack_inbox(ack_inbox)
    reply = inbox if inbox is not None and pol is not AckPolicy.NONE else None
    if partition is not None:
        subject = partition_subject(subject, check_partition(partition))
    h = envelope_headers(key=k, headers=user_headers(headers), ack_inbox=inbox, correlation_id=cid,
                         ack_policy=pol)
    return NatsMessage(subject=subject, data=data, headers=h, reply=reply)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _ns_time(ns: int) -> _dt.datetime | None:
    if ns <= 0:
        return None
    try:
        return _EPOCH + _dt.timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def unmarshal_message(data: Msg | bytes, *, stream: str | None = None,
                      partition: int | None = None) -> tuple[Message | None, bool]:
    """Decode a message (the Liftbridge ``UnmarshalMessage``): ``(message, True)``, or ``(None, False)``.

    ``data`` is either bytes, a message envelope when they start with ``LIFT`` (see
    :func:`new_message`), or a received :class:`jssync.Msg`: its payload may be an
    envelope, or it carries jssync's ``Lift-*`` headers (:meth:`Client.publish`,
    :func:`new_nats_message`). Anything else, e.g. a plain NATS message or a JetStream
    message published without the envelope, gives ``(None, False)``; nothing raises.
    For a JetStream message the offset, timestamp, stream and partition come from its
    metadata (``stream``/``partition`` override the last two); otherwise the offset is
    the envelope's (0 when unset) and ``sequence`` is 0. Pure: no I/O.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        payload, subject, headers, js = bytes(data), "", None, None
    else:
        payload, subject, headers = data.data, data.subject, data.headers
        js = None
        if data.reply.startswith("$JS.ACK."):
            try:
                js = data.metadata
            except Error:
                js = None  # a malformed ack subject: take it as a core message
    env = decode_envelope(payload) if not (headers and HDR_ACK_POLICY in headers) else None
    if env is None and not (headers and HDR_ACK_POLICY in headers):
        return None, False
    seq, ts = 0, None
    if js is not None:
        seq, ts = js.sequence.stream, js.timestamp
        if stream is None or partition is None:
            parsed = parse_partition_stream_name(js.stream)
            if stream is None:
                stream = parsed[0] if parsed else js.stream
            if partition is None:
                partition = parsed[1] if parsed else 0
    m = message_from(subject, payload, headers, stream or "", partition or 0, seq, ts)
    if js is None:  # not stored by JetStream: no offset, unless the envelope has one
        if env is not None:
            m = dataclasses.replace(m, offset=env["offset"], timestamp=_ns_time(env["timestamp"]),
                                    subject=subject or env["subject"])
        else:
            m = dataclasses.replace(m, offset=0)
    return m, True


def message_from(subject: str, data: bytes, headers: dict[str, str] | None, stream: str, partition: int,
                 seq: int, timestamp: _dt.datetime | None) -> Message:
    """Build a :class:`Message` from the parts of a stored JetStream message.

    The envelope fields come from jssync's ``Lift-*`` headers, or from a ``LIFT``
    envelope payload (:func:`new_message`) when the message has no ``Lift-Ack-Policy``.
    """
    key = ack_inbox = correlation_id = None
    policy: AckPolicy | None = None
    user: dict[str, bytes] = {}
    own_id: str | None = None  # HDR_OWN_MSG_ID
    if headers:
        for k, v in headers.items():
            if k.startswith(HDR_PREFIX):
                if k == HDR_KEY:
                    key = decode_key(v)
                elif k == HDR_ACK_INBOX:
                    ack_inbox = v or None
                elif k == HDR_CORRELATION_ID:
                    correlation_id = v
                elif k == HDR_ACK_POLICY:
                    policy = AckPolicy.__members__.get(v)
                elif k == HDR_CORRELATION_ID_B64:
                    correlation_id = decode_key(v).decode("utf-8", "surrogatepass")
                elif k == HDR_OWN_MSG_ID:
                    own_id = v
                elif k.startswith(HDR_B64_PREFIX):
                    user[k[len(HDR_B64_PREFIX):]] = decode_key(v)
                continue
            user[k] = v.encode("utf-8")
        mid = headers.get("Nats-Msg-Id")
        if mid is not None and (own_id == "true" if own_id is not None
                                else policy is not None and _LEGACY_OWN_MSG_ID.match(mid) is not None):
            del user["Nats-Msg-Id"]  # the client's own id (for safe retries), not the user's
    if policy is None and data.startswith(ENVELOPE_COOKIE):
        env = decode_envelope(data)
        if env is not None:
            user.update(env["headers"])
            return Message(stream=stream, partition=partition, offset=seq - 1, value=env["value"],
                           key=env["key"], timestamp=timestamp, subject=subject, headers=user,
                           ack_inbox=env["ack_inbox"], correlation_id=env["correlation_id"],
                           ack_policy=env["ack_policy"], sequence=seq)
    return Message(stream=stream, partition=partition, offset=seq - 1, value=data, key=key,
                   timestamp=timestamp, subject=subject, headers=user, ack_inbox=ack_inbox,
                   correlation_id=correlation_id, ack_policy=policy, sequence=seq)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def unmarshal_ack(data: Msg | bytes, *, ack_inbox: str | None = None) -> Ack:
    """Decode an ack received on an ack inbox (the Liftbridge ``UnmarshalAck``).

    ``data`` is the received message or its payload. Understands the acks
    :meth:`Client.publish` sends to an ack inbox (a PubAck plus the Liftbridge fields,
    the correlation id among them) and bare JetStream PubAcks
    (``{"stream": ..., "seq": ...}``, which have no correlation id). ``ack_inbox`` fills
    :attr:`Ack.ack_inbox` when the ack does not say. Pure: no I/O.

    Raises:
        InvalidAckError: not an ack.
        jssync.APIError: the ack is a JetStream error reply (e.g. a failed expectation).
        jssync.NoRespondersError: the 503 "no responders" status (no stream captured it).
    """
    if isinstance(data, bytes | bytearray | memoryview):
        payload = bytes(data)
    else:
        payload = data.data
        hdrs = data.headers
        st = classify(hdrs, payload, data.reply) if hdrs and not payload else None
        if st is not None:
            if st.code == NO_RESPONDERS:
                raise NoRespondersError("no stream captured the message (503 no responders)")
            raise InvalidAckError(f"not an ack: status {st.code} {st.description}")
    try:
        obj = json.loads(payload)
    except ValueError:
        raise InvalidAckError(f"not an ack: {payload[:60]!r}") from None
    if not isinstance(obj, dict):
        raise InvalidAckError(f"not an ack: {payload[:60]!r}")
    if "error" in obj:
        check_api_response(payload)
    js_stream, seq = obj.get("stream"), obj.get("seq")
    if not isinstance(js_stream, str) or not isinstance(seq, int):
        raise InvalidAckError(f"not an ack (no stream and seq): {payload[:60]!r}")
    lift = obj.get("liftbridge") if isinstance(obj.get("liftbridge"), dict) else None
    if lift is not None:
        key = lift.get("key")
        policy = lift.get("ack_policy")
        ts = lift.get("commit_timestamp")
        cid = lift.get("correlation_id")
        return Ack(
            stream=str(lift.get("stream", js_stream)), partition=int(lift.get("partition", 0)),
            partition_subject=lift.get("partition_subject"), msg_subject=lift.get("msg_subject"),
            offset=seq - 1, key=None if key is None else decode_key(key),
            ack_inbox=lift.get("ack_inbox") or ack_inbox, correlation_id=cid if isinstance(cid, str) else None,
            ack_policy=AckPolicy.__members__.get(policy) if isinstance(policy, str) else None,
            commit_timestamp=_parse_ts(ts) or _now(), jetstream_stream=js_stream, sequence=seq,
            duplicate=bool(obj.get("duplicate", False)),
        )
    parsed = parse_partition_stream_name(js_stream)
    return Ack(
        stream=parsed[0] if parsed else js_stream, partition=parsed[1] if parsed else 0, partition_subject=None,
        msg_subject=None, offset=seq - 1, key=None, ack_inbox=ack_inbox, correlation_id=None, ack_policy=None,
        commit_timestamp=_now(), jetstream_stream=js_stream, sequence=seq,
        duplicate=bool(obj.get("duplicate", False)),
    )


#: A PubAck's time, or None (the one parser: base/times.py).
_parse_ts = server_time_or_none


def forwarded_ack(ack: Ack) -> bytes:
    """The payload :meth:`Client.publish` sends to an ack inbox: a PubAck plus the Liftbridge fields."""
    body: dict[str, Any] = {"stream": ack.jetstream_stream, "seq": ack.sequence}
    if ack.duplicate:
        body["duplicate"] = True
    body["liftbridge"] = {
        "stream": ack.stream,
        "partition": ack.partition,
        "partition_subject": ack.partition_subject,
        "msg_subject": ack.msg_subject,
        "offset": ack.offset,
        "key": None if ack.key is None else encode_key(ack.key),
        "ack_inbox": ack.ack_inbox,
        "correlation_id": ack.correlation_id,
        "ack_policy": ack.ack_policy.name if ack.ack_policy is not None else None,
        "commit_timestamp": ack.commit_timestamp.isoformat(),
    }
    return json.dumps(body, separators=(",", ":")).encode()


# -- partitioners ------------------------------------------------------------------------------


class Partitioner(ABC):
    """Maps a message to a partition of the stream(s) on its subject.

    Subclass it, or pass any callable ``fn(message, metadata) -> int`` as ``partition_by``.
    """

    @abstractmethod
    def partition(self, message: OutgoingMessage, metadata: Metadata) -> int:
        """Return the partition number for ``message`` (0 when the subject has no stream)."""


def partition_count(subject: str, metadata: Metadata) -> int:
    """The partition count of the first stream on ``subject`` (0 when there is none)."""
    for count in metadata.partition_counts_for_subject(subject).values():
        return count
    return 0


class PartitionByKey(Partitioner):
    """CRC-32 (IEEE) of the key, modulo the partition count (a missing key hashes as ``b""``).

    The unsigned CRC is used, so every key maps to a partition in range. The guide's Go
    snippet casts the CRC to int32 first: for keys whose CRC has the top bit set (about
    half; ``b"key-3"`` is one) that gives a negative partition, which its ``Publish``
    sends to the base subject (partition 0). Thread-safe.
    """

    def partition(self, message: OutgoingMessage, metadata: Metadata) -> int:
        n = partition_count(message.subject, metadata)
        if n <= 0:
            return 0
        return (zlib.crc32(message.key or b"") & 0xFFFFFFFF) % n


class RoundRobinCounters:
    """One counter per subject, for round-robin partitioning. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}

    def next(self, subject: str, partitions: int) -> int:
        """The subject's counter modulo ``partitions`` (then the counter moves on); 0 when there are none."""
        if partitions <= 0:
            return 0
        with self._lock:
            count = self._counters.get(subject, 0)
            self._counters[subject] = count + 1
        return count % partitions


class PartitionByRoundRobin(Partitioner):
    """Cycles through the partitions with one counter per subject. Thread-safe.

    Given to :meth:`Client.publish` (as an instance, a new one per call, or the class
    itself: the guide's flag), the counters are the client's, one per subject, so every
    spelling cycles. Called directly, an instance uses its own counters.
    """

    def __init__(self) -> None:
        self._counters = RoundRobinCounters()

    def partition(self, message: OutgoingMessage, metadata: Metadata) -> int:
        return self._counters.next(message.subject, partition_count(message.subject, metadata))


public(Partitioner, PartitionByKey, PartitionByRoundRobin)

PartitionerLike = Partitioner | Callable[[OutgoingMessage, "Metadata"], int]


def run_partitioner(partitioner: PartitionerLike, message: OutgoingMessage, metadata: Metadata) -> int:
    """Call a Partitioner (or a plain callable) and check what it returned."""
    if isinstance(partitioner, Partitioner):
        p = partitioner.partition(message, metadata)
    else:
        p = partitioner(message, metadata)
    if not isinstance(p, int) or isinstance(p, bool) or p < 0:
        raise ValidationError(f"partitioner {partitioner!r} returned {p!r}, not a partition number >= 0")
    return p
