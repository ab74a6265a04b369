"""Key and value codecs for the key-value store (NATS ADR-54), interoperable with orbit.go's ``kvcodec``.

A codec turns the keys and values an application uses into what is stored, and back:

* a **key codec** has ``encode_key(key: str) -> str`` and ``decode_key(stored: str) -> str``;
  it may also have ``encode_filter(filter: str) -> str``, which encodes a filter with ``*``
  and ``>`` tokens so that it still matches the encoded keys (ADR-54's ``FilterableKeyCodec``);
* a **value codec** has ``encode_value(value) -> bytes`` and ``decode_value(stored: bytes)``.

Any object with these methods is a codec (:class:`KeyCodec`, :class:`FilterableKeyCodec` and
:class:`ValueCodec` are the typing protocols). A codec reports a value it cannot encode or
decode by raising (any exception; :class:`CodecKeyValue` turns it into a jssync error naming the
key or value). Built in:

=========================== ======================================================================
:class:`NoOpCodec`          keys and values unchanged
:class:`Base64Codec`        keys: each ``.``-separated token as URL-safe base64 without padding
                            (``*`` and ``>`` tokens kept in filters); values: the same base64
:class:`PathCodec`          keys: ``a/b/c`` <-> ``a.b.c``, a leading ``/`` <-> a ``_root_`` token
:class:`JSONCodec`          values: any JSON-serializable object <-> compact UTF-8 JSON
:class:`KeyChainCodec`      several key codecs: encoded first to last, decoded last to first
:class:`ValueChainCodec`    several value codecs, the same way
=========================== ======================================================================

:class:`Base64Codec` and :class:`PathCodec` write exactly what orbit.go's ``kvcodec.Base64Codec()``
and ``kvcodec.PathCodec()`` write, so a Go program using orbit and a Python program using jssync
read each other's keys and values. (ADR-54's prose shows the base64 of a whole key with padding;
orbit.go, the reference implementation, encodes token by token without padding, and so does jssync.)

Use them through :class:`CodecKeyValue`: ``js.key_value("B", key_codec=..., value_codec=...)`` or
``kv.with_codecs(...)``. This module sends nothing itself; everything in it is pure code.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from ..base.deadline import DEFAULT, Default
from ..base.errors import ValidationError
from . import handle as _handle
from .entries import Entry, KeyValueOp, validate_key, validate_key_filter, value_bytes
from .errors import (
    InvalidKeyError,
    InvalidValueError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValueDecodeError,
)
from .watcher import KeyWatcher

if TYPE_CHECKING:
    from ..jetstream.streams import Stream
    from .entries import KeyValueStatus
    from .handle import KeyValue

log = logging.getLogger("jssync")

__all__ = [
    "Base64Codec",
    "CodecEntry",
    "CodecKeyValue",
    "CodecKeyWatcher",
    "FilterableKeyCodec",
    "JSONCodec",
    "KeyChainCodec",
    "KeyCodec",
    "NoOpCodec",
    "PathCodec",
    "ValueChainCodec",
    "ValueCodec",
]

_WILDCARDS = ("*", ">")
_B64_TOKEN = re.compile(r"[A-Za-z0-9_-]*\Z")


# -- the protocols ----------------------------------------------------------------------------------


@runtime_checkable
class KeyCodec(Protocol):
    """Turns an application's keys into stored keys and back (ADR-54 ``KeyCodec``)."""

    def encode_key(self, key: str) -> str:
        """Return the key as stored; raise (any exception) for a key this codec cannot encode."""
        ...

    def decode_key(self, stored: str) -> str:
        """Return the application's key for a stored key; raise if it cannot be decoded."""
        ...


@runtime_checkable
class FilterableKeyCodec(KeyCodec, Protocol):
    """A key codec that can also encode filters with ``*`` and ``>`` tokens (ADR-54)."""

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        """Return the filter as stored, its wildcard tokens kept so that it matches the encoded keys."""
        ...


