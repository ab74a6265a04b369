"""A push subscription keeps the leases of the messages it holds, as the pull consume does:
time in its buffer or in a slow callback does not count against the consumer's ack_wait
(no redelivery storm), real server."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)

ACK_WAIT = 2.0
N = 300
SLOW = 5.0  # the first callbacks take this long: 2.5 x ack_wait each
SLOW_FIRST = 2  # the second waits SLOW in the buffer, then SLOW in its callback


@pytest.fixture
def stream(js, unique):
    """A memory stream ``L<unique>`` on ``l<unique>.*`` holding N messages; yields (name, subject)."""
    name = f"L{unique}"
    js.create_stream(name=name, subjects=[f"l{unique}.*"], storage="memory")
    for i in range(N):
        js.publish_async(f"l{unique}.m", b"%d" % i)
    js.publish_async_completed(20)
    try:
        yield name, f"l{unique}.m"
    finally:
        js.delete_stream(name)


def _no_redelivery(sub, runs: Counter[int]) -> None:
    twice = {seq: n for seq, n in runs.items() if n > 1}
    assert not twice, f"{len(twice)} message(s) delivered more than once"
    assert sum(runs.values()) == N, f"{sum(runs.values())} deliveries for {N} messages"
    wait_for(lambda: sub.consumer_info().num_ack_pending == 0, timeout=5, what="every ack applied")
    # every delivery counts a consumer sequence: N means none was a redelivery
    assert sub.consumer_info().delivered.consumer_seq == N


def test_slow_first_callbacks_cause_no_redelivery(js, stream):
    _, subject = stream
    runs: Counter[int] = Counter()
    lock = threading.Lock()
    done = threading.Event()

    def handle(m):
        with lock:
            first = sum(runs.values()) < SLOW_FIRST
            runs[m.metadata.sequence.stream] += 1
            if len(runs) == N:
                done.set()
        if first:
            time.sleep(SLOW)  # behaviour: the first callbacks are slow, the rest wait in the buffer

    sub = js.subscribe(subject, durable="D", callback=handle, ack_wait=ACK_WAIT)
    try:
        assert done.wait(SLOW * SLOW_FIRST + 20 * FACTOR), f"{len(runs)} of {N} handled"
        # the last auto-acks: the consumer's count tells
        _no_redelivery(sub, runs)
    finally:
        sub.unsubscribe()


def test_a_slow_reader_causes_no_redelivery_with_default_options(js, stream):
    _, subject = stream
    runs: Counter[int] = Counter()
    sub = js.subscribe(subject, durable="D", ack_wait=ACK_WAIT)
    try:
        for i in range(N):
            m = sub.next_msg(timeout=10 * FACTOR)
            runs[m.metadata.sequence.stream] += 1
            if i < SLOW_FIRST:
                time.sleep(SLOW)  # behaviour: a slow handler, the rest waits in the buffer
            m.ack()
        with pytest.raises(jssync.TimeoutError):  # nothing more: no redelivery
            sub.next_msg(timeout=ACK_WAIT * 1.5)
        _no_redelivery(sub, runs)
    finally:
        sub.unsubscribe()



def test_a_message_held_past_the_maximum_extension_is_redelivered(js, unique, monkeypatch):
    """The leases end MAX_EXTENSION after the receipt: a message the reader holds without
    acking is then redelivered as usual (here with the maximum lowered to 3 s)."""
    from jssync.jetstream.consume import leasing

    monkeypatch.setattr(leasing, "MAX_EXTENSION", 3.0)
    name = f"X{unique}"
    js.create_stream(name=name, subjects=[f"x{unique}.*"], storage="memory")
    try:
        js.publish(f"x{unique}.m", b"held")
        sub = js.subscribe(f"x{unique}.m", durable="D", ack_wait=1.0)
        try:
            first = sub.next_msg(timeout=5 * FACTOR)
            start = time.monotonic()
            again = sub.next_msg(timeout=10 * FACTOR)  # not acked: renewed for 3 s, then redelivered
            took = time.monotonic() - start
            assert again.metadata.num_delivered == 2 and again.data == first.data
            assert took >= 3.0 - 0.5, f"redelivered after {took:.1f}s: its lease was not kept"
            again.ack()
        finally:
            sub.unsubscribe()
    finally:
        js.delete_stream(name)
