"""The one adapter for nats-py's internals: every private nats-py name jssync uses is here.

jssync runs on nats-py's public API; a few shortcuts into its internals make the hot
paths fast. Each shortcut is a *fast path* with a public fallback. At connect,
:func:`check` finds out which ones work on the nats-py installed; a fast path that does
not is disabled with one ``jssync`` logger warning naming it, and the connection takes
nats-py's public path there instead (correct, slower). No module other than this one
reads or writes a private nats-py attribute (tests/integration/core/test_natspy_adapter.py
greps for them).

The fast paths (the names ``Connection._fast_paths`` reports):

- ``pump_buffer``: queued publishes are encoded in bursts into nats-py's outgoing buffer
  (:func:`buffer_append`, :func:`flush_pending`), not one ``nc.publish`` each.
- ``direct_write``: a caller's thread writes a small request straight to the socket
  (:func:`socket_transport`, :func:`hook_connection_lost`; the path itself is
  ``jssync/_sockpath.py``).
- ``direct_read``: that caller may also read its reply off the socket (:func:`install_reader`).
- ``reply_headers``: a reply read that way has its headers parsed by nats-py's own parser
  (:func:`header_parser`).
- ``wire_header_len``: a pulled message's header size is read from nats-py's parser
  (:func:`parser_needed`).
- ``msg_class``: nats-py builds every message as the connection's ``Msg`` subclass with
  exactly the keywords jssync knows; when nats-py passes one more, the class installed
  instead takes (and ignores) any further keyword (:func:`install_msg_class`).
- ``msg_parse``: the I/O thread's parse step for MSG/HMSG is jssync's (``wire.msg_parser``),
  every other protocol line still nats-py's parser's (:func:`install_msg_parser`).

Besides these the adapter holds the accesses jssync cannot do without (a subscription's
message queue, which only a :class:`Receiver` replaces, UNSUB without removing the
subscription, the server's INFO), and one a caller asks for on its own connection:
:func:`keep_header_blocks` (the raw header block beside nats-py's parsed dict, for the
Spark reader's ``headersFormat=array``; without it the dict is used).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import select
import selectors
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import nats.aio.client
import nats.errors

from ..base.times import format_server_time, parse_server_time
from . import wire as _wire

if TYPE_CHECKING:
    from .connection import Connection
    from .msg import Msg
    from .sockpath import CallerSocket

log = logging.getLogger("jssync")

#: The fast paths, in the order ``Connection._fast_paths`` lists them.
FAST_PATHS = ("pump_buffer", "direct_write", "direct_read", "reply_headers", "wire_header_len", "msg_class",
              "msg_parse")

_EPOLLIN = getattr(select, "EPOLLIN", 1)
_EPOLLOUT = getattr(select, "EPOLLOUT", 4)
_EVENT_READ = selectors.EVENT_READ
_EVENT_WRITE = selectors.EVENT_WRITE

# The names read on nats-py's objects (one place to change when nats-py renames one).
_PARSER = "_ps"  # Client: the protocol parser
_STATE = "state"  # Parser: where it is in the protocol

#: The parser's state between messages (nats.protocol.parser.AWAITING_CONTROL_LINE).
_IDLE: int | None
try:
    from nats.protocol.parser import AWAITING_CONTROL_LINE as _IDLE
except ImportError:  # pragma: no cover - another nats-py: direct reads stay off
    _IDLE = None

#: Where the client keeps its status, and its closed status (``getattr(nc, STATUS) == CLOSED``
#: is ``nc.is_closed`` without the property call, for the ack path).
STATUS = "_status"
CLOSED: int = nats.aio.client.Client.CLOSED

#: The keywords jssync's Msg takes (nats-py's ``Client._build_message`` passes these).
_MSG_KEYWORDS = frozenset({"subject", "reply", "data", "headers", "_client", "_sid"})


# ----------------------------------------------------------------------------- the check


#: The one switch: ``JSSYNC_FAST_PATHS=0`` in the environment turns every fast path off for the
#: connections made from then on (read at each connect), so that the public fallbacks can be
#: run on their own (.ci/run runs the core, JetStream, consuming and KV tests that way).
OFF_SWITCH = "JSSYNC_FAST_PATHS"
_OFF = f"turned off by {OFF_SWITCH}=0"


def switched_off() -> str | None:
    """Why every fast path is off (``JSSYNC_FAST_PATHS=0`` is set), or None when they may be on."""
    return _OFF if os.environ.get(OFF_SWITCH, "").strip() == "0" else None


def check(nc: Any) -> dict[str, str | None]:
    """Which fast paths work on ``nc``'s nats-py: path name -> None (usable) or why not.

    Run once per connection, before it connects. ``direct_write`` and ``direct_read``
    also depend on the transport (TLS, reconnects): this checks what nats-py provides;
    the connection arms them per transport. With ``JSSYNC_FAST_PATHS=0`` every one is off.
    """
    off = switched_off()
    if off is not None:
        return dict.fromkeys(FAST_PATHS, off)
    why: dict[str, str | None] = dict.fromkeys(FAST_PATHS)
    missing = [n for n in ("_pending", "_pending_data_size", "_max_pending_size", "_flush_pending", "_transport")
               if not hasattr(nc, n)]
    if missing:
        why["pump_buffer"] = f"nats-py's Client has no {', '.join(missing)}"
        why["direct_write"] = "it needs pump_buffer"
    ps = getattr(nc, _PARSER, None)
    if ps is None:
        why["direct_read"] = why["wire_header_len"] = f"nats-py's Client has no parser attribute {_PARSER!r}"
    else:
        if not isinstance(getattr(ps, "needed", None), int):
            why["wire_header_len"] = "nats-py's parser has no 'needed' count"
        if _IDLE is None or not hasattr(ps, _STATE) or not isinstance(getattr(ps, "buf", None), bytearray):
            why["direct_read"] = f"nats-py's parser has no {_STATE!r} (or no AWAITING_CONTROL_LINE, or no buf)"
        elif not callable(getattr(ps, "parse", None)) or not callable(getattr(ps, "reset", None)):
            why["direct_read"] = "nats-py's parser has no parse/reset"
    if os.environ.get("JSSYNC_NO_CALLER_SOCKET"):  # (bench only: measures the caller-side socket paths)
        why["direct_write"] = "turned off by JSSYNC_NO_CALLER_SOCKET"
    if why["direct_write"] is not None and why["direct_read"] is None:
        why["direct_read"] = "it needs direct_write"
    if not inspect.iscoroutinefunction(getattr(nc, "_process_headers", None)):
        why["reply_headers"] = "nats-py's Client has no coroutine _process_headers"
    return why


def warn_disabled(why: dict[str, str | None]) -> dict[str, bool]:
    """Log one warning per disabled fast path (naming it); return path -> enabled.

    Paths turned off by ``JSSYNC_FAST_PATHS=0`` are asked for: one debug line, no warning."""
    if _OFF in why.values():
        log.debug("every fast path %s: using nats-py's public paths", _OFF)
        return {name: reason is None for name, reason in why.items()}
    for name, reason in why.items():
        if reason is not None:
            log.warning("fast path %r disabled on this nats-py (%s): using nats-py's public path",
                        name, reason)
    return {name: reason is None for name, reason in why.items()}


# ----------------------------------------------------------------------------- messages


def install_msg_class(nc: Any, base: type[Msg], conn: Connection,
                      off: str | None = None) -> tuple[type[Msg], str | None]:
    """Make nats-py build every message as ``conn``'s subclass of ``base``.

    With ``off`` (why every fast path is off) the tolerant class below is installed at once.

    Returns the class and None, or, when nats-py's construction call passes a keyword
    jssync's Msg does not take, a class that accepts (and ignores) further keywords and
    the reason the ``msg_class`` fast path is off. The check builds one message the way
    nats-py does (``Client._build_message``); without that method it compares the
    keywords of nats-py's own ``Msg``.
    """
    fast: type[Msg] = type("Msg", (base,), {"__slots__": (), "_conn": conn})
    nc.msg_class = fast
    why: str | None = None
    build = getattr(nc, "_build_message", None)
    if off is not None:
        why = off
    elif build is not None:
        try:
            build(1, b"_jssync.check", b"", b"", None)
        except TypeError as exc:
            why = f"nats-py builds its Msg with a keyword jssync does not know ({exc})"
    else:
        try:
            from nats.aio.msg import Msg as NatsMsg

            extra = sorted(set(inspect.signature(NatsMsg).parameters) - _MSG_KEYWORDS)
        except Exception as exc:  # noqa: BLE001 - cannot tell: take the tolerant class
            extra = [f"? ({type(exc).__name__})"]
        if extra:
            why = f"nats-py's Msg takes keyword(s) jssync does not know: {', '.join(extra)}"
    if why is None:
        _install_dispatch(nc, fast)
        return fast, None
    init = base.__init__

    def __init__(self: Msg, subject: str = "", reply: str = "", data: bytes = b"",
                 headers: dict[str, str] | None = None, _client: Any = None, _sid: int | None = None,
                 **_new: Any) -> None:
        init(self, subject, reply, data, headers, _client, _sid)

    tolerant: type[Msg] = type("Msg", (base,), {"__slots__": (), "_conn": conn, "__init__": __init__})
    nc.msg_class = tolerant
    return tolerant, why


def _install_dispatch(nc: Any, cls: type[Msg]) -> bool:
    """Part of the ``msg_class`` fast path: hand a message to a :class:`Receiver` with fewer steps.

    nats-py's ``Client._process_msg`` (a coroutine its parser awaits for every MSG/HMSG)
    counts it, awaits ``_process_headers`` (also for a message without headers), builds
    the message through ``_build_message`` with keywords, checks JetStream flow control
    and ``put_nowait``s it on the subscription's queue. For a subscription whose queue is a
    :class:`Receiver` and that uses none of the rest (no message limit, no nats-py
    JetStream state, no old-style request future, no pending limits: what
    :func:`subscribe` makes) the wrapper installed on this client does the same counting,
    builds ``cls`` with the same arguments positionally and calls ``put_nowait``, and returns
    a future that is done already (no coroutine per message). A header block without a
    status line is parsed on the spot by ``wire.parse_plain_headers`` when that gives what
    nats-py's own parser gives (:func:`plain_header_lines`) and nobody wrapped this client's
    parser (:func:`keep_header_blocks`); any other block (a status: heartbeats, 404/408)
    gets a coroutine, to await nats-py's parse. Anything else goes to nats-py's own method.
    Installed only when ``cls`` is what nats-py's ``_build_message`` builds with exactly
    jssync's keywords. Returns whether it was installed.
    """
    orig = getattr(nc, "_process_msg", None)
    subs = getattr(nc, "_subs", None)
    stats = getattr(nc, "stats", None)
    if (not inspect.iscoroutinefunction(orig) or not isinstance(subs, dict) or not isinstance(stats, dict)
            or "in_msgs" not in stats or "in_bytes" not in stats):
        return False
    try:  # what the fast path returns: a future done already, which the parser's await passes at once
        done = asyncio.get_running_loop().create_future()
    except RuntimeError:  # pragma: no cover - called off the loop: nats-py's own path stays
        return False
    done.set_result(None)
    get = subs.get
    # a header block without a status parsed here, while this client's parser is nats-py's own
    plain = _wire.parse_plain_headers if plain_header_lines(nc) else None
    own = nc.__dict__  # (keep_header_blocks puts its wrapper here)

    def slow(sub: Any, msg: Msg, n: int, sid: int) -> Awaitable[None]:
        sub._pending_size -= n  # the receiver dropped it: a slow consumer, as nats-py reports it
        err = nats.errors.SlowConsumerError(subject=msg.subject, reply=msg.reply, sid=sid, sub=sub)
        return nc._error_cb(err)  # type: ignore[no-any-return]

    async def with_headers(sub: Any, q: Receiver, sid: int, subject: bytes, reply: bytes, data: bytes,
                           headers: bytes) -> None:
        n = len(data)
        stats["in_msgs"] += 1
        stats["in_bytes"] += n
        sub._received += 1
        sub._pending_size += n
        # a block no longer than "NATS/1.0" (a bare publisher's, forwarded as written) has no
        # field; nats-py's parser would index past its end, and the IndexError would end its read loop
        hdr = await nc._process_headers(headers) if len(headers) > _VERSION_LINE_LEN else None
        msg = cls(subject.decode(), reply.decode(), data, hdr, nc, sid)
        try:
            q.put_nowait(msg)
        except asyncio.QueueFull:
            await slow(sub, msg, n, sid)

    def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> Awaitable[None]:
        # a plain function: a message without headers is handed over with no coroutine made
        sub: Any = get(sid)
        try:
            q = sub._pending_queue
            fast = (isinstance(q, Receiver) and not sub._max_msgs and not sub._jsi and sub._future is None
                    and sub._pending_bytes_limit <= 0)
        except AttributeError:  # no subscription (None), or another nats-py's Subscription
            fast = False
        if not fast:
            return orig(sid, subject, reply, data, headers)
        hdr: dict[str, str] | None = None
        if headers is not None:
            if plain is None or "_process_headers" in own:
                return with_headers(sub, q, sid, subject, reply, data, headers)
            parsed = plain(headers)
            if parsed is False:  # a status line, or a block only nats-py reads
                return with_headers(sub, q, sid, subject, reply, data, headers)
            hdr = parsed
        n = len(data)
        stats["in_msgs"] += 1
        stats["in_bytes"] += n
        sub._received += 1
        sub._pending_size += n
        msg = cls(subject.decode(), reply.decode(), data, hdr, nc, sid)
        try:
            q.put_nowait(msg)
        except asyncio.QueueFull:
            return slow(sub, msg, n, sid)
        return done

    process_msg._jssync_done = done  # type: ignore[attr-defined]  # (what install_msg_parser compares with)
    nc._process_msg = process_msg
    return True


#: ``len(b"NATS/1.0")``: a header block no longer than this has no field (``install_msg_class``).
_VERSION_LINE_LEN = 8

#: nats-py's MSG and HMSG line patterns (nats/protocol/parser.py, 2.15 and 2.16): the lines
#: :func:`wire.msg_parser <jssync.core.wire.msg_parser>` reads the same way.
_MSG_RE = "\\AMSG\\s+([^\\s]+)\\s+([^\\s]+)\\s+(([^\\s]+)[^\\S\r\n]+)?(\\d+)\r\n"
_HMSG_RE = "\\AHMSG\\s+([^\\s]+)\\s+([^\\s]+)\\s+(([^\\s]+)[^\\S\r\n]+)?([\\d]+)\\s+(\\d+)\r\n"


def install_msg_parser(nc: Any) -> str | None:
    """The ``msg_parse`` fast path: ``nc``'s parser hands MSG/HMSG over through ``wire.msg_parser``.

    nats-py's parse step matches a regular expression per protocol line, keeps each
    message's fields in a dict, copies its payload twice and awaits ``_process_msg`` for
    every message. The step installed on ``nc``'s parser instead (on this client only;
    before :func:`install_reader` counts it, which then wraps it) walks each read with
    ``bytes.find``/``split`` and calls ``_process_msg`` (as installed now: jssync's
    dispatch when :func:`install_msg_class` put it there) awaiting only what is not done
    already; PING, PONG, +OK, -ERR, INFO, anything unusual and a message nats-py's own
    step started go to nats-py's step, and ``reset`` stays nats-py's. Only on the parser
    this was checked against: nats-py's ``Parser`` with its MSG/HMSG patterns, states and
    fields as in 2.15-2.16. Returns None once installed, else why not (nothing changed).
    """
    try:
        import nats.protocol.parser as npp

        ps = getattr(nc, _PARSER)
        pm = nc._process_msg
    except (ImportError, AttributeError) as exc:
        return f"nats-py has no parser to take over ({exc})"
    if getattr(ps, "_jssync_msg_parse", False):
        return None
    if (type(ps) is not getattr(npp, "Parser", None) or getattr(getattr(npp, "MSG_RE", None), "pattern", None)
            != _MSG_RE.encode() or getattr(getattr(npp, "HMSG_RE", None), "pattern", None) != _HMSG_RE.encode()
            or getattr(npp, "CRLF_SIZE", None) != 2):
        return "nats-py's protocol parser is not the one jssync's MSG/HMSG step was checked against"
    idle = getattr(npp, "AWAITING_CONTROL_LINE", None)
    if (_IDLE is None or idle != _IDLE or getattr(ps, _STATE, None) != idle or _STATE != "state"
            or not isinstance(getattr(ps, "buf", None), bytearray) or not isinstance(getattr(ps, "needed", None), int)):
        return f"nats-py's parser has no {_STATE!r}, 'buf' or 'needed' as jssync knows them"
    if not inspect.iscoroutinefunction(getattr(ps, "parse", None)) or not callable(pm):
        return "nats-py's parser has no coroutine parse, or its client no _process_msg"
    try:
        if len(inspect.signature(pm).parameters) != 5:
            return "nats-py's _process_msg does not take (sid, subject, reply, data, headers)"
    except (TypeError, ValueError):  # pragma: no cover - no signature to look at
        return "nats-py's _process_msg has no signature to check"
    done = getattr(pm, "_jssync_done", None)
    ps.parse = _wire.msg_parser(ps, ps.parse, pm, done if done is not None else object(), idle)
    ps._jssync_msg_parse = True
    return None


def msg_parser_installed(nc: Any) -> bool:
    """True when ``nc``'s parser hands MSG/HMSG over through jssync's step (:func:`install_msg_parser`)."""
    return bool(getattr(getattr(nc, _PARSER, None), "_jssync_msg_parse", False))


def message_class(nc: Any) -> Any:
    """The class nats-py builds messages with."""
    return getattr(nc, "msg_class", None)


# ----------------------------------------------------------------------------- subscriptions


class Receiver:
    """The one base of everything that stands in for a nats-py subscription's message queue.

    nats-py puts each message of a subscription on ``sub._pending_queue`` (an
    ``asyncio.Queue``) with ``put_nowait``, on the I/O thread. jssync swaps that queue for
    a subclass of this class (:func:`set_sub_queue` takes nothing else), whose
    ``put_nowait`` is the one hook: it sorts or hands on the message right there, so no
    loop task and no wake-up per message. ``put_nowait`` may raise ``asyncio.QueueFull``
    to drop the message; nats-py then reports a ``SlowConsumerError`` to the error callback.

    jssync subscribes without nats-py's pending limits (:func:`subscribe`), so nats-py
    never checks the queue's size against one. The rest of the ``asyncio.Queue`` methods
    nats-py's own code may call (its drain, ``unsubscribe(limit)``, ``next_msg``, message
    iterators, ``pending_msgs``; tests/unit/architecture/test_one_receiver.py lists them from nats-py's
    source) are implemented here once, as a queue that is always empty: every message was
    handed on when it was put, so nats-py's drain has nothing to wait for and its readers
    find nothing.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.put_nowait is Receiver.put_nowait:
            raise TypeError(f"{cls.__name__} must define put_nowait (the delivery hook)")

    def put_nowait(self, msg: Msg) -> None:
        """The delivery hook (I/O thread): take one message; subclasses define it."""
        raise NotImplementedError

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def get_nowait(self) -> Msg:
        raise asyncio.QueueEmpty

    async def get(self) -> Msg:
        # nothing ever stays in this queue: wait until cancelled, as on an empty queue
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")  # pragma: no cover

    def task_done(self) -> None:
        return None

    async def join(self) -> None:
        return None


