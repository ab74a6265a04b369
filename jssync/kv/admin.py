"""Bucket management: a bucket's stream config from its options (mirror and sources included),
create / update / open / delete, and the bucket listings (nats.go's rule for what is a bucket)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import DEFAULT, Default
from ..base.errors import (
    StreamNameInUseError,
    StreamNotFoundError,
    ValidationError,
)
from ..base.validate import MAX_I64, check_int
from ..jetstream import hooks as _js_hooks
from ..jetstream.params import check_options, normalize_config
from ..jetstream.streams import Stream
from . import handle as _handle
from .entries import BUCKET_RE, MAX_HISTORY, KeyValueStatus, validate_bucket, validate_key_filter
from .errors import (
    BadBucketError,
    BucketExistsError,
    BucketNotFoundError,
    InvalidBucketNameError,
    KeyHistoryTooLargeError,
)
from .handle import KeyValue

if TYPE_CHECKING:
    from ..jetstream.context import JetStream
    from .codecs import CodecKeyValue, KeyCodec, ValueCodec

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
    mapped into this bucket (the same bucket in another domain, ``external`` set, needs no
    mapping). A source with ``subject_transforms`` is kept exactly as given (the full stream
    name: any stream, its subjects mapped to ``$KV.<bucket>.`` by those transforms).
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
        if ss.external is not None and ss.name == f"KV_{bucket}" and not ss.filter_subject:
            # the same bucket in another domain: its keys are this bucket's keys already
            out.append(ss)
            continue
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
    ``allow_msg_ttl=True`` (per-key TTLs on ``create``/``purge``), ``mirror=StreamSource(...)``
    (a read-only copy of another bucket), ``sources=[StreamSource(...), ...]`` (other buckets'
    keys mapped into this one), ``timeout=``.
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
        scfg = keep_uncovered(current, scfg)
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


def keep_uncovered(current: api.StreamConfig, scfg: api.StreamConfig,
                   covered: frozenset[str] = _BUCKET_STREAM_FIELDS) -> api.StreamConfig:
    """``scfg`` with the fields of ``current`` not in ``covered`` (the fields a bucket's options set)
    and the unknown keys kept from its reply: what an update sends back as the server holds it."""
    from ..jetstream.model import carry_extra

    keep = {f.name: getattr(current, f.name) for f in dataclasses.fields(api.StreamConfig)
            if f.name not in covered and getattr(current, f.name, None) is not None}
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
    if not name.startswith(prefix) or not BUCKET_RE.match(name[len(prefix):]):
        return None
    bucket = name[len(prefix):]
    subjects = list(getattr(cfg, "subjects", None) or [])
    if own_subject.format(bucket) in subjects:
        return bucket
    mirror = getattr(cfg, "mirror", None)
    if not subjects and mirror is not None and str(getattr(mirror, "name", "") or "").startswith(mirror_prefix):
        return bucket
    return None


def buckets(js: JetStream, prefix: str, own_subject: str,
             timeout: float | None | Default) -> Iterator[tuple[str, Any]]:
    # one stream list of every stream (a mirror bucket has no subjects a subject filter could match)
    for info in js.streams(timeout=timeout):
        bucket = _bucket_of(info, prefix, own_subject, prefix)
        if bucket is not None:
            yield bucket, info


def bucket_names(js: JetStream, prefix: str, timeout: float | None | Default) -> Iterator[str]:
    own = _KV_OWN_SUBJECT if prefix == "KV_" else OBJ_OWN_SUBJECT
    return (bucket for bucket, _ in buckets(js, prefix, own, timeout))


#: the subject a bucket's stream captures, as nats.go's listings filter on it
_KV_OWN_SUBJECT = "$KV.{}.>"
OBJ_OWN_SUBJECT = "$O.{}.C.>"


def key_value_store_names(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
    """Iterate over the name of every key-value bucket (streams ``KV_<bucket>`` capturing
    ``$KV.<bucket>.>``, and mirror buckets); one stream list, all pages."""
    return bucket_names(js, "KV_", timeout)


def key_value_stores(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[KeyValueStatus]:
    """Iterate over the status of every key-value bucket (as :func:`key_value_store_names` finds them)."""
    for bucket, info in buckets(js, "KV_", _KV_OWN_SUBJECT, timeout):
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
        assert _handle.CODEC_KV is not None, "jssync.kv.codecs is imported with jssync"
        _handle.CODEC_KV._check(key_codec, value_codec)
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


# The JetStream context's bucket calls (js.key_value() ...) reach this layer through its hooks.
_js_hooks.HOOKS.create_key_value = create_key_value
_js_hooks.HOOKS.key_value = key_value
_js_hooks.HOOKS.delete_key_value = delete_key_value
_js_hooks.HOOKS.update_key_value = update_key_value
_js_hooks.HOOKS.create_or_update_key_value = create_or_update_key_value
_js_hooks.HOOKS.key_value_store_names = key_value_store_names
_js_hooks.HOOKS.key_value_stores = key_value_stores
