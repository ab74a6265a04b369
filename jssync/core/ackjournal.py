"""The +ACK and +TERM acks a connection wrote lately, sent again once after a reconnect.

A nats-server that goes down (a restart, a crash) never reads what is left in its socket, and
the client notices the lost link only after it wrote there (measured: 30-70 ms): the acks
written in that gap are lost, and the restarted server holds their messages ack-pending until
``ack_wait`` (then delivers them again). So every connection keeps the +ACK and +TERM acks
queued within :data:`WINDOW` seconds before the link was noticed lost and publishes them once
more when it is back, for every consumer at once, each once it answers an info request (after
a restart it may still be loading, and an ack reaching the server before its consumer does is
dropped), all within one deadline (:data:`CONSUMER_WAIT`); on a timeout (no permission for
CONSUMER.INFO, say) they are sent anyway.

What is replayed, and what is not:

- +ACK and +TERM only: sent twice they change nothing (the server ignores an ack of a message
  it no longer holds pending). A -NAK or +WPI is never kept: sent again after the server
  redelivered the message, a stale -NAK would make it come once more (the link may drop with
  the server up the whole time). A lost -NAK costs a wait until ``ack_wait`` instead.
- An ack still in the connection's outgoing queue when the link was noticed lost is not kept:
  that queue is written on the reconnect (it never reached the dead socket), so it is not
  sent twice. Nor are the acks queued while the link is down, for the same reason.

The hot path (:meth:`Outbound.send_ack`) does one attribute read and one list append per +ACK
(``self.acks.append(msg.reply)``: the reply subject itself, no tuple; a +TERM appends a
``(reply, payload)`` tuple), on the current bucket, no lock (a list append is atomic).
A timer on the I/O loop starts a new bucket every :data:`BUCKET` seconds, drops those older
than the window and keeps at most :data:`MAX_KEPT` acks (the oldest go first, with a warning
to the ``jssync`` logger the first time); while the link is down each bucket is dropped.
Memory: about 110 bytes per kept ack (its reply subject), so at most ~11 MB per connection at
the cap, ~7 MB at 50k acks/s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("jssync")

#: Acks queued this long before the link was noticed lost are sent again after the reconnect
#: (the gap a stopping server leaves unread is tens of milliseconds; this is 15x that and more).
WINDOW = 1.0
#: How often a new bucket starts (the window's resolution).
BUCKET = 0.25
#: At most this many acks are kept for sending again (the oldest go first).
MAX_KEPT = 100_000
#: How long the resends wait, all consumers together, for their consumers to answer after a
#: reconnect; then they are sent anyway.
CONSUMER_WAIT = 8.0
#: One CONSUMER.INFO request's timeout; a timeout means "send now".
INFO_TIMEOUT = 2.0

_ACK = b"+ACK"
_JS_ACK = "$JS.ACK."

#: A kept ack: the reply subject of a +ACK, or (reply subject, payload) of a +TERM.
Entry = str | tuple[str, bytes]


def ack_target(reply: str) -> tuple[str, str, str] | None:
    """(JetStream API prefix, stream, consumer) of an ack reply subject; None if it is none.

    ``$JS.ACK.<stream>.<consumer>.<5 numbers>`` or, with a domain,
    ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<6 numbers or more>``."""
    tokens = reply.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) >= 12:
        domain = tokens[2]
        api = "$JS.API" if domain in ("", "_") else f"$JS.{domain}.API"
        return api, tokens[4], tokens[5]
    return "$JS.API", tokens[2], tokens[3]


def entry_reply(entry: Entry) -> str:
    """The reply subject of a kept ack."""
    return entry if type(entry) is str else entry[0]


class AckJournal:
    """One connection's journal (see the module's docstring). The I/O loop calls
    :meth:`on_disconnect`, :meth:`on_reconnect` and the rotation; any thread appends to the
    current bucket, ``out.acks`` (the journal swaps it). ``out.publish_raw(reply, payload)``
    queues an ack (here on the loop thread); ``out.q`` is the outgoing queue;
    ``is_closed()`` says the connection is closed; ``out.nc`` is the nats-py client.

    :meth:`rotate`, :meth:`mark_down` and :meth:`take` take the time as an argument (pure:
    the unit tests drive them)."""

    def __init__(self, out: Any, is_closed: Callable[[], bool]) -> None:
        self._out = out
        self._is_closed = is_closed
        #: the acks queued since :attr:`_bucket_start` (appended to by any thread)
        out.acks = []
        self._bucket_start = time.monotonic()
        #: (start time, acks) of the earlier buckets within the window, oldest first
        self._old: deque[tuple[float, list[Entry]]] = deque()
        self._kept = 0  # acks in _old
        #: when the current outage was noticed (None: connected)
        self._down_at: float | None = None
        #: reply subjects of the acks still in the outgoing queue when the link was lost
        self._unsent: set[str] = set()
        self._warned = False
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: acks sent again so far (for tests and logs)
        self.resent = 0
        #: acks dropped at the cap so far
        self.dropped = 0

    @property
    def kept(self) -> int:
        """Acks kept now (the earlier buckets and the current one)."""
        return self._kept + len(self._out.acks)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: start the rotation timer."""
        self._timer = loop.call_later(BUCKET, self._rotate, loop)

    def _rotate(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(BUCKET, self._rotate, loop)
        self.rotate(time.monotonic())

    def rotate(self, now: float) -> None:
        """Start a new bucket at ``now``; drop what is older than the window, or over the cap.
        While down the bucket is dropped (those acks wait in the outgoing queue)."""
        out = self._out
        bucket = out.acks
        out.acks = []
        start, self._bucket_start = self._bucket_start, now
        if self._down_at is not None:
            return
        if bucket:
            self._old.append((start, bucket))
            self._kept += len(bucket)
        self._trim(now - WINDOW - BUCKET)

    def _trim(self, horizon: float) -> None:
        old = self._old
        while old and old[0][0] < horizon:
            self._kept -= len(old.popleft()[1])
        excess = self._kept - MAX_KEPT
        if excess <= 0:
            return
        self.dropped += excess
        self._kept = MAX_KEPT
        while excess:
            first = old[0][1]
            if len(first) <= excess:
                excess -= len(first)
                old.popleft()
            else:
                del first[:excess]
                excess = 0
        if not self._warned:
            self._warned = True
            log.warning("the ack journal keeps at most %d acks for sending again after a reconnect; "
                        "more were acked within %.1fs, the oldest are dropped (warned once per connection)",
                        MAX_KEPT, WINDOW + BUCKET)

    def mark_down(self, now: float, queued: Iterable[tuple[str, bytes, str, Any]] = ()) -> None:
        """The link was noticed lost at ``now``: keep the current bucket, stop keeping new
        acks. ``queued``: the outgoing queue now (its acks are written after the reconnect)."""
        if self._down_at is not None:
            return
        self.rotate(now)
        self._down_at = now
        self._unsent = {item[0] for item in queued if item[0].startswith(_JS_ACK)}

    def take(self) -> list[Entry]:
        """Connected again: the kept acks to send again, and start afresh."""
        if self._down_at is None:
            return []
        self._down_at = None
        unsent, self._unsent = self._unsent, set()
        old = self._old
        self._old = deque()
        self._kept = 0
        self._out.acks = []  # queued while down: in the outgoing queue
        if unsent:
            return [e for _, acks in old for e in acks if entry_reply(e) not in unsent]
        return [e for _, acks in old for e in acks]

    def on_disconnect(self) -> None:
        """A listener (on the loop): the link was noticed lost."""
        self.mark_down(time.monotonic(), list(self._out.q))

    def on_reconnect(self) -> None:
        """A listener (on the loop): send the kept acks again (a task on the loop)."""
        self._bucket_start = time.monotonic()
        todo = self.take()
        if todo:
            task = asyncio.ensure_future(self._resend(todo))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        """On the loop (or after it stopped): end the timer and any resend."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._tasks):
            task.cancel()

    async def _resend(self, todo: list[Entry]) -> None:
        groups: dict[tuple[str, str, str], list[Entry]] = {}
        for entry in todo:
            target = ack_target(entry_reply(entry))
            if target is not None:
                groups.setdefault(target, []).append(entry)
        end = time.monotonic() + CONSUMER_WAIT
        await asyncio.gather(*(self._resend_to(target, acks, end) for target, acks in groups.items()))

    async def _resend_to(self, target: tuple[str, str, str], acks: list[Entry], end: float) -> None:
        if not await self._consumer_answers(*target, end):
            return
        if self._is_closed():
            return
        publish = self._out.publish_raw
        for entry in acks:
            if type(entry) is str:
                publish(entry, _ACK)
            else:
                publish(*entry)
        self._out.acks.extend(acks)  # should the server go down again at once
        self.resent += len(acks)
        log.debug("sent %d acks of consumer %r on stream %r again after a reconnect",
                  len(acks), target[2], target[1])

    async def _consumer_answers(self, api: str, stream: str, consumer: str, end: float) -> bool:
        """Wait (until ``end``) until the consumer answers an info request. True: send its
        acks (it answered; or no answer came in time, as without permission for the request:
        an ack costs nothing). False: it (or its stream) is gone, or the connection closed."""
        subject = f"{api}.CONSUMER.INFO.{stream}.{consumer}"
        while not self._is_closed():
            left = end - time.monotonic()
            try:
                reply = await self._out.nc.request(subject, b"", timeout=max(0.1, min(INFO_TIMEOUT, left)))
                info = json.loads(reply.data or b"{}")
                error = info.get("error") if isinstance(info, dict) else None
                if not error:
                    return True
                if error.get("err_code") in (10014, 10059):  # consumer / stream not found
                    return False
                # (JetStream not ready yet, say): ask again
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                return True  # no answer (a permission violation is not answered): send now
            except Exception as exc:  # noqa: BLE001 - not ready yet (no responders): ask again
                log.debug("consumer %r on stream %r not answering after a reconnect: %r", consumer, stream, exc)
            if time.monotonic() + 0.2 > end:
                return True
            await asyncio.sleep(0.2)
        return False