@runtime_checkable
class ValueCodec(Protocol):
    """Turns an application's values into stored bytes and back (ADR-54 ``ValueCodec``)."""

    def encode_value(self, value: Any) -> bytes:
        """Return the value as stored; raise (any exception) for a value this codec cannot encode."""
        ...

    def decode_value(self, stored: bytes) -> Any:
        """Return the application's value for stored bytes; raise if they cannot be decoded."""
        ...


def _name(codec: object) -> str:
    return type(codec).__name__


def supports_filter(codec: object) -> bool:
    """True when ``codec`` can encode filters with wildcards (every link of a chain can)."""
    if isinstance(codec, KeyChainCodec):
        return all(supports_filter(c) for c in codec.codecs)
    return callable(getattr(codec, "encode_filter", None))


def has_wildcard(filter: str) -> bool:  # noqa: A002
    return any(tok in _WILDCARDS for tok in filter.split("."))


def _encode_filter_with(codec: Any, filter: str) -> str:  # noqa: A002
    """One codec's encoding of a filter: ``encode_filter`` if it has one, else ``encode_key``
    when the filter has no wildcard; a wildcard for a codec without it is a ValidationError."""
    enc = getattr(codec, "encode_filter", None)
    if callable(enc):
        return str(enc(filter))
    if has_wildcard(filter):
        raise InvalidKeyError(
            f"key filter {filter!r}: {_name(codec)} cannot encode wildcards (it has no encode_filter); "
            "watch '>' and filter the decoded keys instead"
        )
    return str(codec.encode_key(filter))


# -- built-in codecs -----------------------------------------------------------------------------------


class NoOpCodec:
    """Keys, filters and values unchanged (ADR-54 ``NoOpCodec``). A key and a value codec."""

    def __repr__(self) -> str:
        return "NoOpCodec()"

    def encode_key(self, key: str) -> str:
        return key

    def decode_key(self, stored: str) -> str:
        return stored

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        return filter

    def encode_value(self, value: Any) -> bytes:
        return value  # type: ignore[no-any-return]  # the bucket checks it is bytes or str

    def decode_value(self, stored: bytes) -> Any:
        return stored


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str | bytes) -> bytes:
    """Strict URL-safe base64 without padding (Go's ``base64.RawURLEncoding``).

    Raises:
        KeyValueDecodeError: ``text`` is not that.
    """
    s = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    failed: str | None = None
    if not _B64_TOKEN.match(s) or len(s) % 4 == 1:
        failed = "it is not URL-safe base64 without padding"
    else:
        try:
            return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
        except binascii.Error as exc:  # pragma: no cover - the checks above catch what it would
            failed = str(exc)
    raise KeyValueDecodeError(f"Base64Codec cannot decode {s[:40]!r}: {failed}", text)


class Base64Codec:
    """URL-safe base64 without padding, as orbit.go's ``kvcodec.Base64Codec()``. A key and a value codec.

    Keys: each ``.``-separated token is encoded on its own (its UTF-8 bytes), so ``.`` still
    separates tokens and filters work: ``"Acme Inc.contact"`` is stored as
    ``"QWNtZSBJbmM.Y29udGFjdA"``, the filter ``"Acme Inc.*"`` as ``"QWNtZSBJbmM.*"``. A key can
    hold any character except that its tokens cannot be empty (no leading, trailing or double
    ``.``). Arbitrary bytes: pass ``raw.decode("utf-8", "surrogateescape")``; stored tokens
    that are not UTF-8 come back the same way. Values: the whole value, same alphabet.
    """

    def __repr__(self) -> str:
        return "Base64Codec()"

    @staticmethod
    def _token_bytes(key: str, token: str) -> bytes:
        try:
            return token.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(f"key {key!r}: Base64Codec cannot encode {token!r} as UTF-8 ({exc.reason})") from exc

    def encode_key(self, key: str) -> str:
        if not isinstance(key, str):
            raise InvalidKeyError(f"key {key!r}: Base64Codec encodes str keys, not {type(key).__name__}")
        tokens = key.split(".")
        if "" in tokens:
            raise InvalidKeyError(
                f"key {key!r}: Base64Codec encodes each '.'-separated token; tokens cannot be empty "
                "(no leading, trailing or double '.')"
            )
        return ".".join(_b64(self._token_bytes(key, t)) for t in tokens)

    def decode_key(self, stored: str) -> str:
        return ".".join(_unb64(t).decode("utf-8", "surrogateescape") for t in stored.split("."))

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        if not isinstance(filter, str):
            raise InvalidKeyError(f"key filter {filter!r}: Base64Codec encodes str filters")
        tokens = filter.split(".")
        if "" in tokens:
            raise InvalidKeyError(f"key filter {filter!r}: tokens cannot be empty")
        return ".".join(t if t in _WILDCARDS else _b64(self._token_bytes(filter, t)) for t in tokens)

    def encode_value(self, value: Any) -> bytes:
        return _b64(value_bytes(value)).encode("ascii")

    def decode_value(self, stored: bytes) -> bytes:
        return _unb64(stored)