def sub_queue(nsub: Any) -> Any:
    """The queue nats-py hands a subscription's messages to (``put_nowait``)."""
    return nsub._pending_queue


def set_sub_queue(nsub: Any, sink: Receiver) -> None:
    """Point a nats-py subscription's deliveries at ``sink``.

    Whatever nats-py already put on its own queue (a fresh subscription's) is handed to
    ``sink`` first, in order.
    """
    if not isinstance(sink, Receiver):
        raise TypeError(f"a subscription's queue must be a jssync Receiver, got {type(sink).__name__}")
    old = nsub._pending_queue
    nsub._pending_queue = sink
    if isinstance(old, asyncio.Queue):
        while not old.empty():
            try:
                sink.put_nowait(old.get_nowait())
            except asyncio.QueueFull:
                pass


async def subscribe(nc: Any, subject: str, sink: Receiver, queue: str | None = None) -> Any:
    """Subscribe ``subject`` (in ``queue`` group) with deliveries going to ``sink``.

    nats-py's pending limits are off: ``sink`` decides what a slow consumer is.
    """
    nsub = await nc.subscribe(subject, queue=queue or "", pending_msgs_limit=0, pending_bytes_limit=0)
    set_sub_queue(nsub, sink)
    return nsub


def sub_sid(nsub: Any) -> int:
    """The subscription's id (the sid in the server's MSG lines)."""
    sid: int = nsub._id
    return sid


