"""The caller-side socket path: a request's caller writes it and may read its reply itself.

Normally the I/O thread owns the connection's socket. For a blocking round trip
(``request``, ``js.publish``, ``kv.get``, the JetStream API) that costs two thread
wake-ups per call (caller -> I/O thread to write, I/O thread -> caller with the reply).
This module lets the caller skip both when it is safe:

- write: when nothing is queued before the request, the caller sends it on the socket
  itself, under the lock every write to that socket takes (:meth:`CallerSocket.send`);
  what a partial send leaves over is handed to the I/O thread, which writes it before
  anything else (:meth:`CallerSocket.take_rest`).
- read: for a few milliseconds the caller watches the socket (:meth:`CallerSocket.watch`);
  when the I/O thread has parsed everything it received up to a message boundary
  (:class:`ReadGate`) and the next whole message on the socket is this caller's reply
  (``wire.parse_reply``), the caller takes it, in one read of the socket; what that read
  brought that is not the reply is handed back to nats-py's reader ahead of its next read
  (:meth:`CallerSocket.give_back`, ``natspy.install_reader``), so the I/O thread's parser
  sees the stream whole and in order.
- park: a caller that will watch for its reply takes the socket out of the I/O loop's
  epoll set once its request is sent (``CallerSocket.parker``, ``natspy.SocketParker``;
  core/requests.py) and gives it back when its watch ends, so the reply does not also
  wake the I/O thread (which then only races the caller for the read lock and costs as
  much CPU as the caller's whole call).
  Parking is only an optimisation: whatever the caller leaves on the socket, the I/O
  thread reads as soon as the socket is unparked.

The protocol decisions are pure and have no sockets or threads: the bytes of a request
and of its reply are ``core/wire.py``'s (``encode_one``, ``parse_reply``: the module
that builds every PUB/HPUB jssync writes); :class:`ReadGate` is here. :class:`CallerSocket` is the thin shell that
applies them to the real socket (tests/unit/core/test_sockpath.py drives it over
``socket.socketpair()``). Hooking it into nats-py's transport (every write and read of
the I/O thread through the same locks) is :meth:`CallerSocket.attach`, with the nats-py
internals in ``_natspy``. It was measured in session 5 (docs/performance.md): it keeps its
place only while it wins clearly on ``js.publish`` and request/reply.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..base.deadline import Deadline
from . import natspy as _natspy
from .wire import Reply, parse_plain_headers, parse_reply

_monotonic = time.monotonic
_new_reply = tuple.__new__

#: Requests up to this size may be written to the socket by the caller's thread.
SEND_MAX = 64 * 1024
#: How long a caller that wrote its request itself watches the socket for the reply.
WATCH_WINDOW = 0.005
#: Bytes a caller reads first when it looks for its reply on the socket (then the rest of
#: a longer reply, up to ``PEEK_MAX``).
PEEK_FIRST = 4096


# ----------------------------------------------------------------------------- the protocol (pure)


class ReadGate:
    """What the I/O thread's reads and its parser have done: may a caller read now?

    The I/O thread reports every read (:meth:`received`) and every parse
    (:meth:`parsed`, with whether its parser and reader now hold nothing half-read);
    a parser reset in mid-message closes the gate (:meth:`reset`). A caller may read
    when everything received so far has been parsed up to a message boundary: then the
    socket's next byte starts a message.
    """

    __slots__ = ("fed", "done", "synced")

    def __init__(self) -> None:
        self.fed = 0  # bytes the I/O thread received (since the last sync)
        self.done = 0  # ... of which its parser has finished with
        self.synced = False

    def received(self, n: int) -> None:
        self.fed += n

    def parsed(self, n: int, idle: bool) -> None:
        if idle:
            self.done = self.fed  # everything received so far is parsed
            self.synced = True
        else:
            self.done += n

    def reset(self) -> None:
        self.synced = False

    def open(self, idle: bool) -> bool:
        """True when a caller may read the socket (``idle``: nothing half-read right now)."""
        return self.synced and self.fed == self.done and idle


# ----------------------------------------------------------------------------- the shell


class Waiting(Protocol):
    """The caller's reply slot, as :meth:`CallerSocket.watch` sees it."""

    _done: bool
    wake_fd: int


