"""The JetStream context's factory room: the objects a context makes (KV, object store, push subscriptions...).

:class:`Factories` is one of the rooms :class:`jssync.JetStream` is made of (see
jetstream/context.py). Each method checks nothing itself and hands over to the module that
implements the feature: counters, atomic batches (jetstream/msgfeatures.py), fast ingest
(jetstream/fastpublish.py), push subscriptions (jetstream/push.py), and, through the hooks
the upper layers register (jetstream/hooks.py), key-value buckets (kv/) and object stores
(objectstore/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Unpack, overload

from nats.js import api

from ..base.deadline import DEFAULT, Default
from .apicalls import APIRoom
from .hooks import HOOKS
from .params import KeyValueParams, ObjectStoreParams

if TYPE_CHECKING:
    from ..kv.codecs import CodecKeyValue, KeyCodec, ValueCodec
    from ..kv.keyvalue import KeyValue, KeyValueStatus
    from ..objectstore.objectstore import ObjectStore, ObjectStoreStatus
    from .fastpublish import FastPublisher
    from .msgfeatures import BatchPublisher, Counter
    from .push import JetStreamSubscription


class Factories(APIRoom):
    """What a JetStream context makes (a room of :class:`jssync.JetStream`): counters, batches,
    push subscriptions, key-value buckets and object stores."""

    # -- counters, atomic and fast batches (ADR-49/50; implemented in jetstream/msgfeatures.py, fastpublish.py) --

    def counter(self, subject: str, *, stream: str | None = None) -> Counter:
        """A distributed counter on ``subject`` (ADR-49; the stream needs ``allow_msg_counter=True``).

        ``counter.add(n)`` returns the new total, ``counter.get()`` reads it; ``stream`` saves
        looking up the stream that captures ``subject`` on the first read.
        """
        from .msgfeatures import Counter

        return Counter(self._context, subject, stream)

    def batch_publish(self, *, batch_id: str | None = None,
                      timeout: float | None | Default = DEFAULT) -> BatchPublisher:
        """An atomic batch (ADR-50; the stream needs ``allow_atomic=True``): all stored or none.

        ``with js.batch_publish() as batch: batch.add(subject, data, ...)`` commits when the
        block ends normally and sends nothing when it ends with an exception; see
        :class:`jssync.BatchPublisher`.
        """
        from .msgfeatures import BatchPublisher

        return BatchPublisher(self._context, batch_id=batch_id, timeout=timeout)

    def fast_publisher(self, *, gap: str = "fail", flow: int = 100, max_outstanding_acks: int = 2,
                       timeout: float | None | Default = DEFAULT,
                       error_cb: Callable[[BaseException], Any] | None = None) -> FastPublisher:
        """A fast-ingest batch (ADR-50; nats-server 2.14+, the stream needs ``allow_batched=True``).

        ``with js.fast_publisher() as fp: fp.add(subject, data, ...)`` sends each message
        at once, paced by the server's flow acks, and ends the batch when the block ends
        (``fp.ack`` is then its PubAck); see :class:`jssync.FastPublisher`. Nothing is sent
        here.

        Args:
            gap: ``"fail"`` (the batch ends at the first lost message: what is stored has
                no gaps) or ``"ok"`` (the batch goes on; gaps are reported to ``error_cb``).
            flow: ask for a flow ack every this many messages (1-65535; the server may
                lower it).
            max_outstanding_acks: how many flow acks may be outstanding before ``add``
                waits (1-3).
            timeout: the default wait of ``add``, ``flush`` and ``close`` (default: the
                context's timeout).
            error_cb: called on the worker pool with each gap (gap="ok") and error report.

        Raises:
            jssync.ValidationError: a bad option.
        """
        from .fastpublish import FastPublisher

        return FastPublisher(self._context, gap=gap, flow=flow, max_outstanding_acks=max_outstanding_acks,
                             timeout=timeout, error_cb=error_cb)

    # -- push subscribe (ADR-15; implemented in jetstream/push.py) -----------------------------------

    def subscribe(
        self,
        subject: str,
        durable: str | None = None,
        queue: str | None = None,
        stream: str | None = None,
        consumer: str | None = None,
        callback: Any = None,
        manual_ack: bool = False,
        ordered: bool = False,
        idle_heartbeat: float | None = None,
        flow_control: bool = False,
        config: api.ConsumerConfig | None = None,
        **options: Any,
    ) -> JetStreamSubscription:
        """Subscribe with a push consumer, following the ADR-15 workflow (see :mod:`jssync.jetstream.push`)."""
        from .push import subscribe

        return subscribe(self._context, subject, durable=durable, queue=queue, stream=stream, consumer=consumer,
                         callback=callback, manual_ack=manual_ack, ordered=ordered,
                         idle_heartbeat=idle_heartbeat, flow_control=flow_control, config=config, **options)

    # -- key-value store (ADR-8; implemented in kv/keyvalue.py) -------------------------------------

    def create_key_value(self, config: Any = None, **params: Unpack[KeyValueParams]) -> KeyValue:
        """Create a key-value bucket (``bucket=``, ``history=``, ``ttl=``, ...)."""
        return HOOKS.create_key_value(self._context, config, **params)

    @overload
    def key_value(self, bucket: str, *, key_codec: None = None, value_codec: None = None,
                  timeout: float | None | Default = DEFAULT) -> KeyValue: ...

    @overload
    def key_value(self, bucket: str, *, key_codec: KeyCodec, value_codec: ValueCodec | None = None,
                  timeout: float | None | Default = DEFAULT) -> CodecKeyValue: ...

    @overload
    def key_value(self, bucket: str, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec,
                  timeout: float | None | Default = DEFAULT) -> CodecKeyValue: ...

    def key_value(self, bucket: str, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec | None = None,
                  timeout: float | None | Default = DEFAULT) -> KeyValue | CodecKeyValue:
        """Open an existing key-value bucket (raises jssync.BucketNotFoundError).

        With ``key_codec`` and/or ``value_codec`` (NATS ADR-54; see :mod:`jssync.kv.codecs`),
        returns a :class:`jssync.CodecKeyValue` whose keys and values go through them.
        """
        return HOOKS.key_value(self._context, bucket, key_codec=key_codec, value_codec=value_codec, timeout=timeout)

    def delete_key_value(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete a key-value bucket and its stream."""
        return HOOKS.delete_key_value(self._context, bucket, timeout=timeout)

    def update_key_value(self, config: Any = None, **params: Any) -> KeyValue:
        """Update a bucket's whole configuration (``bucket=``, ``history=``, ...), built as on create.

        Options left out go back to their defaults. Raises jssync.BucketNotFoundError.
        """
        return HOOKS.update_key_value(self._context, config, **params)

    def create_or_update_key_value(self, config: Any = None, **params: Any) -> KeyValue:
        """Update the bucket, or create it if it does not exist."""
        return HOOKS.create_or_update_key_value(self._context, config, **params)

    def key_value_store_names(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over the name of every key-value bucket (mirrors included; all pages)."""
        return HOOKS.key_value_store_names(self._context, timeout=timeout)

    def key_value_stores(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[KeyValueStatus]:
        """Iterate over the :class:`jssync.KeyValueStatus` of every key-value bucket (all pages)."""
        return HOOKS.key_value_stores(self._context, timeout=timeout)

    # -- object store (ADR-20; implemented in objectstore/objectstore.py) -------------------------------

    def create_object_store(self, config: Any = None, **params: Unpack[ObjectStoreParams]) -> ObjectStore:
        """Create an object store (``bucket=``, ``ttl=``, ``storage=``, ...)."""
        return HOOKS.create_object_store(self._context, config, **params)

    def update_object_store(self, config: Any = None, **params: Unpack[ObjectStoreParams]) -> ObjectStore:
        """Update an object store's whole configuration (``bucket=``, ``description=``, ``ttl=``, ...),
        built as on create: options left out go back to their defaults; its objects stay.

        Blocks for one stream info and the update request. Raises jssync.BucketNotFoundError.
        """
        return HOOKS.update_object_store(self._context, config, **params)

    def create_or_update_object_store(self, config: Any = None, **params: Unpack[ObjectStoreParams]) -> ObjectStore:
        """Update the object store, or create it if it does not exist."""
        return HOOKS.create_or_update_object_store(self._context, config, **params)

    def object_store(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> ObjectStore:
        """Open an existing object store (raises jssync.BucketNotFoundError)."""
        return HOOKS.object_store(self._context, bucket, timeout=timeout)

    def delete_object_store(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete an object store and every object in it."""
        return HOOKS.delete_object_store(self._context, bucket, timeout=timeout)

    def object_store_names(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over the name of every object store (all pages)."""
        return HOOKS.object_store_names(self._context, timeout=timeout)

    def object_stores(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[ObjectStoreStatus]:
        """Iterate over the status of every object store (all pages)."""
        return HOOKS.object_stores(self._context, timeout=timeout)
