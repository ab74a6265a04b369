"""The outgoing side of a connection: the publish queue, the pump, the offline buffer, flush.

Every message jssync sends goes out by one of three writers, each under the socket's
write lock (``CallerSocket.wlock``) and each encoding with core/wire.py:

- ``kick`` (I/O thread, woken once per burst): a small burst taken off the queue
  (``Outbound.q``: ``publish``, requests, acks, the JetStream layers through
  ``conn.internal.enqueue``) while nothing waits in nats-py is encoded
  (``wire.encode_burst``) and written straight to the transport (lowest latency);
- ``pump`` (an I/O thread task): larger bursts (``wire.encode_burst``) are appended to
  nats-py's outgoing buffer, which nats-py's flusher writes (with a nats-py without that
  buffer, ``nc.publish`` each);
- ``try_direct_send`` (a caller's thread, core/sockpath.py): a lone request with nothing
  queued before it never enters the queue (``wire.encode_one``: the bytes of a burst of one).

While disconnected the queue is parked (nothing leaves it; publishers block at its bound,
or at ``reconnect_buffer_size``); it resumes after the reconnect, dropping the requests
whose callers gave up meanwhile. ``sync_pubs`` and ``ordered_flush`` keep a SUB or a
PING behind what was queued before it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from ..base.deadline import Deadline
from ..base.errors import ConnectionClosedError, ReconnectBufferExceededError, TimeoutError, translate, translating
from . import natspy as _natspy
from . import sockpath as _sockpath
from . import wire as _wire
from .ackjournal import AckJournal
from .ackjournal import Entry as JournalEntry
from .msg import _ACK, ACK_SENT, Msg
from .natspy import CLOSED as _NC_CLOSED
from .natspy import STATUS as _NC_STATUS

if TYPE_CHECKING:

    from .connection import Connection
    from .loop import IOLoop
    from .workers import WorkerPool

log = logging.getLogger("jssync")

#: Most publishes handed to the I/O thread in one loop turn.
_PUMP_BATCH = 4096
#: Payload bytes encoded into one chunk at most (large messages: smaller bursts, fewer copies).
_BURST_BYTES = 1 << 20
#: Largest burst written straight to the socket from the wake-up callback.
_DIRECT_MAX = 256
#: Direct writes stop while the socket's write buffer holds more than this.
_DIRECT_BUFFER_LIMIT = 1 << 20
#: Publishes queued before ``publish`` waits for the I/O thread to catch up.
_PUB_HIGH_WATER = 65536
#: ... or this many payload bytes (estimated as queue length x the new message's size).
_PUB_HIGH_BYTES = 64 << 20
#: While not connected the pump leaves the queue alone and looks again after this long.
_PARKED_POLL = 0.05


class Outbound:
    """A connection's outgoing queue and its writers (see the module's docstring).

    Made by the connection before its nats-py client; ``nc``, ``caps`` and ``fast`` are set
    once the client is made (``Connection._make_client``). Reads the connection's life
    state (``_closed``, ``_closing``) and reports through its ``_report_error``.
    """

    def __init__(self, conn: Connection, loop: IOLoop, pool: WorkerPool, offline_limit: int | None) -> None:
        self._conn = conn
        self._loop = loop
        self._pool = pool
        self._call_soon = loop.loop.call_soon_threadsafe
        self.close_lock = conn._close_lock  # (also the ack lock: see send_ack)
        self.nc: Any = None
        self.q: deque[tuple[str, bytes, str, dict[str, str] | None]] = deque()
        #: the +ACK (reply subject) and +TERM ((reply, payload)) acks queued lately: the current
        #: bucket of the connection's ack journal (core/ackjournal.py), which swaps it
        self.acks: list[JournalEntry] = []
        self.journal = AckJournal(self, lambda: conn._closed)
        self.scheduled = False
        self.task: asyncio.Task[None] | None = None
        self.idle: asyncio.Event | None = None
        self.room = threading.Event()
        self.room.set()
        # while not connected: the pump is parked (park) and what is queued stays queued
        self.park_timer: asyncio.TimerHandle | None = None
        self.stale_check = False  # on resuming: drop requests whose caller gave up (drop_stale)
        # reconnect_buffer_size: payload bytes accepted since the connection was lost
        self.offline_limit = offline_limit
        self.offline_lock = threading.Lock()
        self.offline_used = 0
        self.offline_refused = False
        # The caller-side socket path (core/sockpath.py): a request's caller writes it
        # and may read its reply itself. Its write lock orders every write to the socket
        # and every "pop from q, then write".
        self.sockpath = _sockpath.CallerSocket(self._call_soon)
        self.wlock = self.sockpath.wlock
        # which fast paths into nats-py's internals this nats-py allows (set by _make_client)
        self.caps: dict[str, bool] = {}
        self.fast = False

    def offline_reset(self) -> None:
        """On the loop, at a reconnect: ``reconnect_buffer_size`` counts afresh for the next outage."""
        with self.offline_lock:
            self.offline_used = 0
            self.offline_refused = False

    def drop_all(self) -> int:
        """Drop everything queued (the connection closes, or gave up); wake blocked publishers.

        Returns how many messages were dropped."""
        q = self.q
        n = len(q)
        q.clear()
        self.room.set()
        return n

    async def flush(self, timeout: float | None) -> None:
        """On the loop: ``Connection.flush``: hand over the queue (waiting for a reconnect while
        disconnected), then PING/PONG, all within ``timeout`` (None: no limit)."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + max(timeout, 0.001)
        while True:
            await self.sync_pubs()
            nc = self.nc
            if not self.q or nc.is_connected or nc.is_closed:
                break
            # not connected: the rest of the queue waits for the reconnect
            await self.wait_connected(end, timeout)
        with translating():
            await self.ordered_flush(None if end is None else max(end - loop.time(), 0.001))

    def offline_check(self, size: int, subject: str) -> None:
        """While not connected, with ``reconnect_buffer_size`` set: count ``size`` bytes against it.

        Raises :class:`jssync.ReconnectBufferExceededError` when they do not fit, and
        reports the first refusal of each outage to ``error_cb``.
        """
        limit = self.offline_limit
        assert limit is not None
        with self.offline_lock:
            if self.nc.is_connected:
                return
            if self.offline_used + size <= limit:
                self.offline_used += size
                return
            first = not self.offline_refused
            self.offline_refused = True
        err = ReconnectBufferExceededError(
            f"not connected, and the messages waiting for the reconnect would pass reconnect_buffer_size "
            f"({limit} bytes): {size} bytes on {subject!r} refused"
        )
        if first:
            self._conn._report_error(err)
        raise err

    def publish_raw(self, subject: str, data: bytes) -> None:
        """Publish without validation (acks, flow control replies)."""
        if self._conn._closed:
            return
        self.enqueue((subject, data, "", None))

    def send_ack(self, msg: Msg, payload: bytes, terminal: bool, reply: str = "") -> bool:
        """Queue an ack of ``msg`` (on its reply subject) and update its ack state, atomically.

        "Written" for an ack means: accepted into this connection's outgoing queue while
        the connection is open. :meth:`close` takes the same lock to start closing and then
        writes that queue before closing the socket, so an ack either raises here or is in
        the queue that close writes. Under the lock: nothing is sent when a terminal ack
        was already written (or a double ack is waiting for its confirmation); a terminal
        ack marks the message acked. Of concurrent acks of one message exactly one
        terminal ack is sent. ``reply``: the ack's own reply subject (+NXT). Returns
        whether the ack was queued.

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing (nothing sent).
        """
        q = self.q
        n = len(q)
        if n and (n >= _PUB_HIGH_WATER or n * len(payload) >= _PUB_HIGH_BYTES) \
                and not self._loop.in_loop_thread():
            self.wait_room(len(payload))  # (not under the lock: it may block)
        lock = self.close_lock
        lock.acquire()
        try:
            if msg._acked:
                return False
            c = self._conn
            if c._closing or c._closed or getattr(self.nc, _NC_STATUS) == _NC_CLOSED:
                raise ConnectionClosedError("the connection is closed: the ack was not sent")
            q.append((msg.reply, payload, reply, None))
            if terminal:
                msg._acked = ACK_SENT
        finally:
            lock.release()
        if terminal:
            # the ack journal (core/ackjournal.py): a +ACK is kept as its reply subject (an +NXT
            # too: sent again with its reply it would open a pull answered to nobody), a +TERM
            # as (reply, payload); a -NAK is never sent again
            if payload is _ACK or reply:
                self.acks.append(msg.reply)
            elif payload[0] == 43:  # b"+": +TERM
                self.acks.append((msg.reply, payload))
        if not self.scheduled:
            self._schedule_kick()
        return True

    def _schedule_kick(self) -> None:
        """Have the I/O thread take the queue (:meth:`kick`, once per burst). ``scheduled``
        never stays set without a kick coming: a Ctrl-C landing inside the hand-off (which
        may or may not have scheduled it) schedules it again before it goes on (a second
        kick finds the queue empty), so what was queued is still sent."""
        self.scheduled = True
        try:
            self._call_soon(self.kick)
        except RuntimeError:  # the loop is closed
            self.scheduled = False
        except BaseException:
            try:
                self._call_soon(self.kick)
            except BaseException:
                self.scheduled = False  # the next enqueue schedules it
            raise

    def enqueue(self, item: tuple[str, bytes, str, dict[str, str] | None],
                 deadline: Deadline | None = None) -> None:
        """Queue ``item``; at the queue's bound wait for room (see :meth:`wait_room`).

        ``deadline``: the caller's own (a request's timeout), when shorter than the bound's.
        """
        q = self.q
        n = len(q)
        # Bounded by count, and by bytes estimated as count x this message's size (one
        # multiplication instead of a shared byte counter that every thread would update).
        if n and (n >= _PUB_HIGH_WATER or n * len(item[1]) >= _PUB_HIGH_BYTES) \
                and not self._loop.in_loop_thread():
            self.wait_room(len(item[1]), deadline)
        q.append(item)
        if not self.scheduled:
            self._schedule_kick()

    def wait_room(self, size: int, within: Deadline | None = None) -> None:
        """Block until the publish queue is down to half its count and byte limits.

        The I/O thread sets ``room`` after every burst it takes off the queue. Waits
        at most 15 x the connect timeout, or until ``within`` (a request's own deadline)
        when that comes first.
        """
        if self._pool.in_worker() or self._conn._closed:
            return  # never block a callback on the I/O thread's progress
        q = self.q
        half_n, half_b = _PUB_HIGH_WATER // 2, _PUB_HIGH_BYTES // 2
        timeout = self._conn._timeout
        deadline = Deadline(timeout * 15 if timeout else None)
        if within is not None:
            left, own = within.remaining(), deadline.remaining()
            if left is not None and (own is None or left < own):
                deadline = within
        while len(q) >= half_n or len(q) * size >= half_b:
            self._conn._check_open()
            self.room.clear()
            if len(q) < half_n and len(q) * size < half_b:
                return
            self.room.wait(deadline.slice())
            deadline.check("publish (waiting for the outgoing buffer)")

    def kick(self) -> None:
        # On the loop thread. A small burst while connected and with nothing queued in
        # nats-py is encoded and written to the socket right here (lowest latency for
        # requests and acks); anything else goes through the pump task. While not
        # connected nothing leaves the queue (see park).
        self.scheduled = False
        if self.task is not None and not self.task.done():
            return
        q = self.q
        nc = self.nc
        if not nc.is_connected:
            self.park()
            return
        if self.fast and len(q) <= _DIRECT_MAX and not _natspy.pending(nc) and not self.stale_check:
            try:
                writer = _natspy.io_writer(nc)
                if writer.transport is not self.sockpath.checked:
                    self.install_direct()  # a new transport (reconnect): look at it once
                if writer.transport.get_write_buffer_size() < _DIRECT_BUFFER_LIMIT:
                    with self.wlock:
                        chunk = self.encode_burst(_DIRECT_MAX)
                        if chunk:
                            writer.write(chunk)
                    if not q:
                        return
            except Exception:  # pragma: no cover - fall back to the pump
                log.debug("direct write failed; using the pump", exc_info=True)
        assert self.idle is not None
        self.idle.clear()
        self.task = self._loop.loop.create_task(self.pump())

    def encode_burst(self, limit: int) -> bytes:
        """Pop up to ``limit`` queued publishes (and about 1 MiB of payload) as one protocol chunk.

        The byte cap keeps large payloads from being joined and copied in huge chunks.
        """
        chunk, n, nbytes = _wire.encode_burst(self.q, limit, _BURST_BYTES)
        st = self.nc.stats
        st["out_msgs"] += n
        st["out_bytes"] += nbytes
        self.room.set()
        return chunk

    def park(self) -> None:
        """On the loop, not connected: leave the queue as it is and look again in a moment.

        The publishes wait in ``q`` (bounded as always: publishers block at its limit)
        instead of going to nats-py, whose reconnect buffer is small and refuses past it.
        """
        self.stale_check = True
        if self.park_timer is None:
            self.park_timer = self._loop.loop.call_later(_PARKED_POLL, self.unpark)

    def unpark(self) -> None:
        # on the loop: resume the pump once connected again
        self.park_timer = None
        q = self.q
        c = self._conn
        if not q or c._closed or c._closing or self.nc.is_closed:
            return  # (close() drops what is left; so does _gave_up)
        self.kick()

    def drop_stale(self) -> None:
        """On the loop, resuming after a disconnect: drop queued requests whose caller gave up.

        A request, ``js.publish`` or ``publish_async`` that timed out while its message
        waited for the reconnect has reported its failure; sending it afterwards could
        store a message its caller treats as not stored. Such a message's reply subject
        is on the multiplexer, and its token is gone from the multiplexer's ``replies``.
        """
        prefix = self._conn._mux_prefix
        q = self.q
        if prefix is None or not q:
            return
        replies = self._conn._replies
        plen = len(prefix)
        with self.wlock:  # (a direct send checks the queue under it)
            n = len(q)
            kept = []
            for _ in range(n):
                item = q.popleft()
                reply = item[2]
                if reply.startswith(prefix) and reply[plen:] not in replies:
                    continue
                kept.append(item)
            q.extendleft(reversed(kept))
        if len(kept) < n:
            log.debug("%d request(s) that timed out while disconnected not sent", n - len(kept))

    async def pump(self) -> None:
        """On the loop: hand queued publishes to nats-py, a burst at a time, while connected.

        A burst is encoded into one chunk and appended to nats-py's outgoing buffer with
        one flush kick (or, with a nats-py without that buffer, each goes through
        ``nc.publish``). When the connection is lost the pump parks (see :meth:`park`).
        """
        q = self.q
        nc = self.nc
        try:
            if self.stale_check:
                self.stale_check = False
                self.drop_stale()
            while q:
                if not nc.is_connected:
                    self.park()
                    break
                if self.fast:
                    with self.wlock:
                        chunk = self.encode_burst(_PUMP_BATCH)
                        over = _natspy.buffer_append(nc, chunk)
                    try:
                        await _natspy.flush_pending(nc, over)
                    except Exception as exc:  # pragma: no cover - nats-py reports socket errors itself
                        log.debug("flush kick failed: %s", exc)
                else:
                    n = 0
                    while q and n < _PUMP_BATCH and nc.is_connected:
                        subject, data, reply, headers = q.popleft()
                        n += 1
                        try:
                            await nc.publish(subject, data, reply=reply, headers=headers)
                        except Exception as exc:
                            if nc.is_closed:
                                q.clear()
                                break
                            self._conn._report_error(translate(exc))
                    self.room.set()  # (the fast branch's encode_burst sets it)
                if q:
                    await asyncio.sleep(0)
        finally:
            self.room.set()
            assert self.idle is not None
            self.idle.set()

    def install_direct(self) -> None:
        """On the loop: arm the caller-side socket path on the current transport (``sockpath``).

        Only a plain TCP connection: a caller may then write a small request to the socket
        itself and read its reply (saves the wake-ups of this thread and the caller's).
        """
        self.sockpath.attach(self.nc, self.caps["direct_write"], self.caps["direct_read"])

    def fast_paths(self) -> dict[str, bool]:
        """Which shortcuts into nats-py's internals are active on this connection.

        Each is checked against the nats-py it runs on when the connection is made
        (``_natspy.check``) and, where that check fails, the connection logs one ``jssync``
        warning naming it and takes nats-py's public path instead (correct, slower). A
        test requires every one on a supported nats-py (tests/integration/core/test_natspy_fast_paths.py).
        On a plain TCP connection on Linux all are True; ``direct_write`` and
        ``direct_read`` are off under TLS (the SSL layer owns the socket) and while
        disconnected (re-armed on the first write after the reconnect).

        - ``pump_buffer``: queued publishes are encoded in bursts into nats-py's outgoing
          buffer, not one ``nc.publish`` each.
        - ``direct_write``: a caller's thread writes a small request straight to the socket
          (``sockpath.CallerSocket.send``).
        - ``direct_read``: that caller may also read its reply off the socket
          (``sockpath.CallerSocket.watch``; needs ``os.eventfd``).
        - ``reply_headers``: a reply read that way has its headers parsed by nats-py's own
          header parser (else such a reply is left to the I/O thread).
        - ``wire_header_len``: a pulled message's header size is read from nats-py's parser,
          not rebuilt from the header dict (see ``_pull._wire_header_len``).
        - ``msg_class``: nats-py builds every message as this connection's ``Msg`` subclass
          with exactly the keywords jssync knows (else through a constructor that also
          takes, and ignores, keywords a newer nats-py passes).
        - ``msg_parse``: the I/O thread parses MSG/HMSG with jssync's step (``wire.msg_parser``),
          not nats-py's regular expressions; nats-py's parser keeps every other line.
        """
        nc = self.nc
        return {
            "pump_buffer": bool(self.fast),
            "direct_write": self.sockpath.sock is not None,
            "direct_read": self.sockpath.reader is not None and _natspy.reader_counted(nc),
            "reply_headers": self.sockpath.header_parser is not None,
            "wire_header_len": self.caps["wire_header_len"],
            "msg_class": self.caps["msg_class"] and _natspy.message_class(nc) is self._conn._msg_class,
            "msg_parse": self.caps["msg_parse"] and _natspy.msg_parser_installed(nc),
        }

    def try_direct_send(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None) -> bool:
        """On a caller's thread: send one message on the socket if nothing is queued before it.

        Returns False (nothing sent) when the message must go through the queue instead.
        """
        if self.sockpath.sock is None or self.q or len(data) > _sockpath.SEND_MAX:
            return False
        nc = self.nc
        buf = _wire.encode_one(subject, data, reply, headers)
        if not self.sockpath.send(buf, self.send_blocked):
            return False
        st = nc.stats
        st["out_msgs"] += 1
        st["out_bytes"] += len(data)
        return True

    def send_blocked(self) -> bool:
        # (under the write lock) something queued must be written before a caller's message
        # (what nats-py and the transport hold is the socket path's own check)
        pt = self.task
        return bool(self.q or (pt is not None and not pt.done()))

    async def sync_pubs(self) -> None:
        """On the loop: wait until every publish queued so far was handed to nats-py.

        While not connected it returns at once (or as soon as the pump parks): the queue
        goes out after the reconnect. (nats-py sends the subscriptions first on a
        reconnect, so a SUB cannot be ordered after the queued publishes anyway.)
        """
        if self.q and self.nc.is_connected:
            self.scheduled = False
            self.kick()
        if self.task is not None and not self.task.done():
            assert self.idle is not None
            await self.idle.wait()

    async def ordered_flush(self, timeout: float | None) -> None:
        """On the loop: PING/PONG once everything nats-py buffered is on the socket.

        nats-py writes its PING straight to the socket, ahead of commands still in its
        buffer (e.g. a SUB just made), so the PONG could come back before the server saw
        them. Writing the buffer first keeps the order. ``timeout`` None: no limit.
        """
        if timeout is None:
            await self.flush_no_limit()
            return
        nc = self.nc
        if not nc.is_connected and not nc.is_closed:
            # nats-py's flush returns at once while reconnecting; wait for the connection
            # (the PING must reach the server) within the same timeout.
            end = asyncio.get_running_loop().time() + timeout
            await self.wait_connected(end, timeout)
            timeout = max(0.001, end - asyncio.get_running_loop().time())
        if self.fast and nc.is_connected:
            try:
                _natspy.write_pending(nc)
            except Exception:  # pragma: no cover - nats-py's flusher reports socket errors
                log.debug("could not write the buffer before PING", exc_info=True)
        await nc.flush(timeout=timeout)

    async def wait_connected(self, end: float | None, timeout: float | None) -> None:
        """On the loop: return once connected (or closed); TimeoutError at loop time ``end``
        (None: no limit)."""
        nc = self.nc
        loop = asyncio.get_running_loop()
        while not nc.is_connected and not nc.is_closed:
            left = 0.05 if end is None else end - loop.time()
            if left <= 0:
                raise TimeoutError(f"flush timed out after {timeout}s: not connected")
            await asyncio.sleep(min(0.05, left))

    async def flush_no_limit(self) -> None:
        """On the loop: ``_ordered_flush`` without a limit.

        nats-py's flush needs a number, and a PING sent before a disconnect is never
        answered (the reconnect forgets it): so the PING goes out again after each
        reconnect, until a PONG comes back (or the connection closes: nats-py raises).
        """
        nc = self.nc
        year = 365 * 86400.0  # nats-py's flush needs a number: a year, looked at every 0.1 s
        while True:
            await self.wait_connected(None, None)
            reconnects = nc.stats["reconnects"]
            if self.fast and nc.is_connected:
                try:
                    _natspy.write_pending(nc)
                except Exception:  # pragma: no cover - nats-py's flusher reports socket errors
                    log.debug("could not write the buffer before PING", exc_info=True)
            ping = asyncio.ensure_future(nc.flush(timeout=year))
            try:
                while not ping.done():
                    await asyncio.wait((ping,), timeout=0.1)
                    if not ping.done() and (nc.stats["reconnects"] != reconnects or not nc.is_connected):
                        ping.cancel()  # its PONG will not come: PING again once reconnected
                        await asyncio.wait((ping,))
            except BaseException:
                ping.cancel()
                raise
            if not ping.cancelled():
                ping.result()
                return
