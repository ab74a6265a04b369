"""The kombu channel (queues as work-queue streams, pulls within the prefetch) and its QoS."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import threading
import uuid
from collections import deque
from queue import Empty
from typing import TYPE_CHECKING, Any

from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments

from ..base.errors import (
    ConsumerDeletedError,
    ConsumerNotFoundError,
    Error,
    NoRespondersError,
    StreamNotFoundError,
    ValidationError,
)
from ..core.msg import Msg
from ..jetstream.consumers import Consumer
from ..jetstream.context import JetStream
from .names import escape
from .puller import Puller

if TYPE_CHECKING:
    from .transport import Transport



logger = logging.getLogger("jssync")

#: seconds a get waits for a message this channel put or requeued, when a no-wait pull found none
UNSEEN_WAIT = 1.0


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with acks, rejects and restores sent to JetStream."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        """+ACK the message; returns at once (the ack is buffered). Safe from any thread."""
        msg = self.channel._held_pop(delivery_tag)
        if msg is not None:
            msg.ack()
        super().ack(delivery_tag)
        self.channel._wake()  # prefetch room: the channel's pulls may ask for more

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        """-NAK (``requeue=True``: delivered again at once; blocks until the server confirmed
        it, at most 5 s) or +TERM (never delivered again)."""
        msg = self.channel._held_pop(delivery_tag)
        if msg is not None:
            if requeue:
                # confirmed by the server, so the next basic_get finds it (the server handles a
                # plain -NAK apart from pull requests: a get right after it could miss it)
                try:
                    msg.nak_sync()
                except Error as exc:
                    logger.debug("kombu transport: confirmed nak failed (%s); sending a plain one", exc)
                    msg.nak()
                self.channel._note_unseen(msg.metadata.stream)
            else:
                msg.term("rejected by kombu")
        self._quick_ack(delivery_tag)
        self.channel._wake()

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """-NAK every message delivered and not yet acked (channel close, ``basic_recover``)."""
        self._flush()
        errors: list[tuple[BaseException, Any]] = []
        for tag in list(self._delivered):
            msg = self.channel._held_pop(tag)
            if msg is None:
                continue
            try:
                msg.nak()
            except Error as exc:
                errors.append((exc, self._delivered.get(tag)))
        self._delivered.clear()
        self.channel._wake()
        return errors


class Channel(virtual.Channel):
    """A kombu channel on the transport's one jssync connection. Queues are work-queue streams."""

    QoS = QoS
    supports_fanout = True
    do_restore = True
    connection: Transport

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._lock = threading.Lock()
        #: delivery tag -> the JetStream message, for every message delivered and not settled
        self._held: dict[str, Msg] = {}
        #: messages pulled beyond the one _get returned, per queue
        self._buffers: dict[str, deque[Msg]] = {}
        #: queues consumed with no_ack: their messages are acked when taken
        self._no_ack: set[str] = set()
        self._keepalive_stop = threading.Event()
        self._keepalive_thread: threading.Thread | None = None
        #: consumed queue -> the thread that keeps a pull request open for it
        self._pullers: dict[str, Puller] = {}
        #: why a pull thread stopped for good; raised by the next drain_events
        self._pull_error: BaseException | None = None
        #: delivery tags: unique per channel (and across channels), cheaper than a uuid each
        self._tag_prefix = f"{uuid.uuid4().hex}."
        #: queues declared here with auto_delete: deleted when this channel stops consuming them
        self._auto_delete: set[str] = set()
        self._tag_seq = itertools.count(1)
        #: stream -> messages put or requeued here and not got since: a get that finds nothing
        #: waits up to UNSEEN_WAIT s for them (a loaded server can answer a no-wait pull sent
        #: right after a confirmed publish or -NAK before the message is on offer to it)
        self._unseen: dict[str, int] = {}

    # -- names --------------------------------------------------------------------------------

    @property
    def options(self) -> dict[str, Any]:
        return self.connection.options

    def stream_name(self, queue: str) -> str:
        """The stream that holds ``queue``."""
        return f"{self.options['subject_prefix'].replace('.', '_')}_{escape(queue)}"

    def subject(self, queue: str) -> str:
        """The subject messages for ``queue`` are published on."""
        return f"{self.options['subject_prefix']}.q.{escape(queue)}"

    @property
    def consumer_name(self) -> str:
        return str(self.options["subject_prefix"]).replace(".", "_")

    @property
    def js(self) -> JetStream:
        return self.connection.js

    # -- queues -------------------------------------------------------------------------------

    def prepare_queue_arguments(self, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """kombu's ``Queue(message_ttl=, max_length=, max_length_bytes=)`` as ``x-`` queue arguments."""
        return dict(to_rabbitmq_queue_arguments(arguments, **kwargs))

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        """Create the queue's stream and consumer unless they exist (blocks on two API calls).

        A declaration never changes an existing consumer's settings: those belong to the
        processes that consume the queue (see :meth:`Transport.declare_queue`)."""
        if kwargs.get("auto_delete"):
            self._auto_delete.add(queue)
        self.connection.declare_queue(queue, kwargs.get("arguments") or {}, self)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        try:
            self.js.stream(self.stream_name(queue))
        except StreamNotFoundError:
            return False
        return True

    def _consumer(self, queue: str, *, consuming: bool = False) -> Consumer:
        """The queue's durable consumer (declared here if needed). ``consuming``: this channel
        consumes the queue, so the consumer gets this process's settings (once per connection)."""
        transport = self.connection
        consumer = transport.consumers.get(queue)
        if consumer is None or (consuming and queue not in transport.configured):
            transport.declare_queue(queue, {}, self, consuming=consuming)
            consumer = transport.consumers[queue]
        return consumer

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Store ``message`` in ``queue``'s stream; blocks until the stream confirmed it."""
        if queue not in self.connection.consumers:
            self._new_queue(queue)
        ttl: int | None = None
        expiration = message.get("properties", {}).get("expiration")
        headers = message.get("headers") or {}
        if expiration is not None and not (headers.get("task") and headers.get("expires")):
            # (a Celery task with ``expires`` is kept: the worker sees it expired and revokes it,
            # so its result becomes REVOKED instead of staying PENDING, as on kombu's Redis)
            try:
                ttl = max(1, math.ceil(float(expiration) / 1000))
            except (TypeError, ValueError):
                raise ValidationError(f"message expiration {expiration!r}: need milliseconds") from None
        data = json.dumps(message).encode("utf-8")
        # a Celery task: its id, name, retry count and replace depth as Nats-Msg-Id, so a publish
        # retried after a lost PubAck is stored once (within the stream's duplicate window, 2
        # minutes), while a retry of the task (one more retry) or its replacement
        # (Task.replace keeps the id, one more nesting) is a new message
        task_id = headers.get("id") if headers.get("task") else None
        msg_id = (f"{task_id}:{headers.get('task')}:{headers.get('retries') or 0}:"
                  f"{headers.get('replaced_task_nesting') or 0}") if isinstance(task_id, str) and task_id else None
        try:
            self.js.publish(self.subject(queue), data, ttl=ttl, msg_id=msg_id)
        except (NoRespondersError, StreamNotFoundError):
            # the stream went away (deleted, or a failover to a server without it): make it again
            self.connection.forget_queue(queue)
            self._new_queue(queue)
            self.js.publish(self.subject(queue), data, ttl=ttl, msg_id=msg_id)
        self._note_unseen(self.stream_name(queue))

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """The next message of ``queue``; raises ``Empty`` when there is none now (never waits).

        A consumed queue (``basic_consume``) is served from what its pull thread received (the
        thread starts here, on the first call, so a ``basic_qos`` made after ``basic_consume``
        already bounds its first pull). Any other queue (``basic_get``) is asked for one message
        with a no-wait pull: a round trip.
        """
        if queue in self._active_queues and not self.closed:
            with self._lock:
                buf = self._buffers.get(queue)
                msg = buf.popleft() if buf else None
                started = queue in self._pullers
            if not started:
                self._start_puller(queue)
            if msg is None:
                raise Empty()
            no_ack = queue in self._no_ack
            if no_ack or not buf:
                # room for the pull thread: a no_ack queue's buffer counts alone; an acked
                # queue's delivered message still counts against the prefetch until acked
                self._wake()
            return self._payload(msg, settle=no_ack)
        with self._lock:
            buf = self._buffers.setdefault(queue, deque())
            msg = buf.popleft() if buf else None
        if msg is None:
            try:
                fetched = list(self._consumer(queue).fetch_no_wait(1))
            except (StreamNotFoundError, ConsumerNotFoundError, ConsumerDeletedError, NoRespondersError):
                # the queue's consumer (or stream) is gone: deleted by someone, or a failover to a
                # server without it; declare it again (that raises if JetStream itself is not there)
                self.connection.forget_queue(queue)
                fetched = list(self._consumer(queue).fetch_no_wait(1))
            stream = self.stream_name(queue)
            if not fetched and self._unseen.get(stream):
                fetched = list(self._consumer(queue).fetch(1, expires=UNSEEN_WAIT))
            with self._lock:
                left = self._unseen.pop(stream, 0) - 1
                if fetched and left > 0:
                    self._unseen[stream] = left
            if not fetched:
                raise Empty()
            msg = fetched[0]
        return self._payload(msg, settle=queue in self._no_ack)

    def _note_unseen(self, stream: str) -> None:
        """Count a message put or requeued into ``stream`` here: a get that finds nothing
        waits a moment for it (:data:`UNSEEN_WAIT`)."""
        with self._lock:
            self._unseen[stream] = self._unseen.get(stream, 0) + 1

    def _payload(self, msg: Msg, *, settle: bool) -> dict[str, Any]:
        """kombu's message dict for ``msg``; held for a later ack, or acked now (``settle``)."""
        payload: dict[str, Any] = json.loads(msg.data)
        props = payload.setdefault("properties", {})
        tag = f"{self._tag_prefix}{next(self._tag_seq)}"
        props["delivery_tag"] = tag
        info = props.setdefault("delivery_info", {})
        if msg.metadata.num_delivered > 1:
            payload["redelivered"] = True
            info["redelivered"] = True
        if settle:
            msg.ack()
            return payload
        with self._lock:
            self._held[tag] = msg
        self._start_keepalive()
        return payload

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        """Consume ``queue``; with ``no_ack`` every message is acked as it is taken."""
        if no_ack:
            self._no_ack.add(queue)
        else:
            self._no_ack.discard(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        """Stop consuming; a queue declared ``auto_delete`` here is deleted when its last consumer
        of this channel is cancelled."""
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._no_ack.discard(queue)
            self._stop_pullers([queue])
            if queue in self._auto_delete:
                self._auto_delete_queue(queue)
        return result

    def _auto_delete_queue(self, queue: str) -> None:
        """Delete the ``auto_delete`` queue nobody of this channel consumes any more (as kombu's
        Redis transport does: whoever else consumed it too sees it declared again by its next
        pull); failures are logged (the queue's ``x-expires`` removes it instead)."""
        self._auto_delete.discard(queue)
        try:
            self.queue_delete(queue)
        except Error as exc:
            logger.debug("kombu transport: auto-delete of queue %r failed: %s", queue, exc)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        """One message of ``queue`` or None (never waits); with ``no_ack`` it is acked at once."""
        if not no_ack:
            return super().basic_get(queue, no_ack, **kwargs)
        was = queue in self._no_ack
        self._no_ack.add(queue)
        try:
            return super().basic_get(queue, no_ack, **kwargs)
        finally:
            if not was:
                self._no_ack.discard(queue)

    def _held_pop(self, tag: str) -> Msg | None:
        with self._lock:
            return self._held.pop(tag, None)

    def _nak(self, msg: Msg) -> None:
        """-NAK a message received and not delivered (logged when that fails)."""
        try:
            msg.nak()
        except Error as exc:
            logger.debug("kombu transport: nak of an undelivered message failed: %s", exc)

    def _size(self, queue: str) -> int:
        """Messages ready for delivery: stored minus delivered-and-unacked (two API calls)."""
        try:
            stored = self.js.stream(self.stream_name(queue)).info().state.messages
            pending = self._consumer(queue).info().num_ack_pending or 0
        except StreamNotFoundError:
            return 0
        return max(0, stored - pending)

    def _purge(self, queue: str) -> int:
        """Remove every message of ``queue`` (delivered and unacked ones too); returns how many."""
        try:
            return self.js.stream(self.stream_name(queue)).purge()
        except StreamNotFoundError:
            return 0

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any) -> int:
        """Delete ``queue``'s stream (its messages) and every binding of it; returns how many it held."""
        if if_empty and self._size(queue):
            return 0
        self.connection.delete_bindings(queue)
        self.state.queue_bindings_delete(queue)
        self.connection.forget_queue(queue)
        self._auto_delete.discard(queue)
        with self._lock:
            self._buffers.pop(queue, None)
        try:
            st = self.js.stream(self.stream_name(queue))
            held = st.info().state.messages
            self.js.delete_stream(st.name)
        except StreamNotFoundError:
            return 0
        return held

    # -- bindings (shared through the key-value bucket) ----------------------------------------

    def _queue_bind(self, exchange: str, routing_key: str, pattern: Any, queue: str) -> None:
        self.connection.store_binding(exchange, queue, routing_key)

    def queue_unbind(self, queue: str, exchange: str | None = None, routing_key: str = "",
                     arguments: Any = None, **kwargs: Any) -> None:
        """Remove the binding here and from the bucket, so no process routes by it any more."""
        self.state.binding_delete(queue, exchange, routing_key)
        if exchange:
            self.connection.remove_binding(exchange, queue, routing_key or "")

    def get_table(self, exchange: str, fresh: bool = False) -> list[tuple[str, Any, str]]:
        """The bindings of ``exchange``: this process's and those stored by others (from the cache a
        key-value watch keeps current; a listing of the bucket while that cache is not ready, or
        with ``fresh``)."""
        table = {(rk, queue) for rk, _pattern, queue in self.state.exchanges.get(exchange, {}).get("table", [])}
        table.update(self.connection.stored_bindings(exchange, fresh=fresh))
        typ = self.typeof(exchange)
        return [typ.prepare_bind(queue, exchange, rk, None) for rk, queue in sorted(table)]

    def _lookup(self, exchange: str, routing_key: str, default: str | None = None) -> list[str]:
        """The queues ``routing_key`` reaches through ``exchange``; when the bindings cache finds
        none, from a listing of the bucket (a binding stored a moment ago by another process, a
        Celery control client's reply queue, may not be in this process's cache yet)."""
        for fresh in (False, True) if exchange else ():
            with contextlib.suppress(KeyError):
                if found := list(self.typeof(exchange).lookup(self.get_table(exchange, fresh=fresh),
                                                              exchange, routing_key, None)):
                    return found
        return list(super()._lookup(exchange, routing_key, default))

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        """A copy of ``message`` to every queue bound to ``exchange``."""
        for queue in {q for _rk, _p, q in self.get_table(exchange)}:
            self._put(queue, message, **kwargs)

    # -- pulls for consumed queues -------------------------------------------------------------

    def _wake(self) -> None:
        """Tell the pull threads and a waiting ``drain_events`` that something changed."""
        transport = self.connection
        if transport is not None:
            transport.wake()

    def _start_puller(self, queue: str) -> None:
        """Start the pull thread of the consumed ``queue`` (declares the queue if needed; raises
        what that raises)."""
        self._consumer(queue, consuming=True)
        _ = self.qos  # made here, in the calling thread, before the pull thread reads it
        with self._lock:
            if queue in self._pullers or self.closed:
                return
            puller = self._pullers[queue] = Puller(self, queue)
            self._buffers.setdefault(queue, deque())
            over = self._over_share()
        for pull in over:  # asked for more than the new share: pull again with it (what it still brings is nak'ed)
            pull.stop()
        puller.start()

    def _over_share(self) -> list[Any]:
        """The open pulls of acked queues that asked for more than their share of the prefetch
        room now (called with ``_lock`` held, after a queue was added or the prefetch count
        changed): an open pull of an idle queue, made while it was the only one (or before
        ``basic_qos``), would otherwise hold the other queues' room until it expires."""
        limit = self.qos.prefetch_count
        if not limit:
            return []
        acked = [p for p in self._pullers.values() if p.queue not in self._no_ack]
        share = max(1, -(-limit // max(1, len(acked))))
        pulls = []
        for p in acked:
            if p.reserved > share:
                if p._pull is not None:
                    pulls.append(p._pull)
                else:  # its pull is being sent: stopped as soon as it is made
                    p.resize = True
        return pulls

    def _stop_pullers(self, queues: list[str]) -> None:
        """Stop the pull threads of ``queues``: their open pulls end at once (what those still
        bring is nak'ed); -NAK what they received and was not delivered. Waits up to 5 s each."""
        with self._lock:
            pullers = [p for q in queues if (p := self._pullers.pop(q, None)) is not None]
        for puller in pullers:
            puller.stop()
        for puller in pullers:
            puller.join(5.0)
        for puller in pullers:
            with self._lock:
                buf = self._buffers.pop(puller.queue, None)
            for msg in buf or ():
                self._nak(msg)
        if pullers:
            self._wake()

    def _pull_size(self, puller: Puller) -> int:
        """How many messages ``puller`` may ask for now (0: none). Called with ``_lock`` held.

        At most ``fetch_batch``. For a queue consumed with acks, messages delivered and not
        acked, received and not delivered, and asked for and not yet received, of all the
        channel's queues, stay within ``prefetch_count``, and each queue takes at most its
        share of it, so an idle queue's open pull does not hold the room of a busy one.
        A queue consumed with ``no_ack`` (kombu does not count those against the prefetch)
        has at most ``fetch_batch`` received and not delivered.
        """
        batch = int(self.options["fetch_batch"])
        own = len(self._buffers.get(puller.queue) or ())
        limit = self.qos.prefetch_count
        if puller.queue in self._no_ack or not limit:
            room = batch - own
            cap = batch
        else:
            acked = [p for p in self._pullers.values() if p.queue not in self._no_ack]
            qos = self.qos
            unacked = len(qos._delivered) - len(qos._dirty)
            buffered = sum(len(self._buffers.get(p.queue) or ()) for p in acked)
            asked = sum(p.reserved for p in acked)
            share = max(1, -(-limit // max(1, len(acked))))
            cap = min(batch, share)
            room = min(limit - unacked - buffered - asked, cap - own)
            if room <= 0 and not own and limit - unacked - buffered > 0:
                # the other queues' open pulls hold the free room (more queues than room, or
                # shares rounded up): ask for one all the same; the first arrival that fills the
                # room ends the other open pulls (see _received), so no queue waits for an idle
                # one's pull to expire
                room = 1
        if room <= 0:
            return 0
        # ask when half the room is free (fewer, larger pulls) or when nothing is left to deliver
        if own and room < max(1, cap // 2):
            return 0
        return room

    def _overbooked(self, arrived: Puller) -> list[Any]:
        """The other open pulls of acked queues once the messages delivered-and-unacked,
        received and asked for exceed the prefetch count (pulls of one were let through, see
        :meth:`_pull_size`): ended, they pull again when there is room. Called with ``_lock`` held."""
        limit = self.qos.prefetch_count
        if not limit or arrived.queue in self._no_ack:
            return []
        acked = [p for p in self._pullers.values() if p.queue not in self._no_ack]
        qos = self.qos
        unacked = len(qos._delivered) - len(qos._dirty)
        held = unacked + sum(len(self._buffers.get(p.queue) or ()) + p.reserved for p in acked)
        if held <= limit:
            return []
        pulls = []
        for p in acked:
            if p is not arrived and p.reserved:
                if p._pull is not None:
                    pulls.append(p._pull)
                else:  # its pull is being sent: stopped as soon as it is made
                    p.resize = True
                p.reserved = 0  # counted as ended now: its thread pulls again when there is room
        return pulls

    def _received(self, puller: Puller, msg: Msg) -> None:
        """A message of ``puller``'s open pull arrived: buffer it for delivery (-NAK it when the
        puller was stopped meanwhile)."""
        with self._lock:
            puller.reserved = max(0, puller.reserved - 1)
            keep = not puller.stopped and self._pullers.get(puller.queue) is puller
            if keep:
                self._buffers.setdefault(puller.queue, deque()).append(msg)
            over = self._overbooked(puller) if keep else []
        for pull in over:  # the room is full: the other open pulls end (what they still bring is nak'ed)
            pull.stop()
        if not keep:
            self._nak(msg)
            return
        self._start_keepalive()  # received and not yet delivered is held too
        self._wake()

    # -- in progress for held messages --------------------------------------------------------

    def _start_keepalive(self) -> None:
        """Start the in-progress thread once (from the main thread or a pull thread)."""
        if not self.options["keepalive"] or self._keepalive_thread is not None:
            return
        with self._lock:
            if self._keepalive_thread is not None or self._keepalive_stop.is_set():
                return
            thread = self._keepalive_thread = threading.Thread(target=self._keepalive,
                                                               name="jssync-kombu-keepalive", daemon=True)
        thread.start()

    def _keepalive(self) -> None:
        interval = max(0.2, self.options["ack_wait"] / 3)
        while not self._keepalive_stop.wait(interval):
            with self._lock:  # delivered and unacked, and pulled and not yet delivered
                held = list(self._held.values()) + [m for buf in self._buffers.values() for m in buf]
            for msg in held:
                try:
                    msg.in_progress()
                except Error as exc:
                    logger.debug("kombu transport: in-progress not sent: %s", exc)

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False) -> None:
        """Limit the messages delivered and not acked on this channel (kombu counts them)."""
        self.qos.prefetch_count = prefetch_count
        with self._lock:
            over = self._over_share()
        for pull in over:  # asked for more than the new limit allows: pull again within it
            pull.stop()
        self._wake()

    def close(self) -> None:
        """Cancel consumers, -NAK what was delivered and not acked or pulled and not delivered."""
        if self.closed:
            return
        self._keepalive_stop.set()
        self._stop_pullers(list(self._pullers))
        thread = self._keepalive_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        for buf in self._buffers.values():
            while buf:
                self._nak(buf.popleft())
        self._buffers.clear()
        try:
            super().close()
        except Error as exc:
            logger.debug("kombu transport: channel close: %s", exc)

