"""The caller-side socket path (jssync/core/sockpath.py) without a server or the I/O thread.

The protocol decisions (``wire.parse_reply``, :class:`ReadGate`; the encoder is tested in
test_wire.py) are pure; the shell (:class:`CallerSocket`) is driven over ``socket.socketpair()``
(what it hands back to the I/O thread is recorded by the fixture's ``feed``): bytes
written on one end are in the other's buffer when ``sendall`` returns (AF_UNIX), so every
test is deterministic: no sleeps, no waiting for data to arrive.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jssync.base.deadline import Deadline
from jssync.core.sockpath import PEEK_FIRST, CallerSocket, ReadGate, wake, wake_fd
from jssync.core.wire import PEEK_MAX, Reply, encode_one, parse_reply

HEAD = b"MSG _INBOX.abc."
SID = b"3"


def msg(token: str, data: bytes, sid: bytes = SID, subject: bytes = b"_INBOX.abc.") -> bytes:
    return b"MSG " + subject + token.encode() + b" " + sid + b" %d\r\n" % len(data) + data + b"\r\n"


def hmsg(token: str, hdr: bytes, data: bytes) -> bytes:
    return (b"HMSG _INBOX.abc." + token.encode() + b" " + SID + b" %d %d\r\n" % (len(hdr), len(hdr) + len(data))
            + hdr + data + b"\r\n")


# ----------------------------------------------------------------------------- pure: parse_reply


def test_a_whole_reply_is_recognised_and_its_length_known() -> None:
    wire = msg("7", b"payload")
    got = parse_reply(wire + b"MSG other 1 1\r\nx\r\n", HEAD, SID, b"7")
    assert got == Reply(len(wire), 3, None, b"payload", 7)


def test_a_reply_with_headers_keeps_its_raw_header_block() -> None:
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    got = parse_reply(hmsg("12", hdr, b"data"), HEAD, SID, b"12")
    assert isinstance(got, Reply) and got.hdr == hdr and got.data == b"data" and got.size == len(hdr) + 4


@pytest.mark.parametrize("buf", [
    msg("71", b"x"),  # another reply whose token starts with ours
    msg("7", b"x", sid=b"4"),  # another subscription's sid
    msg("7", b"x", subject=b"_INBOX.abd."),  # another inbox
    b"PING\r\n",
    b"+OK\r\n" + msg("7", b"x"),  # anything before the reply
    b"MSG _INBOX.abc.7 3 x\r\nx\r\n",  # not a number
    b"MSG _INBOX.abc.7 3 1 2 3\r\nx\r\n",  # too many fields
    b"HMSG _INBOX.abc.7 3 9 2\r\nxy\r\n",  # header size over the total
    b"MSG _INBOX.abc.7 3 2\r\nxyz\r\n",  # the payload is not followed by CRLF
    b"MSG _INBOX.abc.7 3",  # the line is not whole
], ids=["other-token", "other-sid", "other-inbox", "ping", "ok-first", "nan", "fields", "hdr-size", "crlf",
        "line"])
def test_anything_else_is_left_to_the_io_thread(buf: bytes) -> None:
    assert parse_reply(buf, HEAD, SID, b"7") is None


def test_a_reply_cut_short_asks_for_its_length_and_a_too_long_one_is_left() -> None:
    wire = msg("7", b"z" * 10000)
    assert parse_reply(wire[:PEEK_FIRST], HEAD, SID, b"7") == len(wire)
    assert isinstance(parse_reply(wire, HEAD, SID, b"7"), Reply)
    big = msg("7", b"z" * PEEK_MAX)
    assert parse_reply(big[:PEEK_FIRST], HEAD, SID, b"7") is None


# ----------------------------------------------------------------------------- pure: ReadGate


def test_the_gate_opens_only_when_everything_received_was_parsed_to_a_boundary() -> None:
    g = ReadGate()
    assert not g.open(True)  # never synced
    g.received(100)
    g.parsed(60, idle=False)
    assert not g.open(True)
    g.parsed(40, idle=True)
    assert g.open(True)
    assert not g.open(False)  # nats-py holds something half-read right now
    g.received(5)  # the I/O thread read more, not parsed yet
    assert not g.open(True)
    g.parsed(5, idle=False)
    assert g.open(True)
    g.reset()  # a parser reset mid-message
    assert not g.open(True)
    g.parsed(0, idle=True)
    assert g.open(True)


# ----------------------------------------------------------------------------- the shell over a socketpair


class _Transport:
    """What the shell asks of asyncio's transport (its write buffer, whether it closes)."""

    def __init__(self) -> None:
        self.buffered = 0
        self.closing = False
        self.written: list[bytes] = []

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Waiting:
    def __init__(self) -> None:
        self._done = False
        self.wake_fd = -1


