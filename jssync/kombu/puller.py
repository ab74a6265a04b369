"""The thread that keeps one pull request open for a consumed queue."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    ConsumerNotFoundError,
    Error,
    NoRespondersError,
    StreamNotFoundError,
)

if TYPE_CHECKING:
    from .channel import Channel



logger = logging.getLogger("jssync")

#: seconds one pull request of a consumed queue stays open on the server when nothing comes
PULL_EXPIRES = 5.0
#: the stream metadata key of a queue's ``x-expires`` (milliseconds)
EXPIRES_KEY = "kombu-expires-ms"
#: errors of a pull after which the queue is declared again (deleted by someone, or a
#: failover to a server without it)
GONE = (StreamNotFoundError, ConsumerNotFoundError, ConsumerDeletedError, NoRespondersError)


class Puller:
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
            except GONE:  # declared again by the next pull; a short pause should that keep failing
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
