"""The internal interface of a Connection: what the layers above core may use of it.

The JetStream, KV, object store and Liftbridge layers need more of a connection than its
public API (the I/O loop, the worker pool, the outgoing queue, the reply router). They use
``conn.internal``, a :class:`ConnectionInternal`, and never a ``_private`` member of the
Connection (tests/unit/architecture/test_import_layers.py checks that). ``internal`` is not part of the
public API (API.md): it may change in any release.

Cost: the objects are the connection's own (the same loop, pool, dict, lock), and the calls
are the bound methods of the connection or of its rooms (core/outbound.py, core/requests.py,
core/links.py), stored once: ``conn.internal.enqueue(item)`` is the same call as
``conn._enqueue(item)`` (``Outbound.enqueue``), with no extra call layer. Only ``closed``,
``closing``, ``close_error`` and ``mux_prefix`` are properties: they change while the
connection lives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:

    from ..base.errors import ConnectionClosedError
    from .connection import Connection


class ConnectionInternal:
    """``conn.internal``: made once, when the connection is up.

    Objects (fixed for the connection's life):

    - ``loop``: the connection's I/O thread (:class:`jssync.core.loop.IOLoop`): ``run``, ``submit``,
      ``call_soon``, ``in_loop_thread``, ``check``, its asyncio ``loop``.
    - ``pool``: the worker pool (:class:`jssync.core.workers.WorkerPool`) that runs user callbacks.
    - ``nc``: the nats-py client (only jssync/core/natspy.py touches its private names).
    - ``subs`` / ``subs_lock``: the open subscriptions (closed with the connection), and their lock.
    - ``replies``: reply token -> callback, for requests routed through the shared reply
      subscription (see ``start_mux``); ``tokens``: the counter those tokens come from.
    - ``disconnect_listeners`` / ``reconnect_listeners``: callables run on the I/O thread
      after a disconnect / a reconnect.
    - ``id``: the connection's number (thread names); ``urls``: the server URLs it was given;
      ``timeout``: ``connect(timeout=)``; ``offline_limit``: ``reconnect_buffer_size``.

    Calls (bound methods of the connection or its rooms):

    - ``request(subject, data, headers, timeout) -> Msg``: a request without argument checks
      (``timeout`` a number, None, or the caller's ``Deadline``).
    - ``enqueue(item, deadline=None)``: queue ``(subject, data, reply, headers)`` for the pump.
    - ``publish_raw(subject, data)``: queue a publish without checks (acks, flow control replies).
    - ``send_ack(msg, payload, terminal, reply="") -> bool``: queue an ack and update its state.
    - ``check_open()``: raise ConnectionClosedError (or ForkError) unless the connection is usable.
    - ``offline_check(size, subject)``: count a publish against ``reconnect_buffer_size``.
    - ``start_mux(deadline) -> str``: subscribe the shared reply subject once; its prefix.
    - ``report_error(exc)``: log and hand ``exc`` to the user's ``error_cb``.
    - ``call_user_cb(cb, *args)``: call a user callback, logging what it raises.
    - ``drain_nsub(nsub, timeout)`` (a coroutine, on the loop): drain a nats-py subscription.
    - ``sync_pubs()`` (a coroutine, on the loop): wait until queued publishes reached nats-py.
    - ``unsubscribe(sub, drain, timeout)``: end a subscription.
    - ``make_subscription(subject, queue, callback, pending_msgs_limit, check_permissions=)``:
      ``subscribe`` without argument checks; without ``check_permissions`` it does not wait
      for the server (no PING/PONG), e.g. a fresh inbox under a prefix already allowed.
    - ``link_state() -> str | None``: while not connected, why a call may time out (the
      connection is reconnecting: to which server, which attempt; or it gave up); else None.

    State (properties): ``closed``, ``closing``, ``close_error``, ``mux_prefix``.
    """

    __slots__ = ("_conn", "loop", "pool", "nc", "subs", "subs_lock", "replies", "tokens", "disconnect_listeners",
                 "reconnect_listeners", "id", "urls", "timeout", "offline_limit", "request", "enqueue",
                 "publish_raw", "send_ack", "check_open", "offline_check", "start_mux", "report_error",
                 "call_user_cb", "drain_nsub", "sync_pubs", "unsubscribe", "link_state",
                 "make_subscription")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.loop = conn._loop
        self.pool = conn._pool
        self.nc = conn._nc
        self.subs = conn._subs
        self.subs_lock = conn._subs_lock
        self.replies = conn._replies
        self.tokens = conn._tokens
        self.disconnect_listeners = conn._disconnect_listeners
        self.reconnect_listeners = conn._reconnect_listeners
        self.id = conn._id
        self.urls = conn._urls
        self.timeout = conn._timeout
        self.offline_limit = conn._offline_limit
        self.request = conn._request
        self.enqueue = conn._enqueue
        self.publish_raw = conn._publish_raw
        self.send_ack = conn._send_ack
        self.check_open = conn._check_open
        self.offline_check = conn._offline_check
        self.start_mux = conn._start_mux
        self.report_error = conn._report_error
        self.call_user_cb = conn._call_user_cb
        self.drain_nsub = conn._drain_nsub
        self.sync_pubs = conn._sync_pubs
        self.unsubscribe = conn._unsubscribe
        self.link_state = conn._link_state
        self.make_subscription = conn._make_subscription

    @property
    def closed(self) -> bool:
        """The connection is closed (``close``/``drain`` finished, or it failed for good)."""
        return self._conn._closed

    @property
    def closing(self) -> bool:
        """``close``/``drain`` has started."""
        return self._conn._closing

    @property
    def close_error(self) -> ConnectionClosedError | None:
        """Why the connection closed by itself (it gave up reconnecting); None otherwise.

        Set as soon as nats-py gave up, before the connection is torn down.
        """
        return self._conn._closed_error

    @property
    def mux_prefix(self) -> str | None:
        """The shared reply subject's prefix once ``start_mux`` subscribed it, else None."""
        return self._conn._req.prefix
