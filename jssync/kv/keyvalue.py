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

The package's modules, by job: :mod:`.entries` (the entry and status types, the name rules),
:mod:`.admin` (bucket management and listings), :mod:`.handle` (the :class:`KeyValue`
handle), :mod:`.watcher` (the watcher engine). This module gathers their public names.
"""

from __future__ import annotations

from .admin import (
    create_key_value,
    create_or_update_key_value,
    delete_key_value,
    key_value,
    key_value_store_names,
    key_value_stores,
    update_key_value,
)
from .entries import Entry, KeyValueOp, KeyValueStatus, validate_bucket, validate_key, validate_key_filter
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
from .handle import KeyValue
from .watcher import KeyWatcher

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
    "create_or_update_key_value",
    "delete_key_value",
    "key_value",
    "key_value_store_names",
    "key_value_stores",
    "update_key_value",
    "validate_bucket",
    "validate_key",
    "validate_key_filter",
]
