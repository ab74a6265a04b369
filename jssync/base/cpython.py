"""The one adapter for CPython's private internals (asyncio, concurrent.futures, threading).

No other module of jssync reads a private name of the standard library
(tests/unit/test_natspy_privates.py checks it with an AST walk). What is read, and why:

- ``asyncio.Task._must_cancel``: a ``task.cancel()`` not yet delivered (``cancelling()`` counts
  it only from Python 3.11's uncancel bookkeeping on; a blocking call made from a task checks
  both so Ctrl-C ends it): :func:`cancel_requested`.
- ``concurrent.futures._base`` states and a ``Future``'s fields, ``threading.Condition``'s
  ``_lock`` and ``_waiters``: :class:`LeanFuture`, a Future that shares one Condition with its
  siblings and makes its two lists on first use (``publish_async`` keeps thousands in flight).

The capabilities are checked once, at import (:data:`CAPABILITIES`). Where one is missing
(another interpreter, a future CPython) jssync does without it: :func:`cancel_requested` relies
on ``cancelling()`` alone, and :class:`LeanFuture` is a plain ``concurrent.futures.Future``
(its Condition argument unused). Imports nothing from jssync.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")


class _Deadline(Protocol):
    """What :class:`LeanFuture` waits with (a :class:`jssync.base.deadline.Deadline`)."""

    def expired(self) -> bool: ...

    def slice(self) -> float: ...

__all__ = ["CAPABILITIES", "NOT_SETTLED", "LeanFuture", "cancel_requested", "is_finished", "settled_result"]


def _check() -> dict[str, bool]:
    """Which private internals this interpreter has (looked at once, at import)."""
    caps = {"task_must_cancel": False, "lean_future": False}
    try:
        caps["task_must_cancel"] = hasattr(asyncio.Task, "_must_cancel")
    except Exception:  # noqa: BLE001 - a capability check never fails the import
        pass
    try:
        from concurrent.futures import _base

        cond = threading.Condition()
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        caps["lean_future"] = (
            all(hasattr(_base, n) for n in ("RUNNING", "FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED"))
            and hasattr(cond, "_lock") and hasattr(cond, "_waiters")
            and all(hasattr(fut, n) for n in ("_condition", "_state", "_result", "_exception", "_waiters",
                                              "_done_callbacks", "_invoke_callbacks"))
        )
    except Exception:  # noqa: BLE001
        pass
    return caps


#: What :func:`_check` found: ``task_must_cancel``, ``lean_future``.
CAPABILITIES: dict[str, bool] = _check()


#: What :func:`settled_result` returns for a Future that has no result to read now.
NOT_SETTLED: Any = object()


def cancel_requested(task: asyncio.Task[Any], cancels_at_start: int) -> bool:
    """True when ``task`` was asked to cancel since ``cancelling()`` was ``cancels_at_start``."""
    if task.cancelling() > cancels_at_start:
        return True
    return CAPABILITIES["task_must_cancel"] and bool(getattr(task, "_must_cancel", False))


if CAPABILITIES["lean_future"]:
    from concurrent.futures import _base as _futures_base

    _RUNNING = _futures_base.RUNNING
    _FINISHED = _futures_base.FINISHED
    _DONE_STATES = frozenset((_FINISHED, _futures_base.CANCELLED, _futures_base.CANCELLED_AND_NOTIFIED))

    class LeanFuture(concurrent.futures.Future[_T]):
        """A Future already RUNNING, sharing ``condition`` with its siblings, lists made on first use.

        What ``Future.__init__`` sets, but with a Condition shared by many Futures (a Condition
        plus an RLock per Future is a measurable cost) and already RUNNING (it cannot be
        cancelled). Any Future completing notifies the shared Condition, and the stock
        result()/exception() wait on it only once, so they are overridden to wait until *this*
        one is done, in short slices (Ctrl-C gets through). Thread-safe like a Future.
        """

        def __init__(self, condition: threading.Condition) -> None:
            self._condition = condition
            self._state = _RUNNING
            self._result = None
            self._exception = None
            # the two lists of a Future are made when first used (see _waiters): thousands of
            # Futures in flight, each with two empty lists, kept the cyclic GC busy
            self._w: list[Any] | None = None
            self._cb: list[Any] | None = None

        @property
        def _waiters(self) -> list[Any]:
            # what concurrent.futures.wait()/as_completed() register with; made on first use
            w = self._w
            if w is None:
                w = self._w = []
            return w

        @_waiters.setter
        def _waiters(self, value: list[Any]) -> None:
            self._w = value

        @property
        def _done_callbacks(self) -> list[Any]:
            cb = self._cb
            if cb is None:
                cb = self._cb = []
            return cb

        @_done_callbacks.setter
        def _done_callbacks(self, value: list[Any]) -> None:
            self._cb = value

        def new_deadline(self, timeout: float | None) -> _Deadline:
            """The deadline :meth:`result` and :meth:`exception` wait with (a subclass gives one)."""
            raise NotImplementedError

        def _wait_done(self, timeout: float | None) -> None:
            # until done or ``timeout``, in short slices (Ctrl-C gets through); spurious
            # wake-ups from the other Futures of the shared Condition just loop
            if self._state == _FINISHED:
                return
            deadline = self.new_deadline(None if timeout is None else max(0.0, timeout))
            with self._condition:
                while self._state not in _DONE_STATES:
                    if deadline.expired():
                        return
                    self._condition.wait(deadline.slice())

        def result(self, timeout: float | None = None) -> _T:
            """The result; blocks up to ``timeout`` seconds (None: until done).

            Raises:
                concurrent.futures.TimeoutError: not done within ``timeout``.
                The Future's exception.
            """
            self._wait_done(timeout)
            return super().result(0)

        def exception(self, timeout: float | None = None) -> BaseException | None:
            """The Future's exception, or None; blocks up to ``timeout`` like :meth:`result`."""
            self._wait_done(timeout)
            return super().exception(0)

        def set_result(self, result: _T) -> None:
            """As ``Future.set_result``, with less overhead: the same lock and steps, but the
            shared Condition is notified only when a thread waits on it, and the callbacks are
            looked at only when there are some."""
            cond = self._condition
            with cond._lock:  # type: ignore[attr-defined]  # the Condition's own lock
                if self._state in _DONE_STATES:
                    raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
                self._result = result
                self._state = _FINISHED
                if self._w:
                    for waiter in self._w:
                        waiter.add_result(self)
                if cond._waiters:  # type: ignore[attr-defined]
                    cond.notify_all()
            if self._cb:
                self._invoke_callbacks()  # type: ignore[attr-defined]

    def is_finished(fut: concurrent.futures.Future[Any]) -> bool:
        """True when ``fut`` finished (a result or an exception), read without its lock."""
        return fut._state == _FINISHED

    def settled_result(fut: concurrent.futures.Future[Any]) -> Any:
        """``fut``'s result when it finished without an exception, read without its lock (set_result
        sets the result before the state); :data:`NOT_SETTLED` otherwise (not done, failed, cancelled)."""
        if fut._state == _FINISHED and fut._exception is None:
            return fut._result
        return NOT_SETTLED

else:  # pragma: no cover - an interpreter without those internals

    def is_finished(fut: concurrent.futures.Future[Any]) -> bool:
        """True when ``fut`` finished (a result or an exception)."""
        return fut.done() and not fut.cancelled()

    def settled_result(fut: concurrent.futures.Future[Any]) -> Any:
        """``fut``'s result when it finished without an exception; :data:`NOT_SETTLED` otherwise."""
        if fut.done() and not fut.cancelled() and fut.exception(0) is None:
            return fut.result(0)
        return NOT_SETTLED

    class LeanFuture(concurrent.futures.Future[_T]):  # type: ignore[no-redef]
        """A plain Future already RUNNING (``condition`` unused: the internals are missing)."""

        def __init__(self, condition: threading.Condition) -> None:
            super().__init__()
            self.set_running_or_notify_cancel()