#: how :class:`PathCodec` stores a leading separator (orbit.go's ``rootPrefix``)
ROOT_TOKEN = "_root_"


class PathCodec:
    """Path-style keys as subjects, as orbit.go's ``kvcodec.PathCodec()``. A key codec.

    ``"user/profile/settings"`` is stored as ``"user.profile.settings"``; a leading separator
    becomes a ``_root_`` token (``"/etc/hosts"`` <-> ``"_root_.etc.hosts"``, ``"/"`` <->
    ``"_root_"``) and a trailing one is dropped (``"a/b/"`` is stored as ``"a.b"`` and reads
    back as ``"a/b"``). Filters keep ``*`` and ``>``: ``"user/*"`` -> ``"user.*"``.

    Keys that would not read back as written are refused (:class:`jssync.InvalidKeyError`):
    a key with a ``.`` (it would read back with the separator), and one whose first
    segment is ``_root_`` (it would read back with a leading separator).

    Args:
        separator: the path separator (default ``/``); not empty, not ``.``, ``*`` or ``>``.
    """

    def __init__(self, separator: str = "/") -> None:
        if not isinstance(separator, str) or not separator or any(c in separator for c in ".*> "):
            raise ValidationError(f"PathCodec separator must be a non-empty str without '.', '*', '>' "
                                  f"or spaces, got {separator!r}")
        self.separator = separator

    def __repr__(self) -> str:
        return f"PathCodec(separator={self.separator!r})"

    def _encode(self, key: str, what: str) -> str:
        if not isinstance(key, str):
            raise InvalidKeyError(f"{what} {key!r}: PathCodec encodes str keys, not {type(key).__name__}")
        if "." in key:
            raise InvalidKeyError(f"{what} {key!r}: PathCodec keys cannot hold '.' (it stores "
                                  f"{self.separator!r} as '.', so it would read back as {self.separator!r})")
        sep = self.separator
        if key.split(sep, 1)[0] == ROOT_TOKEN:
            raise InvalidKeyError(f"{what} {key!r}: PathCodec keys cannot start with the segment "
                                  f"{ROOT_TOKEN!r} (it stores a leading {sep!r} that way)")
        if key.startswith(sep):
            if key == sep:
                return ROOT_TOKEN
            key = ROOT_TOKEN + "." + key[len(sep):]
        if key.endswith(sep):
            key = key[: -len(sep)]
        return key.replace(sep, ".")

    def encode_key(self, key: str) -> str:
        return self._encode(key, "key")

    def decode_key(self, stored: str) -> str:
        sep = self.separator
        if stored == ROOT_TOKEN:
            return sep
        if stored.startswith(ROOT_TOKEN + "."):
            return sep + stored[len(ROOT_TOKEN) + 1:].replace(".", sep)
        return stored.replace(".", sep)

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        return self._encode(filter, "key filter")