class CallerSocket:
    """The shell: the connection's socket as its callers' threads use it.

    ``call_soon(fn)`` runs ``fn`` on the I/O thread (it writes a partial send's rest).
    ``sock`` is None while the path is off (TLS, disconnected, not attached yet).
    Every write to the socket takes ``wlock``, every read ``rlock`` (in this order
    where both are taken).
    """

    def __init__(self, call_soon: Callable[[Callable[[], None]], Any]) -> None:
        self.wlock = threading.RLock()
        self.rlock = threading.RLock()
        self.gate = ReadGate()
        self._call_soon = call_soon
        self.sock: Any = None
        self.transport: Any = None
        self.rest = b""  # what a partial send left over (the I/O thread writes it first)
        self.spill = b""  # what a caller read that was not its reply (nats-py's reader gets it first)
        self.feed: Callable[[bytes], None] | None = None  # I/O thread: bytes to nats-py's reader (natspy)
        self.checked: Any = None  # the transport attach() last looked at
        self.reader: Callable[[], bool] | None = None  # the I/O thread holds nothing half-read
        self.header_parser: Callable[[bytes], Any] | None = None  # nats-py's (a coroutine function)
        self.head: bytes | None = None  # b"MSG <reply inbox prefix>"
        self.sid: bytes | None = None  # the reply inbox subscription's sid
        self.parker: _natspy.SocketParker | None = None  # takes the socket out of the loop's epoll set
        self.plain_headers = False  # nats-py parses a header block as wire.parse_plain_headers does

    # -- on the I/O thread

    def attach(self, nc: Any, write_ok: bool, read_ok: bool) -> None:
        """On the I/O thread: arm the path on ``nc``'s current transport (or disarm it).

        Only a plain TCP connection through asyncio's selector transport: every write to
        it (nats-py's and the callers') then goes through ``wlock``, every read through
        ``rlock``, and closing the socket through both.
        """
        with self.wlock, self.rlock:
            self.transport = None
            self.sock = None
            self.rest = b""  # a remainder belongs to the transport it was cut on
            self.spill = b""  # ... and what a caller read, to the transport it came from
            self.reader = None
            self.feed = None
            self.gate.reset()
            try:
                self.checked, t, sock = _natspy.socket_transport(nc)
                if t is None or not write_ok:
                    return
                orig_write = t.write
            except Exception:  # noqa: BLE001 - another transport (websocket...): no direct path
                return
            wlock, rlock = self.wlock, self.rlock

            def write(data: Any) -> None:
                with wlock:
                    if self.rest and self.transport is t:
                        data = self.take_rest() + bytes(data)
                    orig_write(data)

            def writelines(chunks: Any) -> None:
                write(b"".join(chunks))

            def hook(orig_lost: Callable[[Any], None]) -> Callable[[Any], None]:
                def lost(exc: Any) -> None:
                    with wlock, rlock:
                        if self.transport is t:
                            self.transport = None
                            self.sock = None
                            self.rest = b""
                            self.spill = b""  # (the parser starts afresh on the next connection)
                            self.gate.reset()
                    orig_lost(exc)
                return lost

            t.write = write
            t.writelines = writelines
            _natspy.hook_connection_lost(t, hook)
            if read_ok and hasattr(os, "eventfd"):
                self.reader = _natspy.install_reader(nc, t, self)
                if self.reader is not None:
                    self.parker = _natspy.socket_parker(t._loop, sock.fileno(), self.parker)
            self.plain_headers = _natspy.plain_header_lines(nc)
            self.writable = _natspy.writer_idle(nc, t)  # type: ignore[method-assign]
            self.transport = t
            self.sock = sock

    def give_back(self) -> None:
        """On the I/O thread: hand what a caller read that was not its reply to nats-py's
        reader, ahead of anything read after it (its next socket read does the same first).

        Never waits for ``rlock``: a caller holding it may be a thread stopped in a signal
        handler that itself waits for the I/O thread; then this tries again 1 ms later.
        """
        rlock = self.rlock
        if not rlock.acquire(False):
            try:
                asyncio.get_running_loop().call_later(0.001, self.give_back)
            except RuntimeError:  # pragma: no cover - not on a running loop: the socket read does it
                pass
            return
        try:
            data, self.spill = self.spill, b""
            feed = self.feed
            if data and feed is not None:
                feed(data)
        finally:
            rlock.release()

    def take_rest(self) -> bytes:
        """On the I/O thread, under ``wlock``: what a caller's partial send left, to write first."""
        rest, self.rest = self.rest, b""
        return rest

    def flush_rest(self) -> None:
        """On the I/O thread: write what a caller's partial send left over."""
        with self.wlock:
            t = self.transport
            if self.rest and t is not None and not t.is_closing():
                t.write(b"")

    # -- on a caller's thread

    def writable(self) -> bool:
        """Nothing waits in the transport (``attach`` replaces this with the adapter's check,
        which also asks whether nats-py holds anything to write and is connected)."""
        t = self.transport
        return not t.get_write_buffer_size() and not t.is_closing()

    def send(self, buf: bytes, blocked: Callable[[], bool]) -> bool:
        """Send ``buf`` (one whole message) on the socket unless ``blocked()`` or a write is pending.

        ``blocked`` is asked under ``wlock`` (something queued before this message).
        Returns False when nothing was sent (the caller queues it instead); True when it
        was sent, or partly sent with the rest handed to the I/O thread.
        """
        with self.wlock:
            sock = self.sock
            if sock is None or self.rest or blocked() or not self.writable():
                return False
            try:
                n = sock.send(buf)
                # at once, before anything that could be interrupted (Ctrl-C): a lost
                # remainder would leave a truncated message on the wire
                self.rest = buf[n:]
            except (BlockingIOError, InterruptedError):
                n = 0
                self.rest = buf
            except OSError:
                return False  # the I/O thread sees the broken socket too; queue it for after the reconnect
            if n < len(buf):
                try:
                    self._call_soon(self.flush_rest)
                except RuntimeError:  # pragma: no cover - the loop is closing
                    pass
            return True

    def watch(self, waiting: Waiting, token: str, deadline: Deadline) -> Reply | None:
        """Right after the caller sent its request: watch the socket briefly for the reply.

        Returns the reply when it was the next thing on the socket (consumed here), else
        None: once ``waiting`` was filled (its ``wake_fd`` is signalled), something else
        arrived, or ``WATCH_WINDOW`` passed; the caller then waits for the I/O thread.
        """
        sock = self.sock
        if sock is None or self.reader is None:
            return None
        sfd = sock.fileno()
        if sfd < 0:
            return None  # closed meanwhile
        w = getattr(_tls, "wake", None)  # (_thread_wake() written out for the usual case)
        if w is None or w.pid != _pid:
            w = _thread_wake()
        wfd = w.fd
        poll = w.pollers.get(sfd)  # (this thread's poller of the socket and its eventfd, made once)
        if poll is None:
            poll = w.poller(sfd)
        left = deadline.remaining()
        window = WATCH_WINDOW if left is None or left > WATCH_WINDOW else left
        end = 0.0  # (when the window ends: looked up only if a poll must be repeated)
        ms = window * 1000.0
        waiting.wake_fd = wfd
        try:
            while not waiting._done:
                try:
                    ready = poll(ms)
                except OSError:
                    return None
                if not ready:
                    return None
                if len(ready) == 1 and ready[0][0] == sfd:  # (the usual: the socket alone)
                    if waiting._done:
                        return None
                    return self.steal(sock, token)
                try:
                    os.eventfd_read(wfd)
                except BlockingIOError:
                    pass
                except OSError:
                    return None
                if len(ready) == 1:  # the slot was filled (or an old wake-up): look again
                    now = _monotonic()
                    if not end:  # (a stale wake-up from an earlier request: the first poll returned at once)
                        end = now + window
                    ms = max(0.0, end - now) * 1000.0
                    continue
                if waiting._done:
                    return None
                return self.steal(sock, token)
            return None
        finally:
            waiting.wake_fd = -1

    def steal(self, sock: Any, token: str) -> Reply | None:
        """Take the reply for ``token`` if it is the next whole message on ``sock``.

        One read: what it brings beyond the reply (or all of it, when the next message is
        something else, or the reply is not whole yet) is not the caller's: it goes to
        ``spill``, which the I/O thread hands to nats-py's reader before anything it reads
        after it (:meth:`give_back`, scheduled here; the I/O thread's socket reads do it
        first too), and no caller reads the socket until it has.
        """
        head, sid = self.head, self.sid
        if head is None or sid is None:
            return None
        tok = token.encode()
        with self.rlock:
            reader = self.reader
            g = self.gate
            # (g.open(reader()) written out: a round trip makes one call fewer)
            if (reader is None or self.sock is not sock or self.spill or not (g.synced and g.fed == g.done)
                    or not reader()):
                return None
            b = b""
            try:  # (whatever stops this midway, Ctrl-C included: what was read goes to the I/O thread)
                try:
                    b = sock.recv(PEEK_FIRST)
                except OSError:  # (nothing there after all, or the socket broke: the I/O thread sees it)
                    return None
                if not b:
                    return None  # the server closed the connection: nothing taken, the I/O thread reads the end
                got = parse_reply(b, head, sid, tok)
                if isinstance(got, int):  # the reply, longer than one read: take what of it has come
                    try:
                        while (n := len(b)) < got:
                            b += sock.recv(got - n)
                            if len(b) == n:
                                break
                    except OSError:  # (the rest is not here yet: the I/O thread reads it)
                        pass
                    got = parse_reply(b, head, sid, tok)
                if isinstance(got, Reply) and got.hdr is not None:
                    hdrs = self.parse_headers(got.hdr)
                    got = None if hdrs is None else _new_reply(Reply, (got.end, got.sid, got.hdr, got.data,
                                                                      got.size, hdrs))
            except BaseException:
                if b:
                    self._spill(b)
                raise
            if not isinstance(got, Reply):
                self._spill(b)
                return None
            if got.end < len(b):
                self._spill(b[got.end:])
        return got

    def _spill(self, data: bytes) -> None:
        """Under ``rlock``: ``data`` (read off the socket, not the caller's) goes to the I/O thread."""
        self.spill = data
        try:
            self._call_soon(self.give_back)
        except RuntimeError:  # pragma: no cover - the loop is closing: the connection goes too
            pass

    def parse_headers(self, raw: bytes) -> dict[str, str] | None:
        """nats-py's own header parsing, run to completion here; None if it cannot be.

        Returns ``{}`` for a header block with nothing in it. For a malformed block
        nats-py calls the connection's error callback, which refuses to run off the I/O
        thread (``_OffLoopError``): then the I/O thread reads the message instead.
        """
        parse = self.header_parser
        if parse is None:
            return None
        if self.plain_headers:
            hdrs = parse_plain_headers(raw)
            if hdrs is not False:
                return hdrs or {}
        coro = parse(raw)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value or {}
        except Exception:  # noqa: BLE001 - leave it to the I/O thread
            return None
        coro.close()
        return None


