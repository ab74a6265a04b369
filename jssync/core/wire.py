"""The NATS wire protocol as jssync writes and reads it itself: pure functions, no I/O.

Every PUB/HPUB line jssync puts on a socket is built here, and every queued message by
:func:`encode_burst` (the one encoder of the queue): the pump's bursts into nats-py's
buffer and the I/O thread's direct write of a small burst. A caller's own write of a
request (core/outbound.py ``try_direct_send`` --> core/sockpath.py) uses
:func:`encode_one`: the same bytes as a burst of one (a property test checks it), without
the burst's per-call cost. jssync parses MSG/HMSG itself in two places: a request's reply
read by its caller off the socket (:func:`parse_reply`), and, on the I/O thread, every
message nats-py's reader gets (:func:`msg_parser`, the ``msg_parse`` fast path that
core/natspy.py installs on nats-py's parser: every other protocol line, and anything
unusual, is still parsed by nats-py). (SUB, UNSUB and PING are written by nats-py.)

A queued message is the tuple ``(subject, data, reply, headers)``: ``reply`` ``""`` for
none, ``headers`` a dict (encoded here) or None.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, NamedTuple, Protocol

from ..base.validate import _encode_headers

#: Largest reply a caller may read off the socket itself (:func:`parse_reply`'s ``limit``).
PEEK_MAX = 65536

#: A queued message: ``(subject, data, reply, headers)``.
Item = tuple[str, bytes, str, dict[str, str] | None]


def encode_burst(q: deque[Item], limit: int, max_bytes: int) -> tuple[bytes, int, int]:
    """Pop up to ``limit`` messages (and about ``max_bytes`` of payload) off the left of ``q``.

    Returns ``(chunk, messages, payload bytes)``: the messages as one protocol chunk, in
    order. The byte cap keeps large payloads from being joined and copied in huge chunks
    (a message is never split: the cap is checked before each). The caller holds whatever
    lock orders its pops and writes (``CallerSocket.wlock``).
    """
    parts: list[bytes] = []
    add = parts.append
    pop = q.popleft
    n = 0
    nbytes = 0
    while q and n < limit and nbytes < max_bytes:
        subject, data, reply, headers = pop()
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
    return b"".join(parts), n, nbytes


def encode_one(subject: str, data: bytes, reply: str = "", headers: dict[str, str] | None = None) -> bytes:
    """The PUB (HPUB with ``headers``) of one message: the bytes of :func:`encode_burst` of a burst of one.

    Written out rather than calling :func:`encode_burst` with a one-message deque: that
    costs about 0.5-1 us more per request written by its caller (measured with timeit);
    tests/unit/core/test_wire.py checks the two give the same bytes for any message.
    """
    if headers is None:
        if reply:
            return f"PUB {subject} {reply} {len(data)}\r\n".encode() + data + b"\r\n"
        return f"PUB {subject} {len(data)}\r\n".encode() + data + b"\r\n"
    hdr = _encode_headers(headers)
    return f"HPUB {subject} {reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode() + hdr + data + b"\r\n"


class Reply(NamedTuple):
    """A whole reply message found at the start of a buffer."""

    end: int  #: bytes the message takes (what to consume)
    sid: int
    hdr: bytes | None  #: the raw header block (HMSG), else None
    data: bytes  #: the payload
    size: int  #: payload bytes, headers included (the protocol line's last number)
    headers: dict[str, str] | None = None  #: the header block parsed (set by CallerSocket.steal)


def parse_reply(buf: bytes, head: bytes, sid: bytes, token: bytes, limit: int = PEEK_MAX) -> Reply | int | None:
    """Is the message at the start of ``buf`` the reply ``head + token`` on ``sid``, whole?

    ``buf`` must start at a message boundary. ``head`` is ``b"MSG " + inbox prefix``;
    ``token`` has no space, CR or LF in it. The line is ``MSG <head><token> <sid> <size>``
    or ``HMSG <head><token> <sid> <header size> <size>`` (no reply subject either way; the
    numbers are ASCII digits, single spaces between the fields).
    Returns the :class:`Reply`; or, when it is that reply but ``buf`` ends before it
    does, the number of bytes it takes (at most ``limit``: look again with that many);
    or None: the next message is something else (other traffic, another reply, a reply
    longer than ``limit``, a malformed line): leave it to the I/O thread's parser.
    """
    # (bytes methods, no regular expression: a third of the instructions per reply)
    if buf.startswith(head):
        off = len(head)
        hmsg = False
    elif buf[:1] == b"H" and buf.startswith(head, 1):
        off = len(head) + 1
        hmsg = True
    else:
        return None  # another message (or, never at a first look, a line cut before the inbox)
    eol = buf.find(b"\r\n", off)
    if eol < 0:
        return None  # the line is not whole (never, at a first look)
    parts = buf[off:eol].split(b" ")
    if hmsg:
        if len(parts) != 4:
            return None
        tok, s, hsize, size = parts
        if tok != token or s != sid or not hsize.isdigit() or not size.isdigit():
            return None
        hn = int(hsize)
    else:
        if len(parts) != 3:
            return None
        tok, s, size = parts
        if tok != token or s != sid or not size.isdigit():
            return None
        hn = 0
    n = int(size)
    start = eol + 2
    end = start + 2 + n
    if hn > n or end > limit:
        return None
    if len(buf) < end:
        return end
    if buf[end - 2:end] != b"\r\n":
        return None
    # (tuple.__new__: the same Reply as Reply(...), without NamedTuple's Python-level __new__)
    return _new_reply(Reply, (end, int(sid), buf[start:start + hn] if hmsg else None, buf[start + hn:start + n],
                              n, None))


_new_reply = tuple.__new__


def parse_plain_headers(raw: bytes) -> dict[str, str] | None | Literal[False]:
    """A header block without a status (``NATS/1.0\\r\\n`` then ``Name: Value`` lines), as nats-py parses it.

    The same dict as nats-py's own byte-level header parser (nats-py 2.15 and 2.16 without
    ``fast_mail_parser``; ``natspy.plain_header_lines`` says when that is the one in use;
    a property test compares them), None when it has no field, and False for a block
    this does not parse (a status line, anything else): the caller then asks nats-py.
    A name with whitespace in it is skipped, a value decoded with ``replace``.
    """
    if raw[8:10] != b"\r\n" or not raw.startswith(b"NATS/1.0"):
        return False
    out: dict[str, str] = {}
    for line in raw[10:].split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        # (nats-py: skip a name with any str.isspace() character; str.split() splits on
        # exactly those, so a name has none when it splits into itself)
        if key and key.split() != [key]:
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out or None


# ----------------------------------------------------------------------------- the I/O thread's messages


class ParserState(Protocol):
    """The protocol parser whose step :func:`msg_parser` takes over (nats-py's, through core/natspy.py)."""

    buf: bytearray  #: what it holds of a line or message not yet whole (a new object after a reset)
    state: int  #: where it is: between messages (``idle``) or inside one
    needed: int  #: the total size of the HMSG being handed over (headers + payload)


#: The per-message hand-over: ``(sid, subject, reply, payload, header block or None)``; it returns
#: something to await (``done``: nothing to wait for).
Dispatch = Callable[[int, bytes, bytes, bytes, "bytes | None"], Awaitable[None]]

_MSG = b"MSG"
_HMSG = b"HMSG"
#: The other lines a server sends; :func:`msg_parser` hands each alone to the parser it stands in for.
_OTHER_LINES = frozenset({b"PING", b"PONG", b"+OK", b"-ERR", b"INFO"})


def msg_parser(ps: ParserState, other: Callable[[bytes], Awaitable[None]], dispatch: Dispatch, done: object,
               idle: int) -> Callable[[bytes], Coroutine[Any, Any, None]]:
    """A parse step for the bytes a connection reads: MSG/HMSG here, every other line by ``other``.

    ``ps`` is the parser ``other`` (its parse step) works on and ``idle`` its state between
    messages. The step returned takes each read in turn, as ``other`` would: it walks the
    bytes with ``find``/``split`` and hands every whole MSG/HMSG (single spaces or other ASCII
    whitespace between its fields, as the server writes them) to ``dispatch`` with no
    coroutine per message (it awaits only what is not ``done``: a message with headers, a
    subscription jssync does not own). What ``other`` must see goes to it: a PING, PONG,
    +OK, -ERR or INFO line alone (then on here), anything else from that line on (an
    unknown or malformed line: ``other`` parses or refuses it, so its errors are its own),
    and every read while ``other`` is inside a message it started. A line or message not
    yet whole waits in ``ps.buf`` from its first byte, with ``ps.state`` between messages
    (what ``other`` itself keeps there for a cut line), until enough bytes came for it.
    ``ps.needed`` is the HMSG's total size while it is handed over (``natspy.parser_needed``).
    A reset of ``ps`` (``ps.buf`` a new object) while something was awaited drops the rest
    of the read, as ``other`` does. Raises what ``other`` and ``dispatch`` raise; what was
    not parsed then stays in ``ps.buf``. Reads are ``bytes`` (what nats-py's readers hand
    over). Slightly more lenient than ``other``: fields are split on any ASCII whitespace
    and numbers read by ``int()``, so a few lines nats-py refuses (a trailing space before
    CR LF, ``+5`` or ``1_0`` as a size) are read here; no server writes them.
    """
    need = 0  # how long the message waiting in ps.buf is (0: not known yet)

    async def parse(data: bytes = b"") -> None:
        nonlocal need
        buf = ps.buf
        if buf or ps.state != idle:
            if ps.state != idle:  # inside a message the other parser started: it finishes it
                need = 0
                await other(data)
                return
            buf += data
            if len(buf) < need:
                return  # (a large message arriving in pieces: no copy until it is whole)
            data = bytes(buf)
            buf.clear()
        need = 0
        size = len(data)
        find = data.find
        pos = 0
        try:
            while pos < size:
                eol = find(b"\r\n", pos)
                if eol < 0:
                    break  # the line is not whole yet
                args = data[pos:eol].split()
                n = len(args)
                op = args[0] if n else b""
                if op == _MSG and (n == 4 or n == 5):
                    if n == 4:
                        _, subject, sid, ln = args
                        reply = b""
                    else:
                        _, subject, sid, reply, ln = args
                    start = eol + 2
                    try:
                        end = start + int(ln)
                        s = int(sid)
                    except ValueError:  # not numbers where numbers go: the other parser's to refuse
                        end = -1
                    if end >= start:
                        if end + 2 > size:
                            need = end + 2 - pos
                            break  # the payload is not whole yet
                        pos = end + 2
                        r = dispatch(s, subject, reply, data[start:end], None)
                        if r is not done:
                            await r
                            if ps.buf is not buf:
                                return  # reset meanwhile: the rest belongs to the old connection
                        continue
                elif op == _HMSG and (n == 5 or n == 6):
                    if n == 5:
                        _, subject, sid, hl, ln = args
                        reply = b""
                    else:
                        _, subject, sid, reply, hl, ln = args
                    start = eol + 2
                    try:
                        mid = start + int(hl)
                        total = int(ln)
                        s = int(sid)
                    except ValueError:
                        mid = total = -1
                    end = start + total
                    if start <= mid <= end:
                        if end + 2 > size:
                            need = end + 2 - pos
                            break
                        pos = end + 2
                        ps.needed = total
                        r = dispatch(s, subject, reply, data[mid:end], data[start:mid] if mid > start else None)
                        if r is not done:
                            await r
                            if ps.buf is not buf:
                                return
                        continue
                if op in _OTHER_LINES:
                    line = data[pos:eol + 2]
                    pos = eol + 2
                    await other(line)
                    if ps.buf is not buf:
                        return
                    if not buf and ps.state == idle:
                        continue
                # anything else (or a line the other parser read differently): it parses the rest
                rest = data[pos:]
                pos = size
                await other(rest)
                return
        finally:
            if pos < size and ps.buf is buf:
                buf += data[pos:]  # (a message not yet whole; or what an error left unparsed)

    return parse