class JSONCodec:
    """Values as compact UTF-8 JSON (``{"a":1}``); reads back the decoded object. A value codec.

    Args:
        default: called for objects ``json`` cannot serialize (as ``json.dumps(default=...)``).
        sort_keys: write object keys sorted.
    """

    def __init__(self, *, default: Callable[[Any], Any] | None = None, sort_keys: bool = False) -> None:
        self.default = default
        self.sort_keys = sort_keys

    def __repr__(self) -> str:
        return "JSONCodec()"

    def encode_value(self, value: Any) -> bytes:
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                              default=self.default, sort_keys=self.sort_keys)
        except (TypeError, ValueError) as exc:
            raise InvalidValueError(f"value {_short(value)}: JSONCodec cannot encode it: {exc}") from exc
        return text.encode("utf-8")

    def decode_value(self, stored: bytes) -> Any:
        return json.loads(stored)


def _check_links(codecs: tuple[Any, ...], kind: str, methods: tuple[str, str]) -> tuple[Any, ...]:
    if not codecs:
        raise ValidationError(f"{kind} needs at least one codec")
    for i, c in enumerate(codecs):
        missing = [m for m in methods if not callable(getattr(c, m, None))]
        if missing:
            raise ValidationError(f"{kind}: codec {i} ({c!r}) has no {' or '.join(missing)}")
    return codecs


class KeyChainCodec:
    """Several key codecs in a row (ADR-54 codec chaining): encoded first to last, decoded last to first.

    It encodes filters when every link can (:func:`supports_filter`); a link without
    ``encode_filter`` still takes filters without wildcards through ``encode_key``.

    Raises:
        ValidationError: no codec given, or one without ``encode_key``/``decode_key``.
    """

    def __init__(self, *codecs: KeyCodec) -> None:
        self.codecs: tuple[KeyCodec, ...] = _check_links(codecs, "KeyChainCodec", ("encode_key", "decode_key"))

    def __repr__(self) -> str:
        return f"KeyChainCodec({', '.join(map(repr, self.codecs))})"

    def encode_key(self, key: str) -> str:
        for c in self.codecs:
            key = c.encode_key(key)
        return key

    def decode_key(self, stored: str) -> str:
        for c in reversed(self.codecs):
            stored = c.decode_key(stored)
        return stored

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        for c in self.codecs:
            filter = _encode_filter_with(c, filter)
        return filter


class ValueChainCodec:
    """Several value codecs in a row (ADR-54 codec chaining): encoded first to last, decoded last to first.

    ``ValueChainCodec(JSONCodec(), Base64Codec())`` stores the base64 of the JSON.

    Raises:
        ValidationError: no codec given, or one without ``encode_value``/``decode_value``.
    """

    def __init__(self, *codecs: ValueCodec) -> None:
        self.codecs: tuple[ValueCodec, ...] = _check_links(codecs, "ValueChainCodec",
                                                           ("encode_value", "decode_value"))

    def __repr__(self) -> str:
        return f"ValueChainCodec({', '.join(map(repr, self.codecs))})"

    def encode_value(self, value: Any) -> bytes:
        for c in self.codecs:
            value = c.encode_value(value)
        return value  # type: ignore[no-any-return]

    def decode_value(self, stored: bytes) -> Any:
        value: Any = stored
        for c in reversed(self.codecs):
            value = c.decode_value(value)
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the bucket with codecs -------------------------------------------------------------------------------


@dataclass(repr=False)
class CodecEntry(Entry):
    """An :class:`Entry` read through codecs: ``key`` and ``value`` are decoded.

    Attributes:
        value: the decoded value (whatever the value codec returns; ``b""`` for delete and
            purge markers, which are never decoded).
        raw_key: the key as stored in the bucket.
    """

    value: Any
    raw_key: str = ""

    def __repr__(self) -> str:
        return (f"CodecEntry(bucket={self.bucket!r}, key={self.key!r}, value={_short(self.value)}, "
                f"revision={self.revision}, delta={self.delta}, operation={self.operation.value}, "
                f"raw_key={self.raw_key!r})")


