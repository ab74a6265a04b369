"""The bucket handle: :class:`KeyValue`'s reads (direct get), writes (expected last subject
sequence), listings and watches."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING

from ..base.deadline import DEFAULT, Deadline, Default, no_wait, resolve_timeout
from ..base.errors import (
    APIError,
    MessageNotFoundError,
    NoRespondersError,
    RequestTimeoutError,
    StreamNotFoundError,
    TimeoutError,
)
from ..base.validate import check_int, check_optional_int
from ..jetstream.direct import _no_responders, status_error
from ..jetstream.features import require
from ..jetstream.streams import Stream
from .entries import (
    HDR_ROLLUP,
    HDR_TTL,
    KV_OP,
    Entry,
    KeyValueOp,
    KeyValueStatus,
    is_wrong_last_seq,
    operation_of,
    parse_stamp,
    ttl_header,
    validate_key,
    validate_key_filter,
    value_bytes,
)
from .errors import (
    BucketNotFoundError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from .watcher import KeyWatcher

if TYPE_CHECKING:
    from ..jetstream.context import JetStream
    from .codecs import CodecKeyValue, KeyCodec, ValueCodec

#: jssync.kv.codecs.CodecKeyValue, set when that module (which builds on this one) is imported
CODEC_KV: type[CodecKeyValue] | None = None


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
            return Entry(self.bucket, key, msg.data, seq, 0, parse_stamp(hdrs.get("Nats-Time-Stamp")),
                         operation_of(hdrs))
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
        return Entry(self.bucket, key, sm.data, sm.seq, 0, sm.time, operation_of(sm.headers))

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
            if is_wrong_last_seq(exc):
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
        return self._publish(key, value_bytes(value), None, None, timeout)

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
        data = value_bytes(value)
        headers = {HDR_TTL: ttl_header(ttl)} if ttl is not None else None
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
        return self._publish(key, value_bytes(value), None, last, timeout)

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
            headers[HDR_TTL] = ttl_header(ttl)
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
