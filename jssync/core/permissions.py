"""Permission watches: a waiting call learns that the server refused its publish or subscription.

The server reports a permissions violation as an asynchronous ``-ERR`` naming the
operation and the subject; nats-py hands it to the connection's error callback on the I/O
thread. A call that waits on a subject (a request, a subscribe, ``request_many``)
registers a watch first; :meth:`PermissionWatch.notify` hands a matching ``-ERR`` to
those watches, and the waiting call raises :class:`jssync.PermissionDeniedError` on its
own thread (the error is then not reported to ``error_cb`` a second time).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..base.errors import PermissionDeniedError

log = logging.getLogger("jssync")


class PermissionWatch:
    """A connection's watches: key -> (operation, lower-cased subject, callback run on the I/O thread).

    ``flush(timeout)``: the connection's ordered PING/PONG (a coroutine function), used by
    :meth:`check_subscription`; ``timeout``: the connect timeout (bounds that check).
    """

    __slots__ = ("watches", "_keys", "_flush", "_timeout", "nc")

    def __init__(self, flush: Callable[[float | None], Coroutine[Any, Any, None]], timeout: float | None) -> None:
        self.watches: dict[int, tuple[str, str, Callable[[PermissionDeniedError], None]]] = {}
        self._keys = itertools.count(1)
        self._flush = flush
        self._timeout = timeout
        self.nc: Any = None  # the nats-py client (set once it is made)

    def watch(self, operation: str, subject: str, fn: Callable[[PermissionDeniedError], None]) -> int:
        """Call ``fn(err)`` on the I/O thread when the server refuses ``operation`` on ``subject``.

        ``operation`` is ``"publish"`` or ``"subscribe"``. Returns a key for
        :meth:`unwatch`. Cheap (one dict insert); any thread.
        """
        key = next(self._keys)
        self.watches[key] = (operation, subject, fn)  # (compared lowercased in notify: -ERRs are rare)
        return key

    def unwatch(self, key: int) -> None:
        self.watches.pop(key, None)

    def notify(self, err: PermissionDeniedError) -> bool:
        """On the I/O thread: hand a permissions -ERR to the calls waiting on its subject.

        Returns True if a waiting call took it (that call raises it on its own thread).
        """
        if err.subject is None or not self.watches:
            return False
        subject = err.subject.lower()
        taken = False
        for op, subj, fn in list(self.watches.values()):
            if op == err.operation and subj.lower() == subject:
                taken = True
                try:
                    fn(err)
                except Exception:  # pragma: no cover - watchers are tiny
                    log.debug("permission watcher failed", exc_info=True)
        return taken

    async def check_subscription(self, nsub: Any, subject: str, denied: list[PermissionDeniedError],
                                 key: int) -> None:
        """On the loop, after a SUB: PING/PONG, then raise if a permissions -ERR named ``subject``.

        The server answers in order, so a refusal of the SUB arrives before the PONG.
        ``denied`` is filled by the watch ``key`` (registered before the SUB was sent).
        Skipped while disconnected (the SUB goes out on reconnect; a refusal then goes to
        error_cb).

        Raises:
            jssync.PermissionDeniedError: the server refused the subscription (it is removed).
        """
        try:
            if self.nc.is_connected and not denied:
                try:
                    await self._flush(max(0.5, min(self._timeout or 2.0, 5.0)))
                except Exception as exc:
                    log.debug("could not confirm the subscription on %r: %s", subject, exc)
        finally:
            self.unwatch(key)
        if denied:
            try:
                await nsub.unsubscribe()
            except Exception:
                log.debug("could not remove the refused subscription", exc_info=True)
            raise PermissionDeniedError(
                f"permission denied: the server refused the subscription to {subject!r}",
                operation="subscribe", subject=subject,
            ) from denied[0]
