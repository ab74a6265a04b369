"""The I/O thread's side of a consume: every message and status on its inbox.

nats-py hands each message to the consume itself (it stands in for the subscription's
queue: :class:`~jssync.core.natspy.Receiver`), on the I/O thread, with no event-loop hop:
:meth:`Intake.put_nowait` sorts it (a user message or a status, see
:mod:`jssync.base.status`), tells the engine, and puts user messages on the queue the
iterator or the callback lane reads. This is the per-message path: it calls the engine
once and nothing else (the body of ``_buffer`` is written out in it).
"""

from __future__ import annotations

from ...base.status import classify, is_user_msg, message_size
from ...core import natspy as _natspy
from ...core.msg import Msg
from .common import _wire_header_len
from .engine import Action as EngineAction
from .engine import Nak
from .state import ConsumeState

__all__ = ["Intake"]


class _WrittenOff(_natspy.Receiver):
    """The receiver of a consume inbox whose pull requests were written off.

    Whatever still arrives there comes from requests the counts no longer include (see
    ``PullRunner._swap_inbox``); the server tells the inboxes apart by the subscription id
    of each message.
    """

    __slots__ = ("cc",)

    def __init__(self, cc: ConsumeState) -> None:
        self.cc = cc

    def put_nowait(self, msg: Msg) -> None:
        self.cc._written_off_msg(msg)


class Intake(ConsumeState, _natspy.Receiver):
    """Messages and statuses arriving on the inbox (I/O thread)."""

    def put_nowait(self, msg: Msg) -> None:
        """Called by nats-py on the I/O thread for every message on the inbox (the Receiver hook)."""
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            if self._pins is not None:
                self._pins.seen(self._group, h)
            if self._bytes_mode:
                size = message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(self._conn, msg))
                self._sizes.append(size)
                acts = self._eng.message(size)
            else:
                acts = self._eng.message()
            if acts:
                self._not_buffered(msg, acts)
                return
            # buffered (the body of _buffer, inline: the per-message path)
            if self._ack_none:
                msg._ack_none = True
            elif self._lease_wait is not None:
                fresh = self._fresh
                fresh.append(msg)
                if len(fresh) >= self._fresh_cap:
                    self._prune_fresh()
            self._q.put(msg)
            if self._cb is not None and not self._running:
                self._kick_lane()
            if self._early and self._eng.due():  # a priority group: keep a pull waiting
                self._refill()
            return
        self._status(msg, False)

    def _buffer(self, msg: Msg) -> None:
        """Hand a received message to the application (the queue the iterator or lane reads)."""
        if self._ack_none:
            msg._ack_none = True
        elif self._lease_wait is not None:
            fresh = self._fresh
            fresh.append(msg)
            if len(fresh) >= self._fresh_cap:
                self._prune_fresh()
        self._q.put(msg)
        if self._cb is not None and not self._running:
            self._kick_lane()

    def _not_buffered(self, msg: Msg, acts: tuple[EngineAction, ...]) -> None:
        """The engine said Nak (stopped) or Drop (closed) for a message just received."""
        if acts[0].__class__ is Nak:
            self._not_handed_over(msg)

    def _status(self, msg: Msg, written_off: bool) -> None:
        st = classify(msg.headers, msg.data, msg.reply)
        if st is None:  # pragma: no cover
            return
        with self._lock:
            acts = self._eng.status(st.code, st.description, st.pending_msgs, st.pending_bytes,
                                    self._timer.now(), written_off)
        if acts:
            self._do(acts)

    def _written_off_msg(self, msg: Msg) -> None:
        """A message for a written-off pull request (I/O thread): it was alive after all.

        A user message was counted as never to come: now it counts as requested and
        received (pending one more, in flight unchanged), then goes to the buffer like any
        other. A status ends or heartbeats a request no longer counted: only a terminal one
        (consumer deleted, push based) matters.
        """
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            if self._bytes_mode:
                size = message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(self._conn, msg))
                self._sizes.append(size)
                acts = self._eng.message(size, written_off=True)
            else:
                acts = self._eng.message(written_off=True)
            if acts:
                self._not_buffered(msg, acts)
            else:
                self._buffer(msg)
            return
        self._status(msg, True)
