"""The key-value store (NATS ADR-8) on top of JetStream.

A bucket ``B`` is the stream ``KV_B`` capturing ``$KV.B.>``; key ``k`` is the subject
``$KV.B.k``, its revisions are stream sequences, the bucket's history is
``max_msgs_per_subject``. Deletes and purges are marker messages with a
``KV-Operation`` header (a purge also rolls up the key's history with
``Nats-Rollup: sub``). Reads use Direct Get (any replica or mirror answers) when the
bucket's stream allows it; watches, ``keys`` and ``history`` read through an
ephemeral, ordered push consumer that never acks and is re-created when it falls out
of order, misses heartbeats, or the connection reconnects: from the last seen
revision, or, while a watch's initial values (the latest per key) are still being
read, again with the latest per key, skipping the revisions already passed.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as _dt
import enum
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from nats.js import api

from ..base.backoff import Backoff, retry
from ..base.deadline import DEFAULT, Deadline, Default, no_wait, resolve_timeout
from ..base.durations import seconds
from ..base.errors import (
    APIError,
    Error,
    MessageNotFoundError,
    NoRespondersError,
    PermissionDeniedError,
    RequestTimeoutError,
    StreamNameInUseError,
    StreamNotFoundError,
    SubscriptionClosedError,
    TimeoutError,
    ValidationError,
    WrongLastSequenceError,
    worth_retrying,
)
from ..base.status import CONFLICT, NOT_FOUND, PushAction, classify, decide_push
from ..base.validate import MAX_I64, check_int, check_optional_int
from ..jetstream import hooks as _js_hooks
from ..jetstream.consume.gaps import DELIVER, SKIP, GapTracker, Reset
from ..jetstream.consume.heartbeat import HeartbeatMonitor
from ..jetstream.direct import _no_responders, parse_timestamp, status_error
from ..jetstream.features import require
from ..jetstream.params import check_options, normalize_config
from ..jetstream.streams import Stream
from .errors import (
    BadBucketError,
    BucketExistsError,
    BucketNotFoundError,
    InvalidBucketNameError,
    InvalidKeyError,
    InvalidValueError,
    KeyDeletedError,
    KeyExistsError,
    KeyHistoryTooLargeError,
    KeyNotFoundError,
    KeyValueDecodeError,
    KeyValueError,
    KeyWrongLastSequenceError,
)

if TYPE_CHECKING:
    from ..base.jsack import MsgMetadata
    from ..core.connection import Connection
    from ..core.msg import Msg
    from ..core.subscription import Subscription
    from ..jetstream.context import JetStream
    from ..jetstream.streams import Stream
    from .codecs import CodecKeyValue, KeyCodec, ValueCodec

log = logging.getLogger("jssync")

#: a watcher's first consumer, while the server does not answer: 0.1 s, doubling up to 1.6 s
_CREATE_RETRY = Backoff(0.1, 1.6)

#: jssync.kv.codecs.CodecKeyValue, set when that module (which builds on this one) is imported
CODEC_KV: type[CodecKeyValue] | None = None

#: A watcher's subscription ended (a sentinel, distinct from None: no message yet).
_CLOSED: Any = object()
T = TypeVar("T")

__all__ = [
    "BadBucketError",
    "BucketExistsError",
    "BucketNotFoundError",
    "Entry",
    "InvalidBucketNameError",
    "InvalidKeyError",
    "InvalidValueError",
    "KeyDeletedError",
    "KeyExistsError",
    "KeyHistoryTooLargeError",
    "KeyNotFoundError",
    "KeyValue",
    "KeyValueDecodeError",
    "KeyValueError",
    "KeyValueOp",
    "KeyValueStatus",
    "KeyWatcher",
    "KeyWrongLastSequenceError",
    "create_key_value",
    "delete_key_value",
    "key_value",
]

KV_OP = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"
HDR_ROLLUP = "Nats-Rollup"
HDR_TTL = "Nats-TTL"
MAX_HISTORY = 64
#: Watch consumers send a heartbeat this often when idle (seconds).
WATCH_HEARTBEAT = 5.0

_BUCKET_RE = re.compile(r"^[a-zA-Z0-9_-]+\Z")
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


# -- validation ----------------------------------------------------------------------------------


def validate_bucket(bucket: Any) -> str:
    if not isinstance(bucket, str) or not bucket or not _BUCKET_RE.match(bucket):
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


def _value_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"value must be bytes or str, got {type(value).__name__}")


def _ttl_header(ttl: Any, what: str = "ttl") -> str:
    ttl = seconds(ttl, what, minimum=1.0)
    if float(ttl).is_integer():
        return f"{int(ttl)}s"
    return f"{int(round(ttl * 1000))}ms"


#: ``Nats-Time-Stamp`` text -> its datetime, for the gets of a value read again (bounded).
_stamps: dict[str, _dt.datetime | None] = {}


def _stamp(text: str | None) -> _dt.datetime | None:
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


def _operation(headers: dict[str, str] | None) -> KeyValueOp:
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


def _is_wrong_last_seq(exc: APIError) -> bool:
    return isinstance(exc, WrongLastSequenceError) or exc.err_code in (10071, 10164)


# -- bucket management ---------------------------------------------------------------------------

_EXTRA_OPTIONS = ("compression", "metadata", "allow_msg_ttl", "mirror", "sources")


#: the keyword options of create_key_value and friends
KV_OPTIONS = tuple(f.name for f in dataclasses.fields(api.KeyValueConfig)) + _EXTRA_OPTIONS + ("timeout",)


def _stream_config(config: api.KeyValueConfig | None, params: dict[str, Any],
                   call: str = "create_key_value") -> api.StreamConfig:
    check_options(params, KV_OPTIONS, call)
    extras = {k: params.pop(k) for k in _EXTRA_OPTIONS if k in params}
    if config is None:
        if "bucket" not in params:
            raise ValidationError(f"{call} needs bucket=")
        config = api.KeyValueConfig(**params)
    elif not isinstance(config, api.KeyValueConfig):
        raise TypeError(f"config must be a KeyValueConfig, got {type(config).__name__}")
    elif params:
        config = config.evolve(**params)
    bucket = validate_bucket(config.bucket)
    config = normalize_config(config)
    history = 1 if config.history is None or config.history == 0 else config.history
    check_int(history, f"history (1 to {MAX_HISTORY})", maximum=MAX_I64, open_ended=True)
    if history > MAX_HISTORY:
        raise KeyHistoryTooLargeError(f"history {history} is over the limit of {MAX_HISTORY} values per key")
    ttl = config.ttl
    replicas = config.replicas or 1
    check_int(replicas, "replicas", maximum=MAX_I64, open_ended=True)
    dup = 120.0
    if ttl and ttl < dup:
        dup = ttl
    scfg = api.StreamConfig(
        name=f"KV_{bucket}",
        description=config.description,
        subjects=[f"$KV.{bucket}.>"],
        retention=api.RetentionPolicy.LIMITS,
        max_consumers=-1,
        max_msgs=-1,
        max_bytes=config.max_bytes if config.max_bytes else -1,
        max_age=ttl or 0,
        max_msgs_per_subject=history,
        max_msg_size=config.max_value_size if config.max_value_size else -1,
        storage=config.storage or api.StorageType.FILE,
        num_replicas=replicas,
        placement=config.placement,
        republish=config.republish,
        discard=api.DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        deny_delete=True,
        duplicate_window=dup,
        allow_direct=True if config.direct is None else bool(config.direct),
    )
    if extras.get("compression"):
        scfg.compression = api.StoreCompression.S2
    if extras.get("metadata"):
        md = extras["metadata"]
        if not isinstance(md, dict):
            raise TypeError("metadata must be a dict of str to str")
        scfg.metadata = dict(md)
    _mirror_and_sources(scfg, bucket, extras.get("mirror"), extras.get("sources"))
    marker_ttl = config.limit_marker_ttl
    if marker_ttl:
        if marker_ttl < 1:
            raise ValidationError(f"limit_marker_ttl must be >= 1 second, got {marker_ttl!r}")
        scfg.allow_msg_ttl = True
        scfg.subject_delete_marker_ttl = marker_ttl
    elif extras.get("allow_msg_ttl"):
        scfg.allow_msg_ttl = True
    return scfg


def _kv_stream_name(name: Any, what: str) -> str:
    """``KV_<bucket>`` for a bucket name given with or without the ``KV_`` prefix."""
    if not isinstance(name, str) or not name:
        raise InvalidBucketNameError(f"{what} must name a bucket, got {name!r}")
    bucket = name[3:] if name.startswith("KV_") else name
    validate_bucket(bucket)
    return f"KV_{bucket}"


def _mirror_and_sources(scfg: api.StreamConfig, bucket: str, mirror: Any, sources: Any) -> None:
    """Set a bucket's mirror or sources on its stream config (ADR-8, ADR-57).

    A mirror (a read-only copy of another bucket) names the origin bucket (``KV_`` is
    added); the stream gets no subjects of its own and answers direct gets for the
    origin (``mirror_direct``). A source without ``subject_transforms`` is another
    bucket: its keys (those matching its ``filter_subject``, a key filter, when set) are
    mapped into this bucket. A source with ``subject_transforms`` is kept exactly as given.
    """
    if mirror is not None and sources:
        raise ValidationError("a bucket takes a mirror or sources, not both")
    if mirror is not None:
        if not isinstance(mirror, api.StreamSource):
            raise TypeError(f"mirror must be a nats.js.api.StreamSource, got {type(mirror).__name__}")
        if mirror.subject_transforms:
            raise ValidationError("a bucket's mirror cannot have subject_transforms")
        m = dataclasses.replace(mirror, name=_kv_stream_name(mirror.name, "mirror name"))
        if m.filter_subject:
            validate_key_filter(m.filter_subject)
            m.filter_subject = f"$KV.{m.name[3:]}.{m.filter_subject}"
        scfg.mirror = m
        scfg.mirror_direct = True
        scfg.subjects = None
        return
    if sources is None:
        return
    if not isinstance(sources, list | tuple) or not all(isinstance(x, api.StreamSource) for x in sources):
        raise TypeError("sources must be a list of nats.js.api.StreamSource")
    out: list[api.StreamSource] = []
    for src in sources:
        if src.subject_transforms:
            if not isinstance(src.name, str) or not src.name:
                raise ValidationError(f"source name must be a non-empty string, got {src.name!r}")
            out.append(src)
            continue
        ss = dataclasses.replace(src, name=_kv_stream_name(src.name, "source name"))
        key = ">"
        if ss.filter_subject:
            key = validate_key_filter(ss.filter_subject)
            ss.filter_subject = None
        # the same key in this bucket: each '*' of the key filter maps to its own token
        dest, n = [], 0
        for tok in key.split("."):
            if tok == "*":
                n += 1
                tok = f"{{{{wildcard({n})}}}}"
            dest.append(tok)
        ss.subject_transforms = [api.SubjectTransform(src=f"$KV.{ss.name[3:]}.{key}",
                                                      dest=f"$KV.{bucket}.{'.'.join(dest)}")]
        out.append(ss)
    scfg.sources = out


def create_key_value(js: JetStream, config: api.KeyValueConfig | None = None, **params: Any) -> KeyValue:
    """Create a bucket from a ``KeyValueConfig`` or its fields (``bucket=``, ``history=``, ``ttl=``, ...).

    Options beyond ``KeyValueConfig``: ``compression=True`` (S2), ``metadata={...}``,
    ``allow_msg_ttl=True`` (per-key TTLs on ``create``/``purge``), ``timeout=``.
    Creating a bucket that exists with the same configuration returns it.

    Blocks for the stream create request, at most ``timeout`` (default: the context's).

    Raises:
        InvalidBucketNameError, KeyHistoryTooLargeError, ValueError, TypeError: bad options (nothing sent).
        BucketExistsError: it exists with a different configuration.
    """
    timeout = params.pop("timeout", DEFAULT)
    scfg = _stream_config(config, dict(params))
    try:
        stream = js.create_stream(scfg, timeout=timeout)
    except StreamNameInUseError as exc:
        raise BucketExistsError(exc.code, exc.err_code,
                                f"bucket {(scfg.name or '')[3:]!r} exists with a different configuration: "
                                f"{exc.description}") from exc
    assert isinstance(stream, Stream)
    return KeyValue(js, stream)


def update_key_value(js: JetStream, config: api.KeyValueConfig | None = None, **params: Any) -> KeyValue:
    """Update a bucket's configuration: the whole of it, built as :func:`create_key_value` builds it.

    Every option left out goes back to its default (as with a full stream config), so give
    the bucket's full configuration (``history``, ``storage``, ``ttl``, ...). A change the
    server does not allow on an existing stream (e.g. ``storage``) raises its APIError.
    The stream's fields no bucket option covers (``allow_atomic``, ``deny_purge``, ... and
    keys nats-py does not model) are sent back as the server holds them: blocks for one
    stream info request, then the update, each up to ``timeout``.

    Raises:
        InvalidBucketNameError, KeyHistoryTooLargeError, ValueError, TypeError: bad options (nothing sent).
        BucketNotFoundError: there is no such bucket.
    """
    timeout = params.pop("timeout", DEFAULT)
    scfg = _stream_config(config, dict(params), "update_key_value")
    try:
        current = js.stream(scfg.name or "", timeout=timeout).cached_info.config
        scfg = _keep_uncovered(current, scfg)
        stream = js.update_stream(scfg, timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code, f"bucket {(scfg.name or '')[3:]!r} not found") from exc
    return KeyValue(js, stream)


#: the stream config fields a bucket's options set (create_key_value's _stream_config); update_key_value
#: sends the others back as the server holds them
_BUCKET_STREAM_FIELDS = frozenset((
    "name", "description", "subjects", "retention", "max_consumers", "max_msgs", "max_bytes", "max_age",
    "max_msgs_per_subject", "max_msg_size", "storage", "num_replicas", "placement", "republish", "discard",
    "allow_rollup_hdrs", "deny_delete", "duplicate_window", "allow_direct", "mirror_direct", "compression",
    "metadata", "allow_msg_ttl", "subject_delete_marker_ttl", "mirror", "sources"))


def _keep_uncovered(current: api.StreamConfig, scfg: api.StreamConfig) -> api.StreamConfig:
    """``scfg`` with the fields of ``current`` no bucket option covers (and its kept unknown keys)."""
    from ..jetstream.model import carry_extra

    keep = {f.name: getattr(current, f.name) for f in dataclasses.fields(api.StreamConfig)
            if f.name not in _BUCKET_STREAM_FIELDS and getattr(current, f.name, None) is not None}
    out = dataclasses.replace(scfg, **keep) if keep else scfg
    return carry_extra(current, out)


def create_or_update_key_value(js: JetStream, config: api.KeyValueConfig | None = None,
                               **params: Any) -> KeyValue:
    """Update the bucket (see :func:`update_key_value`), or create it if it does not exist."""
    check_options(params, KV_OPTIONS, "create_or_update_key_value")
    try:
        return update_key_value(js, config, **params)
    except BucketNotFoundError:
        return create_key_value(js, config, **params)


def _bucket_of(info: Any, prefix: str, own_subject: str, mirror_prefix: str) -> str | None:
    """The bucket a stream listing entry is, or None when the stream is not one (nats.go's rule).

    A bucket's stream is named ``<prefix><bucket>`` and captures ``own_subject`` formatted with
    the bucket (``$KV.<bucket>.>``, ``$O.<bucket>.C.>``), as nats.go lists them (a stream list
    filtered by that subject, names with that prefix); a mirror bucket has no subjects and
    mirrors a stream named ``<mirror_prefix>...``. Streams that only look like buckets (the
    prefix without the subjects, another bucket's subjects) are not.
    """
    cfg = getattr(info, "config", None)
    name = getattr(cfg, "name", None) or ""
    if not name.startswith(prefix) or not _BUCKET_RE.match(name[len(prefix):]):
        return None
    bucket = name[len(prefix):]
    subjects = list(getattr(cfg, "subjects", None) or [])
    if own_subject.format(bucket) in subjects:
        return bucket
    mirror = getattr(cfg, "mirror", None)
    if not subjects and mirror is not None and str(getattr(mirror, "name", "") or "").startswith(mirror_prefix):
        return bucket
    return None


def _buckets(js: JetStream, prefix: str, own_subject: str,
             timeout: float | None | Default) -> Iterator[tuple[str, Any]]:
    # one stream list of every stream (a mirror bucket has no subjects a subject filter could match)
    for info in js.streams(timeout=timeout):
        bucket = _bucket_of(info, prefix, own_subject, prefix)
        if bucket is not None:
            yield bucket, info


def _bucket_names(js: JetStream, prefix: str, timeout: float | None | Default) -> Iterator[str]:
    own = _KV_OWN_SUBJECT if prefix == "KV_" else _OBJ_OWN_SUBJECT
    return (bucket for bucket, _ in _buckets(js, prefix, own, timeout))


#: the subject a bucket's stream captures, as nats.go's listings filter on it
_KV_OWN_SUBJECT = "$KV.{}.>"
_OBJ_OWN_SUBJECT = "$O.{}.C.>"


def key_value_store_names(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
    """Iterate over the name of every key-value bucket (streams ``KV_<bucket>`` capturing
    ``$KV.<bucket>.>``, and mirror buckets); one stream list, all pages."""
    return _bucket_names(js, "KV_", timeout)


def key_value_stores(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[KeyValueStatus]:
    """Iterate over the status of every key-value bucket (as :func:`key_value_store_names` finds them)."""
    for bucket, info in _buckets(js, "KV_", _KV_OWN_SUBJECT, timeout):
        yield KeyValueStatus(bucket, info)


def key_value(js: JetStream, bucket: str, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec | None = None,
              timeout: float | None | Default = DEFAULT) -> KeyValue | CodecKeyValue:
    """Open an existing bucket; with ``key_codec`` or ``value_codec``, as a :class:`CodecKeyValue`.

    Blocks for one stream info request, at most ``timeout`` (default: the context's).

    Raises:
        InvalidBucketNameError: bad name (nothing sent).
        ValidationError: a codec without the methods it needs (nothing sent).
        BucketNotFoundError: there is no such bucket.
        BadBucketError: the stream is not a key-value bucket.
    """
    validate_bucket(bucket)
    with_codecs = key_codec is not None or value_codec is not None
    if with_codecs:
        assert CODEC_KV is not None, "jssync.kv.codecs is imported with jssync"
        CODEC_KV._check(key_codec, value_codec)
    try:
        stream = js.stream(f"KV_{bucket}", timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code, f"bucket {bucket!r} not found") from exc
    if (stream.cached_info.config.max_msgs_per_subject or 0) < 1:
        raise BadBucketError(f"stream KV_{bucket} is not a key-value bucket (max_msgs_per_subject < 1)")
    kv = KeyValue(js, stream)
    return kv.with_codecs(key_codec=key_codec, value_codec=value_codec) if with_codecs else kv


def delete_key_value(js: JetStream, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
    """Delete a bucket: its stream and every value.

    Raises:
        InvalidBucketNameError: bad name (nothing sent).
        BucketNotFoundError: there is no such bucket.
    """
    validate_bucket(bucket)
    try:
        return js.delete_stream(f"KV_{bucket}", timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code, f"bucket {bucket!r} not found") from exc


# -- the bucket ------------------------------------------------------------------------------------


class KeyValue:
    """A key-value bucket. Made by :meth:`JetStream.create_key_value` / ``key_value``.

    Every blocking call takes ``timeout`` (default: the JetStream context's) and raises
    :class:`jssync.TimeoutError` when it runs out. Thread-safe.
    """

    def __init__(self, js: JetStream, stream: Stream) -> None:
        self._js = js
        self._stream = stream
        cfg = stream.cached_info.config
        self.stream_name: str = stream.name
        self.bucket: str = stream.name[3:] if stream.name.startswith("KV_") else stream.name
        self._pre = f"$KV.{self.bucket}."
        self._put_pre = self._pre
        if js.prefix != "$JS.API":
            # across a domain / imported API prefix the write subjects sit under the prefix
            self._put_pre = f"{js.prefix}.{self._pre}"
        mirror = cfg.mirror
        if mirror is not None and isinstance(mirror.name, str) and mirror.name.startswith("KV_"):
            # a mirror bucket stores the origin's subjects; writes go to the origin bucket
            origin = mirror.name[3:]
            self._pre = f"$KV.{origin}."
            ext = mirror.external
            if ext is not None and ext.api:
                self._put_pre = f"{ext.api}.{self._pre}"
            else:
                self._put_pre = self._pre
        self._direct = bool(cfg.allow_direct)
        self._direct_pre = f"{js.prefix}.DIRECT.GET.{stream.name}.{self._pre}"

    def __repr__(self) -> str:
        return f"<jssync.KeyValue bucket={self.bucket!r}>"

    def with_codecs(self, *, key_codec: KeyCodec | None = None,
                    value_codec: ValueCodec | None = None) -> CodecKeyValue:
        """This bucket with its keys and values going through codecs (NATS ADR-54).

        Returns a :class:`jssync.CodecKeyValue` (a codec left out: ``NoOpCodec``); sends nothing.

        Raises:
            ValidationError: a codec without the methods it needs.
        """
        assert CODEC_KV is not None, "jssync.kv.codecs is imported with jssync"
        return CODEC_KV(self, key_codec=key_codec, value_codec=value_codec)

    @property
    def stream(self) -> Stream:
        """The bucket's stream."""
        return self._stream

    def _t(self, timeout: float | None | Default) -> float | None:
        t = self._js.timeout if timeout is DEFAULT else resolve_timeout(timeout, self._js.timeout)
        no_wait(t, f"bucket {self.bucket!r}")
        return t

    # -- reads ----------------------------------------------------------------------------

    def get(self, key: str, revision: int | None = None, *, timeout: float | None | Default = DEFAULT) -> Entry:
        """Return the latest entry of ``key``, or the one at ``revision``.

        Reads with Direct Get when the bucket allows it (any replica or mirror answers,
        so a value written a moment ago may not show yet on a lagging replica), else
        through the stream leader. Blocks for one request, at most ``timeout``.

        Raises:
            InvalidKeyError: bad key (nothing sent).
            KeyNotFoundError: no value (or no such revision of this key).
            KeyDeletedError: the latest entry (or the one at ``revision``) is a delete/purge
                marker (a KeyNotFoundError; ``.entry`` holds the marker).
        """
        validate_key(key)
        if revision is not None:
            check_optional_int(revision, "revision", open_ended=True)
        entry = self._get(key, revision, self._t(timeout))
        if entry.operation is not KeyValueOp.PUT:
            raise KeyDeletedError(entry, f"key {key!r} was deleted (revision {entry.revision})")
        return entry

    def _get(self, key: str, revision: int | None, timeout: float | None) -> Entry:
        subject = self._pre + key
        if revision is None and self._direct:
            conn = self._js.conn
            failed: BaseException | None = None
            try:
                msg = conn.request(self._direct_pre + key, b"", timeout=timeout)
            except TimeoutError as exc:
                failed = RequestTimeoutError(f"no reply to the get of key {key!r} within {timeout}s",
                                             subject=self._direct_pre + key,
                                             disconnected=getattr(exc, "disconnected", False))
            except NoRespondersError:
                failed = self._no_responders(timeout)
            if failed is not None:  # raised outside the handler: no internal context
                raise failed
            hdrs = msg.headers
            if not hdrs or (not msg.data and "Status" in hdrs):  # (else status_error gives None)
                err = status_error(msg, f"get of key {key!r} in bucket {self.bucket!r}")
                if err is not None:
                    if isinstance(err, MessageNotFoundError):
                        raise KeyNotFoundError(f"key {key!r} not found in bucket {self.bucket!r}")
                    raise err
            assert hdrs is not None
            try:
                seq = int(hdrs.get("Nats-Sequence", "0"))
            except ValueError:
                seq = 0
            return Entry(self.bucket, key, msg.data, seq, 0, _stamp(hdrs.get("Nats-Time-Stamp")), _operation(hdrs))
        missing = False
        try:
            if self._direct:
                sm = self._stream.direct_get(revision, timeout=timeout)
            elif revision is None:
                sm = self._stream.get_msg(last_by_subject=subject, timeout=timeout)
            else:
                sm = self._stream.get_msg(revision, timeout=timeout)
        except MessageNotFoundError:
            missing = True
        if missing:  # raised outside the handler: no internal context
            what = f"key {key!r}" if revision is None else f"revision {revision} of key {key!r}"
            raise KeyNotFoundError(f"{what} not found in bucket {self.bucket!r}")
        if sm.subject != subject:
            raise KeyNotFoundError(f"revision {revision} of bucket {self.bucket!r} is not of key {key!r}")
        return Entry(self.bucket, key, sm.data, sm.seq, 0, sm.time, _operation(sm.headers))

    def _no_responders(self, timeout: float | None) -> BaseException:
        err = _no_responders(self._js, self._stream.name, timeout)
        if isinstance(err, StreamNotFoundError):
            return BucketNotFoundError(err.code, err.err_code, f"bucket {self.bucket!r} not found")
        return err

    # -- writes ---------------------------------------------------------------------------

    def _publish(self, key: str, value: bytes, headers: dict[str, str] | None, last: int | None,
                 timeout: float | None | Default) -> int:
        try:
            ack = self._js.publish(self._put_pre + key, value, headers=headers, expected_last_subject_seq=last,
                                   timeout=self._t(timeout))
        except APIError as exc:
            if _is_wrong_last_seq(exc):
                raise KeyWrongLastSequenceError(
                    f"key {key!r}: {exc.description or 'wrong last sequence'}", code=exc.code,
                    err_code=exc.err_code) from exc
            raise
        return int(ack.seq)

    def put(self, key: str, value: bytes | str, *, timeout: float | None | Default = DEFAULT) -> int:
        """Store ``value`` (bytes, or str as UTF-8) as the new value of ``key``; returns its revision.

        Blocks until the stream acknowledged it, at most ``timeout``.

        Raises:
            InvalidKeyError, TypeError: bad key or value (nothing sent).
            jssync.MaxPayloadError: the value is over the server's max_payload.
        """
        validate_key(key)
        return self._publish(key, _value_bytes(value), None, None, timeout)

    def create(self, key: str, value: bytes | str, *, ttl: float | None = None,
               timeout: float | None | Default = DEFAULT) -> int:
        """Store ``value`` only if ``key`` has no value (never set, deleted or purged); returns the revision.

        ``ttl`` (seconds, >= 1) removes the value again after that long; the bucket needs
        per-message TTLs (``limit_marker_ttl`` or ``allow_msg_ttl=True``; server 2.11+).

        Blocks for one or two requests (plus one get when the key exists), at most ``timeout`` each.

        Raises:
            InvalidKeyError, TypeError, ValueError: bad arguments (nothing sent).
            KeyExistsError: the key holds a value (a KeyWrongLastSequenceError).
        """
        validate_key(key)
        data = _value_bytes(value)
        headers = {HDR_TTL: _ttl_header(ttl)} if ttl is not None else None
        if headers is not None:
            self._require_ttl(timeout)
        try:
            return self._publish(key, data, headers, 0, timeout)
        except KeyWrongLastSequenceError as exc:
            first = exc
        # the key has history: a create is still allowed over a delete or purge marker
        try:
            latest: Entry | None = self._get(key, None, self._t(timeout))
        except KeyNotFoundError:
            latest = None
        if latest is not None and latest.operation is not KeyValueOp.PUT:
            try:
                return self._publish(key, data, headers, latest.revision, timeout)
            except KeyWrongLastSequenceError as exc:
                raise KeyExistsError(f"key {key!r} exists in bucket {self.bucket!r}", code=exc.code,
                                     err_code=exc.err_code) from exc
        raise KeyExistsError(f"key {key!r} exists in bucket {self.bucket!r}", code=first.code,
                             err_code=first.err_code) from first

    def update(self, key: str, value: bytes | str, last: int, *, timeout: float | None | Default = DEFAULT) -> int:
        """Store ``value`` only if the latest revision of ``key`` is ``last``; returns the new revision.

        ``last=0`` means "the key was never set". Blocks until acknowledged, at most ``timeout``.

        Raises:
            InvalidKeyError, TypeError, ValueError: bad arguments (nothing sent).
            KeyWrongLastSequenceError: the latest revision is not ``last``.
        """
        validate_key(key)
        check_int(last, "last", minimum=0, open_ended=True)
        return self._publish(key, _value_bytes(value), None, last, timeout)

    def delete(self, key: str, *, last: int | None = None, timeout: float | None | Default = DEFAULT) -> None:
        """Mark ``key`` deleted (a ``DEL`` marker; earlier revisions stay in the history).

        With ``last``, only if the latest revision is ``last``. Blocks until acknowledged.

        Raises:
            InvalidKeyError: bad key (nothing sent).
            KeyWrongLastSequenceError: ``last`` did not match.
        """
        validate_key(key)
        check_optional_int(last, "last", minimum=0, open_ended=True)
        self._publish(key, b"", {KV_OP: "DEL"}, last, timeout)

    def purge(self, key: str, *, last: int | None = None, ttl: float | None = None,
              timeout: float | None | Default = DEFAULT) -> None:
        """Remove every revision of ``key``, leaving one ``PURGE`` marker (``Nats-Rollup: sub``).

        With ``last``, only if the latest revision of ``key`` is ``last``
        (``Nats-Expected-Last-Subject-Sequence``; ``0``: the key has no revision); else
        nothing is removed. ``ttl`` (seconds, >= 1) removes the marker itself after that
        long (needs per-message TTLs on the bucket, nats-server 2.11+). Blocks until
        acknowledged.

        Raises:
            InvalidKeyError, ValueError: bad key, ``last`` or ``ttl`` (nothing sent).
            KeyWrongLastSequenceError: ``last`` did not match.
            jssync.NotSupportedError: ``ttl`` on a server older than 2.11 (nothing sent).
        """
        validate_key(key)
        check_optional_int(last, "last", minimum=0, open_ended=True)
        headers = {KV_OP: "PURGE", HDR_ROLLUP: "sub"}
        if ttl is not None:
            headers[HDR_TTL] = _ttl_header(ttl)
            self._require_ttl(timeout)
        self._publish(key, b"", headers, last, timeout)

    def _require_ttl(self, timeout: float | None | Default) -> None:
        require(self._js, "per-message TTL", timeout=self._t(timeout))

    def purge_deletes(self, *, older_than: float = 30 * 60, timeout: float | None | Default = DEFAULT) -> int:
        """Remove the delete and purge markers (with any history left) of every deleted key.

        Markers younger than ``older_than`` seconds are kept, but the history before them
        is removed; ``older_than=0`` removes them all. Returns the number of keys cleaned.
        """
        cutoff = None
        if older_than > 0:
            cutoff = _dt.datetime.now(_dt.UTC) - _dt.timedelta(seconds=older_than)
        markers = [e for e in self._initial_entries(">", meta_only=True, timeout=timeout)
                   if e.operation is not KeyValueOp.PUT]
        for e in markers:
            keep = 1 if cutoff is not None and e.created is not None and e.created > cutoff else 0
            self._stream.purge(subject=self._pre + e.key, keep=keep if keep else None,
                               timeout=self._t(timeout))
        return len(markers)

    # -- listing and watching ------------------------------------------------------------------

    def watch(self, keys: str | list[str] = ">", *, include_history: bool = False, ignore_deletes: bool = False,
              updates_only: bool = False, meta_only: bool = False,
              resume_from_revision: int | None = None) -> KeyWatcher:
        """Watch keys matching ``keys`` (a key, a filter with ``*``/``>``, or a list of them).

        The watcher is an iterator of :class:`Entry`: first the current value of every
        matching key (with ``include_history``, every stored revision), then ``None`` once
        these initial values are done, then every update as it happens. ``updates_only``
        skips the initial values (``None`` comes first); ``ignore_deletes`` leaves out
        delete/purge markers; ``meta_only`` leaves values empty; ``resume_from_revision``
        starts at that revision. Stop it with :meth:`KeyWatcher.stop` (or ``with``).
        ``None`` comes once every entry up to the bucket's last revision among the watched
        keys was delivered (read from the stream once the server's count says done).
        Deleting the bucket ends the watcher with :class:`BucketNotFoundError`.

        Blocks while the consumer is created, at most the context's timeout, and for the
        subscription to its consumer-deleted advisories (one PING/PONG).

        Raises:
            InvalidKeyError: a bad filter (nothing sent).
            BucketNotFoundError: there is no such bucket.
        """
        filters = [keys] if isinstance(keys, str) else list(keys)
        if not filters:
            filters = [">"]
        for f in filters:
            validate_key_filter(f)
        check_optional_int(resume_from_revision, "resume_from_revision", open_ended=True)
        return KeyWatcher(self, [self._pre + f for f in filters], include_history=include_history,
                          ignore_deletes=ignore_deletes, updates_only=updates_only, meta_only=meta_only,
                          resume_from=resume_from_revision)

    def _initial_entries(self, keys: str | list[str], *, meta_only: bool = False, include_history: bool = False,
                         timeout: float | None | Default) -> list[Entry]:
        """The initial values of a watch, read within ``timeout`` (creating its consumer is retried too)."""
        deadline = Deadline(self._t(timeout))
        filters = [keys] if isinstance(keys, str) else list(keys) or [">"]
        for f in filters:
            validate_key_filter(f)
        out: list[Entry] = []
        with KeyWatcher(self, [self._pre + f for f in filters], include_history=include_history,
                        ignore_deletes=False, updates_only=False, meta_only=meta_only, resume_from=None,
                        deadline=deadline) as w:
            while True:
                rem = deadline.remaining()
                if rem is not None and rem <= 0:
                    raise TimeoutError(f"bucket {self.bucket!r}: listing did not finish within {deadline.timeout}s")
                e = w.next(timeout=rem)
                if e is None:
                    return out
                out.append(e)

    def keys(self, filter: str | list[str] = ">", *, timeout: float | None | Default = DEFAULT) -> list[str]:  # noqa: A002
        """Return the keys matching ``filter`` that hold a value (not deleted), sorted.

        Returns an empty list for an empty bucket. Blocks until every current key was
        read, at most ``timeout``; a connection lost meanwhile (or the consumer's creation
        timing out) is retried within ``timeout``. Every key is listed by its latest entry,
        read after the listing started: a key whose latest entry is a delete or purge
        marker is never listed, even when the listing's consumer had to be re-created.

        Raises:
            InvalidKeyError: a bad filter (nothing sent).
            jssync.TimeoutError: the listing did not finish within ``timeout``.
        """
        live: dict[str, bool] = {}
        for e in self._initial_entries(filter, meta_only=True, timeout=timeout):
            # in revision order: a marker read after a key's PUT (e.g. after a re-created
            # consumer) removes it again
            live[e.key] = e.operation is KeyValueOp.PUT
        return sorted(k for k, v in live.items() if v)

    def history(self, key: str, *, timeout: float | None | Default = DEFAULT) -> list[Entry]:
        """Return every stored revision of ``key`` (markers included), oldest first.

        Blocks until they were read, at most ``timeout``.

        Raises:
            InvalidKeyError: a bad key (a filter with wildcards is allowed).
            KeyNotFoundError: nothing is stored for it.
        """
        validate_key_filter(key)
        entries = self._initial_entries(key, include_history=True, timeout=timeout)
        if not entries:
            raise KeyNotFoundError(f"key {key!r} not found in bucket {self.bucket!r}")
        return entries

    def status(self, *, timeout: float | None | Default = DEFAULT) -> KeyValueStatus:
        """Return the bucket's status (fresh stream info). Blocks for one request."""
        try:
            info = self._stream.info(timeout=self._t(timeout))
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(exc.code, exc.err_code, f"bucket {self.bucket!r} not found") from exc
        return KeyValueStatus(self.bucket, info)


# -- the watcher --------------------------------------------------------------------------------------


class _SubHolder:
    """The current subscription of a watcher (shared with its finalizer)."""

    __slots__ = ("advisory", "sub")

    def __init__(self) -> None:
        self.sub: Subscription | None = None
        #: the subscription to the consumer-deleted advisories of the stream, if any
        self.advisory: Subscription | None = None


def _weak_listener(watcher: _PushWatcher[Any]) -> Callable[[], None]:
    """A reconnect listener that calls ``watcher._on_reconnect`` while the watcher lives."""
    ref = weakref.ref(watcher)

    def listener() -> None:
        w = ref()
        if w is not None:
            w._on_reconnect()

    return listener


class _InitialEnd:
    """Whether a watch's initial values are all delivered, checked against the stream.

    The server's counts run ahead while keys are rewritten: a key's revision removed
    (replaced) before the consumer delivered it is counted as delivered, and a message's
    pending can read 0 early. So the end is confirmed by the last stream sequence of the
    watched subjects (``read``), read once the consumer's walk over its initial messages
    is over (``walked``: the count of those delivered is reached, or a bound read before
    was seen): every revision that replaced one of them was stored before that read, so
    is at or below it, and the marker waits until it has been seen. A read made before
    the walk was known to be over is made again once its sequence is seen. ``due``: read
    again (a failed read, or an idle heartbeat while the bound is not seen: it may be
    gone), at ``retry_at``.
    """

    __slots__ = ("bound", "due", "final", "max_seq", "retry_at", "walked")

    def __init__(self, max_seq: int) -> None:
        self.max_seq = max_seq  # the highest stream sequence seen (delivered or passed over)
        self.retry_at = 0.0
        self.new_consumer()

    def new_consumer(self) -> None:
        """A new consumer walks its initial messages again: what was read does not hold for it."""
        self.bound: int | None = None
        self.final = False  # bound was read after the walk was over
        self.walked = False
        self.due = False

    def done(self, walked: bool, read: Callable[[], int | None]) -> bool:
        if walked or (self.bound is not None and self.max_seq >= self.bound):
            self.walked = True
        if self.bound is not None and not self.due:
            if self.final:
                return self.max_seq >= self.bound
            if not self.walked:
                return False  # wait for the bound read to be seen
        bound = read()
        if bound is None:
            self.due = True
            self.retry_at = time.monotonic() + 0.2
            return False
        self.bound, self.due = bound, False
        # seen already before the read: the walk was over before it
        self.final = self.walked or self.max_seq >= bound
        return self.final and self.max_seq >= bound


def _last_seq(js: JetStream, stream: str, subjects: list[str], timeout: float) -> int:
    """The last stream sequence on any of ``subjects`` (wildcards allowed), 0 for none: one
    STREAM.MSG.GET ``last_by_subj`` per subject, through the stream leader (up to date).

    Raises:
        jssync.StreamNotFoundError: no such stream; jssync.Error: the request failed.
    """
    last = 0
    for subj in subjects:
        try:
            resp = js._api(f"STREAM.MSG.GET.{stream}", {"last_by_subj": subj}, timeout)
        except MessageNotFoundError:
            continue
        last = max(last, int((resp.get("message") or {}).get("seq") or 0))
    return last


def _weak_deleted(watcher: _PushWatcher[Any]) -> Callable[[Msg], None]:
    """An advisory callback that calls ``watcher._on_consumer_deleted`` while the watcher lives."""
    ref = weakref.ref(watcher)

    def deleted(msg: Msg) -> None:
        w = ref()
        if w is not None:
            w._on_consumer_deleted(msg.subject.rpartition(".")[2])

    return deleted


def _abandon_watcher(conn: Connection, holder: _SubHolder, listener: Callable[[], None]) -> None:
    """Finalizer of a watcher dropped without stop(): no lock, no wait, never raises.

    It runs wherever the garbage collector runs. The subscription's UNSUB is handed to the
    I/O thread; the ephemeral consumer, left without interest, is removed by the server
    after its inactive threshold.
    """
    try:
        conn.internal.reconnect_listeners.remove(listener)
    except ValueError:
        pass
    sub, adv = holder.sub, holder.advisory
    holder.sub = holder.advisory = None
    if sub is not None:
        sub._unsubscribe_soon()
    if adv is not None:
        adv._unsubscribe_soon()


class _PushWatcher(Generic[T]):
    """Watches subjects of a stream through an ordered, ack-none push consumer it owns.

    Yields items made by :meth:`_item` from each message: first the stored ones (the last
    per subject, or all with ``include_history``), then ``None`` once those are done,
    then new ones as they are stored. On a gap in the consumer sequence, missed
    heartbeats or a reconnect, the consumer is re-created from the stream sequence after
    the last message seen, so nothing is lost or repeated; while initial values that are
    the last per subject are still being read, it is re-created with the last per subject
    again (the ones up to the last seen are skipped), so an older message never arrives
    as if it were the last. Subclasses say what an item is.
    """

    _what = "watcher"

    def __init__(self, js: JetStream, stream_name: str, subjects: list[str], *, include_history: bool,
                 updates_only: bool, meta_only: bool, resume_from: int | None,
                 deadline: Deadline | None = None) -> None:
        self._js = js
        self._conn = js.conn
        self._stream_name = stream_name
        self._subjects = subjects
        self._include_history = include_history
        self._updates_only = updates_only
        self._meta_only = meta_only
        #: the initial values are the latest per subject: until they are all read, a new
        #: consumer starts again with the latest per subject (not from a sequence)
        self._last_per_subject = not include_history and not updates_only and resume_from is None
        self._lock = threading.RLock()
        self._ready: collections.deque[T | None] = collections.deque()
        self._stopped = False
        self._reset_needed = False  # a consumer must be (re-)created by the reader
        self._reconnected = False  # set on the I/O thread; the reader tells the gap tracker
        self._init_done = False
        self._init_pending = 0
        self._received = 0
        #: when the initial values are all delivered (checked against the stream)
        self._end = _InitialEnd((resume_from - 1) if resume_from else 0)
        #: the stream was deleted (noticed when re-creating the consumer): next() raises
        self._gone: StreamNotFoundError | None = None
        #: the deadline of the reader's call in progress (the requests a reader makes keep to it)
        self._call_deadline: Deadline | None = None
        #: the consumer sequence check and the next stream sequence (ordered delivery, resets)
        self._tracker = GapTracker(next_stream_seq=resume_from or 0)
        #: The current subscription, in a holder the finalizer shares (it must not keep us alive).
        self._holder = _SubHolder()
        self._consumer: str | None = None
        self._retry_at = 0.0
        self._hb = WATCH_HEARTBEAT
        #: 2 x the idle heartbeat without anything: the consumer is re-created (ADR-37)
        self._hb_mon = HeartbeatMonitor(2 * self._hb, time.monotonic())
        # The connection must not keep an abandoned watcher alive (a watcher dropped without
        # stop() would keep its subscription and server-side consumer as long as the
        # connection lives): the listener holds it weakly, and a finalizer cleans up.
        self._listener = _weak_listener(self)
        self._conn.internal.reconnect_listeners.append(self._listener)
        self._finalizer = weakref.finalize(self, _abandon_watcher, self._conn, self._holder, self._listener)
        self._call_deadline = deadline if deadline is not None else Deadline(js.timeout)
        try:
            info = self._create_first(deadline)
            if updates_only:
                self._mark_init_done()
                if self._tracker.next_stream_seq == 0 and info is not None and info.delivered is not None:
                    self._tracker.next_stream_seq = int(info.delivered.stream_seq or 0) + 1
            else:
                self._count_initial(info)
            if deadline is None and self._watches_deletions:
                self._watch_deletions()
        except StreamNotFoundError as exc:
            self._stop_quietly()
            raise self._not_found(exc) from exc
        except BaseException:
            self._stop_quietly()
            raise
        finally:
            self._call_deadline = None

    def __repr__(self) -> str:
        return (f"<jssync.{type(self).__name__} stream={self._stream_name!r} subjects={self._subjects} "
                f"stopped={self._stopped}>")

    @property
    def _sub(self) -> Subscription | None:
        return self._holder.sub

    @_sub.setter
    def _sub(self, sub: Subscription | None) -> None:
        self._holder.sub = sub

    def _not_found(self, exc: StreamNotFoundError) -> BaseException:
        return exc

    def _item(self, msg: Msg, meta: MsgMetadata) -> T | None:
        """The item for a message, or None to skip it."""
        raise NotImplementedError

    # -- consumer plumbing ----------------------------------------------------------------------

    _watches_deletions = False  # a long-lived watcher listens for its consumer's deletion

    def _watch_deletions(self) -> None:
        """Listen for the consumer-deleted advisories of the stream (blocks for the SUB's PING/PONG).

        The deliver subject gets nothing when the consumer or its stream is deleted (the
        heartbeats just stop); ``$JS.EVENT.ADVISORY.CONSUMER.DELETED.<stream>.<consumer>``
        comes at once. Its callback flags the reader, which re-creates the consumer (or
        finds the stream gone). Without permission there, missed heartbeats notice.
        """
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.{self._stream_name}.*"
        try:
            self._holder.advisory = self._conn.subscribe(subject, callback=_weak_deleted(self))
        except Error as exc:  # not allowed (PermissionDeniedError), or the link failed meanwhile
            log.debug("%s on %s: no deletion advisories (%s); heartbeats only", self._what,
                      self._stream_name, exc)

    def _on_consumer_deleted(self, name: str) -> None:
        # on the worker pool: only set flags
        if name and name == self._consumer and not self._stopped:
            self._reset_needed = True
            self._retry_at = 0.0

    def _on_reconnect(self) -> None:
        # on the I/O thread: only set flags; the reader tells the gap tracker and re-creates the consumer
        self._reconnected = True
        self._reset_needed = True

    def _create_first(self, deadline: Deadline | None) -> api.ConsumerInfo | None:
        """Create the first consumer: once within the context's timeout, or, with a
        ``deadline`` (a listing's own timeout), retried while the server does not answer
        (waiting :data:`_CREATE_RETRY` between attempts, never past ``deadline``)."""
        if deadline is None:
            return self._create(first=True, timeout=self._js.timeout)

        def once(_failures: int) -> api.ConsumerInfo | None:
            left = deadline.remaining()
            return self._create(first=True, timeout=self._js.timeout if left is None
                                else max(0.001, min(self._js.timeout, left)))

        def worth(exc: Exception) -> bool:
            # the request lost with the connection, or JetStream not answering yet
            return isinstance(exc, Error) and not self._stopped and worth_retrying(exc, timeouts=True)

        return retry(once, _CREATE_RETRY, deadline, worth_retrying=worth,
                     on_retry=lambda exc: log.debug("%s on %s: creating the consumer failed (%s), retrying",
                                                    self._what, self._stream_name, exc))

    def _count_initial(self, info: api.ConsumerInfo | None) -> None:
        """While the initial values are not all read: how many messages of the consumer just
        created are still initial (all it has pending now; the marker follows the last)."""
        if self._init_done or info is None:
            return
        self._received = 0
        pending = int(info.num_pending or 0) + int(getattr(info.delivered, "consumer_seq", 0) or 0)
        self._init_pending = pending
        self._end.new_consumer()
        if pending == 0:
            self._initial_sent(True)

    _checks_bound = False  # the end of the initial values is checked against the stream (_InitialEnd)

    def _initial_sent(self, walked: bool) -> None:
        """The consumer's counts (``walked``: all it had pending is delivered) or its pending
        0 say the initial values are done: mark them so (with ``_checks_bound``: once the
        stream confirms it, see :class:`_InitialEnd`)."""
        if not self._init_done and (not self._checks_bound or self._end.done(walked, self._read_bound)):
            self._mark_init_done()

    def _read_bound(self) -> int | None:
        """The last stream sequence among the watched subjects (0: none), or None when the
        read failed (retried later). Keeps to the reader's call deadline."""
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None and left <= 0:
            return None
        try:
            return _last_seq(self._js, self._stream_name, self._subjects,
                             self._js.timeout if left is None else max(0.001, min(self._js.timeout, left)))
        except StreamNotFoundError as exc:
            self._stream_gone(exc)
            return None
        except PermissionDeniedError as exc:
            # not allowed to read it: the consumer's counts alone say when they are done
            log.debug("%s on %s: cannot read the last sequence (%s); the end of the initial values "
                     "is the server's count", self._what, self._stream_name, exc)
            self._checks_bound = False
            return self._end.max_seq
        except Error as exc:
            log.debug("%s on %s: reading the last sequence failed (%s), retrying", self._what,
                      self._stream_name, exc)
            return None

    def _stream_gone(self, exc: StreamNotFoundError) -> None:
        """The stream was deleted: the reader raises the error once its queue is empty."""
        if self._gone is None:
            log.info("%s on %s: the stream is gone (%s)", self._what, self._stream_name, exc)
            self._gone = exc

    def _config(self, deliver_subject: str, first: bool) -> api.ConsumerConfig:
        cfg = api.ConsumerConfig(
            deliver_subject=deliver_subject,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            replay_policy=api.ReplayPolicy.INSTANT,
            flow_control=True,
            idle_heartbeat=self._hb,
            headers_only=True if self._meta_only else None,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=300.0,
        )
        if len(self._subjects) == 1:
            cfg.filter_subject = self._subjects[0]
        else:
            cfg.filter_subjects = list(self._subjects)
        if self._last_per_subject and not self._init_done:
            # (again) the latest per subject; the gap tracker skips those delivered already
            cfg.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        elif self._tracker.next_stream_seq > 0:
            cfg.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = self._tracker.next_stream_seq
        elif self._updates_only:
            cfg.deliver_policy = api.DeliverPolicy.NEW
        elif self._include_history:
            cfg.deliver_policy = api.DeliverPolicy.ALL
        else:
            cfg.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
        return cfg

    def _create(self, *, first: bool, timeout: float) -> api.ConsumerInfo | None:
        """Subscribe on a fresh inbox and create the consumer delivering to it.

        The first subscription checks the permissions (a PING/PONG); the ones of a reset
        (the same inbox prefix) do not wait for the server, so that a stalled link costs
        only the create request's ``timeout``. The create gets at most what is left of the
        call in progress (``_call_deadline``) after the subscription.
        """
        conn = self._conn
        if first:
            sub = conn.subscribe(conn.new_inbox(), pending_msgs_limit=1 << 20)
        else:
            sub = conn.internal.make_subscription(conn.new_inbox(), None, None, 1 << 20, check_permissions=False)
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None:
            timeout = max(0.001, min(timeout, left))
        try:
            consumer = self._js.create_consumer(self._stream_name, self._config(sub.subject, first),
                                                timeout=timeout)
        except BaseException:
            sub.unsubscribe()
            raise
        self._sub = sub
        self._consumer = consumer.name
        self._tracker.last_consumer_seq = 0  # a new consumer starts at consumer sequence 1
        self._hb_mon.resumed(time.monotonic())
        return consumer.cached_info

    def _drop_consumer(self, wait: bool = True) -> None:
        """Unsubscribe and delete the consumer: waiting for the reply (at most 2 s), or,
        without ``wait`` (a reset, inside a reader's timeout), only sending the request."""
        sub, name = self._sub, self._consumer
        self._sub = None
        self._consumer = None
        if sub is not None:
            try:
                sub.unsubscribe()
            except Error:
                pass
        if name is not None and not self._conn.is_closed:
            try:
                if wait:
                    self._js.delete_consumer(self._stream_name, name, timeout=min(self._js.timeout, 2.0))
                else:
                    self._js._api_nowait(f"CONSUMER.DELETE.{self._stream_name}.{name}")
            except Error:
                pass  # ephemeral: it goes away by itself once inactive

    def _reset(self, why: str) -> None:
        """Re-create the consumer, within what is left of the reader's call (at most the
        context's timeout, at most 5 s); when nothing is left, at the reader's next turn."""
        log.debug("%s on %s: re-creating the consumer (%s)", self._what, self._stream_name, why)
        self._reset_needed = False
        self._drop_consumer(wait=False)
        if self._stopped:
            return
        timeout = min(self._js.timeout, 5.0)
        d = self._call_deadline
        left = None if d is None else d.remaining()
        if left is not None:
            if left <= 0.001:
                # the reader's call is over (it raises its TimeoutError): its next one does it
                self._reset_needed = True
                self._retry_at = time.monotonic() + 0.01
                self._hb_mon.resumed(time.monotonic())
                return
            timeout = min(timeout, left)
        try:
            info = self._create(first=False, timeout=timeout)
        except StreamNotFoundError as exc:
            self._stream_gone(exc)
            return
        except Error as exc:
            # keep trying while the reader waits (leader elections, reconnects)
            log.info("%s on %s could not re-create its consumer: %s", self._what, self._stream_name,
                     exc)
            self._reset_needed = True
            self._retry_at = time.monotonic() + 0.5
            self._hb_mon.resumed(time.monotonic())
            return
        self._count_initial(info)

    def _mark_init_done(self) -> None:
        if not self._init_done:
            self._init_done = True
            self._ready.append(None)

    def _handle(self, msg: Msg) -> None:
        self._hb_mon.seen(time.monotonic())
        tracker = self._tracker
        hdrs = msg.headers
        st = classify(hdrs, msg.data, msg.reply) if hdrs and not msg.data and "Status" in hdrs else None
        if st is not None:
            act = decide_push(st)
            if act is PushAction.FLOW_CONTROL or act is PushAction.HEARTBEAT:
                if st.flow_control:  # flow control request
                    self._conn.internal.publish_raw(st.flow_control, b"")
                if st.stalled:
                    self._conn.internal.publish_raw(st.stalled, b"")
                hb = tracker.heartbeat(st.last_consumer, tracker.generation)
                if type(hb) is Reset:
                    self._reset(hb.reason)
                elif act is PushAction.HEARTBEAT and self._checks_bound and not self._init_done:
                    # idle, the initial values not confirmed: some may be gone (an expired
                    # value, a purge) and never come; ask the stream (again)
                    self._end.due = True
                    self._initial_sent(False)
                return
            if st.code in (CONFLICT, NOT_FOUND):
                gone = tracker.status_from(tracker.generation, f"status {st.code} {st.description}")
                if type(gone) is Reset:
                    self._reset(gone.reason)
            return
        try:
            meta = msg.metadata
        except Error:
            return
        sseq = meta.sequence.stream
        step = tracker.message(sseq, meta.sequence.consumer, tracker.generation)
        if step is DELIVER:
            item = self._item(msg, meta)
            if item is not None:
                self._ready.append(item)
        elif step is not SKIP:
            # a gap: re-created from the next stream sequence
            self._reset(step.reason if type(step) is Reset else "out of order")
            return
        # SKIP: a consumer re-created during the initial values delivers the latest per
        # subject again; those before the last one delivered were delivered already
        end = self._end
        if sseq > end.max_seq:
            end.max_seq = sseq
        if not self._init_done:
            self._received += 1
            walked = self._received >= self._init_pending
            if walked or meta.num_pending == 0 or end.bound is not None:
                self._initial_sent(walked)

    # -- reading -----------------------------------------------------------------------------

    def next(self, timeout: float | None = None) -> T | None:
        """Return the next entry, or None for the end-of-initial-values marker.

        Blocks until one arrives, at most ``timeout`` seconds (None: until stopped).

        Raises:
            jssync.TimeoutError: nothing arrived in time.
            StopIteration: the watcher was stopped (or its connection closed).
            jssync.BucketNotFoundError (a jssync.StreamNotFoundError; the stream's own
                not-found error for a plain stream watcher): the bucket was deleted,
                raised once the entries already received were read, and on every call after.
        """
        deadline = Deadline(timeout)
        # another thread may be reading (it holds the lock while it waits): wait for it in
        # slices, so this call's own timeout (and stop()) still count
        lock = self._lock
        while not lock.acquire(timeout=deadline.slice()):
            if self._stopped or self._conn.is_closed:
                raise StopIteration
            if deadline.expired():
                raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
        self._call_deadline = deadline
        try:
            while True:
                if self._ready:
                    return self._ready.popleft()
                if self._stopped or self._conn.is_closed:
                    raise StopIteration
                if self._gone is not None:
                    raise self._not_found(self._gone)
                if self._end.due and not self._init_done and time.monotonic() >= self._end.retry_at:
                    self._initial_sent(False)
                    continue
                if self._reset_needed and time.monotonic() >= self._retry_at:
                    why = "retry"
                    if self._reconnected:  # one reset per reconnect
                        self._reconnected = False
                        act = self._tracker.reconnected()
                        why = act.reason if type(act) is Reset else "reconnected"
                    self._reset(why)
                    continue
                sub = self._sub
                if sub is None:
                    if deadline.expired():
                        raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
                    time.sleep(deadline.slice(0.1))
                    continue
                got: Any = None
                try:
                    got = sub.next_msg(timeout=deadline.slice())
                except TimeoutError:
                    if self._hb_mon.check(time.monotonic()):
                        missed = self._tracker.missed_heartbeat()
                        self._reset(missed.reason if type(missed) is Reset else "missed heartbeats")
                except SubscriptionClosedError:
                    got = _CLOSED
                # raised outside the handlers: no internal context
                if got is None:
                    if deadline.expired():
                        raise TimeoutError(f"no update within {timeout}s ({self._what} on {self._stream_name})")
                    continue
                if got is _CLOSED:
                    if self._stopped or self._conn.is_closed:
                        raise StopIteration
                    continue
                self._handle(got)
        finally:
            self._call_deadline = None
            lock.release()

    # nats-py's name for it
    def updates(self, timeout: float | None = 5.0) -> T | None:
        """Like :meth:`next` (nats-py's name), with a default wait of 5 seconds."""
        return self.next(timeout=timeout)

    def __iter__(self) -> Iterator[T | None]:
        return self

    def __next__(self) -> T | None:
        return self.next(timeout=None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Stop watching: delete the consumer and end iteration (idempotent, any thread).

        Blocks for the consumer delete request, at most 2 seconds.
        """
        if self._stopped:
            return
        self._stopped = True
        sub = self._sub
        if sub is not None:
            try:
                sub.unsubscribe()  # wakes a reader blocked in next()
            except Error:
                pass
        self._stop_quietly()

    def _stop_quietly(self) -> None:
        self._stopped = True
        try:
            self._conn.internal.reconnect_listeners.remove(self._listener)
        except ValueError:
            pass
        adv, self._holder.advisory = self._holder.advisory, None
        if adv is not None:
            try:
                adv.unsubscribe()
            except Error:
                pass
        with self._lock:
            self._drop_consumer()
        self._finalizer.detach()


class KeyWatcher(_PushWatcher[Entry]):
    """An iterator over the entries of watched keys; ``None`` marks the end of the initial values.

    Iterating blocks until the next entry (``for e in watcher`` ends when the watcher
    is stopped or its connection closes); :meth:`next` waits at most ``timeout``.
    Underneath is an ephemeral push consumer (ack none, flow control, heartbeats)
    delivering in order; when a gap, a missed heartbeat or a reconnect is noticed it is
    re-created, so no entry is lost or repeated: from the revision after the last one
    seen, or, while the initial values are being read (without ``include_history`` or
    ``resume_from_revision``), with the latest value per key again, skipping the keys
    whose latest revision was delivered already. So every initial value is the latest
    of its key when it is read (ADR-8), never an older revision, and each key comes once.
    :meth:`next`'s timeout bounds the whole call, a re-created consumer included. When
    the bucket is deleted, reading raises :class:`BucketNotFoundError` within a moment.
    Thread-safe; :meth:`stop` may be called from any thread and wakes a blocked reader.
    """

    _what = "key watcher"
    _checks_bound = True
    _watches_deletions = True

    def __init__(self, kv: KeyValue, subjects: list[str], *, include_history: bool, ignore_deletes: bool,
                 updates_only: bool, meta_only: bool, resume_from: int | None,
                 deadline: Deadline | None = None) -> None:
        self._kv = kv
        self._ignore_deletes = ignore_deletes
        super().__init__(kv._js, kv.stream_name, subjects, include_history=include_history,
                         updates_only=updates_only, meta_only=meta_only, resume_from=resume_from,
                         deadline=deadline)

    def _not_found(self, exc: StreamNotFoundError) -> BaseException:
        return BucketNotFoundError(exc.code, exc.err_code, f"bucket {self._kv.bucket!r} not found")

    def _item(self, msg: Msg, meta: MsgMetadata) -> Entry | None:
        pre = self._kv._pre
        key = msg.subject[len(pre):] if msg.subject.startswith(pre) else msg.subject
        op = _operation(msg.headers)
        if self._ignore_deletes and op is not KeyValueOp.PUT:
            return None
        value = b"" if self._meta_only else msg.data
        return Entry(self._kv.bucket, key, value, meta.sequence.stream, meta.num_pending, meta.timestamp, op)


# The JetStream context's bucket calls (js.key_value() ...) reach this layer through its hooks.
_js_hooks.HOOKS.create_key_value = create_key_value
_js_hooks.HOOKS.key_value = key_value
_js_hooks.HOOKS.delete_key_value = delete_key_value
_js_hooks.HOOKS.update_key_value = update_key_value
_js_hooks.HOOKS.create_or_update_key_value = create_or_update_key_value
_js_hooks.HOOKS.key_value_store_names = key_value_store_names
_js_hooks.HOOKS.key_value_stores = key_value_stores
