"""The NATS wire protocol as jssync writes and reads it itself: pure functions, no I/O.

Every PUB/HPUB line jssync puts on a socket is built here, and every queued message by
:func:`encode_burst` (the one encoder of the queue): the pump's bursts into nats-py's
buffer and the I/O thread's direct write of a small burst. A caller's own write of a
request (core/outbound.py ``try_direct_send`` --> core/sockpath.py) uses
:func:`encode_one`: the same bytes as a burst of one (a property test checks it), without
the burst's per-call cost. The only MSG/HMSG line jssync parses itself is a request's
reply read by its caller off the socket (:func:`parse_reply`); every other message is
parsed by nats-py. (SUB, UNSUB and PING are written by nats-py.)

A queued message is the tuple ``(subject, data, reply, headers)``: ``reply`` ``""`` for
none, ``headers`` a dict (encoded here) or None.
"""

from __future__ import annotations

from collections import deque
from typing import Literal, NamedTuple

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
