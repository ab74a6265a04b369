"""What fetch (jetstream/pull.py) and consume (the modules beside this one) both use: the
control items on a message queue, running a coroutine on the I/O thread without waiting,
unsubscribing without waiting, a message's header size as it came over the wire, and the
receiver of idle inboxes (naks what it gets).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...base.errors import ConnectionClosedError
from ...core import natspy as _natspy
from ...core.msg import Msg

if TYPE_CHECKING:
    from ...core.connection import Connection

log = logging.getLogger("jssync")


class _Control:
    """An item on a message queue that is not a message: the end, or an error to raise."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException | None = None) -> None:
        self.exc = exc


_END = _Control()


def _on_loop(conn: Connection, make_coro: Callable[[], Any]) -> None:
    """Run ``make_coro()`` on the I/O thread without waiting (from any thread, even that one)."""
    loop = conn.internal.loop
    try:
        if loop.in_loop_thread():
            loop.loop.create_task(make_coro())
        else:
            loop.call_soon(lambda: loop.loop.create_task(make_coro()))
    except ConnectionClosedError:
        return  # closed: what it would do (an UNSUB, a nak) went with the connection
    except Exception:  # the loop is gone: the connection closed
        log.debug("could not schedule on the I/O loop", exc_info=True)


def _unsubscribe_soon(conn: Connection, nsub: Any) -> None:
    """Send UNSUB for a nats-py subscription without waiting."""
    if nsub is None:
        return

    async def _unsub() -> None:
        if _natspy.sub_closed(nsub) or conn.internal.nc.is_closed:
            return
        try:
            await nsub.unsubscribe()
        except Exception:
            log.debug("unsubscribe failed", exc_info=True)

    _on_loop(conn, _unsub)


def _thread_alive(ident: int) -> bool:
    """Whether the thread with this ident still runs."""
    return any(t.ident == ident for t in threading.enumerate())



def _wire_header_len(conn: Connection, msg: Msg) -> int:
    """The length of ``msg``'s header block as it came over the wire, or -1 when unknown.

    On the I/O thread, inside nats-py's hand-off of ``msg`` (a subscription queue's
    ``put_nowait``). nats-py keeps only the parsed headers (a dict: a repeated name keeps
    one value), so the exact length is read from its parser, which still holds the
    HMSG/MSG line's total length (headers + payload) while it hands the message over.
    This is the one place that reads that nats-py internal; any doubt gives -1 (the size
    is then rebuilt from the dict).
    """
    if msg.headers is None:
        return 0
    try:
        n = _natspy.parser_needed(conn.internal.nc) - len(msg.data)
    except Exception:  # pragma: no cover - another nats-py version
        return -1
    return n if n.__class__ is int and n > 10 else -1


class _Discard(_natspy.Receiver):
    """The receiver of an idle or abandoned inbox: nobody takes what reaches it. A stored
    message (a stale pull's, after a reconnect) is nak'ed, so the server redelivers it at once
    instead of holding it until AckWait; statuses are dropped. Runs on the I/O thread."""

    __slots__ = ()

    def put_nowait(self, msg: Msg) -> None:
        if msg.reply.startswith("$JS.ACK."):
            try:
                msg._nak_quiet()
            except Exception:  # noqa: BLE001 - never break the I/O thread; AckWait brings it back
                log.debug("nak of a message for an idle inbox failed", exc_info=True)


_DISCARD = _Discard()
