"""The blocking Connection: nats-py on a background I/O thread.

``Connection`` is the facade: the public API, and the connection's life state (open,
closing, closed, and why). The work is done in rooms, one job each, made once per
connection and bound once (their methods are stored on the connection, so a hot path has
no extra call layer):

- core/options.py: the options and credentials, checked before any thread starts;
- core/links.py: nats-py's callbacks, outages, the errors reported to ``error_cb``;
- core/outbound.py: the outgoing queue, its writers (the pump, the direct write, the
  caller-side socket path of core/sockpath.py), the offline buffer, flush; every PUB/HPUB
  is encoded by core/wire.py's ``encode_burst``;
- core/requests.py: the reply multiplexer, own-inbox requests (request_many is
  core/request_many.py); core/permissions.py: the permission watches of waiting calls;
- core/subscribing.py: the open subscriptions, subscribe, unsubscribe, the one drain of a
  nats-py subscription; core/closing.py: ``drain`` and ``close``.

Here: the public methods (argument checks, then the rooms), the properties, and the life
state (``_closing``, ``_closed``, ``_closed_error``) that every room reads.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.deadline import Deadline, check_timeout, no_wait
from ..base.errors import (
    BadSubjectError,
    ConnectionClosedError,
    Error,
    MaxPayloadError,
    translate,
)
from ..base.validate import _SUBJECT_BAD, _check_data, _headers_size, validate_headers, validate_subject
from . import closing as _closing
from . import natspy as _natspy
from . import options as _options
from .hooks import HOOKS
from .internal import ConnectionInternal
from .links import Links
from .loop import IOLoop
from .msg import Msg
from .outbound import Outbound
from .permissions import PermissionWatch
from .requests import Requests
from .subscribing import Subscriptions
from .subscription import Subscription
from .urls import check_resolvable, redact_url
from .workers import WorkerPool

if TYPE_CHECKING:
    from ..jetstream.context import JetStream
    from .request_many import RequestMany

T = TypeVar("T")
log = logging.getLogger("jssync")

_ids = itertools.count(1)


class Connection:
    """A connection to NATS with a blocking API.

    One daemon I/O thread per connection runs an asyncio loop with the nats-py client;
    callbacks run on a pool of ``callback_workers`` daemon threads. Every method is
    thread-safe. Use :func:`jssync.connect` to make one.
    """

    def __init__(
        self,
        servers: str | Sequence[str] | None = None,
        *,
        name: str | None = None,
        timeout: float = 2.0,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        creds: str | os.PathLike[str] | None = None,
        nkeys_seed: str | os.PathLike[str] | None = None,
        tls: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        max_reconnect_attempts: int = -1,
        reconnect_time_wait: float = 2.0,
        ping_interval: float = 120.0,
        max_outstanding_pings: int = 2,
        no_echo: bool = False,
        inbox_prefix: str = "_INBOX",
        error_cb: Callable[[Exception], Any] | None = None,
        disconnected_cb: Callable[[], Any] | None = None,
        reconnected_cb: Callable[[], Any] | None = None,
        closed_cb: Callable[[], Any] | None = None,
        callback_workers: int = 4,
        reconnect_buffer_size: int | None = None,
    ) -> None:
        opts = _options.check_options(
            servers, name=name, timeout=timeout, user=user, password=password, token=token, creds=creds,
            nkeys_seed=nkeys_seed, tls=tls, tls_hostname=tls_hostname, max_reconnect_attempts=max_reconnect_attempts,
            reconnect_time_wait=reconnect_time_wait, ping_interval=ping_interval,
            max_outstanding_pings=max_outstanding_pings, no_echo=no_echo, inbox_prefix=inbox_prefix,
            reconnect_buffer_size=reconnect_buffer_size, callback_workers=callback_workers)
        self._urls = opts.urls
        self._id = next(_ids)
        self.name = name
        self._timeout = timeout
        self._offline_limit = reconnect_buffer_size
        self._max_payload = 1024 * 1024
        self._msg_class: type[Msg] = Msg
        # the life state: closing, closed, why it closed by itself (it gave up reconnecting)
        self._closing = False
        self._closed = False
        self._closed_error: ConnectionClosedError | None = None
        self._close_lock = threading.Lock()  # (also the ack lock: see Outbound.send_ack)
        self._dropped_at_close = 0  # queued messages close() dropped (drain() reports them)
        self._links = links = Links(self, opts, reconnect_time_wait=reconnect_time_wait,
                                    max_reconnect_attempts=max_reconnect_attempts, error_cb=error_cb,
                                    disconnected_cb=disconnected_cb, reconnected_cb=reconnected_cb,
                                    closed_cb=closed_cb)
        self._report_error = links.report_error
        self._call_user_cb = links.call_user_cb
        self._link_state = links.link_state
        self._disconnect_listeners = links.disconnect_listeners
        self._reconnect_listeners = links.reconnect_listeners
        check_resolvable(self._urls, timeout)  # before any thread starts: nothing to tear down
        self._pool = WorkerPool(f"jssync-{self._id}", callback_workers, self._report_error)
        self._loop = IOLoop(f"jssync-io-{self._id}")
        self._loop.clock.report = self._report_error  # a stalled I/O loop goes to error_cb
        # the rooms' calls, bound once: no extra call layer per message
        self._out = out = Outbound(self, self._loop, self._pool, reconnect_buffer_size)
        # the terminal acks of the last moments before an outage are sent again after it
        links.disconnect_listeners.append(out.journal.on_disconnect)
        links.reconnect_listeners.append(out.journal.on_reconnect)
        self._loop.call_soon(out.journal.start, self._loop.loop)
        self._pubq = out.q
        self._sockpath = out.sockpath
        self._enqueue = out.enqueue
        self._send_ack = out.send_ack
        self._publish_raw = out.publish_raw
        self._offline_check = out.offline_check
        self._sync_pubs = out.sync_pubs
        self._fast_paths = out.fast_paths
        self._perms = perms = PermissionWatch(out.ordered_flush, timeout)
        self._subscriptions = subs = Subscriptions(self, out, perms)
        self._subs = subs.open
        self._subs_lock = subs.lock
        self._make_subscription = subs.make
        self._drain_nsub = subs.drain_nsub
        self._unsubscribe = subs.unsubscribe
        self._req = req = Requests(self, out, perms)
        self._request = req.request
        self._start_mux = req.start_mux
        self._replies = req.replies
        self._tokens = req.tokens
        self._connect_opts = dict(opts.nats, error_cb=links.on_error, disconnected_cb=links.on_disconnected,
                                  reconnected_cb=links.on_reconnected, closed_cb=links.on_closed)
        failure: BaseException | None = None
        try:
            nc = self._loop.run(self._make_client(), None)
            self._nc: Any = nc
            out.nc = perms.nc = req.nc = links.nc = nc
            out.fast = out.caps["pump_buffer"]
            self._loop.run(self._connect(), Deadline(timeout), "connect")
        except BaseException as exc:
            _closing.teardown(self, 0.5)
            if not isinstance(exc, Error) or isinstance(exc, ConnectionClosedError):
                raise
            failure = exc
        if failure is not None:
            # raised outside the ``except`` so the internal timeout is not the context
            raise _options.connect_failure(failure, timeout, opts, links.last_connect_error, links.failed_url)
        _closing.live.add(self)
        #: What the layers above core use of this connection (core/internal.py); not public API.
        self.internal: ConnectionInternal = ConnectionInternal(self)

    async def _make_client(self) -> Any:
        import nats.aio.client

        nc = nats.aio.client.Client()
        why = _natspy.check(nc)
        off = _natspy.switched_off()  # JSSYNC_FAST_PATHS=0
        self._msg_class, why["msg_class"] = _natspy.install_msg_class(nc, Msg, self, off)
        # (after install_msg_class: it hands over to its dispatch)
        why["msg_parse"] = off or _natspy.install_msg_parser(nc)
        out = self._out
        out.caps = _natspy.warn_disabled(why)
        out.sockpath.header_parser = _natspy.header_parser(nc) if out.caps["reply_headers"] else None
        out.idle = asyncio.Event()
        out.idle.set()
        return nc

    async def _connect(self) -> None:
        # nats-py retries the first connect forever with max_reconnect_attempts=-1; our
        # deadline bounds it. Errors during the first connect are only logged at debug.
        self._links.connecting = True
        try:
            await self._nc.connect(**self._connect_opts)
        except Exception as exc:
            new = translate(exc)
            if new is exc:
                raise
            raise new from exc
        finally:
            self._links.connecting = False
        self._max_payload = self._nc.max_payload
        self._links.server_url = self.connected_url
        self._out.install_direct()

    @property
    def _mux_prefix(self) -> str | None:
        """The reply multiplexer's subject prefix once subscribed (core/requests.py)."""
        return self._req.prefix

    # -- reprs, properties -----------------------------------------------------------------

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self.is_connected else "disconnected")
        url = self.connected_url or ",".join(redact_url(u) for u in self._urls)
        return f"<jssync.Connection {url} {state}>"

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_connected(self) -> bool:
        return not self._closed and bool(self._nc.is_connected)

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` or :meth:`drain` started, or the connection gave up
        reconnecting (``max_reconnect_attempts``; already True when ``closed_cb`` runs)."""
        return self._closed or self._closing or self._closed_error is not None

    @property
    def is_reconnecting(self) -> bool:
        return not self._closed and bool(self._nc.is_reconnecting)

    @property
    def connected_url(self) -> str | None:
        """The URL of the server connected to, with no password in it; None when disconnected."""
        u = self._nc.connected_url if not self._closed else None
        if u is None:
            return None
        return redact_url(u.geturl())

    @property
    def server_info(self) -> dict[str, Any]:
        """The INFO the server sent, as a dict."""
        return _natspy.server_info(self._nc)

    @property
    def max_payload(self) -> int:
        return self._max_payload

    @property
    def stats(self) -> dict[str, int]:
        """Counters: in/out messages and bytes, reconnects, errors."""
        return dict(self._nc.stats)

    @property
    def client(self) -> Any:
        """The underlying nats-py client (use it only through :meth:`run`)."""
        return self._nc

    # -- running things on the loop ------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None | Deadline, what: str = "operation") -> T:
        """Run a coroutine on the I/O thread and wait for it (see :meth:`IOLoop.run`)."""
        if self._closed or self._closed_error is not None:
            coro.close()
            raise self._closed_exc()
        return self._loop.run(coro, timeout, what)

    def _check_open(self) -> None:
        if self._closed_error is not None and not self._loop.forked:
            raise self._closed_exc()
        self._loop.check()
        if self._closed or self._closing:
            raise ConnectionClosedError("the connection is closed")

    def _closed_exc(self) -> ConnectionClosedError:
        """A new error for a call on this closed connection: why it closed, when it closed by itself."""
        err = self._closed_error
        return ConnectionClosedError(str(err) if err is not None else "the connection is closed")

    # -- publishing ----------------------------------------------------------------------

    def publish(
        self,
        subject: str,
        data: bytes = b"",
        *,
        reply: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish a message. Buffered: returns at once, without waiting for the I/O thread.

        Publishes are handed to the I/O thread in bursts (one wake-up per burst). When
        65536 publishes or about 64 MiB of payload are waiting, the call blocks until the
        I/O thread has caught up (to half of that); it never drops. While disconnected
        the messages wait in the same queue, in order, and go out after the reconnect (a
        publisher blocks at the same bound, at most 15 x the connect timeout, then raises
        :class:`jssync.TimeoutError`); with ``reconnect_buffer_size`` set, a publish that
        would pass it raises at once instead. Use :meth:`flush` to wait until the server
        has them.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError: invalid subject, reply or header.
            jssync.MaxPayloadError: ``data`` is over the server's max_payload.
            jssync.ReconnectBufferExceededError: disconnected, and ``reconnect_buffer_size``
                is used up (nothing was queued).
            jssync.ConnectionClosedError, jssync.ForkError.
        """
        tracer = HOOKS.tracer  # jssync.otel: a send span, trace context in the headers (None: off)
        if tracer is not None and tracer.wants():
            return tracer.publish(self, subject, data, reply, headers)
        validate_subject(subject)
        if reply:
            validate_subject(reply, "reply subject")
        if headers is not None:
            validate_headers(headers)
        data = _check_data(data)
        size = len(data) if headers is None else len(data) + _headers_size(headers)
        if size > self._max_payload:
            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        self._check_open()
        if self._offline_limit is not None and not self._nc.is_connected:
            self._offline_check(size, subject)
        self._enqueue((subject, data, reply or "", headers))

    def flush(self, timeout: float | None = 2.0) -> None:
        """Send everything published so far and wait for the server to confirm (PING/PONG).

        Blocks up to ``timeout`` seconds (None: no limit). While disconnected it waits for
        the reconnect and for what was queued meanwhile to go out, within the same ``timeout``.

        Raises:
            jssync.TimeoutError: no PONG in time (or still not connected).
            jssync.ConnectionClosedError.
        """
        self._check_open()
        no_wait(check_timeout(timeout), "flush (it waits for the server's PONG)")
        self.run(self._out.flush(timeout), Deadline(None if timeout is None else timeout + 0.5), "flush")

    # -- request/reply -------------------------------------------------------------------

    def request(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = 2.0,
    ) -> Msg:
        """Send a request and wait for the first reply.

        Blocks up to ``timeout`` seconds (None: no limit).

        Raises (each says why: ``.reason``, ``.subject``, ``.retriable``):
            jssync.RequestTimeoutError (a jssync.TimeoutError): no reply in time
                (``.disconnected``: the connection was down then).
            jssync.NoRespondersError: nobody listens on ``subject`` (retriable).
            jssync.RequestCancelledError (a ConnectionClosedError): the connection was
                closed or drained from another thread while the request waited.
            jssync.PermissionDeniedError: the server refused the publish to ``subject`` or
                the subscription to the reply inbox (raised as soon as the refusal arrives).
            jssync.ReconnectBufferExceededError: disconnected, and ``reconnect_buffer_size``
                is used up.
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError.
        """
        tracer = HOOKS.tracer  # jssync.otel: a send span up to the reply, trace context in the headers (None: off)
        if tracer is not None and tracer.wants():
            return tracer.request(self, subject, data, headers, timeout)
        no_wait(check_timeout(timeout), f"the request on {subject!r}")
        validate_subject(subject, wildcards=False)
        if headers is not None:
            validate_headers(headers)
        if data.__class__ is not bytes:  # (bytes pass without the call)
            data = _check_data(data)
        size = len(data) if headers is None else len(data) + _headers_size(headers)
        if size > self._max_payload:
            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        return self._request(subject, data, headers, timeout)

    def new_inbox(self) -> str:
        """Return a new unique inbox subject."""
        return str(self._nc.new_inbox())

    # -- request many (ADR-47) ------------------------------------------------------------

    def request_many(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        max_wait: float = 2.0,
        max_messages: int | None = None,
        stall: float | None = None,
        sentinel: Callable[[Msg], bool] | bool | None = None,
    ) -> RequestMany:
        """Send one request and iterate over every reply that comes within the limits.

        ``for msg in nc.request_many("svc.who", max_wait=1.0, stall=0.3): ...`` (or use it
        as a context manager to remove the reply subscription when leaving early). Returns
        once the request is handed to the I/O thread (after the reply inbox is subscribed);
        ``next()`` blocks for the next reply.

        Args:
            max_wait: seconds of waiting for replies in all (time spent by the application
                between replies is not counted); then the iteration ends.
            max_messages: end after this many replies.
            stall: after the first reply, end when no further reply comes for this long
                (a stall of at least ``max_wait`` is ignored, as ADR-47 says).
            sentinel: ``sentinel(msg)`` true ends the iteration (that reply is not
                yielded); ``True`` means the standard sentinel, an empty payload.

        Raises:
            ValueError, TypeError: a bad ``max_wait``, ``max_messages``, ``stall`` or ``sentinel``.
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError: before sending.
            jssync.NoRespondersError, jssync.PermissionDeniedError: from ``next()``.
        """
        from . import request_many as _request_many

        tracer = HOOKS.tracer  # jssync.otel: a send span, trace context in the headers (None: off)
        if tracer is not None and tracer.wants():
            return tracer.request_many(self, subject, data, headers, {
                "max_wait": max_wait, "max_messages": max_messages, "stall": stall, "sentinel": sentinel})
        validate_subject(subject, wildcards=False)
        validate_headers(headers)
        data = _check_data(data)
        opts = _request_many.check_options(max_wait, max_messages, stall, sentinel)
        size = len(data) if headers is None else len(data) + _headers_size(headers)
        if size > self._max_payload:
            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        self._check_open()
        if self._loop.in_loop_thread():
            raise RuntimeError("a blocking jssync call was made on the connection's I/O thread")
        return _request_many.start(self, subject, data, headers, *opts)

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(
        self,
        subject: str,
        *,
        queue: str | None = None,
        callback: Callable[[Msg], Any] | None = None,
        pending_msgs_limit: int = 65536,
    ) -> Subscription:
        """Subscribe to ``subject`` (wildcards allowed), optionally in a queue group.

        Without ``callback``, read messages by iterating the subscription or with
        ``next_msg``. With it, the callback runs on the worker pool, one message at a time
        per subscription, in order. Past ``pending_msgs_limit`` unread messages, new ones are
        dropped and reported to ``error_cb`` as :class:`jssync.SlowConsumerError`.

        Blocks until the server confirmed the SUB with a PING/PONG (at most the connect
        timeout plus 5 s), so a refusal by the server's permissions is raised here. While
        disconnected, the SUB is sent on reconnect and a refusal goes to ``error_cb``.

        Raises:
            jssync.BadSubjectError: invalid subject or queue name.
            jssync.PermissionDeniedError: the server refused the subscription.
        """
        validate_subject(subject)
        if queue is not None and (not queue or _SUBJECT_BAD.search(queue)):
            raise BadSubjectError(f"invalid queue group name: {queue!r}")
        return self._make_subscription(subject, queue, callback, pending_msgs_limit, check_permissions=True)

    # -- JetStream -------------------------------------------------------------------------

    def jetstream(
        self,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
        max_pending: int = 4000,
    ) -> JetStream:
        """Return a JetStream context on this connection (no I/O)."""
        return HOOKS.jetstream(self, domain=domain, api_prefix=api_prefix, timeout=timeout, max_pending=max_pending)

    # -- closing -----------------------------------------------------------------------------

    def drain(self, timeout: float | None = 30.0) -> None:
        """Drain every subscription, flush what was published, then close.

        Every ``consume`` is drained first, and the connection stays open (acks accepted)
        until the messages it had buffered were handed over: a callback consume runs its
        callback for each; an iterator consume hands them out to the thread iterating it
        (which can ack them) until that iteration ends. What no thread can take any more
        (the thread that iterated is the one calling ``drain``, or it ended), or what is
        still buffered when ``timeout`` runs out, is nak'ed, so the server redelivers it at
        once. A stopped consume's naks go out before the close, too.

        While disconnected it waits (within ``timeout``) for the reconnect, so that what was
        published goes out. The connection is closed when it returns or raises.

        Blocks up to ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: ``timeout`` passed before everything was drained (e.g. during
                an outage); raised after closing, and says what was left: the subscriptions
                and consumes not drained, the queued messages dropped, and the state of the
                connection (reconnecting: to which server, which attempt).
        """
        _closing.drain(self, timeout)

    def close(self, timeout: float | None = 5.0) -> None:
        """Flush what was published, close the connection and stop its threads.

        Idempotent. Blocks up to ``timeout`` seconds (None: no limit; at interpreter exit
        open connections are closed with a 2 s limit); never raises for a closed connection.
        A ``consume`` that was stopped (``stop()``, leaving its ``with`` block) sends the
        naks ``stop()`` promised before the socket goes: close waits (up to 60 % of
        ``timeout``) until its inbox is unsubscribed, and naks what is still left then.
        Subscription iterators end. While disconnected it does not wait for a reconnect:
        what is still queued is dropped (logged as a warning) and the ``publish_async``
        Futures still waiting fail with :class:`jssync.ConnectionClosedError` at once;
        call :meth:`flush` first to wait for the reconnect.
        """
        _closing.close(self, timeout)


def connect(servers: str | Sequence[str] | None = None, **options: Any) -> Connection:
    """Connect to NATS and return a :class:`Connection`.

    ``servers`` is one URL, a comma-separated string of URLs, or a list of URLs; the
    default is ``$NATS_URL``, else ``nats://127.0.0.1:4222``. Options: ``name``,
    ``timeout`` (seconds for the first connect, default 2.0), ``user``, ``password``,
    ``token``, ``creds`` (a .creds file), ``nkeys_seed`` (a seed file or the seed),
    ``tls`` (an ``ssl.SSLContext``), ``max_reconnect_attempts`` (-1: forever),
    ``reconnect_time_wait``, ``error_cb``, ``disconnected_cb``, ``reconnected_cb``,
    ``closed_cb`` (all run on the worker pool), ``callback_workers`` (default 4),
    ``reconnect_buffer_size`` (payload bytes that publishes and requests may queue while
    disconnected; default None: no limit of its own, publishers block at the publish
    queue's bound; past it a publish raises :class:`jssync.ReconnectBufferExceededError`
    at once and the first refusal of each outage goes to ``error_cb``).

    During an outage ``error_cb`` gets one error when it starts, not one per reconnect
    attempt, and calls that time out say the connection is reconnecting. When
    ``max_reconnect_attempts`` runs out the connection is closed (``is_closed``, before
    ``closed_cb`` runs): every later call and every waiting iterator raises
    :class:`jssync.ConnectionClosedError` saying why.

    Blocks until connected or ``timeout`` passes. Works from any thread, including one
    that runs an asyncio event loop (Jupyter).

    Raises:
        jssync.NoServersError: no server could be reached in time (the message names the
            last connect error, e.g. a TLS certificate problem).
        jssync.AuthorizationError: the credentials were refused.
        ValueError: ``nkeys_seed`` or ``creds`` cannot be used (the message names the file,
            never a credential).

    No credential (password, token, seed, JWT) appears in a repr, a log line or an
    exception message.
    """
    return Connection(servers, **options)