def sub_closed(nsub: Any) -> bool:
    """True once the subscription was unsubscribed or removed."""
    return bool(nsub._closed)


async def send_unsubscribe(nc: Any, nsub: Any) -> None:
    """Send UNSUB for ``nsub`` and keep the subscription (its messages still arrive)."""
    await nc._send_unsubscribe(nsub._id)


def remove_sub(nc: Any, nsub: Any) -> None:
    """Mark ``nsub`` closed and forget it (no more deliveries), with nothing sent."""
    nsub._closed = True
    nc._remove_sub(nsub._id)


def server_info(nc: Any) -> dict[str, Any]:
    """The INFO the server sent, as a dict (empty before the first connect)."""
    return dict(getattr(nc, "_server_info", None) or {})


def server_uris(nc: Any) -> list[Any]:
    """The parsed URLs (``urllib.parse.SplitResult``) of the servers nats-py may connect to:
    the ones given and the ones the cluster announced (empty if nats-py keeps no pool)."""
    try:
        pool = list(getattr(nc, "_server_pool", None) or [])
    except Exception:  # pragma: no cover - nats-py internals changed
        return []
    return [uri for uri in (getattr(srv, "uri", None) for srv in pool) if uri is not None]


def current_server_url(nc: Any) -> str | None:
    """The URL of the server nats-py is connected or connecting to, or None."""
    server = getattr(nc, "_current_server", None)
    uri = getattr(server, "uri", None) if server is not None else None
    return uri.geturl() if uri is not None else None


