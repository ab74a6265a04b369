"""Subscriptions: a connection's open subscriptions, how one is made, unsubscribed and drained.

``subscribe`` (and request_many, own-inbox requests, the JetStream layers) make a
subscription here (:meth:`Subscriptions.make`): queued publishes are handed over first,
so the SUB goes out after them; with ``check_permissions`` a PING/PONG confirms it (a
refusal raises, core/permissions.py). :meth:`Subscriptions.drain_nsub` is the one drain
of a nats-py subscription (core, push, consume): UNSUB, PING/PONG, then remove, so no
message already on the wire is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.deadline import Deadline
from ..base.errors import PermissionDeniedError, translating
from . import natspy as _natspy
from .msg import Msg
from .subscription import Subscription, _Inbound

if TYPE_CHECKING:
    from .connection import Connection
    from .outbound import Outbound
    from .permissions import PermissionWatch

#: How long a drain waits for the server to confirm its UNSUB (callers bound it further).
_DRAIN_FLUSH_TIMEOUT = 10.0


class Subscriptions:
    """A connection's subscriptions: ``open`` (ended when the connection closes) and its ``lock``."""

    def __init__(self, conn: Connection, out: Outbound, perms: PermissionWatch) -> None:
        self._conn = conn
        self._out = out
        self._perms = perms
        self.open: set[Subscription] = set()
        self.lock = threading.Lock()

    def make(self, subject: str, queue: str | None, callback: Callable[[Msg], Any] | None,
                           pending_msgs_limit: int, *, check_permissions: bool) -> Subscription:
        """``subscribe`` without validation; ``check_permissions`` adds the PING/PONG check."""
        c = self._conn
        c._check_open()
        sub = Subscription(c, subject, queue, callback, pending_msgs_limit)

        async def _sub() -> Any:
            await self._out.sync_pubs()
            if not check_permissions:
                return await self.subscribe_async(sub)
            denied: list[PermissionDeniedError] = []
            key = self._perms.watch("subscribe", subject, denied.append)
            try:
                nsub = await self.subscribe_async(sub)
            except BaseException:
                self._perms.unwatch(key)
                raise
            await self._perms.check_subscription(nsub, subject, denied, key)
            return nsub

        try:
            sub._nsub = c.run(_sub(), Deadline(c._timeout + 5), "subscribe")
        except PermissionDeniedError:
            sub._end()
            raise
        with self.lock:
            self.open.add(sub)
        return sub

    async def subscribe_async(self, sub: Subscription) -> Any:
        """On the loop: make the nats-py subscription and point it at ``sub``."""
        with translating():
            return await _natspy.subscribe(self._conn._nc, sub.subject, _Inbound(sub), sub.queue)

    async def drain_nsub(self, nsub: Any, timeout: float) -> None:
        """On the loop: the one drain of a nats-py subscription (core, push, consume).

        Sends UNSUB, waits until the server answered a PING sent after it (so it processed
        the UNSUB and everything it sent for the subscription before has been read), and
        only then removes the subscription from nats-py: no message already on the wire is
        dropped. The subscription is removed even when the flush fails (disconnected, timed
        out), so a drain always ends.
        """
        if nsub is None or _natspy.sub_closed(nsub) or self._conn._nc.is_closed:
            return
        try:
            await _natspy.send_unsubscribe(self._conn._nc, nsub)
            await self._out.ordered_flush(timeout)
        finally:
            _natspy.remove_sub(self._conn._nc, nsub)

    def unsubscribe(self, sub: Subscription, drain: bool, timeout: float | None | Deadline) -> None:
        with self.lock:
            self.open.discard(sub)
        c = self._conn
        if c._closed or c._loop.forked:
            return
        nsub = sub._nsub

        async def _unsub() -> None:
            if nsub is None or _natspy.sub_closed(nsub) or self._conn._nc.is_closed:
                return
            with translating():
                if drain:
                    await self.drain_nsub(nsub, _DRAIN_FLUSH_TIMEOUT)
                else:
                    await nsub.unsubscribe()

        if c._loop.in_loop_thread():
            c._loop.loop.create_task(_unsub())
            return
        c.run(_unsub(), timeout, "unsubscribe")
