"""The callback form of a consume: a lane on the connection's worker pool.

At most one lane runs per consume (``_running``, under ``_lane_lock``): it takes messages
off the queue and calls the callback with each, one at a time, in order. It starts when
the intake buffers a message and no lane runs, gives its worker back every
``_LANE_BUDGET`` messages (so other jobs on the pool get a turn), and ends at the end
marker. Nothing is handed to the callback before ``consume()`` returned.
"""

from __future__ import annotations

import logging
import threading
from queue import Empty

from ...core.hooks import HOOKS as _CORE
from .common import _Control
from .engine import EngineState
from .state import ConsumeState

__all__ = ["CallbackLane"]

log = logging.getLogger("jssync")

#: Messages a callback lane handles before it yields its worker to other jobs.
_LANE_BUDGET = 512


class CallbackLane(ConsumeState):
    """Calls the callback with each message, on the worker pool."""

    def _started(self) -> None:
        """consume() is returning: let the callback lane run (it waited since _start)."""
        if self._cb is None:
            return
        with self._lane_lock:
            self._running = False
        if not self._q.empty():
            self._kick_lane()

    def _kick_lane(self) -> None:
        with self._lane_lock:
            if self._running:
                return
            self._running = True
        self._conn.internal.pool.submit(self._lane)

    def _lane(self) -> None:
        q = self._q
        cb = self._cb
        assert cb is not None
        eng = self._eng
        budget = _LANE_BUDGET
        while True:
            budget -= 1
            if not budget:
                # give the worker back now and then, so other callbacks on the pool get a turn
                self._conn.internal.pool.submit(self._lane)
                return
            try:
                msg = q.get_nowait()
            except Empty:
                self._running = False
                if q.empty():
                    return
                with self._lane_lock:
                    if self._running:
                        return
                    self._running = True
                continue
            if msg.__class__ is _Control:
                self._user_finished()
                return  # _running stays True: nothing runs the lane again
            if self._take_bytes(msg) if self._bytes_mode else eng.taken():
                self._refill()
            self._cb_thread = threading.get_ident()
            # the state is read last, right before the call: a stop() that returned before it
            # (even while this lane sent the next pull) keeps the message from the callback
            state = eng.state
            if state is not EngineState.RUNNING and state is not EngineState.DRAINING:
                self._cb_thread = None
                if state is EngineState.STOPPED:
                    self._not_handed_over(msg)
                continue  # (closed: dropped)
            try:
                tracer = _CORE.tracer  # jssync.otel: a process span around the callback (None: off)
                if tracer is None:
                    cb(msg)
                else:
                    tracer.process(cb, msg, self._conn)
            except BaseException as exc:  # noqa: BLE001 - reported, consuming goes on
                log.debug("consume callback raised", exc_info=True)
                self._report(exc)
            finally:
                self._cb_thread = None
            if eng.reached:  # stop_after: that was the last callback; the rest is nak'ed
                self.stop()
