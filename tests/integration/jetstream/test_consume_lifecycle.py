"""Consuming that loses nothing and never hangs: drain, stop, a deleted consumer,
push drain and the callback's view of its own context, against a real server.

"Lost" is measured on the server: every test uses an explicit-ack consumer with a long
ack_wait (60 s), so a message the application never saw stays in num_ack_pending for the
whole test instead of coming back quietly.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)

ACK_WAIT = 60.0


def publish(js, subject, n, size=16):
    body = b"x" * size
    for _ in range(n):
        js.publish_async(subject, body)
    js.publish_async_completed(20)


def durable(stream, name="D", **cfg):
    cfg.setdefault("ack_policy", "explicit")
    cfg.setdefault("ack_wait", ACK_WAIT)
    return stream.create_consumer(durable_name=name, **cfg)


def acks_applied(js, fence_msg):
    """Wait until the server applied every ack/nak sent so far: it applies them in order, so
    the answer to a +WPI on a message of the same consumer comes after them."""
    js.conn.flush()
    js.conn.request(fence_msg.reply, b"+WPI", timeout=5)


def redelivered_at_once(c, n):
    """The ``n`` messages delivered and not handed over come back now (nak'ed), not after ack_wait."""
    back = []
    while len(back) < n:
        got = list(c.fetch(n - len(back), expires=1))
        assert got, f"only {len(back)} of {n} redelivered at once"
        back += got
    counts = Counter(m.metadata.num_delivered for m in back)
    assert counts == {2: n}, counts
    for m in back:
        m.ack()
    settled(c, 0, "redeliveries acked")


def settled(c, want_ack_pending, what):
    """Wait until the consumer's ack-pending count is ``want_ack_pending`` (acks/naks are async)."""
    wait_for(lambda: c.info().num_ack_pending == want_ack_pending, timeout=5,
             what=f"{what}: num_ack_pending == {want_ack_pending} (is {c.info().num_ack_pending})")


# -- 1. drain hands over every message already sent ------------------------------------------


@pytest.mark.parametrize("trial", range(3))
def test_iterator_drain_hands_over_every_delivered_message(js, stream, trial):
    publish(js, f"{stream.name}.m", 3000)
    c = durable(stream)
    got = 0
    with c.consume(max_messages=1000, expires=5) as it:
        for m in it:
            m.ack()
            got += 1
            if got == 1:
                it.drain()
    info = c.info()
    # everything the server delivered reached the application (and was acked)
    assert got == info.delivered.consumer_seq, (got, info.delivered.consumer_seq)
    settled(c, 0, "after drain")


def test_callback_drain_hands_over_every_delivered_message(js, stream):
    publish(js, f"{stream.name}.m", 3000)
    c = durable(stream)
    got = []
    started = threading.Event()

    def handle(m):
        m.ack()
        got.append(1)
        started.set()

    cc = c.consume(handle, max_messages=1000, expires=5)
    assert started.wait(10)
    cc.drain(timeout=10 * FACTOR)
    assert cc.closed
    assert len(got) == c.info().delivered.consumer_seq
    settled(c, 0, "after drain")


def test_drain_leaves_unacked_only_what_the_app_left_unacked(js, stream):
    publish(js, f"{stream.name}.m", 2000)
    c = durable(stream)
    got = 0
    with c.consume(max_messages=1000, expires=5) as it:
        for m in it:
            got += 1
            if got % 2:
                m.ack()
            if got == 1:
                it.drain()
    assert got == c.info().delivered.consumer_seq
    settled(c, got // 2, "after drain")


# -- 2. stop naks what it does not hand over -------------------------------------------------


@pytest.mark.parametrize("trial", range(3))
def test_iterator_stop_naks_everything_not_handed_over(js, stream, trial):
    publish(js, f"{stream.name}.m", 3000)
    c = durable(stream)
    with c.consume(max_messages=1000, expires=5) as it:
        first = next(it)
        first.ack()
        it.stop()
        with pytest.raises(StopIteration):
            next(it)
    it.wait(5 * FACTOR)
    acks_applied(js, first)
    # nak'ed, not left to ack_wait (60 s)
    redelivered_at_once(c, c.info().delivered.consumer_seq - 1)


def test_callback_stop_naks_everything_not_handed_over(js, stream):
    publish(js, f"{stream.name}.m", 3000)
    c = durable(stream)
    seen = []
    started = threading.Event()

    def handle(m):
        seen.append(m)
        m.ack()
        started.set()

    cc = c.consume(handle, max_messages=1000, expires=5)
    assert started.wait(10)
    cc.stop()
    cc.wait(10 * FACTOR)
    n = len(seen)
    acks_applied(js, seen[0])
    redelivered_at_once(c, c.info().delivered.consumer_seq - n)
    assert len(seen) == n, "a callback ran after the lane ended"


def test_stop_from_the_callback_naks_the_rest(js, stream):
    publish(js, f"{stream.name}.m", 2000)
    c = durable(stream)
    holder = {}
    ready = threading.Event()

    def handle(m):
        ready.wait(5)
        m.ack()
        holder["first"] = m
        holder["cc"].stop()

    holder["cc"] = cc = c.consume(handle, max_messages=1000, expires=5)
    ready.set()
    cc.wait(10 * FACTOR)
    acks_applied(js, holder["first"])
    redelivered_at_once(c, c.info().delivered.consumer_seq - 1)


# -- 6. a deleted consumer ends the consume --------------------------------------------------


def test_iterator_ends_with_consumer_deleted(js, stream):
    c = durable(stream)
    publish(js, f"{stream.name}.m", 3)
    with c.consume(max_messages=10, expires=2) as it:
        for _ in range(3):
            it.next(timeout=5).ack()
        wait_for(lambda: c.info().num_waiting >= 1, what="a pull waiting")
        js.delete_consumer(stream.name, "D")
        with pytest.raises(jssync.ConsumerDeletedError):
            it.next(timeout=6 * FACTOR)
        assert it.closed


def test_callback_ends_with_consumer_deleted(js, stream):
    c = durable(stream)
    errors = []

    cc = c.consume(lambda m: m.ack(), error_cb=errors.append, max_messages=10, expires=2)
    wait_for(lambda: c.info().num_waiting >= 1, what="a pull waiting")
    js.delete_consumer(stream.name, "D")
    cc.wait(6 * FACTOR)
    assert isinstance(cc.error, jssync.ConsumerDeletedError)
    assert any(isinstance(e, jssync.ConsumerDeletedError) for e in errors)


def test_consume_of_a_consumer_deleted_while_no_pull_was_waiting(js, stream):
    """Deleted between pulls: the next pulls get no responders; the consumer's info says it is
    gone, so the consume ends instead of warning forever."""
    c = durable(stream)
    publish(js, f"{stream.name}.m", 1)
    errors = []
    with c.consume(error_cb=errors.append, max_messages=1, expires=2) as it:
        # the one pull (batch 1) is complete and its message not taken: nothing waits on the server
        wait_for(lambda: c.info().num_ack_pending == 1 and c.info().num_waiting == 0, what="no pull waiting")
        js.delete_consumer(stream.name, "D")
        next(it).ack()  # taking it sends the next pull, which nobody answers
        with pytest.raises(jssync.ConsumerDeletedError):
            it.next(timeout=8 * FACTOR)
    assert it.closed


def test_consume_started_after_delete_consumer_ends(js, stream):
    c = durable(stream)
    js.delete_consumer(stream.name, "D")
    errors = []
    with c.consume(error_cb=errors.append, max_messages=10, expires=2) as it:
        with pytest.raises(jssync.ConsumerDeletedError):  # before: NoRespondersError warnings forever
            it.next(timeout=8 * FACTOR)
    cc = c.consume(lambda m: None, error_cb=errors.append, max_messages=10, expires=2)
    cc.wait(8 * FACTOR)
    assert isinstance(cc.error, jssync.ConsumerDeletedError)


# -- 7. push drain deletes the consumer only after the buffered messages were acked ---------


def left(js, name):
    return js.stream(name).info().state.messages


@pytest.fixture
def wq(js, unique):
    name = f"W{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", retention="workqueue")
    try:
        yield name
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def test_push_iterator_drain_deletes_the_consumer_after_the_buffer_was_acked(js, wq):
    publish(js, f"{wq}.m", 100)
    sub = js.subscribe(f"{wq}.m", manual_ack=True, ack_wait=ACK_WAIT)
    assert sub.created_consumer
    wait_for(lambda: sub.pending_msgs == 100, what="100 buffered")
    sub.drain(timeout=5)
    n = 0
    for m in sub:
        m.ack()
        n += 1
    assert n == 100
    wait_for(lambda: left(js, wq) == 0, timeout=5,
             what=f"acked messages removed (left: {left(js, wq)})")
    wait_for(lambda: not list(js.consumer_names(wq)), what="consumer deleted")


def test_push_callback_drain_deletes_the_consumer_after_the_acks(js, wq):
    publish(js, f"{wq}.m", 300)
    gate = threading.Event()
    seen = []

    def handle(m):
        gate.wait(5)
        seen.append(m)

    sub = js.subscribe(f"{wq}.m", callback=handle, ack_wait=ACK_WAIT)
    wait_for(lambda: sub.pending_msgs >= 100, what="buffered")
    t = threading.Thread(target=sub.drain, kwargs={"timeout": 20})
    t.start()
    gate.set()
    t.join(25)
    assert len(seen) == 300
    wait_for(lambda: left(js, wq) == 0, timeout=5,
             what=f"acked messages removed (left: {left(js, wq)})")


# -- ordered consume: stop() while the callback lane holds a message -------------------------


class _StopWhenTaken:
    """Stands in for a consume's message queue: when the lane takes message ``k`` it calls
    ``stop()`` (from another thread, as an application would) before the lane looks at the
    state: the interleaving that was a race."""

    def __init__(self, cc, inner, k):
        self._cc, self._inner, self._k = cc, inner, k
        self._taken = 0
        self.fired = False

    def put(self, item):
        self._inner.put(item)

    def get(self, *a, **kw):
        return self._inner.get(*a, **kw)

    def empty(self):
        return self._inner.empty()

    def qsize(self):
        return self._inner.qsize()

    def get_nowait(self):
        item = self._inner.get_nowait()
        if isinstance(item, jssync.Msg) and not self.fired and threading.current_thread().name.startswith("jssync"):
            self._taken += 1
            if self._taken == self._k:
                self.fired = True
                t = threading.Thread(target=self._cc.stop)
                t.start()
                t.join(5)
        return item


def test_ordered_callback_stop_does_not_skip_the_message_the_lane_holds(js, stream):
    oc = stream.ordered_consumer()
    seen = []
    cc = oc.consume(lambda m: seen.append(m.metadata.sequence.stream), max_messages=50, expires=5)
    wrapper = cc._q = _StopWhenTaken(cc, cc._q, k=6)  # empty so far: the lane has not run yet
    publish(js, f"{stream.name}.m", 20)
    cc.wait(10 * FACTOR)
    assert wrapper.fired and seen == list(range(1, 6))
    rest = [m.metadata.sequence.stream for m in oc.fetch(50, expires=1)]
    assert seen + rest == list(range(1, 21)), rest[:3]


# -- the callback can use the context consume() returned ---------------------------------------


def test_no_callback_before_consume_returned(js, stream, monkeypatch):
    """The callback used to run as soon as the first message arrived, possibly before
    consume() had returned the context it closes over (KeyError in a user's closure)."""
    from jssync.jetstream.pull import ConsumeContext

    publish(js, f"{stream.name}.m", 5)
    c = durable(stream)
    start_returned = threading.Event()
    orig = ConsumeContext._start

    def slow_start(self):
        res = orig(self)
        wait_for(lambda: self._q.qsize() >= 1 or self._rx >= 1, what="a message arrived during consume()")
        start_returned.set()  # from here on consume() only returns
        return res

    monkeypatch.setattr(ConsumeContext, "_start", slow_start)
    early = []
    done = threading.Event()

    def handle(m):
        early.append(not start_returned.is_set())
        m.ack()
        if len(early) == 5:
            done.set()

    cc = c.consume(handle, max_messages=10, expires=5)
    try:
        assert done.wait(10)
        assert early == [False] * 5
    finally:
        cc.stop()
        cc.wait(5)


# -- never hangs -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["drain", "stop"])
def test_drain_and_stop_end_on_a_stalled_connection(nats_server, js, stream, how):
    """The server never answers the PING after the UNSUB: drain/stop still end (the inbox is
    removed when the flush gives up), they do not hang."""
    import time

    from tests.proxy import TcpProxy

    durable(stream)
    publish(js, f"{stream.name}.m", 5)
    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        nc2 = jssync.connect(p.url, ping_interval=30, reconnect_time_wait=0.1, timeout=2.0)
        try:
            c = nc2.jetstream().consumer(stream.name, "D")
            it = c.consume(max_messages=10, expires=5)
            for _ in range(5):
                it.next(timeout=5).ack()
            p.stall()
            t0 = time.monotonic()
            if how == "drain":
                it.drain()
                with pytest.raises(StopIteration):
                    it.next(timeout=15 * FACTOR)
            else:
                it.stop()
            it.wait(15 * FACTOR)
            assert time.monotonic() - t0 < 10 * FACTOR
        finally:
            nc2.close(timeout=2)


def test_push_iterator_drain_with_nothing_buffered_deletes_at_once(js, wq):
    sub = js.subscribe(f"{wq}.m", manual_ack=True, ack_wait=ACK_WAIT)
    assert sub.created_consumer
    sub.drain(timeout=5)
    assert not list(js.consumer_names(wq))


def test_push_unsubscribe_after_drain_deletes_without_reading_to_the_end(js, wq):
    publish(js, f"{wq}.m", 10)
    sub = js.subscribe(f"{wq}.m", manual_ack=True, ack_wait=ACK_WAIT)
    wait_for(lambda: sub.pending_msgs == 10, what="10 buffered")
    sub.drain(timeout=5)
    assert list(js.consumer_names(wq)), "deleted before the buffer was read"
    sub.next_msg(timeout=1).ack()
    sub.unsubscribe()
    assert not list(js.consumer_names(wq))


# -- closing the connection right after stop(): the naks stop() promised go out first --------


def _take_one_and_stop(nc2, stream, how):
    c2 = nc2.jetstream().consumer(stream.name, "D")
    if how == "with":
        with c2.consume() as it:
            for m in it:
                m.ack()
                break
    else:
        it = c2.consume()
        next(it).ack()
        it.stop()


@pytest.mark.parametrize("how", ["with", "stop"])
def test_close_right_after_stop_sends_the_naks_of_the_buffer(nats_server, js, stream, how):
    """docs/consuming.md's first example: take one message, leave the consume's block (or call
    stop()), then close the connection at once: every other buffered message is nak'ed before
    the socket goes, so the server redelivers it now, not after ack_wait."""
    publish(js, f"{stream.name}.m", 500)
    c = durable(stream)
    nc2 = jssync.connect(nats_server.url)
    try:
        _take_one_and_stop(nc2, stream, how)
    finally:
        nc2.close()
    redelivered_at_once(c, 499)


class _Interrupted(Exception):
    """Stands in for KeyboardInterrupt: the blocks are left by an exception."""


@pytest.mark.parametrize("way_out", ["break", "exception"])
def test_nested_with_blocks_send_the_naks_of_the_buffer(nats_server, js, stream, way_out):
    """``with jssync.connect() as nc:`` around ``with consumer.consume() as it:``, left by a
    break or by an exception (Ctrl-C leaves them the same way)."""
    publish(js, f"{stream.name}.m", 500)
    c = durable(stream)
    try:
        with jssync.connect(nats_server.url) as nc2, nc2.jetstream().consumer(stream.name, "D").consume() as it:
            for m in it:
                m.ack()
                if way_out == "exception":
                    raise _Interrupted
                break
    except _Interrupted:
        pass
    redelivered_at_once(c, 499)


def test_interpreter_exit_after_stop_sends_the_naks_of_the_buffer(nats_server, js, stream):
    """A script that leaves the consume's block and ends without closing its connection:
    the close at interpreter exit sends the naks first."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    publish(js, f"{stream.name}.m", 500)
    c = durable(stream)
    script = (
        "import jssync\n"
        f"nc = jssync.connect({nats_server.url!r})\n"
        f"with nc.jetstream().consumer({stream.name!r}, 'D').consume() as it:\n"
        "    for m in it:\n"
        "        m.ack()\n"
        "        break\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=30 * FACTOR,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    redelivered_at_once(c, 499)


# -- nc.drain() drains every consume first: nothing is left unacknowledged --------------------


def test_connection_drain_lets_the_iterator_hand_over_and_ack_its_buffer(nats_server, js, stream):
    """An iterator in another thread acks every message while ``nc.drain()`` runs: every ack
    goes out before the connection closes (none refused), nothing is left for ack_wait."""
    import time

    publish(js, f"{stream.name}.m", 100)
    c = durable(stream)
    nc2 = jssync.connect(nats_server.url)
    refused: list[BaseException] = []
    acked = []
    first = threading.Event()

    def iterate(it):
        for m in it:
            time.sleep(0.02)  # behaviour: the handler works; the inbox goes with most of the buffer left
            try:
                m.ack()
                acked.append(m)
            except jssync.ConnectionClosedError as exc:
                refused.append(exc)
            first.set()

    try:
        it = nc2.jetstream().consumer(stream.name, "D").consume()
        t = threading.Thread(target=iterate, args=(it,))
        t.start()
        assert first.wait(5 * FACTOR)
        nc2.drain(timeout=20 * FACTOR)
        t.join(10 * FACTOR)
        assert not t.is_alive()
    finally:
        nc2.close()
    assert not refused, f"{len(refused)} of {len(refused) + len(acked)} acks refused"
    assert len(acked) == c.info().delivered.consumer_seq
    settled(c, 0, "after nc.drain()")


def test_connection_drain_from_the_iterating_thread_naks_the_buffer(nats_server, js, stream):
    """The thread that iterated leaves its loop and calls ``nc.drain()``: nobody can take the
    buffered messages any more, so they are nak'ed (redelivered now), and drain does not wait
    its whole timeout for an iterator that cannot move."""
    import time

    publish(js, f"{stream.name}.m", 500)
    c = durable(stream)
    nc2 = jssync.connect(nats_server.url)
    try:
        it = nc2.jetstream().consumer(stream.name, "D").consume()
        for m in it:
            m.ack()
            break
        t0 = time.monotonic()
        nc2.drain(timeout=20 * FACTOR)
        assert time.monotonic() - t0 < 5 * FACTOR
    finally:
        nc2.close()
    redelivered_at_once(c, 499)
