"""Pure parts of the Liftbridge client on JetStream: names, headers, envelopes, acks, partitioners.

Nothing here does I/O. The public names are re-exported by :mod:`jssync.liftbridge`.

The mapping (documented in ``docs/liftbridge.md``):

* a Liftbridge stream ``name`` with base subject ``foo`` and ``n`` partitions is ``n``
  JetStream streams ``name-0`` ... ``name-(n-1)``; partition ``p`` captures exactly the
  subject ``foo`` (p = 0) or ``foo.p``;
* a Liftbridge offset is the JetStream stream sequence minus one;
* the Liftbridge envelope fields travel as NATS headers (:data:`HDR_KEY` ...).
"""

from __future__ import annotations

import base64
import binascii
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

from ._errors import Error, StreamNameInUseError, StreamNotFoundError

if TYPE_CHECKING:
    from ._liftbridge_meta import Metadata
    from ._msg import Msg

_PUBLIC = "jssync.liftbridge"

# -- errors ------------------------------------------------------------------------------------


class StreamExistsError(StreamNameInUseError):
    """A Liftbridge stream (or one of its partition streams) of that name already exists.

    The Liftbridge ``ErrStreamExists``. A :class:`jssync.StreamNameInUseError` (an
    :class:`jssync.APIError`: ``.code``, ``.err_code``, ``.description``).
    """


class NoSuchPartitionError(StreamNotFoundError):
    """The Liftbridge stream, or the partition of it, does not exist.

    The Liftbridge ``ErrNoSuchPartition`` (also raised where Liftbridge says
    ``ErrNoSuchStream``). A :class:`jssync.StreamNotFoundError`.
    """


class NotSupportedError(Error, ValueError):
    """A Liftbridge option that has no faithful JetStream mapping (e.g. ``group``)."""


class InvalidAckError(Error, ValueError):
    """The data given to :func:`unmarshal_ack` is not a JetStream PubAck."""


def public(*objs: Any) -> None:
    """Show ``objs`` as members of :mod:`jssync.liftbridge` (their public home)."""
    for obj in objs:
        obj.__module__ = _PUBLIC


public(StreamExistsError, NoSuchPartitionError, NotSupportedError, InvalidAckError)

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
#: ``Nats-Msg-Id`` values the client sets (for safe publish retries) start with this.
MSG_ID_PREFIX = "lift-"

#: Stream metadata keys on every partition stream.
META_STREAM = "liftbridge.stream"
META_SUBJECT = "liftbridge.subject"
META_PARTITION = "liftbridge.partition"
META_PARTITIONS = "liftbridge.partitions"
META_CREATED = "liftbridge.created"

_PART_NAME = re.compile(r"^(.+)-(0|[1-9][0-9]*)\Z")
_TOKEN = re.compile(r"^[^\s.*>]+\Z")


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
    raise ValueError(f"ack_policy must be AckPolicy.LEADER, ALL or NONE, got {ack_policy!r}")


def check_partition(partition: Any, what: str = "partition") -> int:
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ValueError(f"{what} must be an int >= 0, got {partition!r}")
    return partition


def user_headers(headers: Mapping[str, str | bytes] | None) -> dict[str, str]:
    """Check user headers and return them as NATS headers (str values).

    Values may be str or bytes (UTF-8 text without CR/LF: NATS headers are text).

    Raises:
        jssync.BadHeaderError: a bad name or value, or a reserved ``Lift-*`` name.
    """
    from ._connection import validate_headers
    from ._errors import BadHeaderError

    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise BadHeaderError(f"headers must be a dict, got {type(headers).__name__}")
    out: dict[str, str] = {}
    for k, v in headers.items():
        if isinstance(k, str) and k.lower().startswith(HDR_PREFIX.lower()):
            raise BadHeaderError(f"header name {k!r} is reserved (the {HDR_PREFIX}* headers carry the envelope)")
        if isinstance(v, bytes | bytearray | memoryview):
            raw = bytes(v)
            try:
                v = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadHeaderError(f"header {k!r} value is not UTF-8 text: {raw[:40]!r}") from None
        out[k] = v
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
    """The NATS headers of a message: the user's, then the envelope's ``Lift-*`` ones."""
    h = dict(headers)
    if key is not None:
        h[HDR_KEY] = encode_key(key)
    if ack_inbox:
        h[HDR_ACK_INBOX] = ack_inbox
    if correlation_id is not None:
        h[HDR_CORRELATION_ID] = correlation_id
    h[HDR_ACK_POLICY] = ack_policy.name
    if msg_id is not None:
        h["Nats-Msg-Id"] = msg_id
    return h