# ----------------------------------------------------------------------------- times


#: ``date`` as RFC 3339 in UTC, as the server wants it (the one formatter: base/times.py).
to_utc_iso = format_server_time
#: The server's RFC 3339 time into an aware UTC datetime (the one parser: base/times.py).
parse_utc_iso = parse_server_time


# ----------------------------------------------------------------------------- the pump


def pending(nc: Any) -> Any:
    """nats-py's outgoing buffer (a list of chunks; empty when nothing waits)."""
    return nc._pending


def buffer_append(nc: Any, chunk: bytes) -> bool:
    """Append ``chunk`` to nats-py's outgoing buffer; True when it is now over its limit."""
    nc._pending.append(chunk)
    nc._pending_data_size += len(chunk)
    return bool(nc._max_pending_size > 0 and nc._pending_data_size > nc._max_pending_size)


async def flush_pending(nc: Any, force: bool) -> None:
    """Kick nats-py's flusher (``force``: write now)."""
    await nc._flush_pending(force_flush=force)


def write_pending(nc: Any) -> None:
    """Write nats-py's outgoing buffer to its transport now and empty it."""
    if nc._pending:
        nc._transport.writelines(nc._pending[:])
        nc._pending = []
        nc._pending_data_size = 0


# ----------------------------------------------------------------------------- the transport


