"""The link: nats-py's callbacks, outages, and the errors a connection reports.

nats-py calls ``on_error``, ``on_disconnected``, ``on_reconnected`` and ``on_closed`` on
the I/O thread. During the first connect their errors only shape the error ``connect``
raises (core/options.py words it). Later an outage is reported once, when it starts, and
its end is logged; the reconnect attempts in between are logged at debug level and
counted, so a call that times out can say why (``link_state``). When nats-py gives up
reconnecting the connection closes itself (``gave_up``). Every other error goes to
``report_error``: the ``jssync`` logger and the user's ``error_cb`` (on the worker pool),
with the connection's credentials scrubbed; a permissions ``-ERR`` that a waiting call
watches for goes to that call instead (core/permissions.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.errors import (
    AuthorizationError,
    ConnectionClosedError,
    Error,
    PermissionDeniedError,
    _OffLoopError,
    translate,
)
from . import natspy as _natspy
from . import options as _options
from .urls import _scrub, redact_url

if TYPE_CHECKING:
    from .connection import Connection

log = logging.getLogger("jssync")


class Links:
    """A connection's link state and callbacks (see the module's docstring).

    Reads and sets the connection's life state (``_closed``, ``_closing``,
    ``_closed_error``); ``nc`` is set once the nats-py client is made.
    """

    def __init__(self, conn: Connection, opts: _options.Options, *, reconnect_time_wait: float,
                 max_reconnect_attempts: int, error_cb: Callable[[Exception], Any] | None,
                 disconnected_cb: Callable[[], Any] | None, reconnected_cb: Callable[[], Any] | None,
                 closed_cb: Callable[[], Any] | None) -> None:
        self._conn = conn
        self.nc: Any = None
        self.urls = opts.urls
        #: Credentials to scrub from error texts and log lines.
        self.secrets = opts.secrets
        self.error_cb = error_cb
        self.disconnected_cb = disconnected_cb
        self.reconnected_cb = reconnected_cb
        self.closed_cb = closed_cb
        self.disconnect_listeners: list[Callable[[], None]] = []
        self.reconnect_listeners: list[Callable[[], None]] = []
        # the first connect: its errors shape connect()'s
        self.connecting = False
        self.last_connect_error: BaseException | None = None
        self.refused: set[str] = set()
        self.failed_url: str | None = None
        # outages (I/O thread): the one under way, the link error seen just before it, the
        # server connected to last
        self.outage: _Outage | None = None
        self.lost_cause: BaseException | None = None
        self.server_url: str | None = None
        self.reconnect_wait = reconnect_time_wait
        self.max_reconnects = max_reconnect_attempts

    def describe(self, exc: BaseException) -> str:
        """``Type: message`` of ``exc`` with every credential of this connection scrubbed."""
        return _options.describe(exc, self.secrets)

    def report_error(self, exc: BaseException) -> None:
        """Log ``exc`` and hand it to the user's error callback on the worker pool."""
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            return
        text = _scrub(str(exc), self.secrets).removeprefix("nats: ")  # the logger's name is the one prefix
        log.warning("%s: %s", type(exc).__name__, text)
        cb = self.error_cb
        if cb is not None and not self._conn._pool._closed:
            if self._conn._pool.in_worker():
                try:
                    cb(exc)  # type: ignore[arg-type]
                except Exception:
                    log.exception("error_cb raised")
            else:
                self._conn._pool.submit(self.call_user_cb, cb, exc)

    @staticmethod
    def call_user_cb(cb: Callable[..., Any], *args: Any) -> None:
        try:
            cb(*args)
        except Exception:
            log.exception("user callback %r raised", cb)

    async def on_error(self, exc: Exception) -> None:
        if not self._conn._loop.in_loop_thread():
            raise _OffLoopError  # nats-py's header parser run by a caller (_sockpath)
        import nats.errors as ne

        if self.connecting:
            self.last_connect_error = exc
            log.debug("connect attempt failed: %s", self.describe(exc))
            url = _natspy.current_server_url(self.nc)
            if isinstance(exc, ne.AuthorizationError) or "authorization" in str(exc).lower():
                # Raising here ends nats-py's first-connect loop: wrong credentials will not
                # get better by retrying.
                self.failed_url = url
                raise exc
            if isinstance(exc, ConnectionRefusedError):
                self.refused.add(url or str(len(self.refused)))
                if len(self.refused) >= (len(_natspy.server_uris(self.nc)) or len(self.urls)):
                    # every server refused: nothing listens there, so waiting out the
                    # connect timeout would not help
                    raise _options.refused_error(self.urls)
            return

        if isinstance(exc, ne.SlowConsumerError):
            return  # already reported by the subscription
        if self.link_error(exc):
            return
        err = translate(exc)
        if isinstance(err, PermissionDeniedError) and self._conn._perms.notify(err):
            # a waiting subscribe/request raises it on its caller's thread: report it once
            log.debug("%s (raised by the waiting call)", _scrub(str(err), self.secrets))
            return
        self.report_error(err)

    def link_error(self, exc: BaseException) -> bool:
        """On the loop: an error of the link itself, counted for the outage instead of reported.

        While connected: the error that ends the connection (EOF, a socket error, a stale
        connection), named by the report of the outage that follows. During an outage: a
        failed reconnect attempt (logged at debug level; a refused authorization is also
        reported, once per outage). Permission errors are never link errors. Returns True
        when ``exc`` is not to be reported.
        """
        import nats.errors as ne

        o = self.outage
        if o is None:
            if not isinstance(exc, ne.UnexpectedEOF | ne.StaleConnectionError | OSError):
                return False
            self.lost_cause = exc
            log.debug("the connection is lost: %s", self.describe(exc))
            return True
        if "permissions violation" in str(exc).lower():
            return False
        o.attempts += 1
        o.last = exc
        log.debug("reconnect attempt %d failed: %s", o.attempts, self.describe(exc))
        if isinstance(translate(exc), AuthorizationError) and not o.auth_reported:
            o.auth_reported = True
            return False
        return True

    def servers_text(self) -> str:
        """The server(s) reconnect attempts go to, without passwords (for error texts)."""
        try:
            urls = [redact_url(u.geturl()) for u in self.nc.servers]
        except Exception:  # pragma: no cover - an unexpected nats-py
            urls = []
        urls = urls or [redact_url(u) for u in self.urls]
        return urls[0] if len(urls) == 1 else "one of " + ", ".join(urls)

    def link_state(self) -> str | None:
        """Why a call may have timed out: the connection is disconnected and reconnecting (to
        which server, which attempt, the last error), or it gave up; None while connected.

        Any thread; never blocks.
        """
        if self._conn._closed_error is not None:
            return str(self._conn._closed_error)
        if self._conn._closed or self._conn._closing or self.nc.is_connected:
            return None
        o = self.outage
        if o is None:
            return f"the connection is disconnected and reconnecting (to {self.servers_text()})"
        last = f"; last error: {self.describe(o.last)}" if o.last is not None else ""
        return (f"the connection is disconnected and reconnecting (to {self.servers_text()}, attempt "
                f"{o.attempts + 1}, for {time.monotonic() - o.start:.1f}s{last})")

    def outage_started(self) -> None:
        """On the loop, at a disconnect: report the outage once (not each reconnect attempt)."""
        cause = self.lost_cause
        self.lost_cause = None
        self.outage = _Outage(time.monotonic())
        url = self.server_url or ", ".join(redact_url(u) for u in self.urls)
        why = f" ({self.describe(cause)})" if cause is not None else ""
        limit = "" if self.max_reconnects < 0 else f", max_reconnect_attempts={self.max_reconnects}"
        err = Error(f"disconnected from {url}{why}: reconnecting (every {self.reconnect_wait}s{limit}); "
                    "reported once per outage, the attempts are logged at debug level")
        err.__cause__ = cause
        self.report_error(err)

    def gave_up(self) -> None:
        """On the loop: nats-py closed the connection by itself (no more reconnect attempts).

        From now on the connection is closed (``is_closed``) and every call raises
        :class:`ConnectionClosedError` saying why; what was queued is dropped; ``error_cb``
        gets that error once. Then a helper thread runs :meth:`close` (a thread of its own:
        close joins this one), which ends every subscription, consume and iterator with it.
        """
        o = self.outage
        self.outage = None
        took = last = ""
        n = 0
        if o is not None:
            n = o.attempts
            took = f" over {time.monotonic() - o.start:.1f}s"
            if o.last is not None:
                last = f"; last error: {self.describe(o.last)}"
        why = (f"the connection is closed: it gave up reconnecting to {self.servers_text()} after {n} failed "
               f"attempt(s){took} (max_reconnect_attempts={self.max_reconnects}{last})")
        self._conn._closed_error = ConnectionClosedError(why)
        dropped = self._conn._out.drop_all()
        self.report_error(ConnectionClosedError(
            why + (f"; {dropped} queued message(s) dropped" if dropped else "")))
        threading.Thread(target=self.close_given_up, name=f"jssync-{self._conn._id}-close", daemon=True).start()

    def close_given_up(self) -> None:
        try:
            self._conn.close()
        except BaseException:  # noqa: BLE001 - a helper thread: nobody to raise to
            log.debug("closing the connection that gave up failed", exc_info=True)

    async def on_disconnected(self) -> None:
        if self.connecting:
            return
        # a close() the user asked for, or nats-py closing after it gave up, is no outage; an
        # outage is reported once, to error_cb (by default the jssync logger), when it starts
        if self.outage is None and not (self._conn._closing or self._conn._closed or self.nc.is_closed):
            self.outage_started()
        for fn in list(self.disconnect_listeners):
            try:
                fn()
            except Exception:  # one bad listener must not skip the others
                log.exception("connection listener %r raised", fn)
        if self.disconnected_cb is not None:
            self._conn._pool.submit(self.call_user_cb, self.disconnected_cb)

    async def on_reconnected(self) -> None:
        o = self.outage
        self.outage = None
        self.server_url = self._conn.connected_url
        if o is not None:  # the outage's end: reported once
            log.info("reconnected to %s after %d failed attempt(s) in %.1fs", self._conn.connected_url,
                     o.attempts, time.monotonic() - o.start)
        else:
            log.info("reconnected to %s", self._conn.connected_url)
        self._conn._out.offline_reset()  # reconnect_buffer_size counts afresh for the next outage
        for fn in list(self.reconnect_listeners):
            try:
                fn()
            except Exception:  # one bad listener must not skip the others
                log.exception("connection listener %r raised", fn)
        if self.reconnected_cb is not None:
            self._conn._pool.submit(self.call_user_cb, self.reconnected_cb)

    async def on_closed(self) -> None:
        if self.connecting:
            return
        c = self._conn
        if not (c._closing or c._closed or c._loop.forked) and c._closed_error is None:
            self.gave_up()  # not close(): nats-py gave up reconnecting
        if self.closed_cb is not None:
            self._conn._pool.submit(self.call_user_cb, self.closed_cb)


class _Outage:
    """One outage, from the disconnect to the reconnect or the give-up (I/O thread)."""

    __slots__ = ("start", "attempts", "last", "auth_reported")

    def __init__(self, start: float) -> None:
        self.start = start
        self.attempts = 0  # failed reconnect attempts so far
        self.last: BaseException | None = None  # the last attempt's error
        self.auth_reported = False