def check_correlation_id(correlation_id: Any) -> str | None:
    if correlation_id is None:
        return None
    if not isinstance(correlation_id, str) or not correlation_id:
        raise ValueError(f"correlation_id must be a non-empty str, got {correlation_id!r}")
    if "\r" in correlation_id or "\n" in correlation_id:
        raise ValueError(f"correlation_id may not contain CR or LF: {correlation_id!r}")
    return correlation_id


def ack_reply_subject(ack_inbox: str, correlation_id: str | None) -> str:
    """Where a PubAck for a message with this ack inbox and correlation id is sent.

    ``ack_inbox`` alone, or ``ack_inbox.<correlation_id>`` (the PubAck has no room for the
    id, so it travels in the subject; the id must then be one subject token).

    Raises:
        ValueError: the correlation id is not a single subject token.
    """
    if correlation_id is None:
        return ack_inbox
    if not _TOKEN.match(correlation_id):
        raise ValueError(
            f"correlation_id {correlation_id!r} cannot travel in the ack subject: with ack_inbox it must be "
            "one subject token (no '.', '*', '>' or whitespace)"
        )
    return f"{ack_inbox}.{correlation_id}"


# -- low-level helpers (NewMessage, UnmarshalMessage, UnmarshalAck) -----------------------------


def new_message(
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
    """Build a message for a plain NATS publish (the Liftbridge ``NewMessage``).

    The key, ack inbox, correlation id and ack policy become ``Lift-*`` NATS headers.
    With ``ack_inbox`` and an ack policy other than NONE, the reply subject is set so that
    JetStream sends its PubAck to ``ack_inbox`` (or ``ack_inbox.<correlation_id>`` when a
    correlation id is given); decode it with :func:`unmarshal_ack`. ``partition`` derives
    the partition subject (``foo.2``). Without a :class:`Client` there is no ALL
    confirmation: the PubAck is the LEADER ack. Pure: no I/O.

    Raises:
        ValueError, TypeError: a bad argument (named in the message).
        jssync.BadSubjectError, jssync.BadHeaderError.
    """
    from ._connection import validate_subject

    validate_subject(subject, wildcards=False)
    data = check_bytes(value, "value")
    assert data is not None
    k = check_bytes(key, "key", optional=True)
    pol = check_ack_policy(ack_policy)
    cid = check_correlation_id(correlation_id)
    reply = None
    if ack_inbox is not None:
        validate_subject(ack_inbox, "ack_inbox", wildcards=False)
        if pol is not AckPolicy.NONE:
            reply = ack_reply_subject(ack_inbox, cid)
    if partition is not None:
        subject = partition_subject(subject, check_partition(partition))
    h = envelope_headers(key=k, headers=user_headers(headers), ack_inbox=ack_inbox, correlation_id=cid,
                         ack_policy=pol)
    return NatsMessage(subject=subject, data=data, headers=h, reply=reply)


def unmarshal_message(msg: Msg, *, stream: str | None = None, partition: int | None = None) -> Message:
    """Turn a JetStream message (from any jssync consumer) into a :class:`Message`.

    The Liftbridge ``UnmarshalMessage``: the ``Lift-*`` headers give the key, ack inbox,
    correlation id and ack policy; the JetStream metadata gives offset and timestamp.
    ``stream``/``partition`` default to what the JetStream stream name says.

    Raises:
        jssync.Error: ``msg`` is not a JetStream message.
    """
    meta = msg.metadata
    if stream is None or partition is None:
        parsed = parse_partition_stream_name(meta.stream)
        if stream is None:
            stream = parsed[0] if parsed else meta.stream
        if partition is None:
            partition = parsed[1] if parsed else 0
    seq = meta.sequence.stream
    return message_from(msg.subject, msg.data, msg.headers, stream, partition, seq, meta.timestamp)


def message_from(subject: str, data: bytes, headers: dict[str, str] | None, stream: str, partition: int,
                 seq: int, timestamp: _dt.datetime | None) -> Message:
    """Build a :class:`Message` from the parts of a stored JetStream message."""
    key = ack_inbox = correlation_id = None
    policy: AckPolicy | None = None
    user: dict[str, bytes] = {}
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
                continue
            if k == "Nats-Msg-Id" and v.startswith(MSG_ID_PREFIX):
                continue
            user[k] = v.encode("utf-8")
    return Message(stream=stream, partition=partition, offset=seq - 1, value=data, key=key,
                   timestamp=timestamp, subject=subject, headers=user, ack_inbox=ack_inbox,
                   correlation_id=correlation_id, ack_policy=policy, sequence=seq)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def unmarshal_ack(data: Msg | bytes, *, ack_inbox: str | None = None) -> Ack:
    """Decode an ack received on an ack inbox (the Liftbridge ``UnmarshalAck``).

    ``data`` is the received message (preferred: its subject carries the correlation id)
    or its payload. Understands JetStream PubAcks (``{"stream": ..., "seq": ...}``) and
    the richer acks :meth:`Client.publish` forwards to an ack inbox. Pure: no I/O.

    Args:
        data: a :class:`jssync.Msg` or the payload bytes.
        ack_inbox: the ack inbox the message was published with; with a Msg, the
            subject's token after it is the correlation id.

    Raises:
        InvalidAckError: not an ack.
        jssync.APIError: the ack is a JetStream error reply (e.g. a failed expectation).
        jssync.NoRespondersError: the 503 "no responders" status (no stream captured it).
    """
    from ._errors import NoRespondersError, check_api_response

    subject: str | None = None
    if isinstance(data, bytes | bytearray | memoryview):
        payload = bytes(data)
    else:
        payload = data.data
        subject = data.subject
        hdrs = data.headers
        if hdrs and not payload and hdrs.get("Status"):
            if hdrs.get("Status") == "503":
                raise NoRespondersError("no stream captured the message (503 no responders)")
            raise InvalidAckError(f"not an ack: status {hdrs.get('Status')} {hdrs.get('Description', '')}")
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
        return Ack(
            stream=str(lift.get("stream", js_stream)), partition=int(lift.get("partition", 0)),
            partition_subject=lift.get("partition_subject"), msg_subject=lift.get("msg_subject"),
            offset=seq - 1, key=None if key is None else decode_key(key), ack_inbox=lift.get("ack_inbox"),
            correlation_id=lift.get("correlation_id"),
            ack_policy=AckPolicy.__members__.get(policy) if isinstance(policy, str) else None,
            commit_timestamp=_parse_ts(ts) or _now(), jetstream_stream=js_stream, sequence=seq,
            duplicate=bool(obj.get("duplicate", False)),
        )
    parsed = parse_partition_stream_name(js_stream)
    cid = None
    if subject is not None and ack_inbox is not None and subject.startswith(ack_inbox + "."):
        cid = subject[len(ack_inbox) + 1:]
    return Ack(
        stream=parsed[0] if parsed else js_stream, partition=parsed[1] if parsed else 0, partition_subject=None,
        msg_subject=None, offset=seq - 1, key=None, ack_inbox=ack_inbox, correlation_id=cid, ack_policy=None,
        commit_timestamp=_now(), jetstream_stream=js_stream, sequence=seq,
        duplicate=bool(obj.get("duplicate", False)),
    )


def _parse_ts(value: Any) -> _dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _dt.datetime.fromisoformat(value)
    except ValueError:
        return None


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

    The unsigned CRC is used, so every key maps to a partition in range (the Go client
    casts it to int32 first, which sends keys with the top bit set to partition 0).
    Thread-safe.
    """

    def partition(self, message: OutgoingMessage, metadata: Metadata) -> int:
        n = partition_count(message.subject, metadata)
        if n <= 0:
            return 0
        return (zlib.crc32(message.key or b"") & 0xFFFFFFFF) % n


class PartitionByRoundRobin(Partitioner):
    """Cycles through the partitions with one counter per subject. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}

    def partition(self, message: OutgoingMessage, metadata: Metadata) -> int:
        n = partition_count(message.subject, metadata)
        if n <= 0:
            return 0
        with self._lock:
            count = self._counters.get(message.subject, 0)
            self._counters[message.subject] = count + 1
        return count % n


public(Partitioner, PartitionByKey, PartitionByRoundRobin)

PartitionerLike = Partitioner | Callable[[OutgoingMessage, "Metadata"], int]


def run_partitioner(partitioner: PartitionerLike, message: OutgoingMessage, metadata: Metadata) -> int:
    """Call a Partitioner (or a plain callable) and check what it returned."""
    if isinstance(partitioner, Partitioner):
        p = partitioner.partition(message, metadata)
    else:
        p = partitioner(message, metadata)
    if not isinstance(p, int) or isinstance(p, bool) or p < 0:
        raise ValueError(f"partitioner {partitioner!r} returned {p!r}, not a partition number >= 0")
    return p
