"""A Ctrl-C landing inside the hand-off of a publish (or an ack) to the I/O thread loses
nothing: the message was queued, so it is sent, and later publishes are not stuck behind a
hand-off flag that stayed set (an interrupt there used to leave the queue never kicked again)."""

from __future__ import annotations

import threading

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("scheduled_first", [False, True], ids=["before-scheduling", "after-scheduling"])
def test_a_publish_interrupted_in_the_handoff_is_still_sent(nats_server, scheduled_first: bool) -> None:
    with jssync.connect(nats_server.url) as nc, jssync.connect(nats_server.url) as watcher:
        got: list[bytes] = []
        two = threading.Event()

        def on_msg(msg: jssync.Msg) -> None:
            got.append(msg.data)
            if len(got) == 2:
                two.set()

        watcher.subscribe("handoff", callback=on_msg)
        watcher.flush(timeout=5)
        out = nc._out
        real = out._call_soon
        calls: list[int] = []

        def interrupted(cb, *args):  # the interrupt lands once, inside the hand-off
            calls.append(1)
            if len(calls) == 1:
                if scheduled_first:
                    real(cb, *args)
                raise KeyboardInterrupt
            return real(cb, *args)

        out._call_soon = interrupted
        try:
            with pytest.raises(KeyboardInterrupt):
                nc.publish("handoff", b"first")
        finally:
            out._call_soon = real
        # the first arrives with no other call on the publishing connection to push it out
        first = threading.Event()
        for _ in range(int(30 * FACTOR)):
            if got:
                first.set()
                break
            two.wait(0.1)
        assert first.is_set(), "the interrupted publish was never sent"
        nc.publish("handoff", b"second")
        assert two.wait(5 * FACTOR), got
        assert got == [b"first", b"second"]
