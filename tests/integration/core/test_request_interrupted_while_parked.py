"""A Ctrl-C landing while a request's caller has the socket parked (taken out of the I/O
loop's epoll set so it can read its reply itself, core/sockpath.py) gives the socket back:
a socket left parked is read by no one, so every later message and reply of the connection
waited (seen as an ordered consumer's "no message within 5 s" and a consumer create's
RequestTimeoutError in the real-SIGINT loops)."""

from __future__ import annotations

import threading

import pytest

import jssync
from jssync.core import natspy
from tests.conftest import FACTOR, needs_fast_paths

pytestmark = [pytest.mark.timeout(30), needs_fast_paths]


@pytest.mark.parametrize("where", ["unpark", "park"])
def test_a_request_interrupted_around_its_parked_read_leaves_the_socket_read(nats_server, monkeypatch,
                                                                             where: str) -> None:
    with jssync.connect(nats_server.url) as nc, jssync.connect(nats_server.url) as other:
        other.subscribe("svc", callback=lambda m: other.publish(m.reply, b"ok"))
        other.flush(timeout=5)
        got = threading.Event()
        nc.subscribe("later", callback=lambda m: got.set())
        assert nc.request("svc", b"", timeout=5).data == b"ok"  # warm: the caller-side read is set up
        assert nc._sockpath.parker is not None, "no socket parker on this platform's event loop"
        real = getattr(natspy.SocketParker, where)
        fired: list[int] = []

        def interrupted(self, *args):  # a signal at the function's start (or right after park)
            if not fired:
                fired.append(1)
                if where == "park":
                    real(self, *args)
                raise KeyboardInterrupt
            return real(self, *args)

        monkeypatch.setattr(natspy.SocketParker, where, interrupted)
        with pytest.raises(KeyboardInterrupt):
            nc.request("svc", b"", timeout=5)
        monkeypatch.setattr(natspy.SocketParker, where, real)
        assert fired
        assert not nc._sockpath.parker.parked
        # no request on nc from here: only the I/O thread reads its socket
        other.publish("later", b"x")
        other.flush(timeout=5)
        assert got.wait(5 * FACTOR), "the socket stayed parked: nothing read after the interrupted request"
        assert nc.request("svc", b"", timeout=5).data == b"ok"
