"""The callback worker pool: daemon threads, with serial lanes for per-subscription order."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

from ..base.errors import ValidationError

log = logging.getLogger("jssync")

_STOP = object()
#: A serial lane gives its worker back after this many items or this many seconds, so one
#: busy subscription cannot keep a worker (or the whole pool) from the others.
_LANE_BUDGET = 256
_LANE_QUANTUM = 0.02


class WorkerPool:
    """A fixed set of named daemon threads running submitted callables.

    Daemon threads (not ``concurrent.futures``) so a callback that never returns cannot
    hang interpreter exit. Exceptions from a job go to ``on_error``.
    """

    def __init__(self, name: str, size: int, on_error: Callable[[BaseException], None]) -> None:
        if size < 1:
            raise ValidationError(f"callback_workers must be >= 1, got {size!r}")
        self._jobs: SimpleQueue[Any] = SimpleQueue()
        self._on_error = on_error
        self._closed = False
        self._local = threading.local()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-cb-{i}", daemon=True) for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def in_worker(self) -> bool:
        return getattr(self._local, "worker", False)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._closed:
            return
        self._jobs.put((fn, args))

    def _work(self) -> None:
        self._local.worker = True
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, args = job
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported, the worker goes on
                try:
                    self._on_error(exc)
                except Exception:
                    log.exception("error callback failed")

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the threads after the jobs already queued; wait at most ``timeout`` in all."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._jobs.put(_STOP)
        me = threading.current_thread()
        end = time.monotonic() + timeout
        for t in self._threads:
            if t is me:
                continue
            t.join(max(0.0, end - time.monotonic()))


class SerialLane:
    """Runs items through ``handler`` one at a time, in order, on a shared pool."""

    def __init__(self, pool: WorkerPool, handler: Callable[[Any], None]) -> None:
        self._pool = pool
        self._handler = handler
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._running = False
        #: The thread running the handler right now (0: none).
        self._owner = 0
        self.idle = threading.Event()
        self.idle.set()

    def in_handler(self) -> bool:
        """True when called from inside the handler (waiting for ``idle`` would wait for oneself)."""
        return self._owner == threading.get_ident()

    def put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            if self._running:
                return
            self._running = True
            self.idle.clear()
        self._pool.submit(self._drain)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> list[Any]:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            return items

    def _drain(self) -> None:
        me = threading.get_ident()
        budget = _LANE_BUDGET
        until = time.monotonic() + _LANE_QUANTUM
        while True:
            with self._lock:
                if not self._items:
                    self._owner = 0
                    self._running = False
                    self.idle.set()
                    return
                if budget <= 0 or time.monotonic() >= until:
                    # give the worker back: other lanes and jobs queued on the pool get a
                    # turn, this lane goes on (still in order) when its turn comes again
                    self._owner = 0
                    self._pool.submit(self._drain)
                    return
                budget -= 1
                item = self._items.popleft()
                self._owner = me
            try:
                self._handler(item)
            except BaseException as exc:  # noqa: BLE001
                try:
                    self._pool._on_error(exc)
                except Exception:
                    log.exception("error callback failed")


def get_nowait(q: SimpleQueue[Any]) -> Any:
    try:
        return q.get_nowait()
    except Empty:
        return None
