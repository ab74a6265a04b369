"""Dead letters: a message whose deliveries reached the queue's ``max_deliver`` is moved to a queue of its own.

Without this, JetStream stops delivering such a message and it stays in its work-queue stream
for good (nobody acks it). With the transport option ``dead_letter_queue``, each connection
listens to the server's advisory ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>``
for the queues of its prefix, in a queue group, so one connection of the prefix gets each
advisory; it copies the message into the dead-letter queue (its kombu payload, with the
headers ``x-first-death-queue`` and ``x-delivery-count``) and then deletes it from its queue.
A move that fails (a timeout, a leader election) is tried again with a backoff (0.2 s doubling
to 10 s, :data:`MOVE_ATTEMPTS` tries), then given up with an error log. The copy is published
with ``Nats-Msg-Id`` ``<stream>:<stream created>:<sequence>``, so a move done twice stores one
copy (within the stream's duplicate window), while a queue deleted and declared again (its
sequences start at 1 again) never has a new message taken for an old one. An advisory that is
not a JSON object naming a stream and a sequence is logged and skipped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..base.backoff import Backoff
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
#: how many times a move is tried before it is given up (logged as an error)
MOVE_ATTEMPTS = 10
#: the waits between the tries of a move
MOVE_BACKOFF = Backoff(0.2, 10.0, jitter=0.5)


class DeadLetters:
    """A daemon thread that moves the messages of this prefix's queues that reached
    ``max_deliver`` into the ``dead_letter_queue`` (one per connection; the connections of a
    prefix share the advisories in a queue group, so one of them moves each message)."""

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
        #: moves that failed, to try again: [when (monotonic), failures so far, the advisory]
        self._retries: list[tuple[float, int, dict[str, Any]]] = []
        self._sub = nc.subscribe(f"{MAX_DELIVERIES_ADVISORY}.*.{self._durable}",
                                 queue=f"jssync_kombu_dead_letters_{self._durable}")
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-dead-letters", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = 0.5
            if self._retries:
                wait = max(0.0, min(wait, min(r[0] for r in self._retries) - time.monotonic()))
            try:
                msg = self._sub.next_msg(timeout=wait) if wait > 0 else None
            except TimeoutError:
                msg = None
            except (SubscriptionClosedError, ConnectionClosedError):
                return
            if msg is not None:
                advisory = self._parse(msg.data)
                if advisory is not None:
                    self._try(advisory, 0)
            self._retry_due()

    def _parse(self, data: bytes) -> dict[str, Any] | None:
        """The advisory as a dict, or None (logged) when it is no JSON object."""
        try:
            advisory = json.loads(data)
        except (ValueError, RecursionError):
            advisory = None
        if not isinstance(advisory, dict):
            logger.warning("kombu transport: a max_deliver advisory that is no JSON object was skipped: %r",
                           bytes(data[:200]))
            return None
        return advisory

    def _retry_due(self) -> None:
        now = time.monotonic()
        due = [r for r in self._retries if r[0] <= now]
        if not due:
            return
        self._retries = [r for r in self._retries if r[0] > now]
        for _, failures, advisory in due:
            if self._stop.is_set():
                return
            self._try(advisory, failures)

    def _try(self, advisory: dict[str, Any], failures: int) -> None:
        """One try of :meth:`move`; a jssync error schedules another (up to :data:`MOVE_ATTEMPTS`),
        anything else is logged: the thread goes on."""
        try:
            self.move(advisory)
        except Error as exc:
            failures += 1
            if failures < MOVE_ATTEMPTS:
                delay = MOVE_BACKOFF.delay(failures - 1)
                logger.warning("kombu transport: a message of stream %r that reached max_deliver was not moved "
                               "to the dead-letter queue %r (try %d of %d, again in %.1f s): %s",
                               advisory.get("stream"), self.queue, failures, MOVE_ATTEMPTS, delay, exc)
                self._retries.append((time.monotonic() + delay, failures, advisory))
            else:
                logger.error("kombu transport: message %r of stream %r that reached max_deliver was not moved to "
                             "the dead-letter queue %r after %d tries, given up (it stays in its queue): %s",
                             advisory.get("stream_seq"), advisory.get("stream"), self.queue, failures, exc)
        except Exception:
            logger.exception("kombu transport: a max_deliver advisory could not be handled: %r", advisory)

    def move(self, advisory: dict[str, Any]) -> bool:
        """Copy the message the advisory names into the dead-letter queue, then delete it from
        its queue; False when it is not one of this prefix's queues or is gone already. Blocks
        on a stream lookup, a read, a publish (and a declaration of the dead-letter queue the
        first time) and a delete; raises the jssync error of a failed one."""
        stream, seq = advisory.get("stream"), advisory.get("stream_seq")
        if not isinstance(stream, str) or not isinstance(seq, int) or isinstance(seq, bool) or \
                not stream.startswith(f"{self._durable}_"):
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
            st = js.stream(stream)
            stored = st.get_msg(seq)
        except (MessageNotFoundError, StreamNotFoundError):
            return False  # moved by another connection, or the queue was deleted
        try:
            payload = json.loads(stored.data)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            logger.warning("kombu transport: message %d of stream %r is no kombu message: left there", seq, stream)
            return False
        headers = payload.get("headers")
        if not isinstance(headers, dict):
            headers = payload["headers"] = {}
        headers["x-first-death-queue"] = queue
        headers["x-delivery-count"] = advisory.get("deliveries")
        created = st.cached_info.created
        stamp = "" if created is None else created.isoformat()
        self._publish(json.dumps(payload).encode("utf-8"), msg_id=f"{stream}:{stamp}:{seq}")
        try:
            st.delete_msg(seq)
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
        """Stop listening and the thread (joins it, at most ``timeout`` s); moves still waiting
        for another try are dropped (their messages stay in their queues: a warning each). Idempotent."""
        self._stop.set()
        try:
            self._sub.unsubscribe()
        except Error as exc:
            logger.debug("kombu transport: dead-letter subscription: %s", exc)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        pending, self._retries = list(self._retries), []
        for _, failures, advisory in pending:
            logger.warning("kombu transport: message %r of stream %r is left in its queue: its move to the "
                           "dead-letter queue %r failed %d times before the connection closed",
                           advisory.get("stream_seq"), advisory.get("stream"), self.queue, failures)
