"""The key-value store's errors: each under jssync's core tree (``jssync.JetStreamError``,
``StreamNotFoundError``, ``ValidationError`` ...), exported from ``jssync`` and still offered by
``jssync.kv.keyvalue``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.errors import (
    JetStreamError,
    NotFoundError,
    StreamNameInUseError,
    StreamNotFoundError,
    ValidationError,
    WrongLastSequenceError,
)

if TYPE_CHECKING:
    from .keyvalue import Entry


class KeyValueError(JetStreamError):
    """Base class of key-value store errors."""


class InvalidBucketNameError(KeyValueError, ValidationError):
    """A bucket name is not valid (letters, digits, ``-`` and ``_`` only)."""


class InvalidKeyError(KeyValueError, ValidationError):
    """A key (or key filter) is not valid."""


class InvalidValueError(KeyValueError, ValidationError):
    """A value the bucket's value codec cannot encode (nothing was sent)."""


class KeyValueDecodeError(KeyValueError):
    """A key or value read from the bucket that its key or value codec cannot decode.

    Attributes:
        raw: the key (str) or value (bytes) as stored.
    """

    def __init__(self, description: str, raw: str | bytes = b"") -> None:
        super().__init__(description)
        self.raw = raw


class KeyHistoryTooLargeError(KeyValueError, ValidationError):
    """``history`` is over the limit of 64 values per key."""


class BucketNotFoundError(KeyValueError, StreamNotFoundError):
    """The bucket (its ``KV_<bucket>`` stream) does not exist."""


class BucketExistsError(KeyValueError, StreamNameInUseError):
    """A bucket of that name exists with a different configuration."""


class BadBucketError(KeyValueError):
    """The stream behind the bucket is not a key-value bucket (no per-subject history limit)."""


class KeyNotFoundError(KeyValueError, NotFoundError):
    """The key has no value (never set, or its history was removed)."""

    def __init__(self, description: str = "key not found", *, code: int | None = 404,
                 err_code: int | None = None) -> None:
        NotFoundError.__init__(self, code, err_code, description)


class KeyDeletedError(KeyNotFoundError):
    """The key's latest value is a delete or purge marker.

    Attributes:
        entry: the marker :class:`Entry` (its ``revision`` can be passed to ``update``).
        op: the marker's operation (``KeyValueOp.DEL`` or ``KeyValueOp.PURGE``).
    """

    def __init__(self, entry: Entry, description: str = "key was deleted") -> None:
        super().__init__(description)
        self.entry = entry
        self.op = entry.operation


class KeyWrongLastSequenceError(KeyValueError, WrongLastSequenceError):
    """An update (or create, or conditional delete) found another latest revision."""

    def __init__(self, description: str = "wrong last sequence", *, code: int | None = 400,
                 err_code: int | None = 10071) -> None:
        WrongLastSequenceError.__init__(self, code, err_code, description)


class KeyExistsError(KeyWrongLastSequenceError):
    """``create`` found the key already holding a value."""
