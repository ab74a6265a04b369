"""``consume``: the handle the application holds, and the iterator form.

:class:`ConsumeContext` is put together from the rooms beside this module (see
:mod:`.state` for the table): the intake on the I/O thread, the runner of the pull engine,
the leases, the end, the callback lane. This module holds what the application calls:
``stop``, ``drain``, ``wait``, the counts, and ``for msg in messages`` / ``next()``, whose
per-message path is one queue read and one engine call (``taken``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from ...base.deadline import DEFAULT, EXPIRED, Deadline, Default, wait_get
from ...base.errors import Error, TimeoutError
from ...base.status import message_size
from ...core.hooks import HOOKS as _CORE
from ...core.msg import Msg
from ..priority import Pins, PullPriority
from .common import _END, _Control
from .ending import Ending
from .engine import EngineState
from .intake import Intake
from .lane import CallbackLane
from .leasing import LeaseKeeper
from .options import ConsumeOptions
from .pulling import PullRunner

if TYPE_CHECKING:
    from ..context import JetStream

__all__ = ["ConsumeContext", "consume"]


class ConsumeContext(Intake, PullRunner, LeaseKeeper, Ending, CallbackLane):
    """A running ``consume``: the iterator (without a callback) and the handle.

    Iterator form: ``for msg in messages`` yields messages as they come; ``stop()`` ends
    it at once (every message received and not handed over is nak'ed, so the server
    redelivers it at once), ``drain()`` stops pulling and ends once every message the
    server sent was handed over. Callback form: the callback runs on the connection's
    worker pool, one message at a time, in order, never before ``consume()`` returned;
    ``stop``/``drain`` as above, ``wait()`` blocks until it is over.

    Leases: with an ack policy other than none, every message received and not yet acked,
    nak'ed or terminated (waiting in the buffer or being handled) gets an in-progress ack
    (+WPI) whenever half the consumer's ``ack_wait`` (read from its info) passed since its
    delivery or its last +WPI, for at most ``jssync.jetstream.leases.MAX_EXTENSION`` (600 s)
    after its receipt: time in the buffer or in a slow handler causes no redelivery.

    Terminal conditions (consumer deleted, push consumer) end the iteration by raising
    :class:`jssync.ConsumerDeletedError` / :class:`jssync.ConsumerIsPushBasedError`
    (callback form: passed to ``error_cb``, and kept on :attr:`error`). Warnings
    (missed heartbeats, exceeded limits) go to ``error_cb`` (default: the connection's)
    and the ``jssync`` logger. Thread-safe.
    """

    def stop(self) -> None:
        """Stop at once: no more messages or callbacks. Idempotent.

        Every message received and not handed to the application is nak'ed, so the server
        redelivers it at once: the buffered ones now, and those still arriving until the
        server processed the unsubscribe (the pulls in flight finish sending first, as for
        :meth:`drain`). Returns without waiting (a callback that is running, or that the
        lane had already decided to call, finishes; no further one starts; :meth:`wait`
        returns once the rest was nak'ed and the lane ended). An exception (Ctrl-C) landing
        inside hands the stop's actions to the I/O thread (where no signal handler runs), so
        the stop completes whatever happens (the engine gives them out only once).
        """
        acts: tuple[Any, ...] = ()
        try:
            with self._lock:
                acts = self._eng.stop()
            self._do(acts)
        except BaseException:
            if acts:  # (running them again is harmless: naks skip settled messages, the unsubscribe runs once)
                try:
                    self._conn.internal.loop.call_soon(self._do, acts)
                except Error:  # the connection is closed: nothing left to stop
                    pass
            raise

    def drain(self, timeout: float | None | Default = DEFAULT) -> None:
        """Stop pulling and end once every message the server sent was delivered. Idempotent.

        No new pull request is sent; the pulls in flight finish sending (until each got all
        its messages or its ending status, or nothing arrived for 0.5 s), then the inbox is
        unsubscribed (UNSUB, PING/PONG, removal): every message the server sent before it
        processed the UNSUB is handed to the application (iterator: before the iteration
        ends; callback form: through the callback). Acking them is the application's job.

        Without ``timeout`` it starts the drain and returns (use :meth:`wait`). With ``timeout``
        it blocks until the inbox is unsubscribed and, in callback form, every message went
        through the callback (``timeout=None``: no limit). Called from this consume's own
        callback it does not wait (the rest follows once the callback returns).

        Raises:
            jssync.TimeoutError: ``timeout`` passed first (the drain goes on).
        """
        with self._lock:
            acts = self._eng.drain()
        self._do(acts)
        if not isinstance(timeout, Default):
            if self._cb is not None and self._cb_thread == threading.get_ident():
                return  # called from our own callback: the lane ends once the callback returns
            deadline = Deadline(timeout)
            ev = self._closed if self._cb is not None else self._server_done
            while not ev.wait(deadline.slice()):
                deadline.check("consume drain")

    def _drain_start(self) -> None:
        """``nc.drain()``: start this consume's drain without waiting (its ``drain(timeout)``
        waits for it next), so that the consumes of a connection drain together."""
        self.drain()

    @property
    def closed(self) -> bool:
        """True once no more messages are handed to the application: stopped (iterator: at
        once; callback form: once the running callback returned), drained and every message
        delivered, or ended by an error."""
        return self._closed.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until consuming is over, at most ``timeout`` seconds (None: no limit).

        Over means :attr:`closed` and the inbox unsubscribed: after :meth:`stop`, every
        message received and not handed over was nak'ed by then.

        Raises:
            jssync.TimeoutError: still running after ``timeout``.
            RuntimeError: called from this consume's own callback.
        """
        if self._cb is not None and self._cb_thread == threading.get_ident() and not self._closed.is_set():
            raise RuntimeError("wait() was called from this consume's own callback: it would never return")
        deadline = Deadline(timeout)
        for ev in (self._closed, self._server_done):
            while not ev.wait(deadline.slice()):
                if deadline.expired():
                    raise TimeoutError(f"consume of {self.consumer!r} still running after {timeout}s")

    @property
    def pending_messages(self) -> int:
        """Messages requested and not yet handed to the application (buffered or in flight)."""
        return self._eng.pending_messages

    @property
    def pending_bytes(self) -> int:
        """Bytes requested and not yet handed to the application (``max_bytes`` mode)."""
        return self._eng.pending_bytes

    @property
    def pull_requests(self) -> int:
        """Pull requests sent so far."""
        return self._eng.pulls

    def __enter__(self) -> ConsumeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<jssync.ConsumeContext {self.stream}/{self.consumer} {self._eng.state.name.lower()}>"

    def __iter__(self) -> ConsumeContext:
        if self._cb is not None:
            raise TypeError("a consume with a callback cannot be iterated")
        return self

    def __next__(self) -> Msg:
        tracer = _CORE.tracer  # jssync.otel: a receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("consume", self.__next__, self._conn, self.stream, self.consumer)
        self._iter_thread = threading.get_ident()
        # the hand-over (jssync/base/ledger.py): from the take to the return, an exception
        # gives the message back to the front of the buffer
        msg: Any = None
        counted = False
        try:
            front = self._front
            if front:  # given back by an interrupted read: it comes first
                msg = front[-1]
                del front[-1]
                fc = self._front_counted
                if fc and fc[-1] is msg:
                    del fc[-1]
                    counted = True
            else:
                try:
                    for msg in self._nowait:  # noqa: B007 - FOR_ITER: no signal check before the store
                        break
                except Empty:
                    pass
                if msg is None:  # wait outside the except block: what it raises carries no queue.Empty context
                    msg = self._wait_msg()
            if msg.__class__ is not _Control:
                if not counted:
                    need = self._take_bytes(msg) if self._bytes_mode else self._eng.taken()
                    counted = True
                    if need:
                        self._refill()
                if self._eng.stop_after and self._eng.reached:  # stop_after: the last one, the rest is nak'ed
                    self.stop()
                return msg  # type: ignore[no-any-return]
        except BaseException:
            if msg is not None and msg.__class__ is not _Control:
                self._give_back(msg, counted)
            raise
        self._q.put(_END)  # other iterating threads end too
        self._user_finished()
        exc = msg.exc
        if exc is not None:
            msg.exc = None
            raise exc
        raise StopIteration

    def next(self, timeout: float | None = None) -> Msg:
        """Return the next message, blocking up to ``timeout`` seconds (None: no limit).

        An exception (Ctrl-C) landing while the message is being handed over puts it back
        at the front of the buffer: the next call returns it (or the way out naks it).

        Raises:
            jssync.TimeoutError: no message in time.
            StopIteration: consuming is over.
            jssync.ConsumerDeletedError, jssync.ConsumerIsPushBasedError.
        """
        if self._cb is not None:
            raise TypeError("next() cannot be used on a consume with a callback")
        tracer = _CORE.tracer  # jssync.otel: a receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("consume", self.next, self._conn, self.stream, self.consumer, timeout)
        self._iter_thread = threading.get_ident()
        msg: Any = None
        counted = False
        try:
            front = self._front
            if front:
                msg = front[-1]
                del front[-1]
                fc = self._front_counted
                if fc and fc[-1] is msg:
                    del fc[-1]
                    counted = True
            else:
                try:
                    for msg in self._nowait:  # noqa: B007 - the take, see ledger.py
                        break
                except Empty:
                    pass
                if msg is None:
                    msg = self._wait_msg(Deadline(timeout))
            if msg.__class__ is not _Control:
                if not counted:
                    need = self._take_bytes(msg) if self._bytes_mode else self._eng.taken()
                    counted = True
                    if need:
                        self._refill()
                if self._eng.stop_after and self._eng.reached:  # stop_after: the last one, the rest is nak'ed
                    self.stop()
                return msg  # type: ignore[no-any-return]
        except BaseException:
            if msg is not None and msg.__class__ is not _Control:
                self._give_back(msg, counted)
            raise
        self._q.put(msg)
        return self.__next__()

    def _give_back(self, msg: Msg, counted: bool) -> None:
        """A message taken and not returned (an exception landed): back to the front of the
        buffer, where the next read, or the way out, finds it first (jssync/base/ledger.py).
        Called by the reader's ``except`` (the append is done before anything can raise again).
        """
        self._front.append(msg)
        if counted:  # the engine counted it taken already: not counted again when taken next
            self._front_counted.append(msg)
        state = self._eng.state
        if state is EngineState.STOPPED:
            with self._lock:
                late = self._unsubscribed
            if late:  # the buffer was nak'ed already: nak this one too, now
                self._settle_front()
        elif state is EngineState.CLOSED:
            self._settle_front()

    def _take_bytes(self, msg: Msg) -> bool:
        """Count one message taken in ``max_bytes`` mode; True when a pull is due."""
        try:
            size = self._sizes.popleft()
        except IndexError:  # pragma: no cover - every buffered message's size was appended
            size = message_size(msg.subject, msg.reply, msg.headers, msg.data)
        with self._lock:
            return self._eng.taken(1, size)

    def _wait_msg(self, deadline: Deadline | None = None) -> Any:
        q = self._q
        if deadline is None:
            deadline = Deadline(None)  # its slices also notice a cancelled asyncio task (Ctrl-C)
        item: Any = EXPIRED
        while True:
            try:
                item = wait_get(q, deadline.slice(), self._front)
                if item is not EXPIRED:
                    return item
            except BaseException:
                if item is not EXPIRED:  # returned to this frame and not passed on
                    self._front.append(item)
                raise
            if deadline.expired():
                raise TimeoutError(f"no message from consumer {self.consumer!r} within {deadline.timeout}s")
            if self._eng.state is EngineState.RUNNING:
                self._refill()  # (it pulls only at the threshold)


def consume(js: JetStream, stream: str, consumer: str, callback: Callable[[Msg], Any] | None,
            error_cb: Callable[[BaseException], Any] | None, opts: ConsumeOptions,
            ack_none: bool, prio: PullPriority | None = None, pins: Pins | None = None,
            ack_wait: float | None = None) -> ConsumeContext:
    """Start consuming (see :class:`ConsumeContext`). ``ack_wait``: the consumer's (seconds),
    for the leases of the messages held (None: none kept)."""
    cc = ConsumeContext(js, stream, consumer, opts, callback, error_cb, ack_none, prio, pins, ack_wait)._start()
    cc._started()
    return cc
