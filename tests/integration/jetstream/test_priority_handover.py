"""Priority groups (ADR-42) when a member stops or falls behind (real server): the live
members get the messages (and the pin), not a consume that was just stopped, and a
prioritized consume keeps a pull waiting while it works through its buffer."""

from __future__ import annotations

import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)


class Member:
    """One client (own connection) consuming a group with a callback; records what it got."""

    def __init__(self, url: str, stream: str, consumer: str, **opts: object) -> None:
        self.nc = jssync.connect(url)
        self.c = self.nc.jetstream().consumer(stream, consumer)
        self.got: list[bytes] = []
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.cc = self.c.consume(self._on_msg, error_cb=self.errors.append, **opts)

    def _on_msg(self, msg: jssync.Msg) -> None:
        with self.lock:
            self.got.append(msg.data)
        msg.ack()

    def count(self) -> int:
        with self.lock:
            return len(self.got)

    def close(self) -> None:
        if not self.nc.is_closed:
            self.cc.stop()
            self.cc.wait(10)
            self.nc.close()


def test_an_unpin_right_after_a_standby_stopped_pins_a_live_member(nats_server, js, stream):
    """pinned_client, a long priority_timeout: A is pinned, B a standby; B stops and the
    client is unpinned a moment later. The new pin goes to A (still pulling), which gets the
    next messages at once, not after priority_timeout: B's stopped consume must not keep a
    pull waiting that takes the pin."""
    stream.create_consumer(durable_name="P", ack_policy="explicit", priority_policy="pinned_client",
                           priority_groups=["jobs"], priority_timeout=50)
    a = Member(nats_server.url, stream.name, "P", group="jobs")
    b = None
    try:
        js.publish(f"{stream.name}.m", b"first")
        wait_for(lambda: a.count() == 1, 10, what="A pinned")
        b = Member(nats_server.url, stream.name, "P", group="jobs")  # its pull waits behind A's
        wait_for(lambda: js.consumer(stream.name, "P").cached_info.num_waiting == 2, 10, what="B's pull waiting")
        b.cc.stop()  # (returns at once)
        time.sleep(0.1 * FACTOR)  # behaviour: the stop reaches the server before the unpin
        js.unpin_consumer(stream.name, "P", "jobs")
        t0 = time.monotonic()
        for i in range(3):
            js.publish(f"{stream.name}.m", b"%d" % i)
        wait_for(lambda: a.count() == 4, 20, what="A pinned again and served")
        assert time.monotonic() - t0 < 5 * FACTOR
        assert a.got == [b"first", b"0", b"1", b"2"] and b.got == []
        assert a.c.pin_id("jobs") is not None and not a.errors
        b.cc.wait(10)
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_busy_priority_0_consume_keeps_a_pull_waiting_so_priority_1_gets_nothing(nats_server, js, stream):
    """prioritized: the priority-0 consume has a small buffer (5) and a slow handler; 8
    messages come in a steady trickle. It pulls again as messages arrive (not only as the
    handler takes them), so a pull of it is always waiting: every message goes to priority
    0, none to priority 1."""
    stream.create_consumer(durable_name="R", ack_policy="explicit", priority_policy="prioritized",
                           priority_groups=["jobs"])
    hi_nc = jssync.connect(nats_server.url)
    hi_got: list[bytes] = []

    def slow(msg: jssync.Msg) -> None:
        hi_got.append(msg.data)
        time.sleep(0.2)  # behaviour: a handler slower than the producer (the buffer fills up)
        msg.ack()

    hi = hi_nc.jetstream().consumer(stream.name, "R").consume(slow, group="jobs", priority=0, max_messages=5)
    lo = Member(nats_server.url, stream.name, "R", group="jobs", priority=1, max_messages=5)
    try:
        wait_for(lambda: js.consumer(stream.name, "R").cached_info.num_waiting == 2, 10, what="both pulls waiting")
        for i in range(8):
            js.publish(f"{stream.name}.m", b"%d" % i)
            time.sleep(0.02)  # behaviour: a steady producer, one message every 20 ms
        wait_for(lambda: len(hi_got) + lo.count() == 8, 20, what="the 8 messages handled")
        assert lo.got == [] and hi_got == [b"%d" % i for i in range(8)]
    finally:
        hi.stop()
        hi.wait(10)
        hi_nc.close()
        lo.close()