@pytest.fixture
def pair() -> Iterator[tuple[CallerSocket, socket.socket, list[Callable[[], None]]]]:
    """A shell armed on one end (non-blocking, as asyncio's); the test is the server on the other."""
    ours, server = socket.socketpair()
    ours.setblocking(False)
    scheduled: list[Callable[[], None]] = []
    cp = CallerSocket(scheduled.append)
    cp.sock, cp.transport = ours, _Transport()
    cp.reader = lambda: True  # the I/O thread holds nothing half-read
    cp.head, cp.sid = HEAD, SID
    cp.gate.parsed(0, idle=True)  # ... and has parsed everything it received
    fed: list[bytes] = []

    def feed(data: bytes) -> None:  # what natspy's feed does: to nats-py's reader, counted as received
        fed.append(data)
        cp.gate.received(len(data))

    cp.feed = feed
    cp.fed = fed  # type: ignore[attr-defined]  # (for io_sees)
    try:
        yield cp, server, scheduled
    finally:
        ours.close()
        server.close()


def left_on(sock: socket.socket) -> bytes:
    """Everything still unread on ``sock`` (non-blocking)."""
    out = b""
    while True:
        try:
            chunk = sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def io_sees(cp: CallerSocket, scheduled: list[Callable[[], None]]) -> bytes:
    """Run what was handed to the I/O thread; then what its reader got and the socket still holds."""
    for fn in scheduled:
        fn()
    scheduled.clear()
    fed: list[bytes] = cp.fed  # type: ignore[attr-defined]
    return b"".join(fed) + left_on(cp.sock)


def test_steal_takes_the_reply_in_one_read_and_hands_what_follows_to_the_io_thread(pair: Any) -> None:
    cp, server, scheduled = pair
    after = msg("8", b"next") + b"PING\r\n"
    server.sendall(msg("7", b"mine") + after)
    got = cp.steal(cp.sock, "7")
    assert isinstance(got, Reply) and got.data == b"mine" and got.headers is None
    assert cp.spill == after and scheduled == [cp.give_back], "the bytes after the reply are the I/O thread's"
    server.sendall(msg("9", b"later"))
    assert cp.steal(cp.sock, "9") is None, "no caller reads while handed-back bytes wait"
    assert io_sees(cp, scheduled) == after + msg("9", b"later"), "the I/O thread sees the stream in order"
    assert cp.spill == b""


def test_steal_hands_everything_back_when_the_next_message_is_not_the_reply(pair: Any) -> None:
    cp, server, scheduled = pair
    wire = msg("8", b"other") + msg("7", b"mine")
    server.sendall(wire)
    assert cp.steal(cp.sock, "7") is None
    assert io_sees(cp, scheduled) == wire


def test_a_ping_from_the_server_before_the_reply_goes_to_the_io_thread(pair: Any) -> None:
    cp, server, scheduled = pair
    wire = b"PING\r\n" + msg("7", b"mine")
    server.sendall(wire)
    assert cp.steal(cp.sock, "7") is None
    assert io_sees(cp, scheduled) == wire
    assert not cp.gate.open(True), "until nats-py's parser has taken them, no caller reads"


def test_what_a_caller_hands_back_is_dropped_with_the_connection_it_came_from(pair: Any) -> None:
    cp, server, scheduled = pair
    server.sendall(msg("8", b"other"))
    assert cp.steal(cp.sock, "7") is None and cp.spill
    cp.spill = b""  # (what the connection-lost hook does, under the same lock)
    assert io_sees(cp, scheduled) == b"", "nothing of the old connection reaches the new parser"
    cp.feed = None  # (a connection being re-armed)
    cp.spill = b"x"
    cp.give_back()
    assert cp.spill == b""


