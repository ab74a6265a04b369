"""The blocking Connection: nats-py on a background I/O thread."""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import os
import ssl
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from ..base.deadline import Deadline
from ..base.errors import (
    AuthorizationError,
    BadSubjectError,
    ConnectionClosedError,
    Error,
    MaxPayloadError,
    NoServersError,
    PermissionDeniedError,
    ReconnectBufferExceededError,
    SubscriptionClosedError,
    TimeoutError,
    ValidationError,
    _OffLoopError,
    translate,
    translating,
)
from ..base.status import is_no_responders
from ..base.validate import (
    _SUBJECT_BAD,
    _check_data,
    _encode_headers,
    _headers_size,
    validate_headers,
    validate_subject,
)
from . import natspy as _natspy
from . import request_errors as _why
from . import sockpath as _sockpath
from .hooks import HOOKS
from .internal import ConnectionInternal
from .loop import IOLoop
from .msg import ACK_SENT, Msg
from .natspy import CLOSED as _NC_CLOSED
from .natspy import STATUS as _NC_STATUS
from .subscription import Subscription, _Inbound
from .urls import (
    _check_secret_file,
    _is_local,
    _looks_like_seed,
    _scrub,
    _split_servers,
    _url_secrets,
    check_resolvable,
    redact_url,
)
from .workers import WorkerPool

if TYPE_CHECKING:
    from ..jetstream.context import JetStream
    from .request_many import RequestMany

T = TypeVar("T")
log = logging.getLogger("jssync")

_ids = itertools.count(1)
_live: weakref.WeakSet[Connection] = weakref.WeakSet()

