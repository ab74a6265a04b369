"""JetStream as a kombu transport, so Celery can use NATS JetStream as its broker.

Use it with kombu or Celery (install ``jssync[celery]``)::

    kombu.Connection("nats://127.0.0.1:4222", transport="jssync.kombu:Transport")
    app.conf.broker_url = "nats://127.0.0.1:4222"
    app.conf.broker_transport = "jssync.kombu:Transport"

How kombu's model maps onto JetStream (docs/celery.md has the long form):

- A queue is one work-queue stream, ``<prefix>_<queue>`` on the subject ``<prefix>.q.<queue>``
  (queue names are escaped into subject and stream tokens), with one durable pull consumer
  ``<prefix>`` that every worker of the queue shares. Work-queue retention removes a
  message once it is acked, so the stream holds exactly what is still to do.
- Exchanges are kombu's virtual exchanges (direct, topic, fanout); the bindings live in the
  key-value bucket ``<prefix>_bindings``, so a publisher routes by bindings other processes
  declared (fanout copies reach every bound queue; Celery's remote control works). Each
  connection keeps them in memory, current through a watch of the bucket.
- A consumed queue has one pull request open at a time (a thread per queue and channel) for
  the free prefetch room: messages reach the channel as they are stored and ``drain_events``
  waits for them (no polling, no round trip per message). Cancel and close end that pull and
  -NAK what it brought and was not delivered. ``basic_get`` asks for one message (no wait).
- The consumer's settings (ack_wait, max_deliver, max_ack_pending) are those of the processes
  that consume the queue; a producer's declaration never changes them. ``Queue(expires=)``
  (``x-expires``) is the consumer's inactive threshold, and an expired queue's stream and
  bindings are deleted by a periodic check; ``auto_delete`` queues are deleted when their
  consumer is cancelled.
- ack, reject, requeue are +ACK, +TERM, -NAK. A message delivered and not acked comes back
  after ``ack_wait`` once its holder is gone; while the holder lives, the transport sends
  +WPI (in progress) for the messages it holds, so a long task is not delivered twice.
- The stream and consumer calls raise jssync errors: :attr:`Transport.connection_errors`
  and :attr:`Transport.channel_errors` sort them for kombu's retry logic.

Transport options (``transport_options`` / Celery's ``broker_transport_options``):
``subject_prefix`` (default ``"kombu"``), ``storage`` (``"file"`` or ``"memory"``),
``replicas`` (1), ``ack_wait`` (seconds, 1800), ``max_deliver`` (-1: no limit),
``max_ack_pending`` (-1: no limit), ``fetch_batch`` (most messages one pull asks for, and
the most a consumed queue holds received and not delivered; always within the free prefetch
room; 100), ``keepalive`` (send in-progress for held messages; True), ``expires_check`` (seconds between
checks for queues whose ``x-expires`` passed; 10), ``polling_interval``
(accepted for compatibility, unused: consumed queues wait on an open pull), ``connect_options``
(a dict passed to :func:`jssync.connect`: ``creds``, ``nkeys_seed``, ``token``, ``tls``,
``name``, ...).

Importing this module registers the URL schemes ``jssync`` and ``nats`` with kombu (only where
kombu has no transport of that name), so ``jssync://host:4222`` URLs work after the import
and kombu's failover switch between ``nats://`` alternates finds this transport.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import json
import logging
import math
import os
import re
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from importlib import metadata
from queue import Empty
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.transport.base import to_rabbitmq_queue_arguments
from kombu.transport.virtual.base import BrokerState
from nats.js import api

from .base.errors import (
    APIError,
    ConnectionClosedError,
    ConsumerDeletedError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    Error,
    NoRespondersError,
    NoServersError,
    ReconnectBufferExceededError,
    ServiceUnavailableError,
    StreamNameInUseError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from .core.connection import Connection, connect
from .core.msg import Msg
from .jetstream.consumers import Consumer
from .jetstream.context import JetStream
from .kv.errors import (
    BucketExistsError,
    BucketNotFoundError,
    KeyValueError,
)
from .kv.keyvalue import KeyValue, KeyValueOp

__all__ = ["Channel", "QoS", "Transport"]

logger = logging.getLogger("jssync")

DEFAULT_PORT = 4222
#: seconds a get waits for a message this channel put or requeued, when a no-wait pull found none
UNSEEN_WAIT = 1.0

#: transport options and their defaults
DEFAULT_OPTIONS: dict[str, Any] = {
    "subject_prefix": "kombu",
    "storage": "file",
    "replicas": 1,
    "ack_wait": 1800.0,
    "max_deliver": -1,
    "max_ack_pending": -1,
    "fetch_batch": 100,
    "keepalive": True,
    "polling_interval": 0.1,
    "expires_check": 10.0,
    "connect_options": {},
}

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def escape(name: str) -> str:
    """``name`` as one subject, stream-name and key token: ``[A-Za-z0-9-]`` kept, every other
    byte (``_`` too) written ``_xx``; ``""`` is ``"_"``. Different names give different tokens."""
    if not name:
        return "_"
    out = []
    for ch in name:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out)


def unescape(token: str) -> str:
    """The name :func:`escape` made ``token`` from."""
    if token == "_":
        return ""
    raw = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            raw.append(int(token[i + 1:i + 3], 16))
            i += 3
        else:
            raw.extend(token[i].encode("ascii"))
            i += 1
    return raw.decode("utf-8")


def _options(raw: dict[str, Any]) -> dict[str, Any]:
    """The transport options with defaults filled in, checked; raises ValidationError naming a bad one."""
    opts = dict(DEFAULT_OPTIONS)
    opts.update({k: v for k, v in raw.items() if k in DEFAULT_OPTIONS})
    prefix = opts["subject_prefix"]
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise ValidationError(f"subject_prefix {prefix!r}: need subject tokens of A-Z a-z 0-9 _ - joined by dots")
    if opts["storage"] not in ("file", "memory"):
        raise ValidationError(f"storage {opts['storage']!r}: need 'file' or 'memory'")
    for name in ("replicas", "fetch_batch"):
        if not isinstance(opts[name], int) or isinstance(opts[name], bool) or opts[name] < 1:
            raise ValidationError(f"{name} {opts[name]!r}: need an int >= 1")
    for name in ("max_deliver", "max_ack_pending"):
        if not isinstance(opts[name], int) or isinstance(opts[name], bool) or opts[name] == 0 or opts[name] < -1:
            raise ValidationError(f"{name} {opts[name]!r}: need -1 (no limit) or an int >= 1")
    for name in ("ack_wait", "polling_interval", "expires_check"):
        value = opts[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValidationError(f"{name} {value!r}: need seconds > 0")
    if not isinstance(opts["connect_options"], dict):
        raise ValidationError(f"connect_options {opts['connect_options']!r}: need a dict of jssync.connect options")
    return opts


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
        self._pullers: dict[str, _Puller] = {}
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
            puller = self._pullers[queue] = _Puller(self, queue)
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

    def _pull_size(self, puller: _Puller) -> int:
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

    def _overbooked(self, arrived: _Puller) -> list[Any]:
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

    def _received(self, puller: _Puller, msg: Msg) -> None:
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


_Channel = Channel

#: most seconds a kombu event loop this transport is registered with waits before it turns
TICK = 0.5
#: seconds one pull request of a consumed queue stays open on the server when nothing comes
PULL_EXPIRES = 5.0
#: the stream metadata key of a queue's ``x-expires`` (milliseconds)
EXPIRES_KEY = "kombu-expires-ms"
#: errors of a pull after which the queue is declared again (deleted by someone, or a
#: failover to a server without it)
_GONE = (StreamNotFoundError, ConsumerNotFoundError, ConsumerDeletedError, NoRespondersError)


class _Puller:
    """Keeps one pull request open for a consumed queue, so messages reach the channel's buffer
    as they are stored, without a round trip per message in ``drain_events``.

    The thread asks for as many messages as :meth:`Channel._pull_size` allows (the free
    prefetch room), waits for room otherwise, and declares the queue again when its stream
    or consumer went away. An error that will not pass by itself (the connection closed,
    a channel error) stops it and is raised by the transport's next ``drain_events``;
    passing ones (a reconnect, a timeout) are retried after a short pause.
    """

    def __init__(self, channel: Channel, queue: str) -> None:
        self.channel = channel
        self.queue = queue
        #: messages asked for by the open pull and not yet received (guarded by channel._lock)
        self.reserved = 0
        self.stopped = False
        #: the pull being sent asked for more than the share a queue added since allows: stop it
        self.resize = False
        self._pull: Any = None  # the open FetchResult (guarded by channel._lock)
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-pull", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the open pull at once (what it still brings is nak'ed) and the thread after it."""
        with self.channel._lock:
            self.stopped = True
            pull = self._pull
        if pull is not None:
            pull.stop()
        self.channel._wake()

    def join(self, timeout: float) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _wait_for_room(self) -> int:
        """Block until a pull may ask for messages; returns how many (0: stopped)."""
        ch = self.channel
        transport = ch.connection
        while True:
            seen = transport.events
            with ch._lock:
                if self.stopped:
                    return 0
                size = ch._pull_size(self)
                if size:
                    self.reserved = size
                    return size
            transport.wait_event(seen, 0.5)

    def _run(self) -> None:
        ch = self.channel
        pause = 0.0
        while True:
            size = self._wait_for_room()
            if not size:
                return
            try:
                pull = ch._consumer(self.queue, consuming=True).fetch(size, expires=PULL_EXPIRES)
                with ch._lock:
                    self._pull = pull
                    stopped = self.stopped or self.resize
                    self.resize = False
                if stopped:
                    pull.stop()
                for msg in pull:
                    ch._received(self, msg)
                error = pull.error
                if error is not None and not self.stopped:
                    logger.debug("kombu transport: a pull of queue %r ended: %s", self.queue, error)
                    pause = min(1.0, pause * 2 or 0.05)
                else:
                    pause = 0.0
            except _GONE:  # declared again by the next pull; a short pause should that keep failing
                ch.connection.forget_queue(self.queue)
                pause = min(1.0, pause * 2 or 0.05)
            except ConnectionClosedError as exc:
                self._fail(exc)
                return
            except Error as exc:
                if not isinstance(exc, ch.connection.connection_errors):  # a channel error: for the caller
                    self._fail(exc)
                    return
                # a timeout, a reconnect under way, no JetStream answering for now: pull again soon
                logger.debug("kombu transport: a pull of queue %r failed: %s", self.queue, exc)
                pause = min(1.0, pause * 2 or 0.05)
            finally:
                with ch._lock:
                    self._pull = None
                    self.reserved = 0
                ch._wake()
            if pause and not self.stopped:
                ch.connection.wait_event(-1, pause)

    def _fail(self, exc: BaseException) -> None:
        """Stop for good: ``exc`` is raised by the next ``drain_events``, and the one after starts
        a new pull thread (which raises in the caller's thread if the queue cannot be declared)."""
        ch = self.channel
        with ch._lock:
            report = not self.stopped
            self.stopped = True
            if ch._pullers.get(self.queue) is self:
                del ch._pullers[self.queue]
        if report:
            logger.warning("kombu transport: the pulls of queue %r stopped: %s", self.queue, exc)
            ch._pull_error = exc
        ch._wake()