def io_writer(nc: Any) -> Any:
    """The stream writer nats-py writes to (its ``.transport`` is the socket's transport)."""
    return nc._transport._io_writer


def socket_transport(nc: Any) -> tuple[Any, Any, Any]:
    """``(checked, t, sock)``: the writer's transport as seen now, and, on a plain TCP
    connection through asyncio's selector transport, that transport and its socket
    (else None, None). Raises when nats-py's transport is not the one this knows.
    """
    tr = nc._transport
    checked = tr._io_writer.transport
    if tr._io_writer is not tr._bare_io_writer:
        return checked, None, None  # TLS: the SSL layer owns the socket
    t = tr._io_writer.transport
    sock = t._sock
    if type(t).__name__ != "_SelectorSocketTransport" or t.is_closing():
        return checked, None, None
    return checked, t, sock


def writer_idle(nc: Any, t: Any) -> Callable[[], bool]:
    """For a caller about to write to the transport ``t`` itself: a check, True when nothing
    must be written before its message (nats-py's outgoing buffer is empty and it is
    connected; ``t`` buffers nothing and is not closing).

    One call per request: it reads nats-py's and asyncio's state directly when it is what
    this knows (asyncio's selector transport keeps its write buffer in ``_buffer``, a
    bytearray or a deque, and ``_closing``), else it asks their public calls.
    """
    connected = nats.aio.client.Client.CONNECTED
    if (isinstance(getattr(t, "_buffer", None), bytearray | deque) and type(getattr(t, "_closing", None)) is bool
            and isinstance(getattr(nc, "_pending", None), list) and hasattr(nc, STATUS)):
        def idle() -> bool:
            return not nc._pending and nc._status == connected and not t._buffer and not t._closing
    else:  # pragma: no cover - another asyncio or nats-py
        def idle() -> bool:
            return (not nc._pending and nc.is_connected and not t.get_write_buffer_size()
                    and not t.is_closing())
    return idle