class CodecKeyValue:
    """A key-value bucket whose keys and values go through codecs (ADR-54 ``CodecKV``).

    Made by ``js.key_value(bucket, key_codec=..., value_codec=...)``, ``kv.with_codecs(...)``
    or ``CodecKeyValue(kv, key_codec=..., value_codec=...)``; a codec left out is
    :class:`NoOpCodec`. It has :class:`KeyValue`'s calls with the same arguments and
    blocking behaviour; keys (and key filters) are encoded before anything is sent, and
    entries come back as :class:`CodecEntry` with the decoded key and value.

    * A key (or filter) the key codec refuses, or that it encodes to something that is not
      a valid key, raises :class:`jssync.InvalidKeyError`; a value the value codec refuses
      raises :class:`jssync.InvalidValueError` (both ValidationErrors; nothing is sent).
    * A filter with ``*``/``>`` needs a key codec with ``encode_filter``; without one, only
      ``">"`` (everything) is allowed.
    * Reading data the codecs cannot decode (written without them, say): ``get`` raises
      :class:`jssync.KeyValueDecodeError`; ``watch`` and ``history`` deliver such an entry
      as stored (raw key or value) and log a warning on the ``jssync`` logger, as orbit.go
      does; ``keys`` leaves such keys out, with a warning.

    Thread-safe, like the bucket it wraps.
    """

    def __init__(self, kv: KeyValue, *, key_codec: KeyCodec | None = None,
                 value_codec: ValueCodec | None = None) -> None:
        self._check(key_codec, value_codec)
        self._kv = kv
        self.key_codec: KeyCodec = NoOpCodec() if key_codec is None else key_codec
        self.value_codec: ValueCodec = NoOpCodec() if value_codec is None else value_codec
        self.bucket: str = kv.bucket
        self.stream_name: str = kv.stream_name

    @staticmethod
    def _check(key_codec: object, value_codec: object) -> None:
        """Raise ValidationError unless each codec given (not None) has the methods it needs."""
        for obj, methods, what in ((key_codec, ("encode_key", "decode_key"), "key_codec"),
                                   (value_codec, ("encode_value", "decode_value"), "value_codec")):
            if obj is None:
                continue
            missing = [m for m in methods if not callable(getattr(obj, m, None))]
            if missing:
                raise ValidationError(f"{what} {obj!r} has no {' or '.join(missing)}")

    def __repr__(self) -> str:
        return f"<jssync.CodecKeyValue bucket={self.bucket!r} key_codec={self.key_codec!r} " \
               f"value_codec={self.value_codec!r}>"

    @property
    def raw(self) -> KeyValue:
        """The bucket without codecs (keys and values as stored)."""
        return self._kv

    @property
    def stream(self) -> Stream:
        """The bucket's stream."""
        return self._kv.stream

    # -- encoding and decoding ---------------------------------------------------------------------

    def encode_key(self, key: str) -> str:
        """Return ``key`` as stored. Sends nothing.

        Raises:
            InvalidKeyError: the key codec refuses it, or its encoding is not a valid key.
        """
        try:
            stored = self.key_codec.encode_key(key)
        except InvalidKeyError:
            raise
        except Exception as exc:
            raise InvalidKeyError(f"key {key!r}: {_name(self.key_codec)} cannot encode it: {exc}") from exc
        try:
            return validate_key(stored)
        except InvalidKeyError as exc:
            raise InvalidKeyError(f"key {key!r} encodes to {stored!r} with {_name(self.key_codec)}, "
                                  f"which is not a valid key") from exc

    def encode_filter(self, filter: str) -> str:  # noqa: A002
        """Return a key filter as stored (``>`` alone always means every key). Sends nothing.

        Raises:
            InvalidKeyError: the codec cannot encode it (a wildcard without ``encode_filter``),
                or its encoding is not a valid filter.
        """
        if filter == ">" and not supports_filter(self.key_codec):
            return filter
        try:
            stored = _encode_filter_with(self.key_codec, filter)
        except InvalidKeyError:
            raise
        except Exception as exc:
            raise InvalidKeyError(f"key filter {filter!r}: {_name(self.key_codec)} cannot encode it: {exc}") from exc
        try:
            return validate_key_filter(stored)
        except InvalidKeyError as exc:
            raise InvalidKeyError(f"key filter {filter!r} encodes to {stored!r} with "
                                  f"{_name(self.key_codec)}, which is not a valid filter") from exc

    def _filters(self, keys: str | list[str]) -> list[str]:
        filters = [keys] if isinstance(keys, str) else list(keys)
        return [self.encode_filter(f) for f in filters or [">"]]

    def encode_value(self, value: Any) -> bytes:
        """Return ``value`` as stored (bytes). Sends nothing.

        Raises:
            InvalidValueError: the value codec refuses it, or returns neither bytes nor str.
        """
        try:
            data = self.value_codec.encode_value(value)
        except InvalidValueError:
            raise
        except Exception as exc:
            raise InvalidValueError(f"value {_short(value)}: {_name(self.value_codec)} cannot encode it: "
                                    f"{exc}") from exc
        try:
            return value_bytes(data)
        except TypeError as exc:
            raise InvalidValueError(f"value {_short(value)}: {_name(self.value_codec)} returned "
                                    f"{type(data).__name__}, not bytes or str") from exc

    def decode_key(self, stored: str) -> str:
        """Return the application's key for a stored key.

        Raises:
            KeyValueDecodeError: the key codec cannot decode it.
        """
        try:
            return self.key_codec.decode_key(stored)
        except Exception as exc:
            raise KeyValueDecodeError(f"bucket {self.bucket!r}: stored key {stored!r} cannot be decoded by "
                                      f"{_name(self.key_codec)}: {exc}", stored) from exc

    def decode_value(self, stored: bytes) -> Any:
        """Return the application's value for stored bytes.

        Raises:
            KeyValueDecodeError: the value codec cannot decode them.
        """
        try:
            return self.value_codec.decode_value(stored)
        except Exception as exc:
            raise KeyValueDecodeError(f"bucket {self.bucket!r}: stored value {_short(stored)} cannot be decoded "
                                      f"by {_name(self.value_codec)}: {exc}", stored) from exc

    def _entry(self, e: Entry, key: str | None = None) -> CodecEntry:
        """Decode an entry; ``key``: the caller's key (known, no decoding needed)."""
        if key is None:
            key = self.decode_key(e.key)
        value: Any = e.value
        if e.operation is KeyValueOp.PUT:
            value = self.decode_value(e.value)
        return CodecEntry(e.bucket, key, value, e.revision, e.delta, e.created, e.operation, raw_key=e.key)

    def _entry_or_raw(self, e: Entry, meta_only: bool = False) -> CodecEntry:
        """Decode an entry read by a listing; what cannot be decoded stays as stored (warning)."""
        try:
            key = self.decode_key(e.key)
        except KeyValueDecodeError as exc:
            log.warning("%s; delivering it as stored", exc)
            key = e.key
        value: Any = e.value
        if e.operation is KeyValueOp.PUT and not meta_only:
            try:
                value = self.decode_value(e.value)
            except KeyValueDecodeError as exc:
                log.warning("%s (key %r, revision %d); delivering it as stored", exc, key, e.revision)
        return CodecEntry(e.bucket, key, value, e.revision, e.delta, e.created, e.operation, raw_key=e.key)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, key: str, revision: int | None = None, *, timeout: float | None | Default = DEFAULT) -> CodecEntry:
        """Return the latest entry of ``key`` (or the one at ``revision``), decoded.

        Blocks for one request, at most ``timeout`` (as :meth:`KeyValue.get`).

        Raises:
            InvalidKeyError: the key codec refuses the key (nothing sent).
            KeyNotFoundError: no value (or no such revision of this key).
            KeyDeletedError: the latest entry is a delete/purge marker (``.entry``: the decoded marker).
            KeyValueDecodeError: the stored value cannot be decoded by the value codec.
        """
        stored = self.encode_key(key)
        try:
            e = self._kv.get(stored, revision, timeout=timeout)
        except KeyDeletedError as exc:
            raise KeyDeletedError(self._entry(exc.entry, key), f"key {key!r} was deleted "
                                  f"(revision {exc.entry.revision})") from exc
        except KeyNotFoundError as exc:
            what = f"key {key!r}" if revision is None else f"revision {revision} of key {key!r}"
            raise KeyNotFoundError(f"{what} (stored as {stored!r}) not found in bucket {self.bucket!r}",
                                   code=exc.code, err_code=exc.err_code) from exc
        return self._entry(e, key)

    # -- writes ---------------------------------------------------------------------------------

    def put(self, key: str, value: Any, *, timeout: float | None | Default = DEFAULT) -> int:
        """Encode and store ``value`` as the new value of ``key``; returns its revision.

        Blocks until the stream acknowledged it, at most ``timeout``.

        Raises:
            InvalidKeyError, InvalidValueError: the codecs refuse the key or value (nothing sent).
        """
        stored = self.encode_key(key)
        return self._kv.put(stored, self.encode_value(value), timeout=timeout)

    def create(self, key: str, value: Any, *, ttl: float | None = None,
               timeout: float | None | Default = DEFAULT) -> int:
        """Encode and store ``value`` only if ``key`` has no value (as :meth:`KeyValue.create`).

        Raises:
            InvalidKeyError, InvalidValueError: the codecs refuse the key or value (nothing sent).
            KeyExistsError: the key holds a value.
        """
        stored = self.encode_key(key)
        return self._kv.create(stored, self.encode_value(value), ttl=ttl, timeout=timeout)

    def update(self, key: str, value: Any, last: int, *, timeout: float | None | Default = DEFAULT) -> int:
        """Encode and store ``value`` only if the latest revision of ``key`` is ``last`` (as :meth:`KeyValue.update`).

        Raises:
            InvalidKeyError, InvalidValueError: the codecs refuse the key or value (nothing sent).
            KeyWrongLastSequenceError: the latest revision is not ``last``.
        """
        stored = self.encode_key(key)
        return self._kv.update(stored, self.encode_value(value), last, timeout=timeout)

    def delete(self, key: str, *, last: int | None = None, timeout: float | None | Default = DEFAULT) -> None:
        """Mark ``key`` deleted (as :meth:`KeyValue.delete`).

        Raises:
            InvalidKeyError: the key codec refuses the key (nothing sent).
            KeyWrongLastSequenceError: ``last`` did not match.
        """
        self._kv.delete(self.encode_key(key), last=last, timeout=timeout)

    def purge(self, key: str, *, last: int | None = None, ttl: float | None = None,
              timeout: float | None | Default = DEFAULT) -> None:
        """Remove every revision of ``key``, leaving one purge marker (as :meth:`KeyValue.purge`).

        Raises:
            InvalidKeyError: the key codec refuses the key (nothing sent).
            KeyWrongLastSequenceError: ``last`` did not match.
        """
        self._kv.purge(self.encode_key(key), last=last, ttl=ttl, timeout=timeout)

    def purge_deletes(self, *, older_than: float = 30 * 60, timeout: float | None | Default = DEFAULT) -> int:
        """Remove the markers of deleted keys (as :meth:`KeyValue.purge_deletes`; keys need no decoding)."""
        return self._kv.purge_deletes(older_than=older_than, timeout=timeout)

    # -- listing and watching -----------------------------------------------------------------------

    def watch(self, keys: str | list[str] = ">", *, include_history: bool = False, ignore_deletes: bool = False,
              updates_only: bool = False, meta_only: bool = False,
              resume_from_revision: int | None = None) -> CodecKeyWatcher:
        """Watch keys matching ``keys`` (keys or filters, encoded); entries come back decoded.

        As :meth:`KeyValue.watch`: the current values, ``None``, then every update.
        Blocks while the consumer is created, at most the context's timeout.

        Raises:
            InvalidKeyError: a filter the key codec cannot encode (nothing sent).
        """
        filters = self._filters(keys)
        return CodecKeyWatcher(self, self._kv.watch(
            filters, include_history=include_history, ignore_deletes=ignore_deletes, updates_only=updates_only,
            meta_only=meta_only, resume_from_revision=resume_from_revision), meta_only=meta_only)

    def keys(self, filter: str | list[str] = ">", *, timeout: float | None | Default = DEFAULT) -> list[str]:  # noqa: A002
        """Return the decoded keys matching ``filter`` that hold a value, sorted.

        Blocks as :meth:`KeyValue.keys`, at most ``timeout``. Stored keys the key codec
        cannot decode are left out (a warning on the ``jssync`` logger).

        Raises:
            InvalidKeyError: a filter the key codec cannot encode (nothing sent).
            jssync.TimeoutError: the listing did not finish within ``timeout``.
        """
        out = []
        for stored in self._kv.keys(self._filters(filter), timeout=timeout):
            try:
                out.append(self.decode_key(stored))
            except KeyValueDecodeError as exc:
                log.warning("%s; left out of keys()", exc)
        return sorted(out)

    def history(self, key: str, *, timeout: float | None | Default = DEFAULT) -> list[CodecEntry]:
        """Return every stored revision of ``key`` (a filter is allowed), decoded, oldest first.

        Blocks until they were read, at most ``timeout``.

        Raises:
            InvalidKeyError: the key codec refuses the key (nothing sent).
            KeyNotFoundError: nothing is stored for it.
        """
        stored = self.encode_filter(key)
        try:
            entries = self._kv.history(stored, timeout=timeout)
        except KeyNotFoundError as exc:
            raise KeyNotFoundError(f"key {key!r} (stored as {stored!r}) not found in bucket {self.bucket!r}",
                                   code=exc.code, err_code=exc.err_code) from exc
        return [self._entry_or_raw(e) for e in entries]

    def status(self, *, timeout: float | None | Default = DEFAULT) -> KeyValueStatus:
        """Return the bucket's status (fresh stream info). Blocks for one request."""
        return self._kv.status(timeout=timeout)

    def with_codecs(self, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec | None = None) -> Self:
        """The same bucket with other codecs (those left out: :class:`NoOpCodec`)."""
        return type(self)(self._kv, key_codec=key_codec, value_codec=value_codec)


