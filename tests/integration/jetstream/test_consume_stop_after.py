"""``consumer.consume(stop_after=N)`` (nats.go's StopAfter) against a real nats-server: the consume
ends after N messages were handed over, its pulls never ask for more than what is left, and
nothing past N is left delivered-and-unacked on the server."""

from __future__ import annotations

import json
import threading

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def publish(js, subject: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        js.publish(subject, str(i).encode())


def watch_pulls(nc, stream: str, consumer: str) -> list[dict]:
    """The pull requests sent for ``consumer`` (a plain subscriber sees them too)."""
    seen: list[dict] = []
    nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", callback=lambda m: seen.append(json.loads(m.data)))
    nc.flush()
    return seen


def settled(c, *, delivered: int, pending: int) -> None:
    def ok() -> bool:
        info = c.info()
        return (info.delivered.consumer_seq, info.num_pending, info.num_ack_pending) == (delivered, pending, 0)

    wait_for(ok, 5, what=f"the consumer at {delivered} delivered, {pending} pending, none unacked")


def test_the_iterator_ends_after_n_messages_smaller_than_the_batch(nc, js, stream):
    publish(js, f"{stream.name}.a", 10)
    c = stream.create_consumer(durable_name="D")
    pulls = watch_pulls(nc, stream.name, "D")
    got = []
    with c.consume(stop_after=3) as messages:
        for msg in messages:
            got.append(msg.data)
            msg.ack()
        assert messages.closed
        messages.wait(timeout=5 * FACTOR)
    assert got == [b"0", b"1", b"2"]
    nc.flush()
    assert pulls and all(p["batch"] <= 3 for p in pulls), pulls
    assert sum(p["batch"] for p in pulls) == 3, pulls
    settled(c, delivered=3, pending=7)
    assert c.info().num_redelivered == 0


def test_next_ends_with_stop_iteration_after_n(js, stream):
    publish(js, f"{stream.name}.a", 5)
    c = stream.create_consumer(durable_name="D")
    messages = c.consume(stop_after=2)
    try:
        first, second = messages.next(timeout=5 * FACTOR), messages.next(timeout=5 * FACTOR)
        assert (first.data, second.data) == (b"0", b"1")
        first.ack()
        second.ack()
        with pytest.raises(StopIteration):
            messages.next(timeout=5 * FACTOR)
    finally:
        messages.stop()
    settled(c, delivered=2, pending=3)


def test_the_callback_form_ends_after_the_nth_callback(nc, js, stream):
    publish(js, f"{stream.name}.a", 10)
    c = stream.create_consumer(durable_name="D")
    pulls = watch_pulls(nc, stream.name, "D")
    got, lock = [], threading.Lock()

    def handle(msg) -> None:
        with lock:
            got.append(msg.data)
        msg.ack()

    cc = c.consume(handle, stop_after=4)
    cc.wait(timeout=10 * FACTOR)
    assert cc.closed
    assert got == [b"0", b"1", b"2", b"3"]
    nc.flush()
    assert sum(p["batch"] for p in pulls) == 4, pulls
    settled(c, delivered=4, pending=6)


def test_it_waits_for_messages_until_n_arrived(js, stream):
    c = stream.create_consumer(durable_name="D")
    got = []
    messages = c.consume(stop_after=3, expires=1)
    try:
        publish(js, f"{stream.name}.a", 1)
        got.append(messages.next(timeout=5 * FACTOR))
        assert not messages.closed
        publish(js, f"{stream.name}.a", 4, start=1)
        got += [messages.next(timeout=5 * FACTOR) for _ in range(2)]
        with pytest.raises(StopIteration):
            messages.next(timeout=5 * FACTOR)
    finally:
        messages.stop()
    assert [m.data for m in got] == [b"0", b"1", b"2"]
    for m in got:
        m.ack()
    settled(c, delivered=3, pending=2)


@pytest.mark.parametrize("bad", [0, -2, 2.5, "3"])
def test_a_bad_stop_after_is_refused_before_anything_is_sent(nc, js, stream, bad):
    c = stream.create_consumer(durable_name="D")
    pulls = watch_pulls(nc, stream.name, "D")
    with pytest.raises(jssync.ValidationError, match="stop_after"):
        c.consume(stop_after=bad)
    nc.flush()
    assert pulls == []


def test_a_ctrl_c_landing_inside_stop_still_stops_and_naks_the_buffer(js, stream):
    # stop_after (and a user's stop()) stops from the reader's thread: a KeyboardInterrupt landing
    # while the stop's actions run there must not leave the consume half-stopped (its buffered
    # messages held until AckWait, wait() never returning)
    publish(js, f"{stream.name}.a", 10)
    c = stream.create_consumer(durable_name="D")
    messages = c.consume()
    first = messages.next(timeout=5 * FACTOR)
    first.ack()
    wait_for(lambda: c.info().num_ack_pending == 9, 5, what="the other 9 buffered in the client")
    real_do = messages._do
    calls = []

    def interrupted_do(acts):
        if threading.current_thread() is threading.main_thread() and not calls:
            calls.append(acts)
            raise KeyboardInterrupt
        real_do(acts)

    messages._do = interrupted_do
    with pytest.raises(KeyboardInterrupt):
        messages.stop()
    assert calls, "the stop ran no action in the caller's thread"
    messages.wait(timeout=5 * FACTOR)
    assert messages.closed
    # the 9 are back at once (nak'ed), not after the 30 s AckWait
    again = [m.data for m in c.fetch(9, expires=3 * FACTOR)]
    assert sorted(again, key=int) == [str(i).encode() for i in range(1, 10)]
