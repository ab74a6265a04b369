"""One deadline for a whole blocking operation, in monotonic time."""

from __future__ import annotations

import asyncio
import enum
import importlib
import signal
import sys
import time
from functools import partial
from queue import Empty, SimpleQueue
from typing import Any, Final

from .cpython import cancel_requested
from .errors import RequestTimeoutError, TimeoutError, ValidationError

#: The longest a blocking wait sleeps before it looks again (so Ctrl-C gets through).
SLICE = 0.1


class Default(enum.Enum):
    """The type of :data:`DEFAULT`, the value of an argument left out.

    ``timeout: float | None | Default = DEFAULT``: leaving ``timeout`` out means the
    call's default (e.g. the JetStream context's timeout); ``None`` means no limit.
    """

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


#: An argument left out: the call's default (see :func:`resolve_timeout`).
DEFAULT: Final = Default.DEFAULT

def check_timeout(timeout: Any, what: str = "timeout") -> float | None:
    """``timeout`` if it is a wait the timeout rule allows: a number of seconds >= 0, or None (no limit).

    0 means no wait (see :func:`no_wait`). Anything else (a negative number, NaN, a bool, a str)
    raises :class:`jssync.ValidationError` naming ``what``, before anything is sent.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValidationError(f"{what} must be a number of seconds >= 0 (0: no wait) or None (no limit), "
                              f"got {timeout!r}")
    return timeout


def check_setting(timeout: Any, what: str = "timeout") -> float:
    """A default timeout setting (``nc.jetstream(timeout=...)``, ``connect(timeout=...)``): a number > 0.

    Raises:
        jssync.ValidationError: naming ``what`` (a str, a bool, None, 0, a negative number or NaN).
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValidationError(f"{what} must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


def resolve_timeout(timeout: float | None | Default, default: float | None, what: str = "timeout") -> float | None:
    """The one reading of a ``timeout`` argument (docs/threading.md "The timeout rule").

    :data:`DEFAULT` (left out) gives ``default``, the call's own default; ``None`` is no
    limit; a number is itself, 0 meaning no wait (a negative one, or not a number, raises
    :class:`jssync.ValidationError` naming ``what``).
    """
    if isinstance(timeout, Default):
        return default
    return check_timeout(timeout, what)


def no_wait(timeout: float | None, what: str) -> None:
    """The timeout rule's 0 for a call that needs the server's answer: raise TimeoutError, send nothing.

    The answer cannot arrive without a wait, so the call gives up before sending (no side
    effect: nothing published, nothing stored). Calls that read what already arrived take 0
    as "what is there now" instead.

    Raises:
        jssync.RequestTimeoutError (a jssync.TimeoutError): ``timeout`` is 0.
    """
    if timeout == 0:
        raise RequestTimeoutError(f"{what}: timeout=0 means no wait, and the server's answer cannot come without one "
                           f"(nothing was sent)")


def round_trip_timeout(timeout: float | None | Default, default: float | None, what: str) -> float | None:
    """:func:`resolve_timeout` for a call that needs the server's answer; 0 raises (see :func:`no_wait`)."""
    t = resolve_timeout(timeout, default)
    no_wait(t, what)
    return t


#: What :meth:`Deadline.get` returns when the deadline passed with nothing to get.
EXPIRED: Any = object()

_UNSET: Any = object()


class Deadline:
    """A point in monotonic time by which an operation must finish.

    ``Deadline(None)`` never expires.

    Every wait slice (:meth:`slice`) also notices a Ctrl-C that asyncio turned into a
    cancellation: a blocking call made from a coroutine (inside ``asyncio.run``) blocks the
    event loop, so asyncio's SIGINT handler can only mark the task as cancelling. The next
    slice sees that and raises :class:`asyncio.CancelledError` in the calling coroutine:
    a cancellation requested since the first slice, or one requested before the call began
    and not yet delivered (the task is still running this very step).
    """

    __slots__ = ("_cancels", "_end", "_task", "timeout")

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ValidationError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self._end = None if timeout is None else time.monotonic() + timeout
        self._task: Any = _UNSET
        self._cancels = 0

    def remaining(self) -> float | None:
        """Seconds left (never below 0), or None for no limit."""
        if self._end is None:
            return None
        return max(0.0, self._end - time.monotonic())

    def left(self, floor: float = 0.001) -> float | None:
        """What is left, as the ``timeout`` of a call made within this deadline.

        At least ``floor`` seconds (a call given 0 might not even try); None for no limit.
        """
        if self._end is None:
            return None
        return max(floor, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def slice(self, limit: float = SLICE) -> float:
        """The time to wait next: at most ``limit``, at most what is left.

        Raises:
            asyncio.CancelledError: this runs in an asyncio task (a blocking call made
                from a coroutine) that was cancelled since the first slice, e.g. by
                Ctrl-C inside ``asyncio.run``.
        """
        task = self._task
        if task is _UNSET:  # the first slice of this wait: look the task up once
            try:
                task = asyncio.current_task()
            except RuntimeError:  # no event loop runs in this thread
                task = None
            self._task = task
            if task is not None:
                self._cancels = task.cancelling()
        if task is not None and cancel_requested(task, self._cancels):
            raise asyncio.CancelledError("cancelled (Ctrl-C?) during a blocking jssync call")
        rem = self.remaining()
        return limit if rem is None else min(limit, rem)

    def get(self, q: SimpleQueue[Any], front: list[Any] | None = None) -> Any:
        """The next item of ``q``, waiting in slices; :data:`EXPIRED` once the deadline passed.

        The wait happens outside any ``except`` block, so an exception raised by the caller
        (or by Ctrl-C during the wait) carries no ``queue.Empty`` as its context. ``front``:
        where an item taken and not returned (an exception landed in between) is given
        back (see :func:`wait_get`).
        """
        item: Any = EXPIRED
        try:
            while True:
                item = wait_get(q, self.slice(), front)
                if item is not EXPIRED:
                    return item
                if self.expired():
                    return EXPIRED
        except BaseException:
            if item is not EXPIRED:  # returned to this frame and not passed on
                _give_back(q, front, item)
            raise

    def check(self, what: str = "operation") -> None:
        """Raise :class:`jssync.TimeoutError` if the deadline has passed."""
        if self.expired():
            raise TimeoutError(f"{what} timed out after {self.timeout}s")


# CPython 3.11 and 3.12: ``SimpleQueue.get(timeout=t)`` whose wait is interrupted by a signal
# with a handler (Ctrl-C inside ``asyncio.run``, a SIGTERM/SIGHUP/SIGCHLD handler) recomputes
# what is left of ``t`` after the handler ran; if that is negative by then (a slow handler,
# a busy GIL) it waits with no limit, until something is put. 3.13 rewrote the queue.
# ``wait_get`` keeps the asynchronous signals pending during such a wait (the kernel hands a
# process signal to a thread that is not waiting, or the wait's end delivers it, at most one
# slice later); a queue with something in it needs no wait and no mask.
_QUEUE_WAIT_IS_SIGNAL_SAFE = sys.version_info >= (3, 13) or not hasattr(signal, "pthread_sigmask")
if not _QUEUE_WAIT_IS_SIGNAL_SAFE:
    _signal: Any = importlib.import_module("_signal")
    _sigmask = _signal.pthread_sigmask  # the C function: no Python frame a handler can raise in
    _SIG_BLOCK = _signal.SIG_BLOCK
    _SIG_UNBLOCK = _signal.SIG_UNBLOCK
_DEFERRED_SIGNALS: frozenset[int] = frozenset(
    int(getattr(signal, name)) for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD",
        "SIGWINCH", "SIGPIPE", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGURG", "SIGCONT", "SIGTSTP",
        "SIGTTIN", "SIGTTOU", "SIGXCPU", "SIGXFSZ")
    if hasattr(signal, name))


def wait_get(q: SimpleQueue[Any], timeout: float, front: list[Any] | None = None) -> Any:
    """``q.get(timeout=timeout)``, or :data:`EXPIRED` if nothing came in time.

    Every timed wait on a :class:`queue.SimpleQueue` in jssync goes through here: on CPython
    3.11/3.12 a signal arriving near the end of such a wait can make it wait forever (see
    the comment above); here the wait ends when it should, and the signal's handler runs
    right after it (at most ``timeout`` later). Returns without an exception context.

    The hand-over (jssync/base/ledger.py): the item is taken by ``FOR_ITER`` (no signal
    check between the C call returning it and the local variable holding it); an exception
    landing after that (the handler of a signal held during the wait raises as soon as it is
    unblocked) appends the item to ``front`` before it propagates, so the caller's next read
    finds it first (without ``front`` it is put back at the end of ``q``).
    """
    item: Any = EXPIRED
    if _QUEUE_WAIT_IS_SIGNAL_SAFE or q.qsize():
        try:
            try:
                for item in iter(partial(q.get, True, timeout), EXPIRED):  # noqa: B007 - the take, see ledger.py
                    break
            except Empty:
                return EXPIRED
            return item  # (no check point between the store and the return)
        except BaseException:  # (a tracer's line event)
            if item is not EXPIRED:
                _give_back(q, front, item)
            raise
    # A pending handler may raise (KeyboardInterrupt) at any Python-level call, including
    # ``signal.pthread_sigmask`` (a Python wrapper); so the C function is called, the block
    # happens inside ``try``, and the unblock runs whatever happens: no exception can leave
    # the thread (and every process it starts afterwards) with signals masked.
    held = _sigmask(_SIG_BLOCK, ())  # only reads the mask
    mask = _DEFERRED_SIGNALS.difference(held) if held else _DEFERRED_SIGNALS
    try:
        try:
            _sigmask(_SIG_BLOCK, mask)
            for item in iter(partial(q.get, True, timeout), EXPIRED):  # noqa: B007 - the take, see ledger.py
                break
        except Empty:
            pass
        _sigmask(_SIG_UNBLOCK, mask)  # a signal held meanwhile: its handler raises right here
        return item
    except BaseException:
        if item is not EXPIRED:  # taken: back to the front of the reader's buffer
            _give_back(q, front, item)
        _sigmask(_SIG_UNBLOCK, mask)  # (idempotent)
        raise


def _give_back(q: SimpleQueue[Any], front: list[Any] | None, item: Any) -> None:
    if front is None:
        q.put(item)
    else:
        front.append(item)
