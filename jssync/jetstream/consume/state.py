"""The state of one running ``consume``, shared by its rooms.

A :class:`~jssync.jetstream.consume.context.ConsumeContext` is made of rooms, one job each,
all working on the one state set up here:

============  ==========================================================================
intake.py     the I/O thread's side: every message and status on the inbox (the
              nats-py Receiver hook), sorted, counted by the engine, buffered
pulling.py    the runner of the :class:`~.engine.PullEngine`: starts it, feeds it the
              events, carries out its actions (pulls, the timer, new inboxes, lookups)
leasing.py    the in-progress acks (+WPI) of the messages held (jetstream/leases.py decides)
ending.py     the end: stop, drain, a terminal error, the connection closing
lane.py       the callback form: the lane on the worker pool that calls the callback
context.py    the handle the application holds, and the iterator form
============  ==========================================================================

Threads: the per-message paths (``put_nowait`` on the I/O thread, one ``taken`` on the
thread that takes a message) touch counters only their own thread writes; every other
engine event goes through ``_lock``. The fields below say who writes them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

from ...core.msg import Msg
from ..leases import Lease
from ..priority import Pins, PullPriority
from .engine import Action as EngineAction
from .engine import EngineState, PullEngine
from .options import _NS, ConsumeOptions
from .runner import LoopTimer

if TYPE_CHECKING:
    from ..context import JetStream

__all__ = ["ConsumeState"]

#: A consume prunes the acked messages from those received since its last lease check when
#: this many have piled up (see leasing.py).
FRESH_PRUNE_AT = 1024


class ConsumeState:
    """The fields of one consume and its engine (see the table above for the rooms that use them)."""

    #: the ordered consume: the engine answers ``Recreate`` where a consume re-pulls or ends
    _RECREATE = False

    def __init__(self, js: JetStream, stream: str, consumer: str, opts: ConsumeOptions,
                 callback: Callable[[Msg], Any] | None = None,
                 error_cb: Callable[[BaseException], Any] | None = None, ack_none: bool = False,
                 prio: PullPriority | None = None, pins: Pins | None = None,
                 ack_wait: float | None = None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        if error_cb is not None and not callable(error_cb):
            raise TypeError(f"error_cb must be callable, got {type(error_cb).__name__}")
        conn = js.conn
        conn.internal.check_open()
        self._js = js
        self._conn = conn
        self.stream = stream
        self.consumer = consumer
        self._next_subject = f"{js.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = conn.new_inbox()
        self._opts = opts
        self._cb = callback
        self._error_cb = error_cb
        self._ack_none = ack_none
        self._bytes_mode = opts.bytes_mode
        self._hb = opts.idle_heartbeat
        self._expires_ns = int(opts.expires * _NS)
        self._hb_ns = int(opts.idle_heartbeat * _NS)
        self._eng = PullEngine(
            max_messages=opts.max_messages, max_bytes=opts.max_bytes, threshold_messages=opts.threshold_messages,
            threshold_bytes=opts.threshold_bytes, expires=opts.expires, heartbeat=opts.idle_heartbeat,
            stream=stream, consumer=consumer, recreate=self._RECREATE, grouped=prio is not None,
            early=prio is not None and not prio.pinned, stop_after=opts.stop_after)
        #: a priority group but pinned_client: a pull may be due when a message is received
        self._early = self._eng.early
        self._q: SimpleQueue[Any] = SimpleQueue()
        # the hand-over (jssync/base/ledger.py): the queue read without a signal check before
        # the store, and the front of the buffer: messages given back by an interrupted read
        # (the last one first), those the engine counted taken already also in _front_counted
        self._nowait = iter(self._q.get_nowait, None)
        self._front: list[Any] = []
        self._front_counted: list[Any] = []
        self._lock = threading.Lock()  # every engine event but the per-message ones
        # the engine's one timer (heartbeat checks, retries) and the lease checks' timer
        self._timer = LoopTimer(conn.internal.loop, self._on_timer)
        self._lease_timer: LoopTimer = LoopTimer(conn.internal.loop, self._lease_tick)
        # subscriptions of inboxes whose pull requests were written off, with the time each is
        # drained at (their requests have expired by then; I/O thread)
        self._old: list[tuple[Any, float]] = []
        # max_bytes mode: the wire size of each buffered message, in queue order (I/O thread appends)
        self._sizes: deque[int] = deque()
        # callback lane
        self._running = False
        self._cb_thread: int | None = None
        self._lane_lock = threading.Lock()
        self._closed = threading.Event()
        self._server_done = threading.Event()  # the inbox is unsubscribed: nothing more arrives
        self._winding_down = False
        self._unsubscribed = False  # under _lock: the inbox is gone, naks go out at once
        self._nak_later: list[Msg] = []  # under _lock: after stop(), nak'ed once unsubscribed
        self._iter_thread: int | None = None  # iterator form: the thread that last asked for a message
        self._looking_up = False
        self.error: BaseException | None = None
        self._nsub: Any = None
        self._on_disc = self._disconnected
        self._on_reconn = self._reconnected
        # priority groups (ADR-42): the pull's options; pinned_client: the handle's pin ids and
        # the last id a pull carried, until a 423 (which makes the pulls in flight with it stale)
        self._prio = prio
        self._pins = pins if prio is not None and prio.pinned else None
        self._group = prio.group if prio is not None else ""
        self._sent_pin: str | None = None
        #: the last pull request queued (an interrupted refill checks it was sent)
        self._sent_last: Any = None
        # leases (see jetstream/leases.py; I/O thread only): the consumer's ack_wait when
        # acks count, the messages received since the last lease check, the leases watched
        self._lease_wait: float | None = ack_wait if not ack_none and ack_wait is not None and ack_wait > 0 else None
        self._fresh: list[Msg] = []
        self._fresh_cap: int = FRESH_PRUNE_AT
        self._leases: list[Lease] = []
        self._lease_stamp: float = 0.0

    @property
    def _state(self) -> EngineState:
        """Where the consume is (its engine's state)."""
        return self._eng.state

    @property
    def _rx(self) -> int:
        """Messages received so far."""
        return self._eng.rx

    if TYPE_CHECKING:  # what one room calls in another (each is defined once, in the room named)

        def _on_timer(self) -> None: ...  # pulling.py
        def _do(self, acts: tuple[EngineAction, ...]) -> None: ...  # pulling.py
        def _refill(self) -> None: ...  # pulling.py
        def _report(self, exc: BaseException) -> None: ...  # pulling.py
        def _disconnected(self) -> None: ...  # pulling.py
        def _reconnected(self) -> None: ...  # pulling.py
        def _status(self, msg: Msg, written_off: bool) -> None: ...  # intake.py
        def _written_off_msg(self, msg: Msg) -> None: ...  # intake.py
        def _prune_fresh(self) -> None: ...  # leasing.py
        def _lease_tick(self) -> None: ...  # leasing.py
        def _detach(self) -> None: ...  # ending.py
        def _ended(self, error: BaseException | None) -> None: ...  # ending.py
        def _wind_down(self, wait: bool) -> None: ...  # ending.py
        def _user_finished(self) -> None: ...  # ending.py
        def _terminal(self, exc: BaseException) -> None: ...  # ending.py
        def _nak_buffered(self) -> None: ...  # ending.py
        def _not_handed_over(self, msg: Msg) -> None: ...  # ending.py
        def _kick_lane(self) -> None: ...  # lane.py
        def _take_bytes(self, msg: Msg) -> bool: ...  # context.py
        def _settle_front(self) -> None: ...  # ending.py
        def stop(self) -> None: ...  # context.py