def hook_connection_lost(t: Any, wrap: Callable[[Callable[[Any], None]], Callable[[Any], None]]) -> None:
    """Replace the selector transport's connection-lost step with ``wrap(original)``."""
    t._call_connection_lost = wrap(t._call_connection_lost)


def header_parser(nc: Any) -> Callable[[bytes], Any] | None:
    """nats-py's header parser (a coroutine function of the raw block), or None."""
    f = getattr(nc, "_process_headers", None)
    return f if inspect.iscoroutinefunction(f) else None


def plain_header_lines(nc: Any) -> bool:
    """True when ``nc`` parses a header block without a status line as ``wire.parse_plain_headers`` does.

    That is nats-py's byte-level parser (``_parse_header_lines``, 2.15 and 2.16), used
    when ``fast_mail_parser`` is not installed, in ``nc``'s class's own ``_process_headers``.
    """
    cls = nats.aio.client.Client
    return (getattr(nats.aio.client, "parse_email", True) is None
            and callable(getattr(cls, "_parse_header_lines", None))
            and getattr(type(nc), "_process_headers", None) is getattr(cls, "_process_headers", False))


class HeaderBlock(dict[str, str]):
    """nats-py's parsed headers of one message, plus the block they came in (``block``).

    nats-py parses a header block into a dict, so a name given more than once keeps one
    value; ``block`` is the ``NATS/1.0`` block as received, for the callers that need
    every line (see :func:`keep_header_blocks`).
    """

    __slots__ = ("block",)
    block: bytes


