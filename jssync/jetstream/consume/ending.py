"""The end of a consume: stop, drain, a terminal error, the connection closing.

The end has two sides. The server side is over once the inbox is unsubscribed
(``_server_done``: nothing more arrives; after ``stop()`` the rest was nak'ed); the user
side once the iterator reached its end or the callback lane ended (``_closed``). After
``drain()`` or a terminal error the end marker is queued only once the server side is over,
so the user side ends last; after ``stop()`` it ends at once. The order follows
kafka-python's sender: stop pulling, let the pulls in flight finish sending, unsubscribe
(UNSUB, PING/PONG), then end the user side.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from queue import Empty

from ...base.deadline import Deadline
from ...base.errors import ConnectionClosedError, Error
from ...core.msg import Msg
from .common import _END, _Control, _on_loop, _thread_alive
from .engine import EngineState
from .options import FETCH_GRACE
from .state import ConsumeState

__all__ = ["Ending"]

log = logging.getLogger("jssync")

#: drain/stop: the pulls in flight count as done sending once nothing arrived for this long.
_QUIET = 0.5


class Ending(ConsumeState):
    """Winds a consume down (any thread unless said); ``stop``/``drain`` on the handle start it."""

    def _detach(self) -> None:
        """Stop pulling for good: no connection listeners, no engine timer (any thread).

        The context stays in the connection's subscriptions until its inbox is unsubscribed
        (:meth:`_server_finished`), so closing the connection meanwhile still ends it.
        """
        conn = self._conn
        for lst, fn in ((conn.internal.disconnect_listeners, self._on_disc),
                        (conn.internal.reconnect_listeners, self._on_reconn)):
            try:
                lst.remove(fn)
            except ValueError:
                pass
        self._timer.arm(None)

    def _ended(self, error: BaseException | None) -> None:
        """The engine's End: stopped (the user side ends at once), a terminal error (kept on
        :attr:`error`, raised after the buffer; callback form: reported at once) or closed."""
        state = self._eng.state
        if state is EngineState.STOPPED:
            self._q.put(_END)
            if self._cb is None:
                self._user_finished()
            elif not self._running:
                self._kick_lane()
        elif state is EngineState.DRAINING and error is not None:
            self.error = error
            if self._cb is not None:
                self._report(error)

    def _wind_down(self, wait: bool) -> None:
        """Unsubscribe the inbox without losing what is on the wire (drain, stop, terminal; any thread).

        On the I/O thread. With ``wait``, the pulls in flight first finish sending: until
        none is left (each got all its messages or its ending status), nothing arrived for
        ``_QUIET`` seconds, the connection is lost, or their expiry passed. Then the shared
        drain routine (``Connection._drain_nsub``: UNSUB, PING/PONG, remove). Messages
        arriving meanwhile are buffered (drain) or nak'ed (stop, see :meth:`put_nowait`).
        """
        with self._lock:
            if self._winding_down:
                return
            self._winding_down = True
        conn = self._conn

        async def _run() -> None:
            try:
                if wait:
                    await self._pulls_done_sending()
                # the current inbox and those of written-off requests (none is added from now on)
                subs = [n for n in (self._nsub, *(o for o, _ in self._old)) if n is not None]
                self._old = []
                if not conn.internal.nc.is_closed:
                    for res in await asyncio.gather(*(conn.internal.drain_nsub(n, 5.0) for n in subs),
                                                    return_exceptions=True):
                        if isinstance(res, BaseException):
                            raise res
            except Exception:  # not confirmed (disconnected, timed out): the inbox is removed anyway
                log.debug("consume %s/%s: unsubscribe failed", self.stream, self.consumer, exc_info=True)
            finally:
                self._server_finished()

        try:
            conn.internal.loop.check()
            _on_loop(conn, _run)
        except Error:
            self._server_finished()

    async def _pulls_done_sending(self) -> None:
        """On the loop: wait until the pulls in flight sent what they will send now."""
        loop = asyncio.get_running_loop()
        conn = self._conn
        eng = self._eng
        end = loop.time() + self._opts.expires + FETCH_GRACE
        act = eng.activity
        quiet_since = loop.time()
        while conn.internal.nc.is_connected and self.error is None and eng.state is not EngineState.CLOSED:
            if eng.in_flight <= 0:
                return
            now = loop.time()
            if now >= end:
                return
            if eng.activity != act:
                act = eng.activity
                quiet_since = now
            elif now - quiet_since >= _QUIET:
                return
            await asyncio.sleep(0.02)

    def _server_finished(self) -> None:
        """The inbox is unsubscribed (or the connection is gone): end the user side after the buffer."""
        conn = self._conn
        with conn.internal.subs_lock:
            conn.internal.subs.discard(self)
        with self._lock:
            self._unsubscribed = True
            later = self._nak_later
            self._nak_later = []
            stopped = self._eng.state is EngineState.STOPPED
        if stopped:
            # nak what stop() did not hand over, now that no pull can take it back
            for msg in later:
                msg._nak_quiet()
            self._nak_buffered()
            self._q.put(_END)
        elif self._cb is None and self.error is not None:
            self._q.put(_Control(self.error))
        else:
            self._q.put(_END)
        self._server_done.set()
        if self._cb is not None and not self._running:
            self._kick_lane()

    def _user_finished(self) -> None:
        """The iterator reached its end or the callback lane ended (any thread)."""
        self._closed.set()

    def _terminal(self, exc: BaseException) -> None:
        """The consumer is gone: end after the buffered messages by raising ``exc`` (any thread).

        Callback form: ``exc`` goes to the error callback at once, and the lane ends after
        the buffered messages.
        """
        with self._lock:
            acts = self._eng.fail(exc)
        self._do(acts)

    def _settle_front(self) -> None:
        """The messages given back to the front of the buffer (jssync/base/ledger.py) after the
        way out settled the buffer: nak'ed now (stopped; ordered: rewound), dropped (closed)."""
        front = self._front
        self._front_counted.clear()
        stopped = self._eng.state is EngineState.STOPPED
        while front:
            msg = front.pop()
            if stopped and msg.__class__ is not _Control:
                self._not_handed_over(msg)

    def _nak_buffered(self) -> None:
        """Nak every buffered message, the front first (stopped; ordered: rewound)."""
        self._settle_front()
        q = self._q
        while True:
            try:
                item = q.get_nowait()
            except Empty:
                return
            if item.__class__ is not _Control:
                self._not_handed_over(item)

    def _not_handed_over(self, msg: Msg) -> None:
        """A message received and, after stop(), never handed over: nak it (any thread).

        The nak waits until the inbox is unsubscribed: sent earlier, the server would
        redeliver the message to a pull of this consume still open, which would only nak
        it again (counting a delivery each time, towards max_deliver).
        """
        if self._ack_none:
            return
        with self._lock:
            if not self._unsubscribed:
                self._nak_later.append(msg)
                return
        msg._nak_quiet()

    def _before_close(self, deadline: Deadline, drain: bool) -> None:
        """The connection is about to close, and still accepts acks (user thread; see
        ``Connection.close`` / ``Connection.drain``). Blocks until ``deadline`` at most.

        After :meth:`stop`: waits until the inbox is unsubscribed (its naks then went out),
        and naks what is still parked when ``deadline`` comes first, so the close writes
        every nak stop() promised before the socket goes. ``drain`` (``nc.drain()``, after
        it drained this consume): the iterator hands out the rest of the buffer first (the
        messages it hands out can be acked), unless no other thread iterates (nobody could
        take them: the thread that iterated is the one draining the connection, or it
        ended), and what is still buffered then, or at ``deadline``, is nak'ed (:meth:`stop`).
        """
        if self._state is EngineState.CLOSED:
            return
        if drain and self._cb is None and self._state is not EngineState.STOPPED:
            it = self._iter_thread
            if it is not None and it != threading.get_ident():
                while not self._closed.wait(deadline.slice()):
                    if deadline.expired() or not _thread_alive(it):
                        break
            if not self._closed.is_set():
                self.stop()
        if self._state is not EngineState.STOPPED:
            return
        while not self._server_done.wait(deadline.slice()):
            if deadline.expired():
                break
        with self._lock:
            self._unsubscribed = True  # from now on a message not handed over is nak'ed at once
            later = self._nak_later
            self._nak_later = []
        for msg in later:
            msg._nak_quiet()

    def _end(self, error: Error | None = None) -> None:
        """The connection closed (any thread): iterators and the callback lane end at once
        (the buffered messages are dropped; the server redelivers them after ack_wait).

        Quietly after ``close()``; with ``error`` (the connection gave up reconnecting) the
        iterator raises it, and the consume's own ``error_cb`` gets it (the connection's
        ``error_cb`` had it already).
        """
        with self._lock:
            acts = self._eng.closed(error)
            if not acts:
                return
            if error is not None:
                self.error = error
        self._detach()
        with self._conn.internal.subs_lock:
            self._conn.internal.subs.discard(self)
        self._server_done.set()
        self._front.clear()
        self._front_counted.clear()
        q = self._q
        while True:  # the buffered messages are dropped (their acks could only fail)
            try:
                q.get_nowait()
            except Empty:
                break
        if error is not None and self._cb is None:
            q.put(_Control(ConnectionClosedError(str(error))))
        else:
            q.put(_END)
        if error is not None and self._error_cb is not None:
            self._report(ConnectionClosedError(str(error)))
        self._closed.set()