#: Most publishes handed to the I/O thread in one loop turn.
_PUMP_BATCH = 4096
#: How long a drain waits for the server to confirm its UNSUB (callers bound it further).
_DRAIN_FLUSH_TIMEOUT = 10.0
#: Payload bytes encoded into one chunk at most (large messages: smaller bursts, fewer copies).
_BURST_BYTES = 1 << 20
#: Largest burst written straight to the socket from the wake-up callback.
_DIRECT_MAX = 256
#: Direct writes stop while the socket's write buffer holds more than this.
_DIRECT_BUFFER_LIMIT = 1 << 20
#: Publishes queued before ``publish`` waits for the I/O thread to catch up.
_PUB_HIGH_WATER = 65536
#: ... or this many payload bytes (estimated as queue length x the new message's size).
_PUB_HIGH_BYTES = 64 << 20
#: While not connected the pump leaves the queue alone and looks again after this long.
_PARKED_POLL = 0.05
#: The share of ``close``'s timeout a stopped consume may take to send its naks first.
_BEFORE_CLOSE_SHARE = 0.6

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
        self._urls = _split_servers(servers)
        if reconnect_buffer_size is not None and (
                not isinstance(reconnect_buffer_size, int) or isinstance(reconnect_buffer_size, bool)
                or reconnect_buffer_size < 0):
            raise ValidationError(f"reconnect_buffer_size must be None or an int >= 0, got {reconnect_buffer_size!r}")
        if timeout is not None and timeout <= 0:
            raise ValidationError(f"timeout must be > 0, got {timeout!r}")
        if tls is not None and not isinstance(tls, ssl.SSLContext):
            raise TypeError("tls must be an ssl.SSLContext")
        secrets = [password or "", token or ""]
        secrets += [p for u in self._urls for p in _url_secrets(u)]
        seed_opt: tuple[str, str] | None = None
        if nkeys_seed is not None:
            seed = os.fspath(nkeys_seed)
            if _looks_like_seed(seed):
                seed_opt = ("nkeys_seed_str", seed.strip())
                secrets.append(seed.strip())
            elif os.path.isfile(seed):
                _check_secret_file(seed, "nkeys_seed file", need_jwt=False)
                seed_opt = ("nkeys_seed", seed)
            else:
                # never echo the value: it may be a mistyped seed
                raise ValidationError("nkeys_seed is neither an nkey seed (S...) nor the path of a readable seed file")
        if creds is not None:
            _check_secret_file(os.fspath(creds), "creds file", need_jwt=True)
        #: Credentials to scrub from error texts and log lines.
        self._secrets = tuple(s for s in secrets if s)
        self._id = next(_ids)
        self.name = name
        self._timeout = timeout
        self._error_cb = error_cb
        self._disconnected_cb = disconnected_cb
        self._reconnected_cb = reconnected_cb
        self._closed_cb = closed_cb
        self._closing = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._subs: set[Subscription] = set()
        self._subs_lock = threading.Lock()
        check_resolvable(self._urls, timeout)  # before any thread starts: nothing to tear down
        self._pool = WorkerPool(f"jssync-{self._id}", callback_workers, self._report_error)
        self._loop = IOLoop(f"jssync-io-{self._id}")
        # publish pump state
        self._pubq: deque[tuple[str, bytes, str, dict[str, str] | None]] = deque()
        self._pump_scheduled = False
        self._pump_task: asyncio.Task[None] | None = None
        self._pump_idle: asyncio.Event | None = None
        self._pub_room = threading.Event()
        self._pub_room.set()
        # while not connected: the pump is parked (_park) and what is queued stays queued
        self._park_timer: asyncio.TimerHandle | None = None
        self._stale_check = False  # on resuming: drop requests whose caller gave up (_drop_stale)
        # reconnect_buffer_size: payload bytes accepted since the connection was lost
        self._offline_limit = reconnect_buffer_size
        self._offline_lock = threading.Lock()
        self._offline_used = 0
        self._offline_refused = False
        self._max_payload = 1024 * 1024
        # The caller-side socket path (jssync/_sockpath.py): a request's caller writes it
        # and may read its reply itself. Its write lock orders every write to the socket
        # and every "pop from _pubq, then write".
        self._sockpath = _sockpath.CallerSocket(self._loop.loop.call_soon_threadsafe)
        self._wlock = self._sockpath.wlock
        # which fast paths into nats-py's internals this nats-py allows (set by _make_client)
        self._caps: dict[str, bool] = {}
        self._msg_class: type[Msg] = Msg
        # request/reply multiplexer: one wildcard inbox subscription, replies routed by token
        self._mux_prefix: str | None = None
        self._mux_lock = threading.Lock()
        self._replies: dict[str, Callable[[Msg], None]] = {}
        self._tokens = itertools.count(1)
        self._disconnect_listeners: list[Callable[[], None]] = []
        self._reconnect_listeners: list[Callable[[], None]] = []
        # permission watches: key -> (operation, lower-cased subject, callback run on the I/O thread)
        self._perm_watch: dict[int, tuple[str, str, Callable[[PermissionDeniedError], None]]] = {}
        self._perm_keys = itertools.count(1)
        self._last_connect_error: BaseException | None = None
        # outages (I/O thread): the one under way, the link error seen just before it, the
        # server connected to last; why nats-py closed the connection by itself (it gave up)
        self._outage: _Outage | None = None
        self._lost_cause: BaseException | None = None
        self._server_url: str | None = None
        self._reconnect_wait = reconnect_time_wait
        self._max_reconnects = max_reconnect_attempts
        self._closed_error: ConnectionClosedError | None = None
        self._dropped_at_close = 0  # queued messages close() dropped (drain() reports them)

        opts: dict[str, Any] = dict(
            servers=self._urls,
            name=name,
            connect_timeout=max(1, int(timeout or 2)),
            reconnect_time_wait=reconnect_time_wait,
            max_reconnect_attempts=max_reconnect_attempts,
            ping_interval=ping_interval,
            max_outstanding_pings=max_outstanding_pings,
            no_echo=no_echo,
            inbox_prefix=inbox_prefix,
            allow_reconnect=True,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
            closed_cb=self._on_closed,
        )
        if user is not None:
            opts["user"] = user
        if password is not None:
            opts["password"] = password
        if token is not None:
            opts["token"] = token
        if creds is not None:
            opts["user_credentials"] = os.fspath(creds)
        if seed_opt is not None:
            opts[seed_opt[0]] = seed_opt[1]
        if tls is not None:
            opts["tls"] = tls
        if tls_hostname is not None:
            opts["tls_hostname"] = tls_hostname
        self._connect_opts = opts
        self._refused: set[str] = set()
        self._failed_url: str | None = None
        failure: BaseException | None = None
        try:
            self._nc = self._loop.run(self._make_client(), None)
            self._fast = self._caps["pump_buffer"]
            self._loop.run(self._connect(), Deadline(timeout), "connect")
        except BaseException as exc:
            self._teardown(0.5)
            if not isinstance(exc, Error) or isinstance(exc, ConnectionClosedError):
                raise
            failure = exc
        if failure is not None:
            # raised outside the ``except`` so the internal timeout is not the context
            raise self._connect_failure(failure, timeout)
        _live.add(self)
        #: What the layers above core use of this connection (core/internal.py); not public API.
        self.internal = ConnectionInternal(self)

    def _connect_failure(self, exc: BaseException, timeout: float | None) -> BaseException:
        """The error a failed first connect raises: what failed, where, and what to try."""
        urls = ", ".join(redact_url(u) for u in self._urls)
        if isinstance(exc, TimeoutError):
            last = self._last_connect_error
            why = f" (last error: {self._describe(last)})" if last is not None else ""
            return NoServersError(f"could not connect to {urls} within {timeout}s{why}")
        if isinstance(exc, AuthorizationError):
            where = redact_url(self._failed_url) if self._failed_url else urls
            said = _scrub(str(exc.__cause__ or exc), self._secrets).removeprefix("nats: ")
            new = AuthorizationError(f"authorization failed at {where} using {self._auth_method()}: "
                                     f"the server said {said}")
            new.__cause__ = exc.__cause__
            return new
        if isinstance(exc, NoServersError):
            exc.__context__ = exc.__cause__ = None  # "connection refused" says it all
        return exc

    def _auth_method(self) -> str:
        """How this connection authenticates, without any secret (for error texts)."""
        o = self._connect_opts
        if "user_credentials" in o:
            return f"the creds file {o['user_credentials']!r}"
        if "nkeys_seed" in o:
            return f"the nkey seed file {o['nkeys_seed']!r}"
        if "nkeys_seed_str" in o:
            return "an nkey seed"
        if "token" in o:
            return "a token"
        if "user" in o:
            return f"user {o['user']!r} with a password" if "password" in o else f"user {o['user']!r}"
        for u in self._urls:
            parts = urlsplit(u if "://" in u else "nats://" + u)
            if parts.password is not None:
                return f"user {parts.username!r} with a password (from the URL)"
            if parts.username:
                return "a token (from the URL)"
        return "no credentials (the server requires some)"

    def _refused_error(self) -> NoServersError:
        urls = ", ".join(redact_url(u) for u in self._urls)
        hint = ""
        if all(_is_local(u) for u in self._urls):
            hint = "; is a server running there? `jssync server` starts one (JetStream on 127.0.0.1:4222)"
        return NoServersError(f"could not connect to {urls}: connection refused{hint}")

    def _describe(self, exc: BaseException) -> str:
        """``Type: message`` of ``exc`` with every credential of this connection scrubbed."""
        text = str(exc) or type(exc).__name__
        return _scrub(f"{type(exc).__name__}: {text}", self._secrets)

    async def _make_client(self) -> Any:
        import nats.aio.client

        nc = nats.aio.client.Client()
        why = _natspy.check(nc)
        self._msg_class, why["msg_class"] = _natspy.install_msg_class(nc, Msg, self)
        self._caps = _natspy.warn_disabled(why)
        self._sockpath.header_parser = _natspy.header_parser(nc) if self._caps["reply_headers"] else None
        self._pump_idle = asyncio.Event()
        self._pump_idle.set()
        return nc

    async def _connect(self) -> None:
        # nats-py retries the first connect forever with max_reconnect_attempts=-1; our
        # deadline bounds it. Errors during the first connect are only logged at debug.
        self._connecting = True
        try:
            await self._nc.connect(**self._connect_opts)
        except Exception as exc:
            new = translate(exc)
            if new is exc:
                raise
            raise new from exc
        finally:
            self._connecting = False
        self._max_payload = self._nc.max_payload
        self._server_url = self.connected_url
        self._install_direct()

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

    # -- callbacks ---------------------------------------------------------------------------

    def _report_error(self, exc: BaseException) -> None:
        """Log ``exc`` and hand it to the user's error callback on the worker pool."""
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return
        text = _scrub(str(exc), self._secrets).removeprefix("nats: ")  # the logger's name is the one prefix
        log.warning("%s: %s", type(exc).__name__, text)
        cb = self._error_cb
        if cb is not None and not self._pool._closed:
            if self._pool.in_worker():
                try:
                    cb(exc)  # type: ignore[arg-type]
                except Exception:
                    log.exception("error_cb raised")
            else:
                self._pool.submit(self._call_user_cb, cb, exc)

    @staticmethod
    def _call_user_cb(cb: Callable[..., Any], *args: Any) -> None:
        try:
            cb(*args)
        except Exception:
            log.exception("user callback %r raised", cb)

    async def _on_error(self, exc: Exception) -> None:
        if not self._loop.in_loop_thread():
            raise _OffLoopError  # nats-py's header parser run by a caller (_sockpath)
        import nats.errors as ne

        if getattr(self, "_connecting", False):
            self._last_connect_error = exc
            log.debug("connect attempt failed: %s", self._describe(exc))
            url = _natspy.current_server_url(self._nc)
            if isinstance(exc, ne.AuthorizationError) or "authorization" in str(exc).lower():
                # Raising here ends nats-py's first-connect loop: wrong credentials will not
                # get better by retrying.
                self._failed_url = url
                raise exc
            if isinstance(exc, ConnectionRefusedError):
                self._refused.add(url or str(len(self._refused)))
                if len(self._refused) >= (len(_natspy.server_uris(self._nc)) or len(self._urls)):
                    # every server refused: nothing listens there, so waiting out the
                    # connect timeout would not help
                    raise self._refused_error()
            return

        if isinstance(exc, ne.SlowConsumerError):
            return  # already reported by the subscription
        if self._link_error(exc):
            return
        err = translate(exc)
        if isinstance(err, PermissionDeniedError) and self._notify_permission(err):
            # a waiting subscribe/request raises it on its caller's thread: report it once
            log.debug("%s (raised by the waiting call)", _scrub(str(err), self._secrets))
            return
        self._report_error(err)

    # -- permission violations -----------------------------------------------------------

    def _watch_permission(self, operation: str, subject: str, fn: Callable[[PermissionDeniedError], None]) -> int:
        """Call ``fn(err)`` on the I/O thread when the server refuses ``operation`` on ``subject``.

        ``operation`` is ``"publish"`` or ``"subscribe"``. Returns a key for
        :meth:`_unwatch_permission`. Cheap (one dict insert); any thread.
        """
        key = next(self._perm_keys)
        self._perm_watch[key] = (operation, subject.lower(), fn)
        return key

    def _unwatch_permission(self, key: int) -> None:
        self._perm_watch.pop(key, None)

    def _notify_permission(self, err: PermissionDeniedError) -> bool:
        """On the I/O thread: hand a permissions -ERR to the calls waiting on its subject.

        Returns True if a waiting call took it (that call raises it on its own thread).
        """
        if err.subject is None or not self._perm_watch:
            return False
        subject = err.subject.lower()
        taken = False
        for op, subj, fn in list(self._perm_watch.values()):
            if subj == subject and op == err.operation:
                taken = True
                try:
                    fn(err)
                except Exception:  # pragma: no cover - watchers are tiny
                    log.debug("permission watcher failed", exc_info=True)
        return taken

    async def _check_sub_permission(self, nsub: Any, subject: str, denied: list[PermissionDeniedError],
                                    key: int) -> None:
        """On the loop, after a SUB: PING/PONG, then raise if a permissions -ERR named ``subject``.

        The server answers in order, so a refusal of the SUB arrives before the PONG.
        ``denied`` is filled by the watch ``key`` (registered before the SUB was sent).
        Skipped while disconnected (the SUB goes out on reconnect; a refusal then goes to
        error_cb).
        """
        try:
            if self._nc.is_connected and not denied:
                try:
                    await self._ordered_flush(max(0.5, min(self._timeout or 2.0, 5.0)))
                except Exception as exc:
                    log.debug("could not confirm the subscription on %r: %s", subject, exc)
        finally:
            self._unwatch_permission(key)
        if denied:
            try:
                await nsub.unsubscribe()
            except Exception:
                log.debug("could not remove the refused subscription", exc_info=True)
            raise PermissionDeniedError(
                f"permission denied: the server refused the subscription to {subject!r}",
                operation="subscribe", subject=subject,
            ) from denied[0]

    def _link_error(self, exc: BaseException) -> bool:
        """On the loop: an error of the link itself, counted for the outage instead of reported.

        While connected: the error that ends the connection (EOF, a socket error, a stale
        connection), named by the report of the outage that follows. During an outage: a
        failed reconnect attempt (logged at debug level; a refused authorization is also
        reported, once per outage). Permission errors are never link errors. Returns True
        when ``exc`` is not to be reported.
        """
        import nats.errors as ne

        o = self._outage
        if o is None:
            if not isinstance(exc, ne.UnexpectedEOF | ne.StaleConnectionError | OSError):
                return False
            self._lost_cause = exc
            log.debug("the connection is lost: %s", self._describe(exc))
            return True
        if "permissions violation" in str(exc).lower():
            return False
        o.attempts += 1
        o.last = exc
        log.debug("reconnect attempt %d failed: %s", o.attempts, self._describe(exc))
        if isinstance(translate(exc), AuthorizationError) and not o.auth_reported:
            o.auth_reported = True
            return False
        return True

    def _servers_text(self) -> str:
        """The server(s) reconnect attempts go to, without passwords (for error texts)."""
        try:
            urls = [redact_url(u.geturl()) for u in self._nc.servers]
        except Exception:  # pragma: no cover - an unexpected nats-py
            urls = []
        urls = urls or [redact_url(u) for u in self._urls]
        return urls[0] if len(urls) == 1 else "one of " + ", ".join(urls)

    def _link_state(self) -> str | None:
        """Why a call may have timed out: the connection is disconnected and reconnecting (to
        which server, which attempt, the last error), or it gave up; None while connected.

        Any thread; never blocks.
        """
        if self._closed_error is not None:
            return str(self._closed_error)
        if self._closed or self._closing or self._nc.is_connected:
            return None
        o = self._outage
        if o is None:
            return f"the connection is disconnected and reconnecting (to {self._servers_text()})"
        last = f"; last error: {self._describe(o.last)}" if o.last is not None else ""
        return (f"the connection is disconnected and reconnecting (to {self._servers_text()}, attempt "
                f"{o.attempts + 1}, for {time.monotonic() - o.start:.1f}s{last})")

    def _outage_started(self) -> None:
        """On the loop, at a disconnect: report the outage once (not each reconnect attempt)."""
        cause = self._lost_cause
        self._lost_cause = None
        self._outage = _Outage(time.monotonic())
        url = self._server_url or ", ".join(redact_url(u) for u in self._urls)
        why = f" ({self._describe(cause)})" if cause is not None else ""
        limit = "" if self._max_reconnects < 0 else f", max_reconnect_attempts={self._max_reconnects}"
        err = Error(f"disconnected from {url}{why}: reconnecting (every {self._reconnect_wait}s{limit}); "
                    "reported once per outage, the attempts are logged at debug level")
        err.__cause__ = cause
        self._report_error(err)

    def _gave_up(self) -> None:
        """On the loop: nats-py closed the connection by itself (no more reconnect attempts).

        From now on the connection is closed (``is_closed``) and every call raises
        :class:`ConnectionClosedError` saying why; what was queued is dropped; ``error_cb``
        gets that error once. Then a helper thread runs :meth:`close` (a thread of its own:
        close joins this one), which ends every subscription, consume and iterator with it.
        """
        o = self._outage
        self._outage = None
        took = last = ""
        n = 0
        if o is not None:
            n = o.attempts
            took = f" over {time.monotonic() - o.start:.1f}s"
            if o.last is not None:
                last = f"; last error: {self._describe(o.last)}"
        why = (f"the connection is closed: it gave up reconnecting to {self._servers_text()} after {n} failed "
               f"attempt(s){took} (max_reconnect_attempts={self._max_reconnects}{last})")
        self._closed_error = ConnectionClosedError(why)
        q = self._pubq
        dropped = len(q)
        q.clear()
        self._pub_room.set()
        self._report_error(ConnectionClosedError(
            why + (f"; {dropped} queued message(s) dropped" if dropped else "")))
        threading.Thread(target=self._close_given_up, name=f"jssync-{self._id}-close", daemon=True).start()

    def _close_given_up(self) -> None:
        try:
            self.close()
        except BaseException:  # noqa: BLE001 - a helper thread: nobody to raise to
            log.debug("closing the connection that gave up failed", exc_info=True)

    async def _on_disconnected(self) -> None:
        if getattr(self, "_connecting", False):
            return
        # a close() the user asked for, or nats-py closing after it gave up, is no outage; an
        # outage is reported once, to error_cb (by default the jssync logger), when it starts
        if self._outage is None and not (self._closing or self._closed or self._nc.is_closed):
            self._outage_started()
        for fn in list(self._disconnect_listeners):
            try:
                fn()
            except Exception:  # one bad listener must not skip the others
                log.exception("connection listener %r raised", fn)
        if self._disconnected_cb is not None:
            self._pool.submit(self._call_user_cb, self._disconnected_cb)

    async def _on_reconnected(self) -> None:
        o = self._outage
        self._outage = None
        self._server_url = self.connected_url
        if o is not None:  # the outage's end: reported once
            log.info("reconnected to %s after %d failed attempt(s) in %.1fs", self.connected_url,
                     o.attempts, time.monotonic() - o.start)
        else:
            log.info("reconnected to %s", self.connected_url)
        with self._offline_lock:  # reconnect_buffer_size counts afresh for the next outage
            self._offline_used = 0
            self._offline_refused = False
        for fn in list(self._reconnect_listeners):
            try:
                fn()
            except Exception:  # one bad listener must not skip the others
                log.exception("connection listener %r raised", fn)
        if self._reconnected_cb is not None:
            self._pool.submit(self._call_user_cb, self._reconnected_cb)

    async def _on_closed(self) -> None:
        if getattr(self, "_connecting", False):
            return
        if not (self._closing or self._closed or self._loop.forked) and self._closed_error is None:
            self._gave_up()  # not close(): nats-py gave up reconnecting
        if self._closed_cb is not None:
            self._pool.submit(self._call_user_cb, self._closed_cb)

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

    def _offline_check(self, size: int, subject: str) -> None:
        """While not connected, with ``reconnect_buffer_size`` set: count ``size`` bytes against it.

        Raises :class:`jssync.ReconnectBufferExceededError` when they do not fit, and
        reports the first refusal of each outage to ``error_cb``.
        """
        limit = self._offline_limit
        assert limit is not None
        with self._offline_lock:
            if self._nc.is_connected:
                return
            if self._offline_used + size <= limit:
                self._offline_used += size
                return
            first = not self._offline_refused
            self._offline_refused = True
        err = ReconnectBufferExceededError(
            f"not connected, and the messages waiting for the reconnect would pass reconnect_buffer_size "
            f"({limit} bytes): {size} bytes on {subject!r} refused"
        )
        if first:
            self._report_error(err)
        raise err

    def _publish_raw(self, subject: str, data: bytes) -> None:
        """Publish without validation (acks, flow control replies)."""
        if self._closed:
            return
        self._enqueue((subject, data, "", None))

    def _send_ack(self, msg: Msg, payload: bytes, terminal: bool, reply: str = "") -> bool:
        """Queue an ack of ``msg`` (on its reply subject) and update its ack state, atomically.

        "Written" for an ack means: accepted into this connection's outgoing queue while
        the connection is open. :meth:`close` takes the same lock to start closing and then
        writes that queue before closing the socket, so an ack either raises here or is in
        the queue that close writes. Under the lock: nothing is sent when a terminal ack
        was already written (or a double ack is waiting for its confirmation); a terminal
        ack marks the message acked. Of concurrent acks of one message exactly one
        terminal ack is sent. ``reply``: the ack's own reply subject (+NXT). Returns
        whether the ack was queued.

        Raises:
            jssync.ConnectionClosedError: the connection is closed or closing (nothing sent).
        """
        q = self._pubq
        n = len(q)
        if n and (n >= _PUB_HIGH_WATER or n * len(payload) >= _PUB_HIGH_BYTES) \
                and not self._loop.in_loop_thread():
            self._wait_pub_room(len(payload))  # (not under the lock: it may block)
        lock = self._close_lock
        lock.acquire()
        try:
            if msg._acked:
                return False
            if self._closing or self._closed or getattr(self._nc, _NC_STATUS) == _NC_CLOSED:
                raise ConnectionClosedError("the connection is closed: the ack was not sent")
            q.append((msg.reply, payload, reply, None))
            if terminal:
                msg._acked = ACK_SENT
        finally:
            lock.release()
        if not self._pump_scheduled:
            self._pump_scheduled = True
            try:
                self._loop.loop.call_soon_threadsafe(self._kick_pump)
            except RuntimeError:
                self._pump_scheduled = False
        return True

    def _enqueue(self, item: tuple[str, bytes, str, dict[str, str] | None],
                 deadline: Deadline | None = None) -> None:
        """Queue ``item``; at the queue's bound wait for room (see :meth:`_wait_pub_room`).

        ``deadline``: the caller's own (a request's timeout), when shorter than the bound's.
        """
        q = self._pubq
        n = len(q)
        # Bounded by count, and by bytes estimated as count x this message's size (one
        # multiplication instead of a shared byte counter that every thread would update).
        if n and (n >= _PUB_HIGH_WATER or n * len(item[1]) >= _PUB_HIGH_BYTES) \
                and not self._loop.in_loop_thread():
            self._wait_pub_room(len(item[1]), deadline)
        q.append(item)
        if not self._pump_scheduled:
            self._pump_scheduled = True
            try:
                self._loop.loop.call_soon_threadsafe(self._kick_pump)
            except RuntimeError:
                self._pump_scheduled = False

    def _wait_pub_room(self, size: int, within: Deadline | None = None) -> None:
        """Block until the publish queue is down to half its count and byte limits.

        The I/O thread sets ``_pub_room`` after every burst it takes off the queue. Waits
        at most 15 x the connect timeout, or until ``within`` (a request's own deadline)
        when that comes first.
        """
        if self._pool.in_worker() or self._closed:
            return  # never block a callback on the I/O thread's progress
        q = self._pubq
        half_n, half_b = _PUB_HIGH_WATER // 2, _PUB_HIGH_BYTES // 2
        deadline = Deadline(self._timeout * 15 if self._timeout else None)
        if within is not None:
            left, own = within.remaining(), deadline.remaining()
            if left is not None and (own is None or left < own):
                deadline = within
        while len(q) >= half_n or len(q) * size >= half_b:
            self._check_open()
            self._pub_room.clear()
            if len(q) < half_n and len(q) * size < half_b:
                return
            self._pub_room.wait(deadline.slice())
            deadline.check("publish (waiting for the outgoing buffer)")

    def _kick_pump(self) -> None:
        # On the loop thread. A small burst while connected and with nothing queued in
        # nats-py is encoded and written to the socket right here (lowest latency for
        # requests and acks); anything else goes through the pump task. While not
        # connected nothing leaves the queue (see _park).
        self._pump_scheduled = False
        if self._pump_task is not None and not self._pump_task.done():
            return
        q = self._pubq
        nc = self._nc
        if not nc.is_connected:
            self._park()
            return
        if self._fast and len(q) <= _DIRECT_MAX and not _natspy.pending(nc) and not self._stale_check:
            try:
                writer = _natspy.io_writer(nc)
                if writer.transport is not self._sockpath.checked:
                    self._install_direct()  # a new transport (reconnect): look at it once
                if writer.transport.get_write_buffer_size() < _DIRECT_BUFFER_LIMIT:
                    with self._wlock:
                        chunk = self._encode_burst(_DIRECT_MAX)
                        if chunk:
                            writer.write(chunk)
                    if not q:
                        return
            except Exception:  # pragma: no cover - fall back to the pump
                log.debug("direct write failed; using the pump", exc_info=True)
        assert self._pump_idle is not None
        self._pump_idle.clear()
        self._pump_task = self._loop.loop.create_task(self._pump())

    def _encode_burst(self, limit: int) -> bytes:
        """Pop up to ``limit`` queued publishes (and about 1 MiB of payload) as one protocol chunk.

        The byte cap keeps large payloads from being joined and copied in huge chunks.
        """
        q = self._pubq
        parts: list[bytes] = []
        add = parts.append
        n = 0
        nbytes = 0
        while q and n < limit and nbytes < _BURST_BYTES:
            subject, data, reply, headers = q.popleft()
            n += 1
            nbytes += len(data)
            if headers is None:
                if reply:
                    add(f"PUB {subject} {reply} {len(data)}\r\n".encode())
                else:
                    add(f"PUB {subject} {len(data)}\r\n".encode())
                add(data)
            else:
                hdr = _encode_headers(headers)
                add(f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode())
                add(hdr)
                add(data)
            add(b"\r\n")
        st = self._nc.stats
        st["out_msgs"] += n
        st["out_bytes"] += nbytes
        self._pub_room.set()
        return b"".join(parts)

    def _park(self) -> None:
        """On the loop, not connected: leave the queue as it is and look again in a moment.

        The publishes wait in ``_pubq`` (bounded as always: publishers block at its limit)
        instead of going to nats-py, whose reconnect buffer is small and refuses past it.
        """
        self._stale_check = True
        if self._park_timer is None:
            self._park_timer = self._loop.loop.call_later(_PARKED_POLL, self._unpark)

    def _unpark(self) -> None:
        # on the loop: resume the pump once connected again
        self._park_timer = None
        q = self._pubq
        if not q or self._closed or self._closing or self._nc.is_closed:
            return  # (close() drops what is left; so does _gave_up)
        self._kick_pump()

    def _drop_stale(self) -> None:
        """On the loop, resuming after a disconnect: drop queued requests whose caller gave up.

        A request, ``js.publish`` or ``publish_async`` that timed out while its message
        waited for the reconnect has reported its failure; sending it afterwards could
        store a message its caller treats as not stored. Such a message's reply subject
        is on the multiplexer, and its token is gone from ``_replies``.
        """
        prefix = self._mux_prefix
        q = self._pubq
        if prefix is None or not q:
            return
        replies = self._replies
        plen = len(prefix)
        with self._wlock:  # (a direct send checks the queue under it)
            n = len(q)
            kept = []
            for _ in range(n):
                item = q.popleft()
                reply = item[2]
                if reply.startswith(prefix) and reply[plen:] not in replies:
                    continue
                kept.append(item)
            q.extendleft(reversed(kept))
        if len(kept) < n:
            log.debug("%d request(s) that timed out while disconnected not sent", n - len(kept))

    async def _pump(self) -> None:
        """On the loop: hand queued publishes to nats-py, a burst at a time, while connected.

        A burst is encoded into one chunk and appended to nats-py's outgoing buffer with
        one flush kick (or, with a nats-py without that buffer, each goes through
        ``nc.publish``). When the connection is lost the pump parks (see :meth:`_park`).
        """
        q = self._pubq
        nc = self._nc
        try:
            if self._stale_check:
                self._stale_check = False
                self._drop_stale()
            while q:
                if not nc.is_connected:
                    self._park()
                    break
                if self._fast:
                    with self._wlock:
                        chunk = self._encode_burst(_PUMP_BATCH)
                        over = _natspy.buffer_append(nc, chunk)
                    try:
                        await _natspy.flush_pending(nc, over)
                    except Exception as exc:  # pragma: no cover - nats-py reports socket errors itself
                        log.debug("flush kick failed: %s", exc)
                else:
                    n = 0
                    while q and n < _PUMP_BATCH and nc.is_connected:
                        subject, data, reply, headers = q.popleft()
                        n += 1
                        try:
                            await nc.publish(subject, data, reply=reply, headers=headers)
                        except Exception as exc:
                            if nc.is_closed:
                                q.clear()
                                break
                            self._report_error(translate(exc))
                    self._pub_room.set()  # (the fast branch's _encode_burst sets it)
                if q:
                    await asyncio.sleep(0)
        finally:
            self._pub_room.set()
            assert self._pump_idle is not None
            self._pump_idle.set()

    def _install_direct(self) -> None:
        """On the loop: arm the caller-side socket path on the current transport (``_sockpath``).

        Only a plain TCP connection: a caller may then write a small request to the socket
        itself and read its reply (saves the wake-ups of this thread and the caller's).
        """
        self._sockpath.attach(self._nc, self._caps["direct_write"], self._caps["direct_read"])

    def _fast_paths(self) -> dict[str, bool]:
        """Which shortcuts into nats-py's internals are active on this connection.

        Each is checked against the nats-py it runs on when the connection is made
        (``_natspy.check``) and, where that check fails, the connection logs one ``jssync``
        warning naming it and takes nats-py's public path instead (correct, slower). A
        test requires every one on a supported nats-py (tests/integration/test_fast_paths.py).
        On a plain TCP connection on Linux all are True; ``direct_write`` and
        ``direct_read`` are off under TLS (the SSL layer owns the socket) and while
        disconnected (re-armed on the first write after the reconnect).

        - ``pump_buffer``: queued publishes are encoded in bursts into nats-py's outgoing
          buffer, not one ``nc.publish`` each.
        - ``direct_write``: a caller's thread writes a small request straight to the socket
          (``_sockpath.CallerSocket.send``).
        - ``direct_read``: that caller may also read its reply off the socket
          (``_sockpath.CallerSocket.watch``; needs ``os.eventfd``).
        - ``reply_headers``: a reply read that way has its headers parsed by nats-py's own
          header parser (else such a reply is left to the I/O thread).
        - ``wire_header_len``: a pulled message's header size is read from nats-py's parser,
          not rebuilt from the header dict (see ``_pull._wire_header_len``).
        - ``msg_class``: nats-py builds every message as this connection's ``Msg`` subclass
          with exactly the keywords jssync knows (else through a constructor that also
          takes, and ignores, keywords a newer nats-py passes).
        """
        nc = self._nc
        return {
            "pump_buffer": bool(self._fast),
            "direct_write": self._sockpath.sock is not None,
            "direct_read": self._sockpath.reader is not None and _natspy.reader_counted(nc),
            "reply_headers": self._sockpath.header_parser is not None,
            "wire_header_len": self._caps["wire_header_len"],
            "msg_class": self._caps["msg_class"] and _natspy.message_class(nc) is self._msg_class,
        }

    def _try_direct_send(self, subject: str, data: bytes, reply: str, headers: dict[str, str] | None) -> bool:
        """On a caller's thread: send one message on the socket if nothing is queued before it.

        Returns False (nothing sent) when the message must go through the queue instead.
        """
        if self._sockpath.sock is None or self._pubq or len(data) > _sockpath.SEND_MAX:
            return False
        nc = self._nc
        buf = _sockpath.encode_pub(subject, reply, data, None if headers is None else _encode_headers(headers))
        if not self._sockpath.send(buf, self._send_blocked):
            return False
        st = nc.stats
        st["out_msgs"] += 1
        st["out_bytes"] += len(data)
        return True

    def _send_blocked(self) -> bool:
        # (under the write lock) something must be written before a caller's message
        nc = self._nc
        pt = self._pump_task
        return bool(self._pubq or _natspy.pending(nc) or not nc.is_connected or (pt is not None and not pt.done()))

    async def _sync_pubs(self) -> None:
        """On the loop: wait until every publish queued so far was handed to nats-py.

        While not connected it returns at once (or as soon as the pump parks): the queue
        goes out after the reconnect. (nats-py sends the subscriptions first on a
        reconnect, so a SUB cannot be ordered after the queued publishes anyway.)
        """
        if self._pubq and self._nc.is_connected:
            self._pump_scheduled = False
            self._kick_pump()
        if self._pump_task is not None and not self._pump_task.done():
            assert self._pump_idle is not None
            await self._pump_idle.wait()

    async def _ordered_flush(self, timeout: float | None) -> None:
        """On the loop: PING/PONG once everything nats-py buffered is on the socket.

        nats-py writes its PING straight to the socket, ahead of commands still in its
        buffer (e.g. a SUB just made), so the PONG could come back before the server saw
        them. Writing the buffer first keeps the order. ``timeout`` None: no limit.
        """
        if timeout is None:
            await self._flush_no_limit()
            return
        nc = self._nc
        if not nc.is_connected and not nc.is_closed:
            # nats-py's flush returns at once while reconnecting; wait for the connection
            # (the PING must reach the server) within the same timeout.
            end = asyncio.get_running_loop().time() + timeout
            await self._wait_connected(end, timeout)
            timeout = max(0.001, end - asyncio.get_running_loop().time())
        if self._fast and nc.is_connected:
            try:
                _natspy.write_pending(nc)
            except Exception:  # pragma: no cover - nats-py's flusher reports socket errors
                log.debug("could not write the buffer before PING", exc_info=True)
        await nc.flush(timeout=timeout)

    async def _wait_connected(self, end: float | None, timeout: float | None) -> None:
        """On the loop: return once connected (or closed); TimeoutError at loop time ``end``
        (None: no limit)."""
        nc = self._nc
        loop = asyncio.get_running_loop()
        while not nc.is_connected and not nc.is_closed:
            left = 0.05 if end is None else end - loop.time()
            if left <= 0:
                raise TimeoutError(f"flush timed out after {timeout}s: not connected")
            await asyncio.sleep(min(0.05, left))

    async def _flush_no_limit(self) -> None:
        """On the loop: ``_ordered_flush`` without a limit.

        nats-py's flush needs a number, and a PING sent before a disconnect is never
        answered (the reconnect forgets it): so the PING goes out again after each
        reconnect, until a PONG comes back (or the connection closes: nats-py raises).
        """
        nc = self._nc
        year = 365 * 86400.0  # nats-py's flush needs a number: a year, looked at every 0.1 s
        while True:
            await self._wait_connected(None, None)
            reconnects = nc.stats["reconnects"]
            if self._fast and nc.is_connected:
                try:
                    _natspy.write_pending(nc)
                except Exception:  # pragma: no cover - nats-py's flusher reports socket errors
                    log.debug("could not write the buffer before PING", exc_info=True)
            ping = asyncio.ensure_future(nc.flush(timeout=year))
            try:
                while not ping.done():
                    await asyncio.wait((ping,), timeout=0.1)
                    if not ping.done() and (nc.stats["reconnects"] != reconnects or not nc.is_connected):
                        ping.cancel()  # its PONG will not come: PING again once reconnected
                        await asyncio.wait((ping,))
            except BaseException:
                ping.cancel()
                raise
            if not ping.cancelled():
                ping.result()
                return

    def flush(self, timeout: float | None = 2.0) -> None:
        """Send everything published so far and wait for the server to confirm (PING/PONG).

        Blocks up to ``timeout`` seconds (None: no limit). While disconnected it waits for
        the reconnect and for what was queued meanwhile to go out, within the same ``timeout``.

        Raises:
            jssync.TimeoutError: no PONG in time (or still not connected).
            jssync.ConnectionClosedError.
        """
        self._check_open()

        async def _flush() -> None:
            loop = asyncio.get_running_loop()
            end = None if timeout is None else loop.time() + max(timeout, 0.001)
            while True:
                await self._sync_pubs()
                nc = self._nc
                if not self._pubq or nc.is_connected or nc.is_closed:
                    break
                # not connected: the rest of the queue waits for the reconnect
                await self._wait_connected(end, timeout)
            with translating():
                await self._ordered_flush(None if end is None else max(end - loop.time(), 0.001))

        self.run(_flush(), Deadline(None if timeout is None else timeout + 0.5), "flush")

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
        validate_subject(subject, wildcards=False)
        validate_headers(headers)
        data = _check_data(data)
        size = len(data) if headers is None else len(data) + _headers_size(headers)
        if size > self._max_payload:
            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        return self._request(subject, data, headers, timeout)

    def _request(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float | None) -> Msg:
        """``request`` without argument validation (internal callers compose their subjects)."""
        self._check_open()
        if self._offline_limit is not None and not self._nc.is_connected:
            self._offline_check(len(data) if headers is None else len(data) + _headers_size(headers), subject)
        if ".CONSUMER.MSG.NEXT." in subject:
            return self._request_own_inbox(subject, data, headers, timeout)
        if self._loop.in_loop_thread():
            raise RuntimeError("a blocking jssync call was made on the connection's I/O thread")
        deadline = Deadline(timeout)
        prefix = self._mux_prefix or self._start_mux(deadline)
        token = str(next(self._tokens))
        waiter = _Waiter()
        self._replies[token] = waiter.set
        wkey = self._watch_permission("publish", subject, waiter.fail)
        try:
            if self._try_direct_send(subject, data, prefix + token, headers):
                # Watch the socket only when this is the one request waiting: every caller
                # watching is woken by every reply, so with many threads in requests each
                # reply woke them all (the I/O thread, awake anyway, delivers instead).
                if self._sockpath.reader is not None and len(self._replies) == 1:
                    self._watch_for_reply(waiter, token, deadline)
            else:
                self._enqueue((subject, data, prefix + token, headers), deadline)
            msg = waiter.wait(deadline, self, subject)
        finally:
            self._replies.pop(token, None)
            self._perm_watch.pop(wkey, None)
        if msg is None:
            if waiter.exc is not None:
                raise PermissionDeniedError(
                    f"permission denied: the server refused the request's publish to {subject!r}",
                    operation="publish", subject=subject,
                ) from waiter.exc
            raise _why.timed_out(subject, timeout, self._link_state())
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            raise _why.no_responders(subject)
        return msg

    def _watch_for_reply(self, waiter: _Waiter, token: str, deadline: Deadline) -> None:
        """On a caller's thread, right after it wrote its request: watch the socket briefly.

        When the reply is the next thing on the socket, read it here and hand it to
        ``waiter`` (saves this thread's wake-up by the I/O thread); see ``_sockpath``.
        """
        got = self._sockpath.watch(waiter, token, deadline)
        # the multiplexer's entry decides who delivers the reply (never two threads)
        if got is None or self._replies.pop(token, None) is None:
            return
        nc = self._nc
        st = nc.stats
        st["in_msgs"] += 1
        st["in_bytes"] += len(got.data)
        waiter.set(self._msg_class(subject=f"{self._mux_prefix}{token}", reply="", data=got.data,
                                   headers=got.headers or None, _client=nc, _sid=got.sid))

    def _request_own_inbox(self, subject: str, data: bytes, headers: dict[str, str] | None,
                           timeout: float | None) -> Msg:
        # JetStream delivers pulled messages with their stream subject, not the reply
        # inbox, so the multiplexer cannot route them: use a one-off subscription.
        inbox = self.new_inbox()
        denied: list[PermissionDeniedError] = []
        holder: list[Subscription] = []

        def on_denied(err: PermissionDeniedError) -> None:
            denied.append(err)
            if holder:
                holder[0]._end()

        keys = (self._watch_permission("publish", subject, on_denied),
                self._watch_permission("subscribe", inbox, on_denied))
        try:
            sub = self._make_subscription(inbox, None, None, 16, check_permissions=False)
            holder.append(sub)
            try:
                if denied:
                    sub._end()
                deadline = Deadline(timeout)
                self._enqueue((subject, data, inbox, headers), deadline)
                timed_out = False
                try:
                    msg = sub.next_msg(deadline.remaining())  # (None: no limit)
                except TimeoutError:
                    timed_out = True  # raised below, outside this handler: no context
                except SubscriptionClosedError:
                    if not denied:
                        raise
                    err = denied[0]
                    what = f"publish to {subject!r}" if err.operation == "publish" else f"subscription to {inbox!r}"
                    raise PermissionDeniedError(
                        f"permission denied: the server refused the request's {what}",
                        operation=err.operation, subject=subject if err.operation == "publish" else inbox,
                    ) from err
                if timed_out:
                    raise _why.timed_out(subject, timeout, self._link_state())
            finally:
                sub.unsubscribe()
        finally:
            for k in keys:
                self._perm_watch.pop(k, None)
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            raise _why.no_responders(subject)
        return msg

    def _start_mux(self, deadline: Deadline) -> str:
        """Subscribe to ``<inbox>.*`` once; replies are routed to waiters on the I/O thread."""
        with self._mux_lock:
            if self._mux_prefix is not None:
                return self._mux_prefix
            prefix = self.new_inbox() + "."
            replies = self._replies

            class _Mux(_natspy.Receiver):
                __slots__ = ()

                def put_nowait(self, msg: Msg) -> None:
                    fn = replies.pop(msg.subject[len(prefix):], None)
                    if fn is not None:
                        fn(msg)

            async def _sub() -> None:
                denied: list[PermissionDeniedError] = []
                key = self._watch_permission("subscribe", prefix + "*", denied.append)
                try:
                    with translating():
                        nsub = await _natspy.subscribe(self._nc, prefix + "*", _Mux())
                except BaseException:
                    self._unwatch_permission(key)
                    raise
                self._sockpath.sid = str(_natspy.sub_sid(nsub)).encode()
                try:
                    await self._check_sub_permission(nsub, prefix + "*", denied, key)
                except PermissionDeniedError as exc:
                    raise PermissionDeniedError(
                        f"permission denied: the server refused the subscription to the reply inbox "
                        f"{prefix + '*'!r} that requests need; allow subscribe on "
                        f"'{prefix.split('.')[0]}.>' (or connect with another inbox_prefix)",
                        operation="subscribe", subject=prefix + "*",
                    ) from exc.__cause__

            self.run(_sub(), deadline, "request")
            self._sockpath.head = b"MSG " + prefix.encode()
            self._mux_prefix = prefix
            return prefix

    def _request_cb(
        self, subject: str, data: bytes, headers: dict[str, str] | None, on_reply: Callable[[Msg], None]
    ) -> str:
        """Send a request whose reply is handed to ``on_reply`` on the I/O thread; returns the token.

        No validation; the caller drops ``self._replies[token]`` when it gives up.
        """
        prefix = self._mux_prefix or self._start_mux(Deadline(self._timeout + 5))
        token = str(next(self._tokens))
        self._replies[token] = on_reply
        self._enqueue((subject, data, prefix + token, headers))
        return token

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

    def _make_subscription(self, subject: str, queue: str | None, callback: Callable[[Msg], Any] | None,
                           pending_msgs_limit: int, *, check_permissions: bool) -> Subscription:
        """``subscribe`` without validation; ``check_permissions`` adds the PING/PONG check."""
        self._check_open()
        sub = Subscription(self, subject, queue, callback, pending_msgs_limit)

        async def _sub() -> Any:
            await self._sync_pubs()
            if not check_permissions:
                return await self._subscribe_async(sub)
            denied: list[PermissionDeniedError] = []
            key = self._watch_permission("subscribe", subject, denied.append)
            try:
                nsub = await self._subscribe_async(sub)
            except BaseException:
                self._unwatch_permission(key)
                raise
            await self._check_sub_permission(nsub, subject, denied, key)
            return nsub

        try:
            sub._nsub = self.run(_sub(), Deadline(self._timeout + 5), "subscribe")
        except PermissionDeniedError:
            sub._end()
            raise
        with self._subs_lock:
            self._subs.add(sub)
        return sub

    async def _subscribe_async(self, sub: Subscription) -> Any:
        """On the loop: make the nats-py subscription and point it at ``sub``."""
        with translating():
            return await _natspy.subscribe(self._nc, sub.subject, _Inbound(sub), sub.queue)

    async def _drain_nsub(self, nsub: Any, timeout: float) -> None:
        """On the loop: the one drain of a nats-py subscription (core, push, consume).

        Sends UNSUB, waits until the server answered a PING sent after it (so it processed
        the UNSUB and everything it sent for the subscription before has been read), and
        only then removes the subscription from nats-py: no message already on the wire is
        dropped. The subscription is removed even when the flush fails (disconnected, timed
        out), so a drain always ends.
        """
        if nsub is None or _natspy.sub_closed(nsub) or self._nc.is_closed:
            return
        try:
            await _natspy.send_unsubscribe(self._nc, nsub)
            await self._ordered_flush(timeout)
        finally:
            _natspy.remove_sub(self._nc, nsub)

    def _unsubscribe(self, sub: Subscription, drain: bool, timeout: float | None | Deadline) -> None:
        with self._subs_lock:
            self._subs.discard(sub)
        if self._closed or self._loop.forked:
            return
        nsub = sub._nsub

        async def _unsub() -> None:
            if nsub is None or _natspy.sub_closed(nsub) or self._nc.is_closed:
                return
            with translating():
                if drain:
                    await self._drain_nsub(nsub, _DRAIN_FLUSH_TIMEOUT)
                else:
                    await nsub.unsubscribe()

        if self._loop.in_loop_thread():
            self._loop.loop.create_task(_unsub())
            return
        self.run(_unsub(), timeout, "unsubscribe")

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
        if self._closed or self._closing:
            return
        _why.mark_draining(self)
        deadline = Deadline(timeout)
        with self._subs_lock:
            subs = list(self._subs)
        left: list[str] = []
        for sub in subs:
            try:
                sub.drain(timeout=deadline.remaining())
            except TimeoutError as exc:
                left.append(_drain_what(sub, exc))
            except Error as exc:
                self._report_error(exc)
        in_loop = self._loop.forked or self._loop.in_loop_thread()
        if not in_loop:
            self._before_close(deadline, drain=True, subs=subs)  # (a drained consume left _subs)
        state = self._link_state()  # (before close: why the drain could not finish)
        if self._pubq and not in_loop and not self._nc.is_connected and not deadline.expired():
            try:  # what was published waits for the reconnect, within the drain's timeout
                self.flush(timeout=deadline.remaining())
            except TimeoutError:
                state = self._link_state()
            except Error as exc:
                self._report_error(exc)
        rem = deadline.remaining()
        self.close(timeout=None if rem is None else max(0.5, rem))
        dropped = self._dropped_at_close
        if left or dropped:
            what = left + ([f"{dropped} queued message(s) dropped"] if dropped else [])
            raise TimeoutError(f"drain did not finish within {timeout}s and closed the connection; "
                               f"not drained: {'; '.join(what)}" + (f" ({state})" if state else ""))

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
        deadline = Deadline(timeout)
        if not (self._closed or self._closing or self._loop.forked or self._loop.in_loop_thread()) \
                and self._nc.is_connected:
            # acks are still accepted: the naks a stopped consume promised go out first (not
            # while disconnected: close does not wait for a reconnect, and drops the queue)
            rem = deadline.remaining()
            try:
                self._before_close(Deadline(None if rem is None else rem * _BEFORE_CLOSE_SHARE), drain=False)
            except KeyboardInterrupt:
                with self._close_lock:
                    if self._closed or self._closing:
                        raise
                    self._closing = True
                self._teardown(0.5)
                raise
        with self._close_lock:  # (also the ack lock: see _send_ack)
            if self._closed or self._closing:
                return
            self._closing = True
        if self._loop.forked:
            self._closed = True
            return
        if not self._loop.in_loop_thread():
            try:

                async def _close() -> None:
                    # not while disconnected: close does not wait for a reconnect
                    if self._nc.is_connected:
                        try:
                            rem = deadline.remaining()
                            await asyncio.wait_for(self._sync_pubs(), None if rem is None else max(0.1, rem - 0.2))
                        except Exception:
                            log.debug("could not hand over every publish before close", exc_info=True)
                    q = self._pubq
                    if q:
                        self._dropped_at_close = len(q)
                        log.warning("close: %d queued message(s) dropped (not sent before close)", len(q))
                        q.clear()
                        self._pub_room.set()
                    await self._nc.close()

                self._loop.run(_close(), deadline, "close")
            except BaseException as exc:  # noqa: BLE001 - closing goes on
                if isinstance(exc, KeyboardInterrupt):
                    self._teardown(0.5)
                    raise
                log.debug("error while closing: %s", exc)
        rem = deadline.remaining()
        self._teardown(None if rem is None else rem or 0.5)

    def _before_close(self, deadline: Deadline, drain: bool, subs: list[Subscription] | None = None) -> None:
        """Before ``close`` refuses acks: let every consume send what it promised (its
        ``_before_close``: the naks of a stopped consume; with ``drain``, the hand-over of
        an iterator's buffer). ``subs``: those to look at (default: the open ones). Blocks
        until ``deadline`` at most; reports what fails."""
        if subs is None:
            with self._subs_lock:
                subs = list(self._subs)
        for sub in subs:
            hook: Callable[[Deadline, bool], None] | None = getattr(sub, "_before_close", None)
            if hook is None:
                continue
            try:
                hook(deadline, drain)
            except Error as exc:
                self._report_error(exc)

    def _teardown(self, timeout: float | None) -> None:
        self._closed = True
        self._closing = False
        with self._subs_lock:
            subs = list(self._subs)
            self._subs.clear()
        err = self._closed_error  # None after close(): iterators end quietly
        for sub in subs:
            sub._end(err)
        self._loop.stop(timeout)
        self._pool.stop(1.0 if timeout is None or timeout > 1.0 else timeout)  # at most 1 s
        _live.discard(self)


class _Outage:
    """One outage, from the disconnect to the reconnect or the give-up (I/O thread)."""

    __slots__ = ("start", "attempts", "last", "auth_reported")

    def __init__(self, start: float) -> None:
        self.start = start
        self.attempts = 0  # failed reconnect attempts so far
        self.last: BaseException | None = None  # the last attempt's error
        self.auth_reported = False


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


def _drain_what(sub: Any, exc: BaseException) -> str:
    """What a subscription (or consume, or the PubAck waiter) whose drain timed out was, for drain's error."""
    if isinstance(sub, Subscription):
        return f"the subscription on {sub.subject!r}"
    stream, consumer = getattr(sub, "stream", None), getattr(sub, "consumer", None)
    if isinstance(stream, str) and isinstance(consumer, str):
        return f"the consume of {stream}/{consumer}"
    return str(exc)


@atexit.register
def _close_all_at_exit() -> None:
    for conn in list(_live):
        try:
            if not conn._loop.forked:
                conn.close(timeout=2.0)
        except BaseException:  # noqa: BLE001
            pass


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
