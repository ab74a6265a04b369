"""The delivery ledger: where each message received from the wire is, and how it is handed over.

Every reader (``Consumer.next``, the consume iterator, a fetch's iteration, the ordered
consumer's consume/fetch/next, a push subscription's ``next_msg``) keeps one ledger: each
message received is in exactly one state,

* **buffered**: in the reader's queue, or given back to the *front* of it (see below);
* **handed over**: returned to the application (from then on its ack is the application's);
* **settled**: acked, nak'ed or terminated by jssync (a way out nak'ed it).

:class:`Ledger` is that rule as a pure object (no I/O, no clock, no threads): the unit
tests and the pull engine's model check drive it next to the real readers' protocol and
check its invariant (:meth:`Ledger.check`). The readers themselves keep the ledger in the
structures they already have (their :class:`queue.SimpleQueue` and a *front* list), so the
per-message path costs no extra call; the protocol they follow is the one below.

The hand-over
-------------

A message is lost when an exception (Ctrl-C's KeyboardInterrupt above all) lands after it
was taken out of the queue and before the reader returned it: nobody holds it any more, the
server waits AckWait before it redelivers it, and an ordered consumer, whose expected
sequence moved past it, skips it for good. CPython runs a pending signal handler at a
few points only: at the start of a Python function (``RESUME``), on a backward jump, and
at the end of a ``CALL`` instruction, i.e. right after a C function such as
``SimpleQueue.get`` *returned*, before its result is stored anywhere (3.13 checks there
after every C call; 3.11/3.12 do too, and their signal-unblocking ``wait_get`` runs the
handler right after the unmask). So:

1. **Take without a CALL.** The reader takes an item with ``for item in getter: break``,
   ``getter`` being ``iter(q.get_nowait, None)`` (or a timed ``get``): ``FOR_ITER`` calls
   the C function and stores its result in the local variable with no signal check in
   between. A given-back item is taken with ``item = front[-1]; del front[-1]`` (no call
   at all). A Python function returning to its caller is not a check point either, so a
   helper such as :func:`jssync.base.deadline.wait_get` may return the item.
2. **Give back on any way out.** From the moment the item is in a local variable the
   reader is inside ``try``; ``except BaseException`` appends it to ``front`` (a list
   method: the append is done before the next check point) and re-raises. The next call
   takes ``front``'s last item before the queue: the item is back at the front of the
   buffer, in its place. Where the reader is going away (a fetch given up, a consume
   stopped or closed) the way out naks what is buffered, ``front`` first.
3. **Nothing between the take and the return can lose it.** What runs after the take
   (counting it in the pull engine, a refill pull) is inside the same ``try``; a message
   given back after the engine counted it is marked so (``front_counted``), and is not
   counted again when it is taken next.
4. **Every way out settles the buffer.** stop, break, an exception, close, drain, a fetch
   that ends, an engine already closed, a deleted consumer: what is buffered (``front``
   first, then the queue) is nak'ed at once, so the server redelivers it now, not after
   AckWait (nothing to nak with ack policy none; an ordered consumer instead rewinds its
   expected sequence to the first message not handed over).

What cannot be closed from Python: an exception inside a C call *after* it removed the
item (none of the calls used does that), and code of the application's own (``msg =
next(iterator)`` is a ``CALL``: a signal right after it loses the message; ``for msg in
...`` and the readers' own methods do not).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["Ledger", "LedgerError", "State"]

K = TypeVar("K", bound=Hashable)


class State(enum.Enum):
    """Where one message is."""

    BUFFERED = "buffered"
    HANDED_OVER = "handed over"
    SETTLED = "settled"


#: What an operation that breaks the ledger's rule raises (a bug in the reader using it).
LedgerError = AssertionError


class Ledger(Generic[K]):
    """The states of the messages one reader received, keyed by a message id (e.g. its
    stream sequence). Pure: no I/O, no clock, no threads (the caller serialises calls).

    Operations: :meth:`put` (received: buffered, at the back), :meth:`take` (the front
    message is handed over), :meth:`give_back` (a message taken and not returned goes back
    to the front), :meth:`settle` (acked, nak'ed, termed), :meth:`settle_buffered` (a way
    out: every buffered message is settled, in buffer order: the messages to nak).
    """

    __slots__ = ("_buf", "_state")

    def __init__(self) -> None:
        self._buf: deque[K] = deque()
        self._state: dict[K, State] = {}

    def put(self, key: K) -> None:
        """``key`` arrived from the wire: buffered at the back (a redelivery of a settled one
        is buffered again)."""
        st = self._state.get(key)
        if st is State.BUFFERED or st is State.HANDED_OVER:
            raise LedgerError(f"message {key!r} received while {st.value}")
        self._state[key] = State.BUFFERED
        self._buf.append(key)

    def take(self) -> K | None:
        """Hand the front message over; None when nothing is buffered."""
        if not self._buf:
            return None
        key = self._buf.popleft()
        self._state[key] = State.HANDED_OVER
        return key

    def give_back(self, key: K) -> None:
        """A message taken and not returned (interrupted) goes back to the front."""
        if self._state.get(key) is not State.HANDED_OVER:
            raise LedgerError(f"message {key!r} given back while {self.state(key)}")
        self._state[key] = State.BUFFERED
        self._buf.appendleft(key)

    def settle(self, key: K) -> None:
        """``key`` was acked, nak'ed or terminated (by the application or a way out)."""
        st = self._state.get(key)
        if st is None or st is State.SETTLED:
            raise LedgerError(f"message {key!r} settled while {self.state(key)}")
        if st is State.BUFFERED:
            self._buf.remove(key)
        self._state[key] = State.SETTLED

    def settle_buffered(self) -> list[K]:
        """A way out: every buffered message is settled now; returns them (to nak), front first."""
        out = list(self._buf)
        self._buf.clear()
        for key in out:
            self._state[key] = State.SETTLED
        return out

    def state(self, key: K) -> str:
        """The state of ``key`` as text ("unknown" when never received)."""
        st = self._state.get(key)
        return "unknown" if st is None else st.value

    def __len__(self) -> int:
        return len(self._buf)

    def buffered(self) -> list[K]:
        """The buffered messages, front first."""
        return list(self._buf)

    def in_state(self, state: State) -> set[K]:
        return {k for k, s in self._state.items() if s is state}

    def check(self, received: Iterable[K] | None = None) -> None:
        """The invariant: every message is in exactly one state, the buffer holds exactly the
        buffered ones, once each; with ``received``, every message received is known.

        Raises:
            LedgerError: the rule is broken.
        """
        buf = list(self._buf)
        if len(set(buf)) != len(buf):
            raise LedgerError(f"a message is buffered twice: {buf}")
        if set(buf) != self.in_state(State.BUFFERED):
            raise LedgerError("the buffer and the buffered states disagree")
        if received is not None:
            missing = set(received) - self._state.keys()
            if missing:
                raise LedgerError(f"received and in no state (lost): {sorted(map(repr, missing))}")
