"""The background I/O thread: one asyncio loop per connection, and blocking waits on it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..base.deadline import Deadline
from ..base.errors import ConnectionClosedError, ForkError, TimeoutError, translate
from .clock import Clock

T = TypeVar("T")
log = logging.getLogger("jssync")

#: Bumped in every forked child; a loop made under another generation belongs to the parent.
_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1
    for lp in list(_loops):  # every loop made so far belongs to the parent
        lp.forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)

_loops: weakref.WeakSet[IOLoop] = weakref.WeakSet()


class IOLoop:
    """A daemon thread that runs one asyncio event loop.

    Coroutines are handed over with :meth:`submit` (a ``concurrent.futures.Future``) and
    waited for with :meth:`run`, which waits in slices of at most 0.1 s so Ctrl-C
    reaches the caller; an interrupted or timed-out operation is cancelled.

    ``clock`` is the connection's one timer thread (core/clock.py): heartbeat alarms and
    engine timers armed there run on this loop; it starts with its first alarm and stops
    with :meth:`stop`.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._generation = _fork_generation
        #: True in a forked child (set by the fork hook): a plain attribute, read on every ack
        self.forked = False
        self._stopped = False
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: the timer thread whose alarms run on this loop (started by its first alarm)
        self.clock = Clock(name.replace("-io-", "-clock-") if "-io-" in name else f"{name}-clock",
                           self.loop, self.thread)
        _loops.add(self)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except Exception:  # pragma: no cover - best effort at shutdown
                log.debug("error while shutting down the I/O loop", exc_info=True)
            finally:
                self.loop.close()

    # -- checks -------------------------------------------------------------------------

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def check_fork(self) -> None:
        """Raise :class:`ForkError` in a forked child (this loop runs in the parent only)."""
        if self._generation != _fork_generation:
            raise ForkError(
                "this connection was made in a parent process and cannot be used after os.fork(); "
                "call jssync.connect() in the child"
            )

    def check(self) -> None:
        """Raise if this loop cannot take work: forked child, stopped loop."""
        self.check_fork()
        if self._stopped:
            raise ConnectionClosedError("the connection is closed")

    # -- handing work over ----------------------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop and return its Future (cancelling it cancels the task).

        Raises:
            RuntimeError: called on the I/O thread itself (it would deadlock).
            ForkError, ConnectionClosedError: see :meth:`check`.
        """
        try:
            self.check()
            if self.in_loop_thread():
                raise RuntimeError(
                    "a blocking jssync call was made on the connection's I/O thread; "
                    "this would deadlock (use a callback, which runs on the worker pool)"
                )
        except BaseException:
            coro.close()
            raise
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed after check(): close() on another thread
            coro.close()
        raise ConnectionClosedError("the connection is closed")

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None | Deadline, what: str = "operation") -> T:
        """Run ``coro`` on the loop and block until it is done or the deadline passes.

        Blocks in slices of at most 0.1 s. On timeout or KeyboardInterrupt the operation is
        cancelled.

        Raises:
            jssync.TimeoutError: the deadline passed.
            whatever the coroutine raised, translated to jssync errors.
        """
        deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
        fut = self.submit(coro)
        return wait_future(fut, deadline, what, self.thread)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread soon (thread-safe, no wait).

        Raises:
            ForkError, ConnectionClosedError: see :meth:`check` (also when the loop closed
                after the check).
        """
        self.check()
        try:
            self.loop.call_soon_threadsafe(fn, *args)
            return
        except RuntimeError:
            pass
        raise ConnectionClosedError("the connection is closed")

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the loop and join the thread (idempotent; a no-op in a forked child; None: no limit)."""
        if self._stopped:
            return
        self._stopped = True
        self.clock.stop()
        if self.forked:
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        if not self.in_loop_thread():
            self.thread.join(timeout)


def wait_future(fut: concurrent.futures.Future[T], deadline: Deadline, what: str = "operation",
                thread: threading.Thread | None = None) -> T:
    """Wait for a Future in slices of at most 0.1 s; cancel it on timeout or interrupt.

    ``thread`` is the loop's thread: once it has ended, nothing will complete the Future
    (work handed over just as the loop stopped) and the wait ends with
    :class:`ConnectionClosedError` instead of lasting until the deadline.
    """
    try:
        while True:
            # every raise is outside the ``except`` that saw the slice end, so no
            # concurrent.futures.TimeoutError shows up as the context of a jssync error
            result = _result(fut, deadline.slice())
            if result is _CANCELLED:
                raise ConnectionClosedError(f"{what} was cancelled: the connection closed")
            if result is not _PENDING:
                return result  # type: ignore[no-any-return]
            if deadline.expired():
                fut.cancel()
                raise TimeoutError(f"{what} timed out after {deadline.timeout}s")
            if thread is not None and not thread.is_alive() and not fut.done():
                fut.cancel()
                raise ConnectionClosedError(f"{what} was not run: the connection closed")
    except BaseException as exc:
        if not fut.done():
            fut.cancel()
        new = translate(exc)
        if new is exc:
            raise
        raise new from exc


_PENDING: Any = object()
_CANCELLED: Any = object()


def _result(fut: concurrent.futures.Future[Any], timeout: float) -> Any:
    """``fut``'s result, or _PENDING if it is not done within ``timeout``, or _CANCELLED."""
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        return _PENDING if not fut.done() else fut.result(0)
    except concurrent.futures.CancelledError:
        return _CANCELLED