class CodecKeyWatcher:
    """A :class:`KeyWatcher` whose entries come back decoded (:class:`CodecEntry`).

    Iterating blocks like the watcher it wraps; ``None`` still marks the end of the
    initial values. An entry the codecs cannot decode is delivered as stored, with a
    warning on the ``jssync`` logger. Thread-safe; :meth:`stop` may be called from any thread.
    """

    def __init__(self, kv: CodecKeyValue, watcher: KeyWatcher, *, meta_only: bool = False) -> None:
        self._kv = kv
        self._watcher = watcher
        self._meta_only = meta_only

    def __repr__(self) -> str:
        return f"<jssync.CodecKeyWatcher {self._watcher!r}>"

    @property
    def raw(self) -> KeyWatcher:
        """The watcher underneath (entries as stored)."""
        return self._watcher

    def next(self, timeout: float | None = None) -> CodecEntry | None:
        """Return the next decoded entry, or None for the end-of-initial-values marker.

        Blocks until one arrives, at most ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: nothing arrived in time.
            StopIteration: the watcher was stopped (or its connection closed).
        """
        e = self._watcher.next(timeout=timeout)
        return None if e is None else self._kv._entry_or_raw(e, self._meta_only)

    def updates(self, timeout: float | None = 5.0) -> CodecEntry | None:
        """Like :meth:`next`, with a default wait of 5 seconds (None: no limit)."""
        return self.next(timeout=timeout)

    def __iter__(self) -> Iterator[CodecEntry | None]:
        return self

    def __next__(self) -> CodecEntry | None:
        return self.next(timeout=None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        return self._watcher.stopped

    def stop(self) -> None:
        """Stop watching (idempotent, any thread); blocks for the consumer delete, at most 2 seconds."""
        self._watcher.stop()


_handle.CODEC_KV = CodecKeyValue
