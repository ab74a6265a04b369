"""Dead letters: a message whose deliveries reached the queue's ``max_deliver`` is moved to a queue of its own.

Without this, JetStream stops delivering such a message and it stays in its work-queue stream
for good (nobody acks it). With the transport option ``dead_letter_queue``, each connection
listens to the server's advisory ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>``
for the queues of its prefix, copies the message into the dead-letter queue (its kombu payload,
with the headers ``x-first-death-queue`` and ``x-delivery-count``) and then deletes it from its
queue. The copy is published with ``Nats-Msg-Id`` ``<stream>:<sequence>``, so several
connections hearing the same advisory store it once (within the stream's duplicate window).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    ConnectionClosedError,
    Error,
    MessageNotFoundError,
    StreamNotFoundError,
    SubscriptionClosedError,
    TimeoutError,
)
from .names import unescape

if TYPE_CHECKING:
    from ..core.connection import Connection
    from .channel import Channel
    from .transport import Transport

logger = logging.getLogger("jssync")

#: the subject prefix of the server's advisory for a message that reached max_deliver
MAX_DELIVERIES_ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"


class DeadLetters:
    """A daemon thread that moves the messages of this prefix's queues that reached
    ``max_deliver`` into the ``dead_letter_queue`` (one per connection)."""

    def __init__(self, transport: Transport, nc: Connection) -> None:
        self._owner = transport
        self.queue = str(transport.options["dead_letter_queue"])
        self._durable = str(transport.options["subject_prefix"]).replace(".", "_")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: the channel dead letters are declared and published through (made on the first one)
        self._channel: Channel | None = None
        #: messages moved so far (for tests and logs)
        self.moved = 0
        self._sub = nc.subscribe(f"{MAX_DELIVERIES_ADVISORY}.*.{self._durable}")
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-dead-letters", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._sub.next_msg(timeout=0.5)
            except TimeoutError:
                continue
            except (SubscriptionClosedError, ConnectionClosedError):
                return
            try:
                advisory = json.loads(msg.data)
            except ValueError:
                continue
            try:
                self.move(advisory)
            except Error as exc:
                logger.warning("kombu transport: a message of stream %r that reached max_deliver was not "
                               "moved to the dead-letter queue %r: %s", advisory.get("stream"), self.queue, exc)

    def move(self, advisory: dict[str, Any]) -> bool:
        """Copy the message the advisory names into the dead-letter queue, then delete it from
        its queue; False when it is not one of this prefix's queues or is gone already. Blocks
        on a read, a publish (and a declaration of the dead-letter queue the first time) and a delete."""
        stream, seq = advisory.get("stream"), advisory.get("stream_seq")
        if not isinstance(stream, str) or not isinstance(seq, int) or not stream.startswith(f"{self._durable}_"):
            return False
        try:
            queue = unescape(stream[len(self._durable) + 1:])
        except (ValueError, UnicodeDecodeError):
            return False
        if queue == self.queue:
            return False  # the dead letters' own max_deliver: they stay where they are
        transport = self._owner
        js = transport.js
        try:
            stored = js.stream(stream).get_msg(seq)
        except (MessageNotFoundError, StreamNotFoundError):
            return False  # moved by another connection, or the queue was deleted
        try:
            payload = json.loads(stored.data)
        except ValueError:
            logger.warning("kombu transport: message %d of stream %r is no kombu message: left there", seq, stream)
            return False
        headers = payload.get("headers")
        if not isinstance(headers, dict):
            headers = payload["headers"] = {}
        headers["x-first-death-queue"] = queue
        headers["x-delivery-count"] = advisory.get("deliveries")
        self._publish(json.dumps(payload).encode("utf-8"), msg_id=f"{stream}:{seq}")
        try:
            js.stream(stream).delete_msg(seq)
        except (MessageNotFoundError, StreamNotFoundError):
            pass
        self.moved += 1
        logger.info("kombu transport: message %d of queue %r reached max_deliver (%s deliveries): moved to %r",
                    seq, queue, advisory.get("deliveries"), self.queue)
        return True

    def _publish(self, data: bytes, *, msg_id: str) -> None:
        """Store ``data`` in the dead-letter queue, declared first if this connection has not
        (blocks on the declaration and the publish; raises what they raise)."""
        transport = self._owner
        with self._lock:
            channel = self._channel
            if channel is None:
                channel = self._channel = transport.create_channel(transport)
        if self.queue not in transport.consumers:
            transport.declare_queue(self.queue, {}, channel)
        transport.js.publish(channel.subject(self.queue), data, msg_id=msg_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and the thread (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        try:
            self._sub.unsubscribe()
        except Error as exc:
            logger.debug("kombu transport: dead-letter subscription: %s", exc)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
