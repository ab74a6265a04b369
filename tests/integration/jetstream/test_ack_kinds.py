"""Ack kinds and ack state (deep dive "Acknowledgement Models", ADR-15 "Ack Handling"), real server."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def publish(js, stream, n, start=0):
    for i in range(start, start + n):
        js.publish_async(f"{stream.name}.m", b"%d" % i)
    js.publish_async_completed(10)


def durable(stream, name="D", **cfg):
    cfg.setdefault("ack_policy", "explicit")
    return stream.create_consumer(durable_name=name, **cfg)


# -- acks and a closed connection (defect 8) --------------------------------------------------


def test_ack_after_close_raises_and_leaves_the_message_unacked(nats_server, js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    other = jssync.connect(nats_server.url)
    try:
        m = other.jetstream().consumer(stream.name, "D").next(timeout=2)
        other.close()
        with pytest.raises(jssync.ConnectionClosedError):
            m.ack()
        assert not m.is_acked
        for call in (m.nak, m.term, m.in_progress, m.ack_sync, m.nak_sync, m.term_sync, m.in_progress_sync):
            with pytest.raises(jssync.ConnectionClosedError):
                call()
        assert not m.is_acked
        assert c.info().num_ack_pending == 1  # the server still waits for it
    finally:
        other.close()


def test_acks_accepted_before_close_are_written_by_close(nats_server, js, stream):
    publish(js, stream, 200)
    c = durable(stream)
    other = jssync.connect(nats_server.url)
    msgs = list(other.jetstream().consumer(stream.name, "D").fetch(200, expires=5))
    assert len(msgs) == 200
    for m in msgs:
        m.ack()  # accepted into the outgoing queue
        assert m.is_acked
    other.close()  # writes the queue before closing the socket
    wait_for(lambda: c.info().num_ack_pending == 0, what="every ack accepted before close applied")


def test_ack_racing_close_is_either_written_or_raises(nats_server, js, stream):
    n = 300
    publish(js, stream, n)
    c = durable(stream, ack_wait=30)
    other = jssync.connect(nats_server.url)
    msgs = list(other.jetstream().consumer(stream.name, "D").fetch(n, expires=5))
    assert len(msgs) == n
    raised: list[jssync.Msg] = []
    started = threading.Event()

    def acker() -> None:
        for i, m in enumerate(msgs):
            if i == 50:
                started.set()
            try:
                m.ack()
            except jssync.ConnectionClosedError:
                raised.append(m)
            time.sleep(0.001)  # behaviour: the acks are paced, so the close comes in the middle

    t = threading.Thread(target=acker)
    t.start()
    assert started.wait(5)
    other.close()
    t.join(10)
    acked = [m for m in msgs if m.is_acked]
    assert len(acked) + len(raised) == n and not set(map(id, acked)) & set(map(id, raised))
    # everything that claims to be acked is acked on the server, the rest is pending
    wait_for(lambda: c.info().num_ack_pending == len(raised),
             what=f"num_ack_pending == {len(raised)} (the acks that raised)")


def test_concurrent_terminal_acks_send_exactly_one(nc, js, stream):
    n = 150
    publish(js, stream, n)
    c = durable(stream)
    msgs = list(c.fetch(n, expires=5))
    assert len(msgs) == n
    nc.flush()
    out = nc.stats["out_msgs"]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: widen any race
    try:
        for m in msgs:
            barrier = threading.Barrier(4)

            def race(call, m=m, barrier=barrier) -> None:
                barrier.wait()
                call(m)

            calls = [lambda m: m.ack(), lambda m: m.nak(), lambda m: m.term(), lambda m: m.ack()]
            ts = [threading.Thread(target=race, args=(f,)) for f in calls]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    finally:
        sys.setswitchinterval(old)
    nc.flush()
    assert nc.stats["out_msgs"] - out == n  # one terminal ack per message, never two


# -- double acks for every kind (defect 11) ---------------------------------------------------


def test_nak_sync_is_confirmed_and_redelivers(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    m.nak_sync(timeout=2)
    assert m.is_acked
    again = c.next(timeout=2)
    assert again.data == m.data and again.metadata.num_delivered == 2
    again.ack_sync()
    assert c.info().num_ack_pending == 0


def test_nak_sync_with_delay(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    m.nak_sync(delay=0.5, timeout=2)
    t0 = time.monotonic()
    again = c.next(timeout=5)
    assert 0.3 < time.monotonic() - t0 < 3 * FACTOR
    again.ack()


def test_term_sync_stops_redelivery(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=0.5)
    m = c.next(timeout=2)
    m.term_sync(reason="bad payload", timeout=2)
    assert m.is_acked
    assert c.info().num_ack_pending == 0  # confirmed: applied before term_sync returned
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout=1.2)


def test_in_progress_sync_extends_ack_wait(js, stream):
    publish(js, stream, 1)
    c = durable(stream, ack_wait=1.0)
    m = c.next(timeout=2)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        m.in_progress_sync(timeout=2)
        assert not m.is_acked  # not terminal
        assert list(c.fetch_no_wait(1)) == []
        time.sleep(0.25)  # behaviour: in_progress keeps the message past its ack wait
    m.ack_sync()
    assert c.info().num_ack_pending == 0


def test_sync_kinds_after_terminal_ack_are_ignored(nc, js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    m.term_sync()
    nc.flush()
    out = nc.stats["out_msgs"]
    m.ack_sync()
    m.nak_sync()
    m.in_progress_sync()
    m.ack()
    nc.flush()
    assert nc.stats["out_msgs"] == out


def test_a_second_ack_is_silent_and_only_one_ack_reaches_the_server(nats_server, js, stream):
    """Unlike nats-py (MsgAlreadyAckdError), a second ``ack()`` neither raises nor sends: a watcher on
    ``$JS.ACK`` sees exactly one +ACK, and the consumer counts the message acked."""
    publish(js, stream, 1)
    c = durable(stream)
    with jssync.connect(nats_server.url) as watcher:
        acks = watcher.subscribe(f"$JS.ACK.{stream.name}.>")
        watcher.flush()
        m = c.next(timeout=2 * FACTOR)
        m.ack()
        m.ack()  # silent
        m.ack_sync(timeout=2 * FACTOR)  # silent too: already acked, nothing sent
        assert acks.next_msg(2 * FACTOR).data == b"+ACK"
        js.conn.flush()
        with pytest.raises(jssync.TimeoutError):
            acks.next_msg(0.5 * FACTOR)
    wait_for(lambda: c.info().ack_floor.stream_seq == 1, what="the message acked")


def test_sync_kinds_bad_arguments(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    with pytest.raises(ValueError, match="delay"):
        m.nak_sync(delay=-1)
    with pytest.raises(ValueError, match="timeout"):
        m.term_sync(timeout=-1)
    with pytest.raises(jssync.TimeoutError, match="timeout=0"):  # no wait: nothing is sent
        m.term_sync(timeout=0)
    assert not m.is_acked
    m.ack()


# -- AckNext (defect 11) ----------------------------------------------------------------------


def test_ack_next_acks_and_returns_the_next_messages(js, stream):
    publish(js, stream, 5)
    c = durable(stream)
    m = c.next(timeout=2)
    assert m.data == b"0"
    nxt = m.ack_next(batch=3, timeout=2)
    assert m.is_acked
    assert [x.data for x in nxt] == [b"1", b"2", b"3"]
    assert all(isinstance(x, jssync.Msg) and not x.is_acked for x in nxt)
    assert nxt[0].metadata.sequence.stream == 2
    last = nxt[-1].ack_next(timeout=2)  # batch 1 by default; returned messages are ackable
    assert [x.data for x in last] == [b"4"]
    for x in nxt[:-1]:
        x.ack()
    assert last[0].ack_next(no_wait=True, timeout=2) == []  # nothing left: returns at once
    wait_for(lambda: c.info().num_ack_pending == 0, what="all acked")


def test_ack_next_waits_for_new_messages_up_to_timeout(js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    m = c.next(timeout=2)
    t0 = time.monotonic()
    assert m.ack_next(timeout=0.5) == []
    assert 0.4 < time.monotonic() - t0 < 2 * FACTOR
    assert c.info().num_ack_pending == 0  # the ack part was applied

    m2 = js.consumer(stream.name, "D")
    publish(js, stream, 1, start=1)
    x = m2.next(timeout=2)

    def later() -> None:
        time.sleep(0.3)  # behaviour: the next message comes while ack_next waits
        js.publish(f"{stream.name}.m", b"late")

    t = threading.Thread(target=later)
    t.start()
    got = x.ack_next(timeout=5)
    t.join()
    assert [g.data for g in got] == [b"late"]
    got[0].ack()


def test_ack_next_no_wait_returns_what_is_there(js, stream):
    publish(js, stream, 3)
    c = durable(stream)
    m = c.next(timeout=2)
    t0 = time.monotonic()
    got = m.ack_next(batch=10, no_wait=True, timeout=5)
    assert [g.data for g in got] == [b"1", b"2"]
    assert time.monotonic() - t0 < 2 * FACTOR
    for g in got:
        g.ack()


def test_ack_next_after_terminal_ack_sends_nothing(nc, js, stream):
    publish(js, stream, 2)
    c = durable(stream)
    m = c.next(timeout=2)
    m.nak()
    nc.flush()
    out = nc.stats["out_msgs"]
    assert m.ack_next(timeout=0.5) == []
    nc.flush()
    assert nc.stats["out_msgs"] == out
    for x in c.fetch(2, expires=2):
        x.ack()


def test_ack_next_bad_arguments_send_nothing(nats_server, js, stream):
    publish(js, stream, 1)
    c = durable(stream)
    other = jssync.connect(nats_server.url)
    try:
        m = other.jetstream().consumer(stream.name, "D").next(timeout=2)
        for kw in ({"batch": 0}, {"batch": True}, {"timeout": -1}, {"timeout": "1"}):
            with pytest.raises(ValueError):
                m.ack_next(**kw)
        with pytest.raises(jssync.TimeoutError, match="timeout=0"):  # no wait: nothing is sent
            m.ack_next(timeout=0)
        assert not m.is_acked
        other.close()
        with pytest.raises(jssync.ConnectionClosedError):
            m.ack_next()
        assert not m.is_acked
        assert c.info().num_ack_pending == 1
    finally:
        other.close()


def test_ack_next_on_a_push_consumer_raises(nc, js, stream, unique):
    publish(js, stream, 2)
    stream.create_consumer(durable_name="P", deliver_subject=f"dlv.{unique}", ack_policy="explicit")
    sub = nc.subscribe(f"dlv.{unique}")
    m = sub.next_msg(timeout=2)
    with pytest.raises(jssync.ConsumerIsPushBasedError):
        m.ack_next(timeout=2)
    sub.unsubscribe()


# -- acks of a message that is not a JetStream message (ADR-15 "JSAck") ------------------------

NOT_JS_ACK_KINDS = {
    "ack": lambda m: m.ack(),
    "nak": lambda m: m.nak(),
    "nak_delay": lambda m: m.nak(1.0),
    "term": lambda m: m.term("reason"),
    "in_progress": lambda m: m.in_progress(),
    "ack_sync": lambda m: m.ack_sync(timeout=1),
    "nak_sync": lambda m: m.nak_sync(timeout=1),
    "term_sync": lambda m: m.term_sync(timeout=1),
    "in_progress_sync": lambda m: m.in_progress_sync(timeout=1),
    "ack_next": lambda m: m.ack_next(timeout=1),
}


@pytest.mark.parametrize("kind", sorted(NOT_JS_ACK_KINDS))
def test_acking_a_core_request_raises_not_js_message_and_sends_nothing(nc, unique, kind):
    """A message whose reply subject is not a ``$JS.ACK`` subject is not a JetStream message:
    every ack kind raises jssync.NotJSMessageError and nothing reaches the requester."""
    replies = nc.subscribe(f"reply.{unique}")
    requests = nc.subscribe(f"svc.{unique}")
    nc.publish(f"svc.{unique}", b"question", reply=f"reply.{unique}")
    m = requests.next_msg(timeout=2 * FACTOR)
    with pytest.raises(jssync.NotJSMessageError, match=f"reply.{unique}"):
        NOT_JS_ACK_KINDS[kind](m)
    assert not m.is_acked
    m.respond(b"answer")  # the first (and only) thing on the reply subject
    got = replies.next_msg(timeout=2 * FACTOR)
    assert got.data == b"answer"
    nc.flush()
    with pytest.raises(jssync.TimeoutError):
        replies.next_msg(timeout=0.2 * FACTOR)
    replies.unsubscribe()
    requests.unsubscribe()


def test_not_js_message_error_is_a_jssync_error() -> None:
    assert issubclass(jssync.NotJSMessageError, jssync.JetStreamError)
    assert issubclass(jssync.NotJSMessageError, ValueError)  # as before: a bad ack subject