# ----------------------------------------------------------------------------- per-thread eventfds


_spare_wake_fds: list[tuple[int, int]] = []  # (pid, fd), see _WakeFd
_getpid = os.getpid  # (kept for __del__ at interpreter shutdown)
_pid = os.getpid()  # this process's id, kept current in a forked child (no getpid() per call)


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _WakeFd:
    """A thread's eventfd (see :meth:`CallerSocket.watch`), and its pollers.

    Never closed: the I/O thread may still write to it just after the thread is done with
    it, and a closed number could by then belong to another file. When its thread ends it
    goes back to ``_spare_wake_fds`` for the next thread. ``pollers``: a socket's
    descriptor -> the ``poll`` method of a poller watching it and this eventfd (made once
    per socket: a caller's round trip needs no new poller).
    """

    __slots__ = ("fd", "pid", "pollers")

    def __init__(self, fd: int | None = None) -> None:
        self.fd: int = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) if fd is None else fd
        self.pid = os.getpid()
        self.pollers: dict[int, Callable[[float], list[tuple[int, int]]]] = {}

    def poller(self, sfd: int) -> Callable[[float], list[tuple[int, int]]]:
        """A poller of the socket ``sfd`` and this eventfd (not select(): no limit on the numbers)."""
        if len(self.pollers) >= 8:
            self.pollers.clear()  # (sockets of connections gone: make them again when needed)
        p = select.poll()
        p.register(sfd, select.POLLIN)
        p.register(self.fd, select.POLLIN)
        poll = self.pollers[sfd] = p.poll
        return poll

    def __del__(self) -> None:
        try:
            if self.pid == _getpid():
                _spare_wake_fds.append((self.pid, self.fd))
        except Exception:  # noqa: BLE001 - interpreter shutdown: module globals may be gone
            pass


_tls = threading.local()


def _thread_wake() -> _WakeFd:
    """This thread's :class:`_WakeFd`."""
    w: _WakeFd | None = getattr(_tls, "wake", None)
    if w is None or w.pid != _pid:  # first use on this thread, or a forked child
        if w is not None:
            w.pid = -1  # the parent's: not a spare of this process
        fd = None
        if _spare_wake_fds:
            try:
                pid, spare = _spare_wake_fds.pop()
            except IndexError:
                pass
            else:
                if pid == _getpid():
                    fd = spare  # (a parent's spare is dropped: it is shared with the parent)
        w = _tls.wake = _WakeFd(fd)
    return w


def wake_fd() -> int:
    """This thread's eventfd."""
    return _thread_wake().fd


def wake(fd: int) -> None:
    """Signal a watching thread's eventfd."""
    try:
        os.eventfd_write(fd, 1)
    except OSError:
        pass