class _Sweeper:
    """Every ``expires_check`` seconds, deletes the expired queues of the transport's prefix
    (:meth:`Transport.delete_expired_queues`); a daemon thread of the connection."""

    def __init__(self, transport: Transport) -> None:
        self._owner = transport
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-expires", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = float(self._owner.options["expires_check"])
        while not self._stop.wait(interval):
            try:
                self._owner.delete_expired_queues()
            except Error as exc:  # not connected now, a timeout: the next round tries again
                logger.debug("kombu transport: the check for expired queues failed: %s", exc)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class _BindingsCache:
    """The bindings of the key-value bucket, kept current by a watch of the whole bucket.

    A daemon thread reads the watch and applies every put and delete, so a publish through an
    exchange routes from memory instead of listing the bucket. Other processes' changes are seen
    as soon as the watch delivers them (a round trip after they were stored); this process's own
    changes are applied at once (:meth:`note`). The watch re-creates its consumer after a
    reconnect or a gap; when it fails for good, :attr:`usable` turns False and the transport
    lists the bucket again (and starts a new cache).
    """

    def __init__(self, kv: KeyValue) -> None:
        self._lock = threading.Lock()
        #: key -> (revision, bound); a deleted key stays as (revision, False) so an older
        #: entry arriving later does not bring it back
        self._keys: dict[str, tuple[int, bool]] = {}
        #: escaped exchange -> {key: (routing key, queue)} of the keys bound now
        self._routes: dict[str, dict[str, tuple[str, str]]] = {}
        self._ready = threading.Event()
        self._failed = False
        self._stop = threading.Event()
        self._watcher = kv.watch(">")
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-bindings", daemon=True)
        self._thread.start()

    @property
    def usable(self) -> bool:
        """The initial bindings were read and the watch still runs."""
        return self._ready.is_set() and not self._failed and not self._stop.is_set()

    @property
    def failed(self) -> bool:
        return self._failed

    def wait_ready(self, timeout: float) -> bool:
        """Block until the initial bindings were read (at most ``timeout`` s, in short slices)."""
        end = time.monotonic() + timeout
        while not self._ready.is_set() and not self._failed and not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            self._ready.wait(min(left, 0.1))
        return self.usable

    def routes(self, exchange: str) -> list[tuple[str, str]]:
        """(routing key, queue) of every binding of ``exchange`` stored in the bucket."""
        with self._lock:
            return list(self._routes.get(escape(exchange), {}).values())

    def note(self, key: str, revision: int, bound: bool) -> None:
        """Apply a change to ``key`` at ``revision`` unless a newer one was applied already."""
        parts = key.split(".")
        if len(parts) != 3:
            return
        ex, q, rk = parts
        with self._lock:
            old = self._keys.get(key)
            if old is not None and old[0] >= revision:
                return
            self._keys[key] = (revision, bound)
            if bound:
                self._routes.setdefault(ex, {})[key] = (unescape(rk), unescape(q))
            else:
                table = self._routes.get(ex)
                if table is not None:
                    table.pop(key, None)
                    if not table:
                        del self._routes[ex]

    def forget(self, key: str) -> None:
        """Drop ``key`` now (this process deleted it; the watch confirms with the revision)."""
        parts = key.split(".")
        with self._lock:
            old = self._keys.get(key)
            self._keys[key] = (old[0] if old else 0, False)
            table = self._routes.get(parts[0])
            if table is not None:
                table.pop(key, None)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    entry = self._watcher.next(timeout=0.5)
                except TimeoutError:
                    continue
                if entry is None:
                    self._ready.set()
                    continue
                self.note(entry.key, entry.revision, entry.operation == KeyValueOp.PUT)
        except StopIteration:
            pass
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to listing the bucket
            logger.warning("kombu transport: the bindings watch stopped (%s); listing the bucket instead", exc)
        finally:
            if not self._stop.is_set():
                self._failed = True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and its thread (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        try:
            self._watcher.stop()
        except Error as exc:
            logger.debug("kombu transport: stopping the bindings watch: %s", exc)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class Transport(virtual.Transport):
    """kombu transport on one jssync connection (its own I/O thread); see the module docs."""

    Channel = Channel
    driver_type = "nats"
    driver_name = "jssync"
    can_parse_url = True
    polling_interval = 0.1

    implements = virtual.Transport.implements.extend(
        asynchronous=True,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )

    #: errors a reconnect can cure: kombu reconnects and retries on these
    connection_errors = (  # type: ignore[assignment]  # kombu types it as a 1-tuple
        *virtual.Transport.connection_errors,
        ConnectionClosedError,
        NoServersError,
        TimeoutError,
        ServiceUnavailableError,
        NoRespondersError,
        ReconnectBufferExceededError,
        socket.error,
    )
    #: errors of one call (bad request, missing stream, refused config, message too big)
    channel_errors = (  # type: ignore[assignment]  # kombu types it as a 1-tuple
        *virtual.Transport.channel_errors, APIError, ValidationError, KeyValueError)
    #: what kombu's ``ensure`` (publish retry, ``ensure_connection``) reconnects and retries on;
    #: without these kombu would also reconnect on every channel error and try again once
    recoverable_connection_errors = connection_errors
    #: a channel error is raised as is: trying the same call again would fail the same way
    recoverable_channel_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, client: Any, **kwargs: Any) -> None:
        self.options = _options(client.transport_options or {})
        super().__init__(client, **kwargs)
        self.state = BrokerState()
        if "polling_interval" not in (client.transport_options or {}):
            self.polling_interval = self.options["polling_interval"]
        self._nc: Connection | None = None
        self._js: JetStream | None = None
        self._kv: KeyValue | None = None
        self._cache: _BindingsCache | None = None
        self._cache_retry_at = 0.0
        self._cache_lock = threading.Lock()
        self._declare_lock = threading.Lock()
        #: queue -> its durable consumer, for queues declared on this connection
        self.consumers: dict[str, Consumer] = {}
        #: queues whose consumer this connection set to its own settings (it consumes them)
        self.configured: set[str] = set()
        #: queue -> the x- arguments it was declared with here, for declaring it again
        self.queue_arguments: dict[str, dict[str, Any]] = {}
        self._sweeper: _Sweeper | None = None
        #: bumped (and waiters woken) on every arrival, ack, reject, prefetch or pull change
        self.events = 0
        self._events_cond = threading.Condition(threading.Lock())
        #: the pipe a kombu event loop reads (register_with_event_loop); None until then
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        #: the event loop's periodic timer (register_with_event_loop); None until then
        self._tick: Any = None

    # -- events: arrivals and freed prefetch room ----------------------------------------------

    def wake(self) -> None:
        """Count an event and wake every thread waiting in :meth:`wait_event` (and a kombu
        event loop this transport is registered with)."""
        with self._events_cond:
            self.events += 1
            self._events_cond.notify_all()
        fd = self._wake_w
        if fd is not None:
            try:
                os.write(fd, b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed meanwhile
                pass

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Let a kombu event loop (``kombu.asynchronous.Hub``) deliver this transport's messages:
        a pipe the transport writes to on every arrival, ack or freed prefetch room is a reader
        of the loop, and its callback delivers what is ready without blocking."""
        if self._wake_r is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake_r, self._wake_w = r, w
        loop.add_reader(self._wake_r, self._on_wake, connection)
        loop.call_soon(self._deliver_ready, connection)  # starts the pulls of consumed queues
        # a timer, so the loop's poll never sleeps longer than TICK: Celery sees a warm
        # shutdown (SIGTERM) only when its loop turns, and a poll with no timer due waits on
        # (without it a prefork worker took 3.5-4 s after SIGTERM to start shutting down)
        if self._tick is not None:
            self._tick.cancel()
        self._tick = loop.call_repeatedly(TICK, self._deliver_ready, connection)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.cancel()
        if self._wake_r is not None:
            loop.remove_reader(self._wake_r)
        self._close_wake_pipe()

    def _close_wake_pipe(self) -> None:
        r, w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, None, None
        for fd in (w, r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _on_wake(self, connection: Any) -> None:
        fd = self._wake_r
        if fd is not None:
            try:
                while os.read(fd, 4096):
                    pass
            except OSError:  # emptied (BlockingIOError) or closed
                pass
        self._deliver_ready(connection)

    def _deliver_ready(self, connection: Any) -> None:
        """Deliver what is ready now (at most 100 messages), never waiting."""
        for _ in range(100):
            try:
                self.drain_events(connection, timeout=0)
            except builtins.TimeoutError:
                return

    def wait_event(self, seen: int, timeout: float) -> None:
        """Block until :attr:`events` differs from ``seen``, at most ``timeout`` s (``seen=-1``:
        just the pause, ended early only by a wake)."""
        with self._events_cond:
            if self.events == seen or seen < 0:
                self._events_cond.wait(timeout)

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """Deliver one message to its consumer's callback; blocks until one is there.

        Messages of consumed queues arrive through each queue's open pull (see
        :class:`_Puller`), so this waits for an arrival or freed prefetch room instead of
        polling. Raises ``socket.timeout`` (``TimeoutError``) after ``timeout`` s with nothing to
        deliver, and what stopped a pull thread for good (the connection closed, a channel error).
        """
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self.events
            for channel in self.channels:
                exc = getattr(channel, "_pull_error", None)
                if exc is not None:
                    channel._pull_error = None
                    raise exc
            cycle = self.cycle
            if cycle is None:
                raise ConnectionClosedError("the kombu transport is closed")
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            if left <= 0:
                raise builtins.TimeoutError("no message within the timeout")  # socket.timeout
            self.wait_event(seen, left)

    # -- connection ---------------------------------------------------------------------------

    @property
    def _client(self) -> Any:
        """The kombu Connection this transport serves; ConnectionClosedError once it let go of it."""
        if self.client is None:
            raise ConnectionClosedError("the kombu connection of this transport was closed")
        return self.client

    def servers(self) -> list[str]:
        """The URLs to connect to: the current one first, then kombu's alternates."""
        hosts = [self._client.hostname or "127.0.0.1"]
        hosts += [alt for alt in self._client.alt or [] if isinstance(alt, str)]
        out: list[str] = []
        for host in hosts:
            for one in host.split(","):  # "nats://a:4222,nats://b:4222" is one kombu host
                url = self._url(one.strip(), self._client.port if not out else None)
                if url not in out:
                    out.append(url)
        return out

    def _url(self, host: str, port: int | None) -> str:
        if "://" in host:
            scheme, rest = host.split("://", 1)
            if scheme == "jssync":
                scheme = "nats"
            return f"{scheme}://{rest}"
        return f"nats://{host}:{port or DEFAULT_PORT}"

    def _tls(self) -> ssl.SSLContext | None:
        value = self._client.ssl
        if not value:
            return None
        if isinstance(value, ssl.SSLContext):
            return value
        ctx = ssl.create_default_context(cafile=value.get("ca_certs")) if isinstance(value, dict) \
            else ssl.create_default_context()
        if isinstance(value, dict):
            if value.get("certfile"):
                ctx.load_cert_chain(value["certfile"], value.get("keyfile"))
            if value.get("cert_reqs") == ssl.CERT_NONE:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def establish_connection(self) -> Transport:
        """Connect to NATS (all URLs kombu knows; jssync fails over between them) and check JetStream.

        Blocks up to the connection's ``connect_timeout``. Raises one of :attr:`connection_errors`
        (``jssync.NoServersError`` when no server answers).
        """
        if self._nc is None or self._nc.is_closed:
            opts: dict[str, Any] = {"name": f"kombu-{socket.gethostname()}"}
            if self._client.userid:
                opts["user"] = self._client.userid
                opts["password"] = self._client.password
            tls = self._tls()
            if tls is not None:
                opts["tls"] = tls
            if self._client.connect_timeout:
                opts["timeout"] = float(self._client.connect_timeout)
            opts.update(self.options["connect_options"])
            nc = connect(self.servers(), **opts)
            try:
                js = nc.jetstream()
                js.account_info()
            except BaseException:
                nc.close()
                raise
            self._stop_cache()
            self._stop_sweeper()
            self._nc, self._js = nc, js
            self._kv = None
            self._sweeper = _Sweeper(self)
            self.consumers.clear()
            self.configured.clear()
        super().establish_connection()
        return self

    def close_connection(self, connection: Any) -> None:
        """Close the channels (-NAK what they hold), then the NATS connection (flushes acks)."""
        try:
            super().close_connection(connection)
        finally:
            self._close_wake_pipe()
            self._stop_cache()
            self._stop_sweeper()
            nc, self._nc, self._js, self._kv = self._nc, None, None, None
            if nc is not None:
                nc.close()

    def verify_connection(self, connection: Any) -> bool:
        return self._nc is not None and self._nc.is_connected

    def driver_version(self) -> str:
        try:
            return metadata.version("jssync")
        except metadata.PackageNotFoundError:
            return "unknown"

    @property
    def js(self) -> JetStream:
        if self._js is None:
            raise ConnectionClosedError("the kombu transport is not connected")
        return self._js

    # -- shared state: queues and bindings -----------------------------------------------------

    def forget_queue(self, queue: str) -> None:
        """Drop what this connection knows of ``queue``'s consumer (gone, or the queue deleted)."""
        self.consumers.pop(queue, None)
        self.configured.discard(queue)

    def declare_queue(self, queue: str, arguments: dict[str, Any], channel: _Channel, *,
                      consuming: bool = False) -> None:
        """Create ``queue``'s stream and durable consumer unless they exist; remember the consumer.

        ``arguments["x-message-ttl"]`` (milliseconds, kombu's ``Queue(message_ttl=...)``) becomes
        the stream's max age, ``x-max-length`` / ``x-max-length-bytes`` its ``max_msgs`` /
        ``max_bytes`` (the oldest messages are dropped), ``x-expires`` (``Queue(expires=...)``)
        the consumer's ``inactive_threshold``: once nobody has pulled from the queue for that
        long the server drops its consumer, and a connection's periodic check then deletes the
        stream and its bindings. ``arguments`` empty: those this connection declared it with.

        The consumer settings (``ack_wait``, ``max_deliver``, ``max_ack_pending``) belong to the
        processes that consume the queue: only a declaration with ``consuming`` (a consumer of
        this connection starts) writes this process's settings over existing ones; any other
        one (a producer's, ``basic_get``) creates the consumer when it is missing and leaves an
        existing one as it is. Blocks on up to three JetStream API calls.
        """
        if arguments:
            self.queue_arguments[queue] = dict(arguments)
        else:
            arguments = self.queue_arguments.get(queue, {})
        opts = self.options
        name = channel.stream_name(queue)
        config = api.StreamConfig(
            name=name,
            subjects=[channel.subject(queue)],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType(opts["storage"]),
            num_replicas=opts["replicas"],
            allow_msg_ttl=True,
            description=f"kombu queue {queue}",
        )
        if arguments.get("x-message-ttl") is not None:
            config.max_age = float(arguments["x-message-ttl"]) / 1000
        if arguments.get("x-max-length") is not None:
            config.max_msgs = int(arguments["x-max-length"])  # the oldest go first, as in AMQP
        if arguments.get("x-max-length-bytes") is not None:
            config.max_bytes = int(arguments["x-max-length-bytes"])
        expires: float | None = None
        if arguments.get("x-expires") is not None:
            try:
                expires = float(arguments["x-expires"]) / 1000
            except (TypeError, ValueError):
                raise ValidationError(f"queue {queue!r} x-expires {arguments['x-expires']!r}: "
                                      "need milliseconds") from None
            if not expires > 0:
                raise ValidationError(f"queue {queue!r} x-expires {arguments['x-expires']!r}: need milliseconds > 0")
            config.metadata = {EXPIRES_KEY: str(int(expires * 1000))}
        with self._declare_lock:
            try:
                self.js.create_stream(config)
            except StreamNameInUseError:
                pass
            cconfig = api.ConsumerConfig(
                durable_name=channel.consumer_name,
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=float(opts["ack_wait"]),
                max_deliver=opts["max_deliver"],
                max_ack_pending=opts["max_ack_pending"],
                inactive_threshold=expires,
            )
            if consuming:
                self.consumers[queue] = self.js.create_or_update_consumer(name, cconfig)
                self.configured.add(queue)
                return
            try:
                self.consumers[queue] = self.js.consumer(name, channel.consumer_name)
                return
            except ConsumerNotFoundError:
                pass
            try:
                self.consumers[queue] = self.js.create_consumer(name, cconfig)
            except ConsumerExistsError:  # made meanwhile, by another process, with its settings
                self.consumers[queue] = self.js.consumer(name, channel.consumer_name)

    def bindings(self) -> KeyValue:
        """The key-value bucket of bindings (``<exchange>.<queue>.<routing key>``, escaped)."""
        if self._kv is None:
            bucket = f"{self.options['subject_prefix'].replace('.', '_')}_bindings"
            try:
                self._kv = self.js.key_value(bucket)
            except BucketNotFoundError:
                try:
                    self._kv = self.js.create_key_value(bucket=bucket, history=1, storage=self.options["storage"],
                                                        replicas=self.options["replicas"])
                except BucketExistsError:
                    self._kv = self.js.key_value(bucket)
        return self._kv

    def delete_bindings(self, queue: str) -> None:
        """Remove every stored binding of ``queue`` (one listing, one delete per binding)."""
        kv = self.bindings()
        for key in kv.keys(f"*.{escape(queue)}.*"):
            self._forget(key)
            kv.delete(key)

    def store_binding(self, exchange: str, queue: str, routing_key: str) -> None:
        """Store the binding in the bucket (blocks until stored); this process's cache has it at once."""
        key = f"{escape(exchange)}.{escape(queue)}.{escape(routing_key)}"
        revision = self.bindings().put(key, b"")
        cache = self._cache
        if cache is not None:
            cache.note(key, revision, True)

    def remove_binding(self, exchange: str, queue: str, routing_key: str) -> None:
        """Delete the binding from the bucket (blocks until stored); gone from this process's cache first."""
        key = f"{escape(exchange)}.{escape(queue)}.{escape(routing_key)}"
        self._forget(key)
        self.bindings().delete(key)

    def _forget(self, key: str) -> None:
        cache = self._cache
        if cache is not None:
            cache.forget(key)

    def stored_bindings(self, exchange: str, *, fresh: bool = False) -> list[tuple[str, str]]:
        """(routing key, queue) of the bindings of ``exchange`` in the bucket, every process's.

        From the cache a watch of the bucket keeps current; the first call starts it and waits
        for the initial bindings (at most 5 s). While no cache is usable (not
        ready, its watch failed), or with ``fresh``, the bucket is listed instead (one listing,
        about 1-2 ms).
        """
        cache = None if fresh else self._bindings_cache()
        if cache is not None:
            return cache.routes(exchange)
        out = []
        for key in self.bindings().keys(f"{escape(exchange)}.*.*"):
            _, q, rk = key.split(".")
            out.append((unescape(rk), unescape(q)))
        return out

    def _bindings_cache(self) -> _BindingsCache | None:
        cache = self._cache
        if cache is not None and cache.usable:
            return cache
        if not self._cache_lock.acquire(blocking=False):
            return None  # another thread is starting it: list the bucket this once
        try:
            cache = self._cache
            if cache is not None and not cache.failed:
                return cache if cache.wait_ready(5.0) else None
            now = time.monotonic()
            if now < self._cache_retry_at:
                return None
            self._cache_retry_at = now + 5.0
            if cache is not None:
                cache.stop()
            self._cache = None
            try:
                cache = self._cache = _BindingsCache(self.bindings())
            except Error as exc:  # no watch now: list the bucket, try again in 5 s
                logger.warning("kombu transport: no watch of the bindings bucket (%s); listing it instead", exc)
                return None
            return cache if cache.wait_ready(5.0) else None
        finally:
            self._cache_lock.release()

    def _stop_sweeper(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop()

    def delete_expired_queues(self) -> list[str]:
        """Delete the queues of this prefix declared with ``x-expires`` whose consumer the server
        dropped (nobody pulled from them for that long): their streams and bindings. Returns
        their names. Blocks on one listing plus a lookup per such queue (and the deletes).
        A queue created less than its ``x-expires`` ago is kept (its declaration may be under way)."""
        prefix = str(self.options["subject_prefix"])
        durable = prefix.replace(".", "_")
        now = time.time()
        gone = []
        for info in list(self.js.streams(subject=f"{prefix}.q.*")):
            cfg = info.config
            expires_ms = (cfg.metadata or {}).get(EXPIRES_KEY)
            if expires_ms is None or cfg.name is None or not cfg.name.startswith(f"{durable}_"):
                continue
            created = _timestamp(info.created)
            if created is not None and now - created < float(expires_ms) / 1000:
                continue
            try:
                self.js.consumer(cfg.name, durable)
                continue
            except ConsumerNotFoundError:
                pass
            except StreamNotFoundError:
                continue
            try:
                queue = unescape(cfg.name[len(durable) + 1:])
            except (ValueError, UnicodeDecodeError):
                continue
            self.delete_bindings(queue)
            self.state.queue_bindings_delete(queue)
            self.forget_queue(queue)
            try:
                self.js.delete_stream(cfg.name)
            except StreamNotFoundError:
                continue  # another connection deleted it first
            logger.info("kombu transport: queue %r expired (unused for %s ms): deleted", queue, expires_ms)
            gone.append(queue)
        return gone

    def _stop_cache(self) -> None:
        cache, self._cache = self._cache, None
        self._cache_retry_at = 0.0
        if cache is not None:
            cache.stop()


def _timestamp(value: Any) -> float | None:
    """Seconds since the epoch of a stream's ``created`` (a datetime or an RFC 3339 string)."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        from datetime import datetime

        text = str(value)
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        head, _, tail = text.partition(".")
        if tail:  # fractions beyond microseconds: cut to six digits
            digits = "".join(itertools.takewhile(str.isdigit, tail))
            text = f"{head}.{digits[:6]}{tail[len(digits):]}"
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _register_aliases() -> None:
    # kombu has no registration API; only names kombu itself does not use are added
    for scheme in ("jssync", "nats"):
        TRANSPORT_ALIASES.setdefault(scheme, "jssync.kombu:Transport")


_register_aliases()
