"""What the layers above JetStream plug into it (dependency inversion: jetstream never imports them).

``JetStream.key_value()``, ``create_object_store()`` and the other bucket calls of the context are
implemented in jssync/kv and jssync/objectstore, which sit above the JetStream layer. The context
calls the functions those packages stored here when they were imported (``jssync/__init__.py``
imports every layer first, so they are set before a user can hold a JetStream context).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..kv.codecs import CodecKeyValue
    from ..kv.keyvalue import KeyValue, KeyValueStatus
    from ..objectstore.objectstore import ObjectStore, ObjectStoreStatus


class JetStreamHooks:
    """The hooks; each is set once, at import, by the module named in its group's comment."""

    # -- set by jssync.kv.admin --
    create_key_value: Callable[..., KeyValue]
    key_value: Callable[..., KeyValue | CodecKeyValue]
    delete_key_value: Callable[..., bool]
    update_key_value: Callable[..., KeyValue]
    create_or_update_key_value: Callable[..., KeyValue]
    key_value_store_names: Callable[..., Iterator[str]]
    key_value_stores: Callable[..., Iterator[KeyValueStatus]]
    # -- set by jssync.objectstore.objectstore --
    create_object_store: Callable[..., ObjectStore]
    update_object_store: Callable[..., ObjectStore]
    create_or_update_object_store: Callable[..., ObjectStore]
    object_store: Callable[..., ObjectStore]
    delete_object_store: Callable[..., bool]
    object_store_names: Callable[..., Iterator[str]]
    object_stores: Callable[..., Iterator[ObjectStoreStatus]]


HOOKS = JetStreamHooks()

