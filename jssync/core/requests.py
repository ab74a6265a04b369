"""Requests: the reply multiplexer, requests through their own inbox, and the reply waiter.

``request`` (and ``conn.internal.request``: the JetStream API, ``js.publish``, ``kv.get``)
sends its message with the reply subject ``<mux prefix><token>``: one wildcard
subscription, ``<inbox>.*``, made once (:meth:`Requests.start_mux`), receives every reply
and hands it to the waiter registered under its token, on the I/O thread. When nothing is
queued before it, the caller writes its request itself and may read the reply off the
socket (core/sockpath.py, ``CallerSocket.watch``). A pull request
(``$JS.API.CONSUMER.MSG.NEXT``) is answered with messages on their stream subjects, so it
uses a subscription of its own instead (:meth:`Requests.request_own_inbox`).
``request_many`` is core/request_many.py. A permissions ``-ERR`` on the request's subject
ends the wait at once (core/permissions.py).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from threading import get_ident as _get_ident
from typing import TYPE_CHECKING, Any

from ..base.deadline import Deadline
from ..base.errors import (
    ConnectionClosedError,
    PermissionDeniedError,
    SubscriptionClosedError,
    TimeoutError,
    translating,
)
from ..base.status import is_no_responders
from ..base.validate import _headers_size
from . import loop as _loopmod
from . import natspy as _natspy
from . import request_errors as _why
from . import sockpath as _sockpath
from .msg import Msg

if TYPE_CHECKING:
    from .connection import Connection
    from .outbound import Outbound
    from .permissions import PermissionWatch
    from .subscription import Subscription


class Requests:
    """A connection's requests (see the module's docstring).

    ``replies``: token -> callback run with the reply on the I/O thread (the multiplexer's
    routing table); ``tokens``: where the tokens come from; ``prefix``: the multiplexer's
    subject prefix once subscribed. ``direct`` and ``enqueue`` are the two ways a request
    goes out (the outgoing side's bound methods, bound once).
    """

    def __init__(self, conn: Connection, out: Outbound, perms: PermissionWatch) -> None:
        self._conn = conn
        self._out = out
        self._perms = perms
        self._check_open = conn._check_open
        self._loop = conn._loop
        self._loop_ident = conn._loop.thread.ident  # (the I/O thread: started before any connection)
        self._watch = perms.watch
        self._watches = perms.watches
        self._sockpath = out.sockpath
        self.direct = out.try_direct_send
        self.enqueue = out.enqueue
        self.nc: Any = None  # the nats-py client (set once it is made)
        self.prefix: str | None = None
        self._lock = threading.Lock()
        self.replies: dict[str, Callable[[Msg], None]] = {}
        self.tokens: itertools.count[int] = itertools.count(1)

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None,
                timeout: float | None | Deadline) -> Msg:
        """``request`` without argument validation (internal callers compose their subjects).

        ``timeout`` may be the caller's own :class:`Deadline` (js.publish's, spanning its
        retries: no second one per round trip).
        """
        conn = self._conn
        loop = self._loop
        if (conn._closed_error is not None or conn._closed or conn._closing or loop._stopped
                or loop._generation != _loopmod._fork_generation):
            self._check_open()  # (raises; written out above: a round trip makes three calls fewer)
        out = self._out
        if out.offline_limit is not None and not self.nc.is_connected:
            out.offline_check(len(data) if headers is None else len(data) + _headers_size(headers), subject)
        deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
        if ".CONSUMER.MSG.NEXT." in subject:
            return self.request_own_inbox(subject, data, headers, deadline.remaining())
        if _get_ident() == self._loop_ident:
            raise RuntimeError("a blocking jssync call was made on the connection's I/O thread")
        prefix = self.prefix or self.start_mux(deadline)
        token = str(next(self.tokens))
        waiter = _Waiter()
        replies = self.replies
        watches = self._watches
        msg: Msg | None = None
        wkey: Any = None
        parked: Any = None  # the parker to give the socket back with (see below)
        try:
            # (inside the try: a Ctrl-C landing right after must not leave the entry behind,
            # which would keep every later request off the caller-side read)
            replies[token] = waiter.set
            wkey = self._watch("publish", subject, waiter.fail)
            # Watch the socket only when this is the one request waiting: every caller
            # watching is woken by every reply, so with many threads in requests each
            # reply woke them all (the I/O thread, awake anyway, delivers instead). The
            # watcher parks the socket before it sends (after would be off the round
            # trip's path, but a send that wakes the server often lets it run first on a
            # busy machine, and the reply then woke the I/O thread): the reply wakes no
            # I/O thread.
            # ``parked`` is set before park() and the socket is given back in a finally that
            # a Ctrl-C cannot skip: a socket left parked is read by no one, and every
            # reply and message of the connection waited (the next request timed out)
            sp = self._sockpath
            p = sp.parker
            got = None
            try:
                if p is not None and sp.reader is not None and len(replies) == 1:
                    parked = p
                    if not p.park():
                        parked = None
                sent = self.direct(subject, data, prefix + token, headers)
                if sent and parked is not None and len(replies) == 1:  # (still alone)
                    got = sp.watch(waiter, token, deadline)
            finally:
                # (inline, not a helper: a signal is checked at every function's start, so a
                # Ctrl-C landing at unpark's (or a helper's) start is caught here and unpark
                # called again, then raised; unpark is idempotent)
                interrupted: KeyboardInterrupt | None = None
                while parked is not None:
                    try:
                        parked.unpark()
                        parked = None
                    except KeyboardInterrupt as exc:
                        interrupted = exc
                if interrupted is not None:
                    raise interrupted
            if not sent:
                self.enqueue((subject, data, prefix + token, headers), deadline)
            elif got is not None and replies.pop(token, None) is not None:
                # (the multiplexer's entry decides who delivers the reply: never two threads)
                nc = self.nc
                st = nc.stats
                st["in_msgs"] += 1
                st["in_bytes"] += len(got.data)
                # (positional: subject, reply, data, headers, _client, _sid)
                msg = self._conn._msg_class(f"{prefix}{token}", "", got.data, got.headers or None, nc, got.sid)
            # a reply read off the socket above (or one or an error already in) needs no
            # wait; else wait() returns once set()/fail() released the slot's lock
            if msg is None:
                msg = waiter.msg
                if msg is None and waiter.exc is None:
                    msg = waiter.wait(deadline, conn, subject)
        finally:
            replies.pop(token, None)
            if wkey is not None:
                watches.pop(wkey, None)
        if msg is None:
            if waiter.exc is not None:
                raise PermissionDeniedError(
                    f"permission denied: the server refused the request's publish to {subject!r}",
                    operation="publish", subject=subject,
                ) from waiter.exc
            raise _why.timed_out(subject, deadline.timeout, self._conn._link_state())
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            raise _why.no_responders(subject)
        return msg

    def request_own_inbox(self, subject: str, data: bytes, headers: dict[str, str] | None,
                           timeout: float | None) -> Msg:
        # JetStream delivers pulled messages with their stream subject, not the reply
        # inbox, so the multiplexer cannot route them: use a one-off subscription.
        inbox = self._conn.new_inbox()
        denied: list[PermissionDeniedError] = []
        holder: list[Subscription] = []

        def on_denied(err: PermissionDeniedError) -> None:
            denied.append(err)
            if holder:
                holder[0]._end()

        keys = (self._watch("publish", subject, on_denied), self._watch("subscribe", inbox, on_denied))
        try:
            sub = self._conn._make_subscription(inbox, None, None, 16, check_permissions=False)
            holder.append(sub)
            try:
                if denied:
                    sub._end()
                deadline = Deadline(timeout)
                self.enqueue((subject, data, inbox, headers), deadline)
                timed_out = False
                try:
                    msg = sub.next_msg(deadline.remaining())  # (None: no limit)
                except TimeoutError:
                    timed_out = True  # raised below, outside this handler: no context
                except (SubscriptionClosedError, ConnectionClosedError) as exc:
                    if not denied:
                        if _why.ending(self._conn):  # closed or drained from another thread
                            raise _why.cancelled(self._conn, subject) from exc
                        raise
                    err = denied[0]
                    what = f"publish to {subject!r}" if err.operation == "publish" else f"subscription to {inbox!r}"
                    raise PermissionDeniedError(
                        f"permission denied: the server refused the request's {what}",
                        operation=err.operation, subject=subject if err.operation == "publish" else inbox,
                    ) from err
                if timed_out:
                    raise _why.timed_out(subject, timeout, self._conn._link_state())
            finally:
                sub.unsubscribe()
        finally:
            for k in keys:
                self._watches.pop(k, None)
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            raise _why.no_responders(subject)
        return msg

    def start_mux(self, deadline: Deadline) -> str:
        """Subscribe to ``<inbox>.*`` once; replies are routed to waiters on the I/O thread."""
        with self._lock:
            if self.prefix is not None:
                return self.prefix
            prefix = self._conn.new_inbox() + "."
            replies = self.replies

            class _Mux(_natspy.Receiver):
                __slots__ = ()

                def put_nowait(self, msg: Msg) -> None:
                    fn = replies.pop(msg.subject[len(prefix):], None)
                    if fn is not None:
                        fn(msg)

            async def _sub() -> None:
                denied: list[PermissionDeniedError] = []
                key = self._watch("subscribe", prefix + "*", denied.append)
                try:
                    with translating():
                        nsub = await _natspy.subscribe(self.nc, prefix + "*", _Mux())
                except BaseException:
                    self._perms.unwatch(key)
                    raise
                self._sockpath.sid = str(_natspy.sub_sid(nsub)).encode()
                try:
                    await self._perms.check_subscription(nsub, prefix + "*", denied, key)
                except PermissionDeniedError as exc:
                    raise PermissionDeniedError(
                        f"permission denied: the server refused the subscription to the reply inbox "
                        f"{prefix + '*'!r} that requests need; allow subscribe on "
                        f"'{prefix.split('.')[0]}.>' (or connect with another inbox_prefix)",
                        operation="subscribe", subject=prefix + "*",
                    ) from exc.__cause__

            self._conn.run(_sub(), deadline, "request")
            self._sockpath.head = b"MSG " + prefix.encode()
            self.prefix = prefix
            return prefix


class _Waiter:
    """A one-shot slot a user thread waits on (in 0.1 s slices) until the I/O thread fills it.

    ``set`` (a reply) and ``fail`` (a permissions -ERR) run on the I/O thread, ``set`` also
    on the waiting thread itself when it read its reply off the socket (only whoever popped
    the multiplexer's entry calls it); the first one wins. While the waiting thread polls,
    ``wake_fd`` is its eventfd, signalled after either.
    """

    __slots__ = ("_lock", "msg", "exc", "_done", "wake_fd")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.msg: Msg | None = None
        self.exc: BaseException | None = None
        self._done = False
        self.wake_fd = -1  # an eventfd the waiting thread selects on, while it does

    def set(self, msg: Msg) -> None:
        if self._done:
            return
        self._done = True
        self.msg = msg
        self._release()

    def fail(self, exc: BaseException) -> None:
        if self._done:
            return
        self._done = True
        self.exc = exc
        self._release()

    def _release(self) -> None:
        self._lock.release()
        fd = self.wake_fd
        if fd >= 0:
            _sockpath.wake(fd)

    def wait(self, deadline: Deadline, conn: Connection, subject: str) -> Msg | None:
        lock = self._lock
        while True:
            if lock.acquire(timeout=deadline.slice()):
                return self.msg
            if deadline.expired():
                return None
            if conn._closed_error is not None:
                raise _why.cancelled(conn, subject, str(conn._closed_error))
            if conn._closed:
                raise _why.cancelled(conn, subject)
