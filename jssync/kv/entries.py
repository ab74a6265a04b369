"""A bucket's values: the entry and status types, key and bucket name rules, the header values
of an entry (its operation, its TTL, its time stamp)."""

from __future__ import annotations

import datetime as _dt
import enum
import re
from dataclasses import dataclass
from typing import Any

from nats.js import api

from ..base.durations import seconds
from ..base.errors import (
    APIError,
    WrongLastSequenceError,
)
from ..jetstream.direct import parse_timestamp
from .errors import (
    InvalidBucketNameError,
    InvalidKeyError,
)

KV_OP = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"
HDR_ROLLUP = "Nats-Rollup"
HDR_TTL = "Nats-TTL"
MAX_HISTORY = 64

BUCKET_RE = re.compile(r"^[a-zA-Z0-9_-]+\Z")
_KEY_RE = re.compile(r"^[-/_=.a-zA-Z0-9]+\Z")
_SEARCH_KEY_RE = re.compile(r"^[-/_=.a-zA-Z0-9*]*>?\Z")


# -- values -------------------------------------------------------------------------------------


class KeyValueOp(enum.StrEnum):
    """What an entry records: a value, a delete marker, or a purge marker."""

    PUT = "PUT"
    DEL = "DEL"
    PURGE = "PURGE"

    def __str__(self) -> str:
        return self.value


@dataclass
class Entry:
    """One value (or delete/purge marker) of a key.

    Attributes:
        bucket: the bucket name.
        key: the key.
        value: the value (``b""`` for markers, and for watches with ``meta_only``).
        revision: the stream sequence that stored it; unique in the bucket.
        delta: in watches and history, how many newer entries matched (0 = latest); 0 from ``get``.
        created: when it was stored (aware UTC datetime), or None if unknown.
        operation: ``KeyValueOp.PUT``, ``DEL`` or ``PURGE`` (a ``str`` enum).
    """

    bucket: str
    key: str
    value: bytes
    revision: int
    delta: int = 0
    created: _dt.datetime | None = None
    operation: KeyValueOp = KeyValueOp.PUT

    def __repr__(self) -> str:
        return (f"Entry(bucket={self.bucket!r}, key={self.key!r}, value={self.value[:32]!r}, "
                f"revision={self.revision}, delta={self.delta}, operation={self.operation.value})")


@dataclass(frozen=True)
class KeyValueStatus:
    """The state of a bucket, from its stream's info.

    Attributes:
        bucket: the bucket name.
        stream_info: the full ``StreamInfo`` of ``KV_<bucket>``.
    """

    bucket: str
    stream_info: api.StreamInfo

    @property
    def values(self) -> int:
        """Messages stored, history and markers included."""
        return int(self.stream_info.state.messages or 0)

    @property
    def history(self) -> int:
        """Values kept per key."""
        return int(self.stream_info.config.max_msgs_per_subject or 0)

    @property
    def ttl(self) -> float | None:
        """Seconds a value is kept, or None for forever."""
        age = self.stream_info.config.max_age
        return age if age else None

    @property
    def bytes(self) -> int:
        """Bytes stored."""
        return int(self.stream_info.state.bytes or 0)

    @property
    def is_compressed(self) -> bool:
        comp = self.stream_info.config.compression
        return comp is not None and str(getattr(comp, "value", comp)) not in ("", "none")

    @property
    def limit_marker_ttl(self) -> float | None:
        """Seconds the markers for values removed by the TTL are kept, or None (no markers)."""
        return self.stream_info.config.subject_delete_marker_ttl or None

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.stream_info.config.metadata or {})

    @property
    def backing_store(self) -> str:
        return "JetStream"

    @property
    def replicas(self) -> int:
        return int(self.stream_info.config.num_replicas or 1)

    @property
    def storage(self) -> api.StorageType | None:
        return self.stream_info.config.storage

    @property
    def mirror(self) -> api.StreamSource | None:
        """The bucket this one mirrors (its stream's ``mirror``: ``name`` is ``KV_<origin>``), or None."""
        return self.stream_info.config.mirror

    @property
    def sources(self) -> list[api.StreamSource]:
        """The buckets (or streams) sourced into this one, with the subject transforms that map their keys."""
        return list(self.stream_info.config.sources or [])


# -- validation ----------------------------------------------------------------------------------


def validate_bucket(bucket: Any) -> str:
    if not isinstance(bucket, str) or not bucket or not BUCKET_RE.match(bucket):
        raise InvalidBucketNameError(
            f"invalid bucket name {bucket!r}: use letters, digits, '-' and '_' only"
        )
    return bucket


def validate_key(key: Any) -> str:
    if (not isinstance(key, str) or not key or key[0] == "." or key[-1] == "." or ".." in key
            or not _KEY_RE.match(key)):
        raise InvalidKeyError(
            f"invalid key {key!r}: use letters, digits and '-/_=.', not starting or ending with '.'"
        )
    return key


def validate_key_filter(key: Any) -> str:
    if (not isinstance(key, str) or not key or key[0] == "." or key[-1] == "." or ".." in key
            or not _SEARCH_KEY_RE.match(key)):
        raise InvalidKeyError(f"invalid key filter {key!r}")
    for tok in key.split("."):
        if ("*" in tok and tok != "*") or (">" in tok and tok != ">"):
            raise InvalidKeyError(f"invalid key filter {key!r}: wildcards must be whole tokens")
    return key


def value_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"value must be bytes or str, got {type(value).__name__}")


def ttl_header(ttl: Any, what: str = "ttl") -> str:
    ttl = seconds(ttl, what, minimum=1.0)
    if float(ttl).is_integer():
        return f"{int(ttl)}s"
    return f"{int(round(ttl * 1000))}ms"


#: ``Nats-Time-Stamp`` text -> its datetime, for the gets of a value read again (bounded).
_stamps: dict[str, _dt.datetime | None] = {}


def parse_stamp(text: str | None) -> _dt.datetime | None:
    """``parse_timestamp(text)``, remembered: a key read again and again has the same stamp."""
    if text is None:
        return None
    try:
        return _stamps[text]
    except KeyError:
        pass
    when = parse_timestamp(text)
    if len(_stamps) >= 256:
        _stamps.clear()
    _stamps[text] = when
    return when


def operation_of(headers: dict[str, str] | None) -> KeyValueOp:
    if not headers:
        return KeyValueOp.PUT
    op = headers.get(KV_OP)
    if op:
        if op == "DEL":
            return KeyValueOp.DEL
        if op == "PURGE":
            return KeyValueOp.PURGE
        return KeyValueOp.PUT
    reason = headers.get(MARKER_REASON)
    if reason in ("MaxAge", "Purge"):
        return KeyValueOp.PURGE
    if reason == "Remove":
        return KeyValueOp.DEL
    return KeyValueOp.PUT


def is_wrong_last_seq(exc: APIError) -> bool:
    return isinstance(exc, WrongLastSequenceError) or exc.err_code in (10071, 10164)