@pytest.mark.parametrize("close", ["not-synced", "unparsed-bytes", "half-read", "no-reader", "other-socket"])
def test_steal_reads_nothing_while_the_io_thread_is_inside_a_message(pair: Any, close: str) -> None:
    cp, server, _ = pair
    wire = msg("7", b"mine")
    server.sendall(wire)
    sock = cp.sock
    if close == "not-synced":
        cp.gate.reset()
    elif close == "unparsed-bytes":
        cp.gate.received(10)
    elif close == "half-read":
        cp.reader = lambda: False
    elif close == "no-reader":
        cp.reader = None
    else:
        cp.sock = None
    assert cp.steal(sock, "7") is None
    assert left_on(sock) == wire


@pytest.mark.parametrize("cut", [10, 50], ids=["in-the-line", "in-the-payload"])
def test_a_partly_arrived_reply_goes_to_the_io_thread_whole_and_in_order(pair: Any, cut: int) -> None:
    cp, server, scheduled = pair
    wire = msg("7", b"y" * 100) + msg("8", b"after")
    server.sendall(wire[:cut])
    assert cp.steal(cp.sock, "7") is None
    server.sendall(wire[cut:])
    assert cp.steal(cp.sock, "7") is None, "the rest is not at a message boundary: no caller reads it"
    assert io_sees(cp, scheduled) == wire


def test_a_reply_longer_than_the_first_read_is_read_whole(pair: Any) -> None:
    cp, server, scheduled = pair
    data = bytes(range(256)) * 40  # 10 KiB
    server.sendall(msg("7", data) + b"PING\r\n")
    got = cp.steal(cp.sock, "7")
    assert isinstance(got, Reply) and got.data == data
    assert io_sees(cp, scheduled) == b"PING\r\n"


def test_a_reply_over_the_read_limit_is_the_io_threads(pair: Any) -> None:
    cp, server, scheduled = pair
    wire = msg("7", b"b" * PEEK_MAX)
    server.setblocking(False)
    n = server.send(wire)  # (whatever fits in the buffer: enough to see the size)
    assert n > PEEK_FIRST
    assert cp.steal(cp.sock, "7") is None
    assert io_sees(cp, scheduled) == wire[:n]


def test_a_closed_connection_is_left_to_the_io_thread(pair: Any) -> None:
    cp, server, scheduled = pair
    server.close()
    assert cp.steal(cp.sock, "7") is None
    assert cp.spill == b"" and scheduled == []


def test_headers_are_parsed_by_the_given_parser_or_the_reply_is_left(pair: Any) -> None:
    cp, server, scheduled = pair
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    seen: list[bytes] = []

    async def parser(raw: bytes) -> dict[str, str]:
        seen.append(raw)
        return {"K": "v"}

    cp.header_parser = parser
    server.sendall(hmsg("7", hdr, b"d"))
    got = cp.steal(cp.sock, "7")
    assert isinstance(got, Reply) and got.headers == {"K": "v"} and got.data == b"d" and seen == [hdr]

    async def refuses(raw: bytes) -> dict[str, str]:
        raise RuntimeError("nats-py's error callback refused to run off the I/O thread")

    cp.header_parser = refuses
    wire = hmsg("9", hdr, b"e")
    server.sendall(wire)
    assert cp.steal(cp.sock, "9") is None
    assert io_sees(cp, scheduled) == wire
    cp.gate.parsed(len(wire), idle=True)  # (nats-py's parser took it)
    cp.header_parser = None  # (a nats-py without its header parser)
    server.sendall(wire)
    assert cp.steal(cp.sock, "9") is None
    assert io_sees(cp, scheduled) == wire * 2


def test_watch_returns_a_reply_already_waiting(pair: Any) -> None:
    cp, server, _ = pair
    server.sendall(msg("7", b"mine"))
    w = _Waiting()
    got = cp.watch(w, "7", Deadline(10))
    assert isinstance(got, Reply) and got.data == b"mine"
    assert w.wake_fd == -1, "the eventfd is only the slot's while the caller watches"


def test_watch_gives_up_when_other_traffic_comes_first(pair: Any) -> None:
    cp, server, scheduled = pair
    wire = msg("8", b"other") + msg("7", b"mine")
    server.sendall(wire)
    assert cp.watch(_Waiting(), "7", Deadline(10)) is None
    assert io_sees(cp, scheduled) == wire


def test_watch_stops_once_the_io_thread_filled_the_slot(pair: Any) -> None:
    cp, server, _ = pair
    w = _Waiting()
    w._done = True  # delivered by the I/O thread before the caller looked
    wake(wake_fd())  # (and its wake-up is pending on this thread's eventfd)
    server.sendall(msg("7", b"late copy"))
    assert cp.watch(w, "7", Deadline(10)) is None
    assert left_on(cp.sock) == msg("7", b"late copy")
    os.eventfd_read(wake_fd())  # (leave this thread's eventfd as it was)


