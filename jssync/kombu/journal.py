"""The acks a connection sent lately, sent again after a reconnect."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from ..base.errors import (
    ConsumerNotFoundError,
    Error,
    StreamNotFoundError,
)
from ..core.connection import Connection
from ..jetstream.context import JetStream

logger = logging.getLogger("jssync")

#: seconds before a lost link was noticed in which an ack, reject or requeue sent may not have
#: reached the server (a server going down does not read what is left in its socket): those,
#: and those sent while the link was down, are sent again after the reconnect
RESEND_WINDOW = 5.0
#: the most acks kept for that (the newest)
RESEND_MAX = 100_000


class AckJournal:
    """The acks, rejects and requeues a connection sent lately (the transport's, and the naks
    of messages that reached a pull already given up), sent again after a reconnect.

    A server that goes down (a restart, a crash) never reads what is left in its socket, and
    the client notices the lost link only after it wrote there: acks sent in the last moments
    before (measured: all those of the 30-40 ms before a restart) are lost, and the restarted
    server holds their messages ack-pending until ``ack_wait`` (then delivers them again).
    So every ack sent within :data:`RESEND_WINDOW` seconds before the link was noticed lost,
    or while it was down, is published again once the connection is back and the consumer
    it belongs to answers (a daemon thread does that, off the I/O thread). An ack of a message
    the server already removed is ignored by it; a -NAK sent again can at worst make a message
    the server redelivered meanwhile come once more (at-least-once, as any redelivery).
    """

    def __init__(self, nc: Connection, js: JetStream) -> None:
        self._nc = nc
        self._js = js
        self._lock = threading.Lock()
        #: (monotonic time, reply subject, payload) of the acks sent, oldest first
        self._sent: deque[tuple[float, str, bytes]] = deque(maxlen=RESEND_MAX)
        #: when the current outage was noticed (None: connected)
        self._down_at: float | None = None
        #: acks to send again, taken by the thread
        self._todo: list[tuple[str, bytes]] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        #: acks sent again so far (for tests and logs)
        self.resent = 0
        internal = nc.internal
        internal.disconnect_listeners.append(self._on_disconnect)
        internal.reconnect_listeners.append(self._on_reconnect)
        internal.set_ack_hook(self.note)  # every ack of the connection: the pulls' own naks too
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-resend", daemon=True)
        self._thread.start()

    def note(self, reply: str, payload: bytes) -> None:
        """Remember an ack just queued on ``reply`` (the connection's ack hook: any thread,
        the I/O thread too; cheap)."""
        now = time.monotonic()
        with self._lock:
            sent = self._sent
            sent.append((now, reply, payload))
            if self._down_at is None:
                horizon = now - RESEND_WINDOW
                while sent and sent[0][0] < horizon:
                    sent.popleft()

    def _on_disconnect(self) -> None:  # a listener: on the I/O thread
        with self._lock:
            if self._down_at is None:
                self._down_at = time.monotonic()

    def _on_reconnect(self) -> None:  # a listener: on the I/O thread
        with self._lock:
            down_at, self._down_at = self._down_at, None
            if down_at is None:
                return
            horizon = down_at - RESEND_WINDOW
            self._todo.extend((reply, payload) for t, reply, payload in self._sent if t >= horizon)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            with self._lock:
                todo, self._todo = self._todo, []
            if todo:
                self._resend(todo)

    def _resend(self, todo: list[tuple[str, bytes]]) -> None:
        """Publish ``todo`` again, per consumer once it answers (it may be loading after a
        restart; an ack reaching the server before the consumer does is dropped)."""
        groups: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
        for reply, payload in todo:
            tokens = reply.split(".")
            # $JS.ACK.<stream>.<consumer>.<...> or $JS.ACK.<domain>.<account>.<stream>.<consumer>.<...>
            key = (tokens[4], tokens[5]) if len(tokens) >= 12 else (tokens[2], tokens[3])
            groups.setdefault(key, []).append((reply, payload))
        for (stream, consumer), acks in groups.items():
            end = time.monotonic() + 30.0
            while not self._stop.is_set():
                try:
                    self._js.consumer(stream, consumer, timeout=2.0)
                    break
                except (StreamNotFoundError, ConsumerNotFoundError):
                    acks = []  # gone: nothing holds those messages any more
                    break
                except Error as exc:
                    if time.monotonic() > end or self._nc.is_closed:
                        logger.warning("kombu transport: %d acks of consumer %r on stream %r not sent "
                                       "again after a reconnect (%s): their messages come back after "
                                       "ack_wait", len(acks), consumer, stream, exc)
                        acks = []
                        break
                    self._stop.wait(0.2)
            now = time.monotonic()
            for reply, payload in acks:
                try:
                    self._nc.publish(reply, payload)
                except Error as exc:
                    logger.debug("kombu transport: an ack not sent again: %s", exc)
                    return
                with self._lock:
                    self._sent.append((now, reply, payload))  # should the server go down again at once
            self.resent += len(acks)
            if acks:
                logger.debug("kombu transport: sent %d acks of %r again after a reconnect", len(acks), consumer)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and the listening (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        self._wake.set()
        internal = self._nc.internal
        internal.set_ack_hook(None)
        for lst, fn in ((internal.disconnect_listeners, self._on_disconnect),
                        (internal.reconnect_listeners, self._on_reconnect)):
            try:
                lst.remove(fn)
            except ValueError:
                pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
