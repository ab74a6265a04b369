"""The object store (NATS ADR-20): large objects in chunks on a JetStream stream.

A store ``B`` is the stream ``OBJ_B`` on ``$O.B.C.>`` (chunks) and ``$O.B.M.>`` (object
info). An object's bytes go in chunks (default 128 KiB) on ``$O.B.C.<nuid>``, a fresh
id for every put; its info is JSON on ``$O.B.M.<base64url(name)>``, rolled up so only
the latest stays. A SHA-256 digest of the bytes (``SHA-256=<base64url>``) is checked
on every read. Reads of the info and of the chunks use Direct Get when the stream
allows it.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import datetime as _dt
import hashlib
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, no_wait, resolve_timeout
from ..base.errors import (
    MaxPayloadError,
    MessageNotFoundError,
    StreamNameInUseError,
    StreamNotFoundError,
)
from ..jetstream import hooks as _js_hooks
from ..jetstream.params import check_options, normalize_config
from ..kv.admin import OBJ_OWN_SUBJECT, bucket_names, buckets, keep_uncovered
from ..kv.entries import validate_bucket
from ..kv.errors import BucketExistsError, BucketNotFoundError
from ..kv.watcher import PushWatcher
from .errors import (
    BadObjectMetaError,
    DigestMismatchError,
    ObjectAlreadyExistsError,
    ObjectChangedError,
    ObjectNotFoundError,
    ObjectStoreError,
    _Changed,
)

if TYPE_CHECKING:
    from ..base.jsack import MsgMetadata
    from ..core.msg import Msg
    from ..jetstream.context import JetStream
    from ..jetstream.replies import StoredMsg
    from ..jetstream.streams import Stream

log = logging.getLogger("jssync")

__all__ = [
    "BadObjectMetaError",
    "DigestMismatchError",
    "ObjectAlreadyExistsError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "ObjectResult",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreStatus",
    "ObjectWatcher",
    "create_object_store",
    "create_or_update_object_store",
    "delete_object_store",
    "object_store",
    "update_object_store",
]

DEFAULT_CHUNK_SIZE = 128 * 1024
DIGEST_PREFIX = "SHA-256="
HDR_ROLLUP = "Nats-Rollup"
#: Bytes asked for per Direct Get batch while reading chunks.
_READ_BATCH_BYTES = 8 * 1024 * 1024
#: How many times one get starts over on a newer version (the object was replaced meanwhile).
_MAX_REREADS = 5


# -- values -------------------------------------------------------------------------------------


@dataclass
class ObjectResult:
    """What :meth:`ObjectStore.get` returns.

    Attributes:
        info: the object's info.
        data: its bytes (``b""`` when they were written into ``writeinto``).
    """

    info: api.ObjectInfo
    data: bytes = b""


@dataclass(frozen=True)
class ObjectStoreStatus:
    """The state of an object store, from its stream's info."""

    bucket: str
    stream_info: api.StreamInfo

    @property
    def description(self) -> str | None:
        return self.stream_info.config.description

    @property
    def ttl(self) -> float | None:
        """Seconds objects are kept, or None for forever."""
        return self.stream_info.config.max_age or None

    @property
    def storage(self) -> api.StorageType | None:
        return self.stream_info.config.storage

    @property
    def replicas(self) -> int:
        return int(self.stream_info.config.num_replicas or 1)

    @property
    def sealed(self) -> bool:
        return bool(self.stream_info.config.sealed)

    @property
    def size(self) -> int:
        """Bytes stored, chunks and info together."""
        return int(self.stream_info.state.bytes or 0)

    @property
    def is_compressed(self) -> bool:
        comp = self.stream_info.config.compression
        return comp is not None and str(getattr(comp, "value", comp)) not in ("", "none")

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.stream_info.config.metadata or {})

    @property
    def backing_store(self) -> str:
        return "JetStream"


# -- helpers --------------------------------------------------------------------------------------


