"""A consume keeps the leases of the messages it holds: time in its buffer or in a slow
handler does not count against the consumer's ack_wait (no redelivery storm), real server."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)

ACK_WAIT = 2.0
N = 150
WORK = 0.04  # a slow handler: N x WORK = 6 s, three times ack_wait, with everything buffered


def _publish(js, stream, n):
    for i in range(n):
        js.publish_async(f"{stream.name}.m", b"%d" % i)
    js.publish_async_completed(20)


@pytest.mark.parametrize("form", ["callback", "iterator"])
def test_slow_handler_with_default_options_causes_no_redelivery(js, stream, form):
    _publish(js, stream, N)
    c = stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=ACK_WAIT)
    runs: Counter[int] = Counter()
    done = threading.Event()

    def handle(m):
        time.sleep(WORK)  # behaviour: the handler is slow
        runs[m.metadata.sequence.stream] += 1
        m.ack()
        if len(runs) == N:
            done.set()

    if form == "callback":
        cc = c.consume(handle)
        try:
            assert done.wait(N * WORK * 3 * FACTOR + 10), f"{len(runs)} of {N} handled"
        finally:
            cc.stop()
            cc.wait(10 * FACTOR)
    else:
        with c.consume() as it:
            for m in it:
                handle(m)
                if done.is_set():
                    break
    twice = {seq: n for seq, n in runs.items() if n > 1}
    assert not twice, f"{len(twice)} message(s) handled more than once"
    wait_for(lambda: c.info().num_ack_pending == 0, timeout=5, what="every ack applied")
    # every delivery counts a consumer sequence: N means none was a redelivery
    assert c.info().delivered.consumer_seq == N, f"{c.info().delivered.consumer_seq - N} redeliveries"


def test_a_fast_consume_does_not_keep_its_acked_messages_alive(js, stream):
    """The leases watch only what is still unacked: a consume that acks as fast as it receives
    holds a bounded number of messages between two lease checks, not all it received."""
    import gc

    from jssync.core.msg import Msg

    n = 5000
    for _ in range(n):
        js.publish_async(f"{stream.name}.m", b"x" * 256)
    js.publish_async_completed(20 * FACTOR)
    # ack_wait 120 s: lease checks every 5 s, so the whole run fits between two of them
    c = stream.create_consumer(durable_name="FAST", ack_policy="explicit", ack_wait=120)
    got = 0
    with c.consume() as it:
        for m in it:
            m.ack()
            got += 1
            if got == n:
                break
        del m
        gc.collect()
        alive = sum(1 for o in gc.get_objects() if isinstance(o, Msg))
    # the prune threshold (1024) plus the consume's buffer (max_messages, 500 by default)
    assert alive < 2000, f"{alive} messages still alive after {n} were received and acked"