def keep_header_blocks(nc: Any) -> bool:
    """Make the headers of every message ``nc`` receives from now on a :class:`HeaderBlock`.

    Wraps nats-py's header parser on this client only (the parsed dict is the same, with
    the raw block attached). Returns False, changing nothing, when nats-py has no such
    parser (the headers then stay plain dicts).
    """
    parse = getattr(nc, "_process_headers", None)
    if not inspect.iscoroutinefunction(parse):
        return False
    if getattr(parse, "_jssync_keeps_blocks", False):
        return True

    async def process_headers(raw: bytes) -> Any:
        hdr = await parse(raw)
        if hdr is None or not raw:
            return hdr
        out = HeaderBlock(hdr)
        out.block = bytes(raw)
        return out

    process_headers._jssync_keeps_blocks = True  # type: ignore[attr-defined]
    nc._process_headers = process_headers
    return True


def parser_needed(nc: Any) -> int:
    """While a message with headers is handed over: its HMSG line's total size (headers + payload;
    set by nats-py's parse step, and by ``wire.msg_parser`` where that one is installed)."""
    n: int = getattr(nc, _PARSER).needed
    return n


def reader_counted(nc: Any) -> bool:
    """True once :func:`install_reader` counts this client's parsed bytes."""
    return bool(getattr(getattr(nc, _PARSER, None), "_jssync_counted", False))


def install_reader(nc: Any, t: Any, path: CallerSocket) -> Callable[[], bool] | None:
    """Count what the transport ``t`` reads and what nats-py's parser finished with.

    The transport's reads go through ``path.rlock`` and are reported to ``path.gate``
    (``received``); bytes a caller read off the socket that were not its reply
    (``path.spill``) are handed to nats-py's reader first, as if the transport had read
    them (also by ``path.feed``, which ``CallerSocket.give_back`` calls); after each
    parse, ``path.gate.parsed`` learns whether the reader's buffer and the parser are
    empty with the parser between messages; a parser reset closes the gate. Returns a
    function telling whether nats-py holds nothing half-read (call it under
    ``path.rlock``), or None when this nats-py or transport cannot be counted; the path
    keeps it as ``path.reader``.
    """
    try:
        reader = nc._transport._io_reader
        ps = getattr(nc, _PARSER)
        orig_read = t._read_ready_cb
        if not isinstance(reader._buffer, bytearray) or not isinstance(ps.buf, bytearray):
            return None
        getattr(ps, _STATE)
        if _IDLE is None:
            return None
    except Exception:  # noqa: BLE001 - another nats-py: no direct reads
        return None
    rlock = path.rlock
    gate = path.gate
    idle_state = _IDLE
    state = _STATE
    data_received = t.get_protocol().data_received  # (what the transport hands each read to)

    def idle() -> bool:
        return not reader._buffer and not ps.buf and getattr(ps, state) == idle_state

    def feed(data: bytes) -> None:
        # (I/O thread, under rlock) bytes a caller read off the socket that were not its
        # reply: to nats-py's reader, exactly as if the transport had read them
        n = len(reader._buffer)
        data_received(data)
        gate.received(len(reader._buffer) - n)

    def read_ready() -> None:
        # never wait for a caller that is looking at the socket (it may be a signal
        # handler's thread, stuck until the handler returns): the data is still
        # there, and the selector calls this again on its next turn
        if not rlock.acquire(False):
            return
        try:
            n = len(reader._buffer)
            spill = path.spill
            if spill:  # what a caller read before this goes first
                path.spill = b""
                data_received(spill)
            orig_read()
            gate.received(len(reader._buffer) - n)
        finally:
            rlock.release()

    t._read_ready_cb = read_ready
    path.feed = feed
    if not getattr(ps, "_jssync_counted", False):
        orig_parse = ps.parse
        orig_reset = ps.reset

        def reset() -> None:
            # nats-py drops a half-parsed message (force_reconnect, stale PINGs)
            # while the socket may still hold its rest: no direct reads until the
            # parser has been seen between messages again
            with rlock:
                gate.reset()
                orig_reset()

        ps.reset = reset

        async def parse(data: bytes = b"") -> None:
            await orig_parse(data)
            r = path.reader  # (the idle check of the transport now read)
            gate.parsed(len(data), r is not None and r())

        ps.parse = parse
        ps._jssync_counted = True
    return idle