def test_watch_is_off_without_a_reader(pair: Any) -> None:
    cp, server, _ = pair
    server.sendall(msg("7", b"mine"))
    cp.reader = None
    assert cp.watch(_Waiting(), "7", Deadline(10)) is None


def test_send_writes_the_whole_message_when_nothing_waits_before_it(pair: Any) -> None:
    cp, server, scheduled = pair
    buf = encode_one("s", b"hi", "_INBOX.abc.7")
    assert cp.send(buf, lambda: False)
    assert server.recv(1024) == buf and cp.rest == b"" and scheduled == []


@pytest.mark.parametrize("block", ["queued", "rest", "buffered", "closing", "off"])
def test_send_refuses_when_something_must_go_first(pair: Any, block: str) -> None:
    cp, server, _ = pair
    blocked = False
    if block == "queued":
        blocked = True
    elif block == "rest":
        cp.rest = b"PUB s 1\r\n"  # a partial send not written yet
    elif block == "buffered":
        cp.transport.buffered = 10
    elif block == "closing":
        cp.transport.closing = True
    else:
        cp.sock = None
    assert not cp.send(b"PUB s r 0\r\n\r\n", lambda: blocked)
    assert left_on(server) == b""


def test_a_partial_send_hands_the_rest_to_the_io_thread_in_order(pair: Any) -> None:
    cp, server, scheduled = pair
    cp.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    buf = encode_one("s", b"q" * (1 << 20), "r")
    assert cp.send(buf, lambda: False)
    assert 0 < len(cp.rest) < len(buf), "the socket took part of it"
    assert scheduled == [cp.flush_rest], "the I/O thread is asked to write the rest"
    assert not cp.send(b"PUB s r 0\r\n\r\n", lambda: False), "nothing may overtake the rest"
    sent = left_on(server)
    scheduled[0]()  # on the I/O thread: the transport writes the rest first
    assert cp.transport.written == [b""]
    assert sent + cp.take_rest() == buf and cp.rest == b""


# ----------------------------------------------------------------------------- per-thread eventfds


def test_a_forked_child_gets_an_eventfd_of_its_own() -> None:
    # the parent's eventfd is shared with the child after fork: the child must not watch it
    parent = wake_fd()
    assert wake_fd() == parent, "one eventfd per thread, made once"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(w, str(wake_fd()).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        child = int(os.read(r, 32))
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert child != parent


def test_a_caller_stopped_midway_hands_what_it_read_to_the_io_thread(pair: Any) -> None:
    """Ctrl-C (or any exception) while the caller looks at what it read: the bytes are not lost."""
    cp, server, scheduled = pair
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    wire = hmsg("7", hdr, b"mine") + msg("8", b"other")

    async def interrupted(raw: bytes) -> dict[str, str]:
        raise KeyboardInterrupt

    cp.header_parser = interrupted
    server.sendall(wire)
    with pytest.raises(KeyboardInterrupt):
        cp.steal(cp.sock, "7")
    assert io_sees(cp, scheduled) == wire, "everything read goes to nats-py's reader, in order"


def test_give_back_never_waits_for_a_caller_holding_the_read_lock(pair: Any) -> None:
    """The I/O thread tries again later instead of waiting (the holder may be a stopped thread)."""
    cp, server, scheduled = pair
    after = msg("8", b"next")
    server.sendall(msg("7", b"mine") + after)
    assert isinstance(cp.steal(cp.sock, "7"), Reply)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with cp.rlock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(10)
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_call(cp.give_back))
            # (had it waited for the lock, it would have fed the bytes once the holder gave up)
            assert t.is_alive() and cp.fed == [] and cp.spill == after, "returned without the lock"  # type: ignore[attr-defined]
            release.set()
            t.join(10)
            loop.run_until_complete(_until(lambda: bool(cp.fed)))  # type: ignore[attr-defined]  # (the retry)
        finally:
            loop.close()
    finally:
        release.set()
        t.join(10)
    assert cp.fed == [after] and cp.spill == b""  # type: ignore[attr-defined]


async def _call(fn: Callable[[], None]) -> None:
    fn()


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.001)  # poll: the loop runs its timers meanwhile
