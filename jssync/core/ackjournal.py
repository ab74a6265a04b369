"""The terminal acks a connection wrote lately, sent again once after a reconnect.

A nats-server that goes down (a restart, a crash) never reads what is left in its socket, and
the client notices the lost link only after it wrote there (measured: 30-70 ms): the acks,
naks and terms written in that gap are lost, and the restarted server holds their messages
ack-pending until ``ack_wait`` (then delivers them again). So every connection keeps the
terminal acks (+ACK, -NAK, +TERM) queued within :data:`WINDOW` seconds before the link was
noticed lost, and those queued while it was down, and publishes them once more when it is
back, per consumer once that consumer answers (after a restart it may still be loading, and
an ack reaching the server before its consumer does is dropped). An ack of a message the
server already removed is ignored; a -NAK sent again can at worst make a message the server
redelivered meanwhile come once more (at-least-once, as any redelivery).

The hot path (:meth:`Outbound.send_ack`) does one attribute read and one list append per
terminal ack (``self.acks.append((reply, payload))``, the current bucket, no lock: a list
append is atomic).
A timer on the I/O loop starts a new bucket every :data:`BUCKET` seconds and drops those older
than the window; while the link is down nothing is dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("jssync")

#: Acks queued this long before the link was noticed lost are sent again after the reconnect.
WINDOW = 2.0
#: How often a new bucket starts (the window's resolution).
BUCKET = 0.25
#: At most this many acks are kept for sending again (the oldest buckets go first).
MAX_KEPT = 100_000
#: How long the resend waits for a consumer to answer after a reconnect, then sends anyway.
CONSUMER_WAIT = 30.0

Entry = tuple[str, bytes]


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


class AckJournal:
    """One connection's journal (see the module's docstring). The I/O loop calls
    :meth:`on_disconnect`, :meth:`on_reconnect` and the rotation; any thread appends to the
    current bucket, ``out.acks`` (the journal swaps it). ``out.publish_raw(reply, payload)``
    queues an ack (here on the loop thread); ``is_closed()`` says the connection is closed;
    ``out.nc`` is the nats-py client."""

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
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: acks sent again so far (for tests and logs)
        self.resent = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: start the rotation timer."""
        self._timer = loop.call_later(BUCKET, self._rotate, loop)

    def _rotate(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(BUCKET, self._rotate, loop)
        if self._down_at is not None:
            return  # down: everything queued since stays in the current bucket
        now = time.monotonic()
        out = self._out
        bucket = out.acks
        if bucket:
            out.acks = []
            self._old.append((self._bucket_start, bucket))
            self._kept += len(bucket)
        self._bucket_start = now
        old = self._old
        horizon = now - WINDOW - BUCKET
        while old and (old[0][0] < horizon or self._kept > MAX_KEPT):
            self._kept -= len(old.popleft()[1])

    def on_disconnect(self) -> None:
        """A listener (on the loop): the link was noticed lost."""
        if self._down_at is None:
            self._down_at = time.monotonic()

    def on_reconnect(self) -> None:
        """A listener (on the loop): take the acks of the window before the outage and of the
        outage itself, and send them again (a task on the loop)."""
        down_at, self._down_at = self._down_at, None
        if down_at is None:
            return
        horizon = down_at - WINDOW - BUCKET
        todo = [e for start, acks in self._old if start >= horizon for e in acks]
        out = self._out
        bucket = out.acks
        out.acks = []
        todo.extend(bucket)
        self._old.clear()
        self._kept = 0
        self._bucket_start = time.monotonic()
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
            target = ack_target(entry[0])
            if target is not None:
                groups.setdefault(target, []).append(entry)
        for target, acks in groups.items():
            if not await self._consumer_answers(*target):
                continue
            if self._is_closed():
                return
            publish = self._out.publish_raw
            for reply, payload in acks:
                publish(reply, payload)
            self._out.acks.extend(acks)  # should the server go down again at once
            self.resent += len(acks)
            log.debug("sent %d acks of consumer %r on stream %r again after a reconnect",
                      len(acks), target[2], target[1])

    async def _consumer_answers(self, api: str, stream: str, consumer: str) -> bool:
        """Wait (at most :data:`CONSUMER_WAIT`) until the consumer answers an info request.
        False: it (or its stream) is gone, nothing holds those messages any more."""
        end = time.monotonic() + CONSUMER_WAIT
        while not self._is_closed():
            try:
                reply = await self._out.nc.request(f"{api}.CONSUMER.INFO.{stream}.{consumer}", b"", timeout=2.0)
                info = json.loads(reply.data or b"{}")
                error = info.get("error") if isinstance(info, dict) else None
                if not error:
                    return True
                if error.get("err_code") in (10014, 10059):  # consumer / stream not found
                    return False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - not ready yet (no responders, a timeout): ask again
                log.debug("consumer %r on stream %r not answering after a reconnect: %r", consumer, stream, exc)
            if time.monotonic() > end:
                return True  # (another API prefix, say): send them anyway, an ack costs nothing
            await asyncio.sleep(0.2)
        return False