class SocketParker:
    """Takes one socket out of the event loop's epoll interest set while a caller reads it.

    asyncio's selector event loop keeps every socket it reads in an epoll set; a blocking
    round trip whose caller reads its reply itself (core/sockpath.py) would still wake the
    I/O thread for that reply. :meth:`park` tells epoll to report nothing for the socket,
    :meth:`unpark` gives it back the interest asyncio registered (read, and write when a
    write is pending: the mask of its fd in ``masks``, which the selector's wrapped
    ``register`` and ``modify`` keep current for every fd, so a parker replaced after a
    reconnect (the new socket may reuse the fd) still gives back what the loop wants now).
    Every change the loop makes to its selector goes through the same lock
    (:func:`socket_parker` wraps the selector's ``register``/``modify``), so a change
    made while the socket is parked is kept and applied at :meth:`unpark`. Parking only
    delays what the I/O thread reads: anything left on the socket is reported again at once.
    """

    __slots__ = ("_ep", "fd", "_lock", "parked", "_masks")

    def __init__(self, ep: Any, fd: int, lock: Any, masks: dict[int, int]) -> None:
        self._ep = ep
        self.fd = fd
        self._lock = lock
        self.parked = False
        self._masks = masks  # fd -> the epoll events asyncio wants for it now (shared per selector)

    @property
    def mask(self) -> int:
        """The epoll events asyncio wants for the socket now (what :meth:`unpark` gives back)."""
        return self._masks.get(self.fd, _EPOLLIN)

    def park(self) -> bool:
        """On a caller's thread: the loop stops watching the socket; False if it cannot."""
        with self._lock:
            try:
                self._ep.modify(self.fd, 0)
            except (OSError, ValueError):
                return False
            self.parked = True
        return True

    def unpark(self) -> None:
        """The loop watches the socket again, for what it registered (read; write if pending)."""
        with self._lock:
            self.parked = False
            try:
                self._ep.modify(self.fd, self._masks.get(self.fd, _EPOLLIN))
            except (OSError, ValueError):
                pass  # unregistered meanwhile (the connection was lost), or the selector closed


def _epoll_mask(events: int) -> int:
    return (_EPOLLIN if events & _EVENT_READ else 0) | (_EPOLLOUT if events & _EVENT_WRITE else 0)


def socket_parker(loop: Any, fd: int, old: SocketParker | None = None) -> SocketParker | None:
    """A :class:`SocketParker` for ``fd`` on ``loop`` (an asyncio selector loop on epoll), or None.

    On the loop's thread. Wraps the loop's selector once so that its ``register`` and
    ``modify`` take the parkers' lock and keep a parked socket parked.
    """
    import selectors

    sel = getattr(loop, "_selector", None)
    if type(sel) is not selectors.EpollSelector:
        return None
    ep = getattr(sel, "_selector", None)
    if ep is None or not hasattr(ep, "modify"):
        return None
    guard = getattr(sel, "_jssync_park", None)
    if guard is None:
        import threading

        lock = threading.Lock()
        parkers: list[SocketParker] = []
        masks: dict[int, int] = {}
        orig_modify, orig_register = sel.modify, sel.register

        def keep_parked(key: Any) -> None:
            masks[key.fd] = _epoll_mask(key.events)  # (what unpark gives back)
            for p in parkers:
                if p.parked and p.fd == key.fd:
                    ep.modify(key.fd, 0)

        def modify(fileobj: Any, events: int, data: Any = None) -> Any:
            with lock:
                key = orig_modify(fileobj, events, data)
                keep_parked(key)
                return key

        def register(fileobj: Any, events: int, data: Any = None) -> Any:
            with lock:
                key = orig_register(fileobj, events, data)
                keep_parked(key)
                return key

        sel.modify = modify  # type: ignore[method-assign]
        sel.register = register  # type: ignore[method-assign]
        guard = (lock, parkers, masks)
        setattr(sel, "_jssync_park", guard)  # noqa: B010 - once per selector
    lock, parkers, masks = guard
    with lock:
        parkers[:] = [p for p in parkers if p.fd != fd and p is not old]
        try:
            masks[fd] = _epoll_mask(sel.get_key(fd).events)
        except (KeyError, ValueError, RuntimeError):
            pass  # (not registered yet: register() sets it)
        p = SocketParker(ep, fd, lock, masks)
        parkers.append(p)
    return p
