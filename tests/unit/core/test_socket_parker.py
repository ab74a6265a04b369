"""The socket parker (jssync/core/natspy.py): a caller takes its socket out of the loop's epoll set.

A real asyncio selector loop and a socket pair, no server: parked, the loop is not told that
the socket is readable; unparked, it is at once; what the loop registers while the socket is
parked (a pending write) is kept and given back at unpark.
"""

from __future__ import annotations

import asyncio
import selectors
import socket

import pytest

from jssync.core import natspy

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop_and_pair():
    loop = asyncio.SelectorEventLoop(selectors.EpollSelector())
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield loop, a, b
    loop.close()
    a.close()
    b.close()


def _ready(loop: asyncio.AbstractEventLoop) -> list[int]:
    sel = loop._selector  # type: ignore[attr-defined]
    return [key.fd for key, _ in sel.select(0)]


def test_a_parked_socket_is_not_reported_and_is_again_once_unparked(loop_and_pair):
    loop, a, b = loop_and_pair
    loop.add_reader(a.fileno(), lambda: None)
    parker = natspy.socket_parker(loop, a.fileno())
    assert parker is not None
    assert parker.park()
    b.send(b"x")
    assert _ready(loop) == []
    parker.unpark()
    assert _ready(loop) == [a.fileno()]


def test_what_the_loop_registers_while_parked_is_given_back_at_unpark(loop_and_pair):
    loop, a, b = loop_and_pair
    loop.add_reader(a.fileno(), lambda: None)
    parker = natspy.socket_parker(loop, a.fileno())
    assert parker is not None and parker.park()
    loop.add_writer(a.fileno(), lambda: None)  # the loop's own change (a write is pending)
    assert _ready(loop) == []  # still parked: neither readable nor writable is reported
    parker.unpark()
    key = loop._selector.get_key(a.fileno())  # type: ignore[attr-defined]
    assert key.events == selectors.EVENT_READ | selectors.EVENT_WRITE
    assert _ready(loop) == [a.fileno()]  # writable
    loop.remove_writer(a.fileno())
    b.send(b"x")
    assert _ready(loop) == [a.fileno()]


def test_unpark_after_the_socket_was_unregistered_is_harmless(loop_and_pair):
    loop, a, _b = loop_and_pair
    loop.add_reader(a.fileno(), lambda: None)
    parker = natspy.socket_parker(loop, a.fileno())
    assert parker is not None and parker.park()
    loop.remove_reader(a.fileno())
    parker.unpark()
    assert _ready(loop) == []


def test_a_parker_for_a_new_socket_replaces_the_old_one(loop_and_pair):
    loop, a, b = loop_and_pair
    loop.add_reader(a.fileno(), lambda: None)
    old = natspy.socket_parker(loop, a.fileno())
    new = natspy.socket_parker(loop, b.fileno(), old)
    assert old is not None and new is not None
    sel = loop._selector  # type: ignore[attr-defined]
    assert sel._jssync_park[1] == [new]


def test_unpark_gives_back_what_the_loop_wants_now_also_after_changes_made_while_unparked(loop_and_pair):
    loop, a, b = loop_and_pair
    loop.add_reader(a.fileno(), lambda: None)
    parker = natspy.socket_parker(loop, a.fileno())
    assert parker is not None
    loop.add_writer(a.fileno(), lambda: None)  # while not parked
    assert parker.park()
    assert _ready(loop) == []
    parker.unpark()
    assert _ready(loop) == [a.fileno()], "writable again: the pending write's interest came back"
    loop.remove_writer(a.fileno())
    assert parker.park()
    parker.unpark()
    assert _ready(loop) == [], "read interest only, and nothing to read"
    b.send(b"x")
    assert _ready(loop) == [a.fileno()]


def test_a_replaced_parker_unparks_to_what_the_loop_wants_for_the_fd_now(loop_and_pair):
    """After a reconnect the new socket may reuse the old fd: a caller that parked the old
    socket's parker and unparks it after the loop registered a pending write on the new one
    must not drop that write interest (the loop would never be told the socket is writable)."""
    loop, a, _b = loop_and_pair
    fd = a.fileno()
    loop.add_reader(fd, lambda: None)
    old = natspy.socket_parker(loop, fd)
    assert old is not None and old.park()
    loop.remove_reader(fd)  # the connection is lost ...
    loop.add_reader(fd, lambda: None)  # ... and the new socket got the same fd
    new = natspy.socket_parker(loop, fd, old)
    assert new is not None and not new.parked
    loop.add_writer(fd, lambda: None)  # a write waits on the new connection
    old.unpark()  # the caller of the old connection finishes
    assert _ready(loop) == [fd], "the pending write is still reported"
    loop.remove_writer(fd)