def encode_name(name: str) -> str:
    """The subject token of an object name: base64url of its UTF-8 bytes (with padding)."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def digest_value(h: Any) -> str:
    return DIGEST_PREFIX + base64.urlsafe_b64encode(h.digest()).decode()


def _validate_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise BadObjectMetaError(f"object name must be a non-empty str, got {name!r}")
    return name


def _new_nuid() -> str:
    from nats.nuid import NUID

    return NUID().next().decode()


def _info_from(raw: dict[str, Any], time: _dt.datetime | None) -> api.ObjectInfo:
    info: api.ObjectInfo = api.ObjectInfo.from_response(dict(raw))
    info.mtime = (time or _dt.datetime.now(_dt.UTC)).isoformat()
    return info


def _headers_json(headers: dict[str, Any] | None) -> dict[str, list[str]] | None:
    """Headers as the Go clients store them: name -> list of values."""
    if not headers:
        return None
    out: dict[str, list[str]] = {}
    for k, v in headers.items():
        if not isinstance(k, str):
            raise BadObjectMetaError(f"header names must be str, got {k!r}")
        out[k] = [str(x) for x in v] if isinstance(v, list | tuple) else [str(v)]
    return out


def _position(out: IO[bytes]) -> int | None:
    """Where ``out`` is now, if it can seek back there later; else None."""
    try:
        return out.tell() if out.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def _rewind(out: IO[bytes], start: int | None) -> bool:
    """Seek ``out`` back to ``start`` and drop what follows; False when it cannot."""
    if start is None:
        return False
    try:
        out.seek(start)
        out.truncate()
    except (AttributeError, OSError, ValueError):
        return False
    return True


# -- store management ---------------------------------------------------------------------------


#: the keyword options of create_object_store and friends
_OBJ_OPTIONS = tuple(f.name for f in dataclasses.fields(api.ObjectStoreConfig)) + ("compression", "metadata",
                                                                                  "timeout")

#: the stream config fields a store's options set (_store_stream_config); update_object_store sends
#: the others (``sealed``, ``deny_delete``, ... and keys nats-py does not model) back as the server holds them
_OBJ_STREAM_FIELDS = frozenset((
    "name", "description", "subjects", "max_age", "max_bytes", "storage", "num_replicas", "placement",
    "discard", "allow_rollup_hdrs", "allow_direct", "compression", "metadata"))


def _store_stream_config(config: api.ObjectStoreConfig | None, params: dict[str, Any],
                         call: str) -> api.StreamConfig:
    """The stream config of a store from an ``ObjectStoreConfig`` and/or its fields (pure; nothing sent).

    Raises:
        InvalidBucketNameError, ValidationError, TypeError: bad options.
    """
    check_options(params, _OBJ_OPTIONS, call)
    compression = params.pop("compression", False)
    metadata = params.pop("metadata", None)
    if config is None:
        config = api.ObjectStoreConfig()
    elif not isinstance(config, api.ObjectStoreConfig):
        raise TypeError(f"config must be an ObjectStoreConfig, got {type(config).__name__}")
    if params:
        config = config.evolve(**params)
    bucket = validate_bucket(config.bucket)
    config = normalize_config(config)
    scfg = api.StreamConfig(
        name=f"OBJ_{bucket}",
        description=config.description,
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        max_age=config.ttl or 0,
        max_bytes=config.max_bytes if config.max_bytes else -1,
        storage=config.storage or api.StorageType.FILE,
        num_replicas=config.replicas or 1,
        placement=config.placement,
        discard=api.DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
    )
    if compression:
        scfg.compression = api.StoreCompression.S2
    if metadata:
        if not isinstance(metadata, dict):
            raise TypeError("metadata must be a dict of str to str")
        scfg.metadata = dict(metadata)
    return scfg


def create_object_store(js: JetStream, config: api.ObjectStoreConfig | None = None, **params: Any) -> ObjectStore:
    """Create an object store from an ``ObjectStoreConfig`` or its fields (``bucket=``, ``ttl=``, ...).

    Options beyond ``ObjectStoreConfig``: ``compression=True``, ``metadata={...}``, ``timeout=``.
    Creating a store that exists with the same configuration returns it. Blocks for the stream
    create request, at most ``timeout`` (default: the context's).

    Raises:
        InvalidBucketNameError, ValueError, TypeError: bad options (nothing sent).
        BucketExistsError: it exists with a different configuration.
    """
    params = dict(params)
    timeout = params.pop("timeout", DEFAULT)
    scfg = _store_stream_config(config, params, "create_object_store")
    try:
        stream = js.create_stream(scfg, timeout=timeout)
    except StreamNameInUseError as exc:
        raise BucketExistsError(exc.code, exc.err_code,
                                f"object store {(scfg.name or '')[4:]!r} exists with a different configuration: "
                                f"{exc.description}") from exc
    return ObjectStore(js, stream)


def update_object_store(js: JetStream, config: api.ObjectStoreConfig | None = None, **params: Any) -> ObjectStore:
    """Update a store's configuration: the whole of it, built as :func:`create_object_store` builds it.

    What may change is what the server lets a stream change: ``description``, ``ttl``,
    ``max_bytes``, ``metadata``, ``compression``, ``replicas`` and ``placement`` (on a cluster);
    ``storage`` may not (the server's APIError). Every option left out goes back to its
    default, as on create. The stream's fields no store option covers (``sealed``,
    ``deny_delete``, ... and keys nats-py does not model) are sent back as the server holds
    them: blocks for one stream info request, then the update, each up to ``timeout``.
    Objects stored stay.

    Raises:
        InvalidBucketNameError, ValueError, TypeError: bad options (nothing sent).
        BucketNotFoundError: there is no such store.
        jssync.APIError: a change the server refuses.
    """
    params = dict(params)
    timeout = params.pop("timeout", DEFAULT)
    scfg = _store_stream_config(config, params, "update_object_store")
    try:
        current = js.stream(scfg.name or "", timeout=timeout).cached_info.config
        if current.sealed:
            # sealing took the store's roll-ups away (a sealed stream denies purges): keep that
            scfg.allow_rollup_hdrs = current.allow_rollup_hdrs
        stream = js.update_stream(keep_uncovered(current, scfg, _OBJ_STREAM_FIELDS), timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code,
                                  f"object store {(scfg.name or '')[4:]!r} not found") from exc
    return ObjectStore(js, stream)


def create_or_update_object_store(js: JetStream, config: api.ObjectStoreConfig | None = None,
                                  **params: Any) -> ObjectStore:
    """Update the store (see :func:`update_object_store`), or create it if it does not exist.

    Raises what those raise (bad options before anything is sent).
    """
    _store_stream_config(config, {k: v for k, v in params.items() if k != "timeout"},
                         "create_or_update_object_store")
    try:
        return update_object_store(js, config, **params)
    except BucketNotFoundError:
        return create_object_store(js, config, **params)


def object_store(js: JetStream, bucket: str, *, timeout: float | None | Default = DEFAULT) -> ObjectStore:
    """Open an existing object store.

    Raises:
        InvalidBucketNameError: bad name (nothing sent).
        BucketNotFoundError: there is no such store.
    """
    validate_bucket(bucket)
    try:
        stream = js.stream(f"OBJ_{bucket}", timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code, f"object store {bucket!r} not found") from exc
    return ObjectStore(js, stream)


def object_store_names(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
    """Iterate over the name of every object store (streams ``OBJ_<bucket>`` capturing
    ``$O.<bucket>.C.>``); one stream list, all pages."""
    return bucket_names(js, "OBJ_", timeout)


def object_stores(js: JetStream, *, timeout: float | None | Default = DEFAULT) -> Iterator[ObjectStoreStatus]:
    """Iterate over the status of every object store (as :func:`object_store_names` finds them)."""
    for bucket, info in buckets(js, "OBJ_", OBJ_OWN_SUBJECT, timeout):
        yield ObjectStoreStatus(bucket, info)


def delete_object_store(js: JetStream, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
    """Delete an object store and every object in it.

    Raises:
        BucketNotFoundError: there is no such store.
    """
    validate_bucket(bucket)
    try:
        return js.delete_stream(f"OBJ_{bucket}", timeout=timeout)
    except StreamNotFoundError as exc:
        raise BucketNotFoundError(exc.code, exc.err_code, f"object store {bucket!r} not found") from exc


# -- the store ----------------------------------------------------------------------------------------


class ObjectStore:
    """An object store. Made by :func:`create_object_store` / :func:`object_store`.

    Every blocking call takes ``timeout`` (default: the JetStream context's; for ``put``
    and ``get`` it bounds the whole transfer) and raises :class:`jssync.TimeoutError`
    when it runs out. Thread-safe.
    """

    def __init__(self, js: JetStream, stream: Stream) -> None:
        self._js = js
        self._stream = stream
        self.stream_name: str = stream.name
        self.bucket: str = stream.name[4:] if stream.name.startswith("OBJ_") else stream.name
        self._direct = bool(stream.cached_info.config.allow_direct)

    def __repr__(self) -> str:
        return f"<jssync.ObjectStore bucket={self.bucket!r}>"

    @property
    def stream(self) -> Stream:
        return self._stream

    def _t(self, timeout: float | None | Default) -> float | None:
        t = resolve_timeout(timeout, self._js.timeout)
        no_wait(t, f"object store {self.bucket!r}")
        return t

    def _meta_subject(self, name: str) -> str:
        return f"$O.{self.bucket}.M.{encode_name(name)}"

    def _chunk_subject(self, nuid: str) -> str:
        return f"$O.{self.bucket}.C.{nuid}"

    # -- info ----------------------------------------------------------------------------------

    def _raw_info(self, name: str, timeout: float | None, *,
                  leader: bool = False) -> tuple[dict[str, Any], StoredMsg] | None:
        """The info of ``name`` as stored (None: no such object), by Direct Get when the store
        allows it; ``leader=True`` reads it through the stream leader (read-after-write)."""
        subject = self._meta_subject(name)
        try:
            if self._direct and not leader:
                sm = self._stream.direct_get(last_by_subject=subject, timeout=timeout)
            else:
                sm = self._stream.get_msg(last_by_subject=subject, timeout=timeout)
        except MessageNotFoundError:
            return None
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(exc.code, exc.err_code, f"object store {self.bucket!r} not found") from exc
        try:
            raw = json.loads(sm.data)
        except ValueError as exc:
            raise BadObjectMetaError(f"object {name!r}: unreadable info: {sm.data[:80]!r}") from exc
        if not isinstance(raw, dict):
            raise BadObjectMetaError(f"object {name!r}: unreadable info: {sm.data[:80]!r}")
        return raw, sm

    def get_info(self, name: str, *, show_deleted: bool = False,
                 timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Return the info of object ``name`` (``mtime``: when it was stored, RFC 3339).

        Blocks for one request, at most ``timeout``.

        Raises:
            ObjectNotFoundError: no such object (or deleted, unless ``show_deleted``).
        """
        _validate_name(name)
        found = self._raw_info(name, self._t(timeout))
        if found is None:
            raise ObjectNotFoundError(f"object {name!r} not found in store {self.bucket!r}")
        raw, sm = found
        info = _info_from(raw, sm.time)
        if info.deleted and not show_deleted:
            raise ObjectNotFoundError(f"object {name!r} was deleted from store {self.bucket!r}")
        return info

    def _publish_meta(self, name: str, raw: dict[str, Any], timeout: float | None) -> None:
        raw = {k: v for k, v in raw.items() if k != "mtime" and v is not None}
        self._js.publish(self._meta_subject(name), json.dumps(raw).encode(), headers={HDR_ROLLUP: "sub"},
                         timeout=timeout)

    # -- put ----------------------------------------------------------------------------------

    def put(self, name: str, data: bytes | str | IO[bytes], *, description: str | None = None,
            headers: dict[str, Any] | None = None, chunk_size: int | None = None,
            meta: api.ObjectMeta | None = None, timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Store ``data`` (bytes, str as UTF-8, or a binary file object) as object ``name``.

        The bytes go in chunks of ``chunk_size`` (default 128 KiB) under a fresh id, then
        the info (size, chunk count, SHA-256 digest) replaces the previous one; the chunks
        of a previous version are purged afterwards, those of a failed put at once.
        ``meta`` may give ``name``/``description``/``headers``/``options.max_chunk_size``.

        Blocks until every chunk and the info are acknowledged, at most ``timeout`` for
        the whole put (default: the context's timeout, plus one second per MiB).

        Raises:
            BadObjectMetaError: bad name or options, or a link in ``meta`` (nothing sent).
            jssync.MaxPayloadError: ``chunk_size`` is over the server's max_payload.
        """
        if meta is not None:
            if meta.options is not None and meta.options.link is not None:
                raise BadObjectMetaError("put cannot store a link: use add_link or add_bucket_link")
            name = meta.name or name
            description = meta.description if description is None else description
            headers = meta.headers if headers is None else headers
            if chunk_size is None and meta.options is not None:
                chunk_size = meta.options.max_chunk_size
        _validate_name(name)
        size = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise BadObjectMetaError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        conn = self._js.conn
        if size > conn.max_payload:
            raise MaxPayloadError(f"chunk_size {size} is over the server's max_payload of {conn.max_payload}")
        reader: IO[bytes]
        if isinstance(data, bytes | bytearray | memoryview):
            reader = io.BytesIO(bytes(data))
        elif isinstance(data, str):
            reader = io.BytesIO(data.encode())
        elif hasattr(data, "read"):
            reader = data
        else:
            raise TypeError(f"data must be bytes, str or a binary file object, got {type(data).__name__}")
        hdrs = _headers_json(headers)

        if isinstance(timeout, Default):
            known = len(data) if isinstance(data, bytes | bytearray | memoryview | str) else 0
            timeout = self._js.timeout + known / (1 << 20)
        deadline = Deadline(self._t(timeout))
        previous = self._raw_info(name, deadline.left())

        nuid = _new_nuid()
        chunk_subject = self._chunk_subject(nuid)
        h = hashlib.sha256()
        total = 0
        chunks = 0
        futures = []
        try:
            while True:
                block = reader.read(size)
                if not block:
                    break
                if not isinstance(block, bytes | bytearray):
                    raise TypeError(f"the file object must give bytes, got {type(block).__name__}")
                h.update(block)
                total += len(block)
                chunks += 1
                futures.append(self._js.publish_async(chunk_subject, bytes(block),
                                                      timeout=deadline.left()))
                if len(futures) >= 256:  # keep the list short: check what is done
                    futures = [f for f in futures if not f.done() or f.exception() is not None]
                    for f in futures:
                        if f.done():
                            f.result()
            for f in futures:
                while not f.done():  # in slices, so Ctrl-C gets through
                    concurrent.futures.wait([f], timeout=deadline.slice())
                    deadline.check(f"put of object {name!r}")
                f.result()
            raw: dict[str, Any] = {
                "name": name,
                "description": description,
                "headers": hdrs,
                "options": {"max_chunk_size": size},
                "bucket": self.bucket,
                "nuid": nuid,
                "size": total,
                "chunks": chunks,
                "digest": digest_value(h),
            }
            self._publish_meta(name, raw, deadline.left())
        except BaseException:
            self._purge_quietly(chunk_subject)
            raise
        if previous is not None:
            old = previous[0]
            if old.get("nuid") and old.get("nuid") != nuid and not old.get("deleted"):
                self._purge_quietly(self._chunk_subject(str(old["nuid"])))
        return _info_from(raw, None)

    def _purge_quietly(self, subject: str) -> None:
        try:
            self._stream.purge(subject=subject, timeout=self._js.timeout)
        except Exception as exc:  # noqa: BLE001 - best effort clean-up
            log.warning("object store %s: could not purge %s: %s", self.bucket, subject, exc)

    # -- get ------------------------------------------------------------------------------------

    def get(self, name: str, *, writeinto: IO[bytes] | None = None,
            timeout: float | None | Default = DEFAULT) -> ObjectResult:
        """Read object ``name`` (following a link to an object), checking its size and digest.

        With ``writeinto`` (a binary file object) the bytes are written there as they
        arrive and ``data`` stays empty. Blocks until all chunks were read, at most
        ``timeout`` for the whole read (default: the context's timeout plus one second per
        MiB of the object).

        The info and the chunks are read with Direct Get, which may be answered by a
        replica or mirror that has not applied the latest writes yet (ADR-31). When fewer
        chunks come than the info says, the stream leader is asked which version is
        current: the same one, and the missing chunks are read through the leader (an
        ordered consumer); a newer one (the object was replaced during the read), and the
        read starts over on it (``writeinto`` is sought back to where it started).

        Raises:
            ObjectNotFoundError: no such object (or deleted, also during the read).
            BadObjectMetaError: ``name`` is a link to a whole store.
            ObjectChangedError: it was replaced during the read and ``writeinto`` cannot
                seek back, or it changed more than 5 times in a row.
            DigestMismatchError: the bytes stored are not those the info describes.
        """
        info = self.get_info(name, timeout=timeout)
        if info.is_link():
            return self._get_link(name, info, writeinto, timeout)
        if isinstance(timeout, Default):
            timeout = self._js.timeout + (info.size or 0) / (1 << 20)
        deadline = Deadline(self._t(timeout))
        out = writeinto if writeinto is not None else io.BytesIO()
        start = _position(out)
        rereads = 0
        while True:
            try:
                self._read_into(name, info, out, deadline)
                break
            except _Changed as changed:
                found, written = changed.found, changed.written
            # the object was replaced or deleted after its info was read: read what is there now
            if found is None or found[0].get("deleted"):
                raise ObjectNotFoundError(f"object {name!r} was deleted from store {self.bucket!r} during the read")
            rereads += 1
            if rereads > _MAX_REREADS:
                raise ObjectChangedError(
                    f"object {name!r} in store {self.bucket!r} changed {rereads} times during the read; read it again")
            if written and not _rewind(out, start):
                raise ObjectChangedError(
                    f"object {name!r} in store {self.bucket!r} was replaced during the read after {written} bytes "
                    "were written into writeinto, which cannot seek back; read it again")
            log.debug("object store %s: %r changed during the read; reading the new version",
                      self.bucket, name)
            info = _info_from(found[0], found[1].time)
            if info.is_link():
                return self._get_link(name, info, writeinto, deadline.remaining())
        data = b"" if writeinto is not None else out.getvalue()  # type: ignore[attr-defined]
        return ObjectResult(info=info, data=data)

    def _get_link(self, name: str, info: api.ObjectInfo, writeinto: IO[bytes] | None,
                  timeout: float | None | Default) -> ObjectResult:
        assert info.options is not None and info.options.link is not None
        link = info.options.link
        if not link.name:
            raise BadObjectMetaError(f"object {name!r} is a link to the store {link.bucket!r}, not an object")
        target = self if link.bucket == self.bucket else object_store(self._js, link.bucket, timeout=timeout)
        return target.get(link.name, writeinto=writeinto, timeout=timeout)

    def _same_version(self, name: str, info: api.ObjectInfo, deadline: Deadline,
                      written: int) -> None:
        """Raise _Changed unless the leader's info of ``name`` is still the version ``info``."""
        found = self._raw_info(name, deadline.left(), leader=True)
        if found is None or found[0].get("deleted") or found[0].get("nuid") != info.nuid:
            raise _Changed(found, written)

    def _read_into(self, name: str, info: api.ObjectInfo, out: IO[bytes], deadline: Deadline) -> None:
        """Write the chunks of the version ``info`` into ``out`` and check them against it.

        Raises:
            _Changed: a newer version (or none) replaced it during the read.
            DigestMismatchError: the chunks stored do not match ``info``.
        """
        want = int(info.chunks or 0)
        subject = self._chunk_subject(info.nuid)
        h = hashlib.sha256()
        total = 0
        count = 0
        last_seq = 0
        if want and self._direct:
            for seq, block in self._direct_chunks(subject, want, deadline):
                h.update(block)
                out.write(block)
                total += len(block)
                count += 1
                last_seq = seq
            if count < want:
                # ADR-31: the responder may lag behind the write of this info (no
                # read-after-write), or the object was replaced since. The leader knows.
                self._same_version(name, info, deadline, total)
        if count < want:
            # the rest through the leader: an ordered consumer from the chunk after the last one
            # read, until the leader has no more (a chunk past ``want`` is a mismatch too)
            with _ChunkReader(self, subject, resume_from=last_seq + 1 if last_seq else None) as reader:
                while True:
                    piece = reader.next(timeout=deadline.remaining())
                    if piece is None:  # the end-of-stored-chunks marker: nothing more is coming
                        break
                    h.update(piece)
                    out.write(piece)
                    total += len(piece)
                    count += 1
            if count < want:
                self._same_version(name, info, deadline, total)
        if count != want or total != int(info.size or 0):
            raise DigestMismatchError(
                f"object {name!r}: read {count} chunk(s) / {total} bytes, its info says "
                f"{want} / {info.size}")
        if info.digest and digest_value(h) != info.digest:
            raise DigestMismatchError(f"object {name!r}: digest {digest_value(h)} does not match {info.digest}")

    def _direct_chunks(self, subject: str, want: int, deadline: Deadline) -> Iterator[tuple[int, bytes]]:
        """(sequence, bytes) of all the chunks on ``subject`` one Direct Get responder has, in
        order: batches of ``want`` until the responder has no more (more than ``want`` is a
        mismatch the caller reports)."""
        per_wait = max(0.001, min(deadline.remaining() or self._js.timeout, self._js.timeout))
        batch = self._stream.direct_get_batch(subject, want, max_bytes=_READ_BATCH_BYTES, timeout=per_wait)
        try:
            for sm in batch.all():
                yield sm.seq, sm.data
                deadline.check(f"reading object chunks from store {self.bucket!r}")
        finally:
            batch.close()

    def get_bytes(self, name: str, *, timeout: float | None | Default = DEFAULT) -> bytes:
        """The bytes of object ``name`` (see :meth:`get`)."""
        return self.get(name, timeout=timeout).data

    # -- changing ---------------------------------------------------------------------------------

    def delete(self, name: str, *, timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Delete object ``name``: its info becomes a deleted marker and its chunks are purged.

        Deleting a deleted object does nothing. Blocks for three requests at most.

        Raises:
            ObjectNotFoundError: there is no such object.
        """
        _validate_name(name)
        t = self._t(timeout)
        found = self._raw_info(name, t)
        if found is None:
            raise ObjectNotFoundError(f"object {name!r} not found in store {self.bucket!r}")
        raw = dict(found[0])
        if not raw.get("deleted"):
            raw.update(deleted=True, size=0, chunks=0, digest=None)
            self._publish_meta(name, raw, t)
            if raw.get("nuid"):
                self._purge_quietly(self._chunk_subject(str(raw["nuid"])))
        return _info_from(raw, None)

    def update_meta(self, name: str, meta: api.ObjectMeta | None = None, *, new_name: str | None = None,
                    description: str | None = None, headers: dict[str, Any] | None = None,
                    timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Change the name, description or headers of object ``name`` (the bytes stay).

        Raises:
            ObjectNotFoundError: no such object (or deleted).
            ObjectAlreadyExistsError: ``new_name`` is taken by another object.
        """
        _validate_name(name)
        if meta is not None:
            new_name = meta.name if new_name is None else new_name
            description = meta.description if description is None else description
            headers = meta.headers if headers is None else headers
        t = self._t(timeout)
        found = self._raw_info(name, t)
        if found is None or found[0].get("deleted"):
            raise ObjectNotFoundError(f"object {name!r} not found in store {self.bucket!r}")
        raw = dict(found[0])
        target = name
        if new_name is not None and new_name != name:
            target = _validate_name(new_name)
            other = self._raw_info(target, t)
            if other is not None and not other[0].get("deleted"):
                raise ObjectAlreadyExistsError(f"object {target!r} exists in store {self.bucket!r}")
        raw["name"] = target
        if description is not None:
            raw["description"] = description
        if headers is not None:
            raw["headers"] = _headers_json(headers)
        self._publish_meta(target, raw, t)
        if target != name:
            self._stream.purge(subject=self._meta_subject(name), timeout=t)
        return _info_from(raw, None)

    def _add_link(self, name: str, link: dict[str, Any], timeout: float | None | Default) -> api.ObjectInfo:
        _validate_name(name)
        t = self._t(timeout)
        existing = self._raw_info(name, t)
        if existing is not None:
            e = existing[0]
            is_link = bool((e.get("options") or {}).get("link"))
            if not e.get("deleted") and not is_link:
                raise ObjectAlreadyExistsError(f"object {name!r} exists in store {self.bucket!r}")
        raw = {"name": name, "bucket": self.bucket, "nuid": _new_nuid(), "size": 0, "chunks": 0,
               "options": {"link": link}}
        self._publish_meta(name, raw, t)
        return _info_from(raw, None)

    def add_link(self, name: str, obj: api.ObjectInfo, *, timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Add ``name`` as a link to the object ``obj`` (in this or another store).

        Raises:
            BadObjectMetaError: ``obj`` is deleted or is itself a link.
            ObjectAlreadyExistsError: ``name`` is a regular object here.
        """
        if obj.deleted:
            raise BadObjectMetaError(f"cannot link to the deleted object {obj.name!r}")
        if obj.is_link():
            raise BadObjectMetaError(f"cannot link to the link {obj.name!r}")
        return self._add_link(name, {"bucket": obj.bucket, "name": obj.name}, timeout)

    def add_bucket_link(self, name: str, store: ObjectStore, *,
                        timeout: float | None | Default = DEFAULT) -> api.ObjectInfo:
        """Add ``name`` as a link to the whole store ``store``."""
        return self._add_link(name, {"bucket": store.bucket}, timeout)

    def seal(self, *, timeout: float | None | Default = DEFAULT) -> ObjectStoreStatus:
        """Seal the store: no object can be added, changed or deleted any more."""
        t = self._t(timeout)
        cfg = self._stream.info(timeout=t).config
        cfg.sealed = True
        stream = self._js.update_stream(cfg, timeout=t)
        self._stream = stream
        return ObjectStoreStatus(self.bucket, stream.cached_info)

    # -- listing and watching ------------------------------------------------------------------

    def watch(self, *, include_history: bool = False, ignore_deletes: bool = False,
              updates_only: bool = False) -> ObjectWatcher:
        """Watch the store: the info of every object, then ``None``, then every change.

        Same shape as :meth:`jssync.KeyValue.watch`; stop it with ``stop()`` or ``with``.
        """
        return ObjectWatcher(self, include_history=include_history, ignore_deletes=ignore_deletes,
                             updates_only=updates_only)

    def list(self, *, include_deleted: bool = False, timeout: float | None | Default = DEFAULT) -> list[api.ObjectInfo]:
        """Return the info of every object (deleted ones only with ``include_deleted``).

        Returns an empty list for an empty store. Blocks until all were read, at most
        ``timeout``: every object current when the call started is listed, also while others
        rewrite objects (the end is confirmed by the stream's last sequence, not only the
        consumer's pending count, which can run ahead).

        Raises:
            jssync.TimeoutError: the listing did not finish within ``timeout``.
            jssync.BucketNotFoundError: no such object store.
        """
        deadline = Deadline(self._t(timeout))
        # by name, in stream order: a revision read after the listing started (while the end
        # is confirmed) replaces the one before, and a delete read last removes the object
        latest: dict[str, api.ObjectInfo] = {}
        with self.watch() as w:
            while True:
                info = w.next(timeout=deadline.remaining())
                if info is None:
                    break
                latest.pop(info.name, None)
                latest[info.name] = info
        return [i for i in latest.values() if include_deleted or not i.deleted]

    def status(self, *, timeout: float | None | Default = DEFAULT) -> ObjectStoreStatus:
        """Return the store's status (fresh stream info)."""
        try:
            info = self._stream.info(timeout=self._t(timeout))
        except StreamNotFoundError as exc:
            raise BucketNotFoundError(exc.code, exc.err_code, f"object store {self.bucket!r} not found") from exc
        return ObjectStoreStatus(self.bucket, info)


class ObjectWatcher(PushWatcher[api.ObjectInfo]):
    """An iterator of ``ObjectInfo``: every object's info, ``None``, then each change. Thread-safe."""

    _what = "object watcher"
    _checks_bound = True  # the end of the initial infos is confirmed by the stream (as a KeyWatcher's)

    def __init__(self, store: ObjectStore, *, include_history: bool, ignore_deletes: bool,
                 updates_only: bool) -> None:
        self._store = store
        self._ignore_deletes = ignore_deletes
        super().__init__(store._js, store.stream_name, [f"$O.{store.bucket}.M.>"],
                         include_history=include_history, updates_only=updates_only, meta_only=False,
                         resume_from=None)

    def _not_found(self, exc: StreamNotFoundError) -> BaseException:
        return BucketNotFoundError(exc.code, exc.err_code, f"object store {self._store.bucket!r} not found")

    def _item(self, msg: Msg, meta: MsgMetadata) -> api.ObjectInfo | None:
        try:
            raw = json.loads(msg.data)
        except ValueError:
            log.warning("object store %s: unreadable info on %s", self._store.bucket, msg.subject)
            return None
        if not isinstance(raw, dict):
            return None
        info = _info_from(raw, meta.timestamp)
        if self._ignore_deletes and info.deleted:
            return None
        return info


class _ChunkReader(PushWatcher[bytes]):
    """Reads the chunks of one object in order through the stream leader (an ordered consumer),
    from the stream sequence ``resume_from`` on (default: the first)."""

    _what = "object reader"

    def __init__(self, store: ObjectStore, subject: str, resume_from: int | None = None) -> None:
        super().__init__(store._js, store.stream_name, [subject], include_history=True, updates_only=False,
                         meta_only=False, resume_from=resume_from)

    def _item(self, msg: Msg, meta: MsgMetadata) -> bytes | None:
        return msg.data



# The JetStream context's object store calls (js.object_store() ...) reach this layer through its hooks.
_js_hooks.HOOKS.create_object_store = create_object_store
_js_hooks.HOOKS.update_object_store = update_object_store
_js_hooks.HOOKS.create_or_update_object_store = create_or_update_object_store
_js_hooks.HOOKS.object_store = object_store
_js_hooks.HOOKS.delete_object_store = delete_object_store
_js_hooks.HOOKS.object_store_names = object_store_names
_js_hooks.HOOKS.object_stores = object_stores
