"""The JetStream model (the "Model Deep Dive"), proven against the real server, one test each.

These tests pull with raw CONSUMER.MSG.NEXT requests so they depend only on the context
and the message ack methods, not on the consume machinery.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

import jssync
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def mkstream(js, unique):
    made = []

    def make(**cfg):
        name = f"M{unique}{len(made)}"
        cfg.setdefault("subjects", [f"{name}.>"])
        cfg.setdefault("storage", "memory")
        made.append(name)
        return js.create_stream(name=name, **cfg)

    yield make
    for n in made:
        try:
            js.delete_stream(n)
        except jssync.StreamNotFoundError:
            pass


def pull(js, stream, consumer, expires=0.5):
    """One message via a raw pull request, or None when the request expired."""
    body = json.dumps({"batch": 1, "expires": int(expires * 1e9)}).encode()
    msg = js.conn.request(f"{js.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, timeout=expires + 2)
    if msg.headers and msg.headers.get("Status") in ("404", "408"):
        return None
    return msg


# -- limits ------------------------------------------------------------------------------------


def test_limits_max_msgs_discard_old(js, mkstream):
    st = mkstream(max_msgs=3)
    for i in range(5):
        js.publish(f"{st.name}.a", b"%d" % i)
    state = st.info().state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 3, 5)


def test_limits_max_msgs_discard_new(js, mkstream):
    st = mkstream(max_msgs=3, discard="new")
    for i in range(3):
        js.publish(f"{st.name}.a", b"%d" % i)
    with pytest.raises(jssync.APIError, match="maximum messages exceeded") as ei:
        js.publish(f"{st.name}.a", b"refused")
    assert ei.value.err_code is not None
    assert st.info().state.messages == 3


def test_limits_max_bytes(js, mkstream):
    st = mkstream(max_bytes=1000)
    for _ in range(20):
        js.publish(f"{st.name}.a", b"x" * 100)
    state = st.info().state
    assert state.bytes <= 1000 and 0 < state.messages < 20
    assert state.last_seq == 20


def test_limits_max_age(js, mkstream):
    st = mkstream(max_age=1.0)
    js.publish(f"{st.name}.a", b"old")
    assert st.info().state.messages == 1
    wait_for(lambda: st.info().state.messages == 0, timeout=10, interval=0.1, what="max_age expiry")


def test_limits_max_msg_size(js, mkstream):
    st = mkstream(max_msg_size=16)
    js.publish(f"{st.name}.a", b"x" * 16)
    with pytest.raises(jssync.APIError, match="message size exceeds maximum"):
        js.publish(f"{st.name}.a", b"x" * 17)


def test_limits_max_msgs_per_subject(js, mkstream):
    st = mkstream(max_msgs_per_subject=2)
    for i in range(5):
        js.publish(f"{st.name}.a", b"a%d" % i)
        js.publish(f"{st.name}.b", b"b%d" % i)
    info = st.info(subjects_filter=">")
    assert info.state.messages == 4
    assert info.state.subjects == {f"{st.name}.a": 2, f"{st.name}.b": 2}
    assert st.get_msg(last_by_subject=f"{st.name}.a").data == b"a4"


# -- retention ---------------------------------------------------------------------------------


def test_workqueue_retention(js, mkstream):
    st = mkstream(retention="workqueue")
    js.publish(f"{st.name}.a", b"job1")
    js.publish(f"{st.name}.b", b"job2")
    st.create_consumer(durable_name="W", filter_subject=f"{st.name}.a", ack_policy="explicit")
    # overlapping consumers are refused on a work queue
    with pytest.raises(jssync.APIError, match="(?i)unique|overlap") as ei:
        st.create_consumer(durable_name="W2", filter_subject=f"{st.name}.>", ack_policy="explicit")
    assert ei.value.err_code is not None
    m = pull(js, st.name, "W")
    assert m.data == b"job1"
    m.ack_sync()
    wait_for(lambda: st.info().state.messages == 1, what="acked job removed")
    with pytest.raises(jssync.MessageNotFoundError):
        st.get_msg(1)
    assert st.get_msg(2).data == b"job2"


def test_interest_retention(js, mkstream):
    st = mkstream(retention="interest")
    js.publish(f"{st.name}.a", b"nobody listens")
    assert st.info().state.messages == 0  # no consumers: not kept
    st.create_consumer(durable_name="I1", ack_policy="explicit")
    st.create_consumer(durable_name="I2", ack_policy="explicit")
    js.publish(f"{st.name}.a", b"both")
    assert st.info().state.messages == 1
    pull(js, st.name, "I1").ack_sync()
    assert st.info().state.messages == 1  # I2 still interested
    pull(js, st.name, "I2").ack_sync()
    wait_for(lambda: st.info().state.messages == 0, what="removed once every consumer acked")


def test_dedup_window(js, mkstream):
    st = mkstream(duplicate_window=1.0)
    assert js.publish(f"{st.name}.a", b"hello1", msg_id="1").seq == 1
    for body in (b"hello2", b"hello3", b"hello4"):
        ack = js.publish(f"{st.name}.a", body, msg_id="1")
        assert ack.duplicate and ack.seq == 1
    assert st.info().state.messages == 1
    # after the window the same id is a new message
    end = time.monotonic() + 10
    while True:
        ack = js.publish(f"{st.name}.a", b"later", msg_id="1")
        if not ack.duplicate:
            break
        assert time.monotonic() < end, "the duplicate window never ended"
        time.sleep(0.1)  # poll: until the duplicate window ends, inside the deadline
    assert ack.seq == 2


# -- deliver policies --------------------------------------------------------------------------


def test_deliver_policies(js, mkstream):
    st = mkstream()
    s = st.name
    for i in range(1, 101):
        js.publish(f"{s}.processed", b"order %d" % i)
    js.publish(f"{s}.other", b"other")

    def first(name, **cfg):
        st.create_consumer(durable_name=name, filter_subject=f"{s}.processed", ack_policy="none", **cfg)
        m = pull(js, s, name)
        return None if m is None else m.data

    assert first("ALL", deliver_policy="all") == b"order 1"
    assert first("LAST", deliver_policy="last") == b"order 100"
    assert first("TEN", deliver_policy="by_start_sequence", opt_start_seq=10) == b"order 10"
    assert first("NEW", deliver_policy="new") is None
    js.publish(f"{s}.processed", b"order 101")
    assert pull(js, s, "NEW").data == b"order 101"


def test_deliver_by_start_time(js, mkstream):
    st = mkstream()
    s = st.name
    js.publish(f"{s}.p", b"order 1")
    t1 = st.get_msg(1).time
    time.sleep(0.05)  # behaviour: a time gap between the two messages' timestamps
    js.publish(f"{s}.p", b"order 2")
    js.publish(f"{s}.p", b"order 3")
    t2 = st.get_msg(2).time
    start = t1 + (t2 - t1) / 2
    st.create_consumer(durable_name="T", ack_policy="none", deliver_policy="by_start_time", opt_start_time=start)
    assert pull(js, s, "T").data == b"order 2"
    assert start.tzinfo == dt.UTC


def test_deliver_last_per_subject(js, mkstream):
    st = mkstream()
    s = st.name
    for i in range(3):
        js.publish(f"{s}.a", b"a%d" % i)
        js.publish(f"{s}.b", b"b%d" % i)
    st.create_consumer(durable_name="LPS", ack_policy="none", deliver_policy="last_per_subject",
                       filter_subject=f"{s}.>")
    got = [pull(js, s, "LPS").data for _ in range(2)]
    assert got == [b"a2", b"b2"]
    assert pull(js, s, "LPS", expires=0.2) is None


# -- ack policies and bookkeeping --------------------------------------------------------------


def test_ack_all_acks_earlier_messages(js, mkstream):
    st = mkstream()
    s = st.name
    for i in range(5):
        js.publish(f"{s}.a", b"%d" % i)
    c = st.create_consumer(durable_name="AA", ack_policy="all")
    msgs = [pull(js, s, "AA") for _ in range(3)]
    assert c.info().num_ack_pending == 3
    msgs[2].ack_sync()  # acks 1..3
    info = c.info()
    assert info.num_ack_pending == 0
    assert info.ack_floor.stream_seq == 3


def test_ack_none_needs_no_acks(js, mkstream):
    st = mkstream()
    js.publish(f"{st.name}.a", b"x")
    c = st.create_consumer(durable_name="AN", ack_policy="none")
    pull(js, st.name, "AN")
    info = c.info()
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 1


def test_explicit_ack_redelivery_bookkeeping(js, mkstream):
    """The walk of the deep dive's "Acknowledgement Models" section.

    The deep dive shows an older server that reports the *next* consumer sequence; current
    servers report the last delivered one, so every "delivered" value below is one less
    than the walk's, and the ack floor and counts are the same.
    """
    st = mkstream()
    s = st.name
    c = st.create_consumer(durable_name="DISPATCH", ack_policy="explicit", ack_wait=30.0)
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (0, 0)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (0, 0)
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)

    js.publish(f"{s}.processed", b"order 4")
    assert st.info().state.messages == 1
    m = pull(js, s, "DISPATCH")
    assert m.data == b"order 4" and m.metadata.num_delivered == 1
    m.ack_sync()
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (1, 1)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)

    js.publish(f"{s}.processed", b"order 5")
    m = pull(js, s, "DISPATCH")  # not acked
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (2, 2)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_redelivered) == (1, 0)

    m.nak()  # ask for redelivery now (the CLI walk waits for ack_wait instead)
    m2 = pull(js, s, "DISPATCH")
    assert m2.data == b"order 5" and m2.metadata.num_delivered == 2
    info = c.info()
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 2)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_redelivered) == (1, 1)

    m2.nak()
    m3 = pull(js, s, "DISPATCH")
    assert m3.metadata.num_delivered == 3
    m3.ack_sync()
    info = c.info()
    assert info.delivered.consumer_seq == 4 and info.delivered.stream_seq == 2
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
    assert info.ack_floor.stream_seq == 2


def test_term_and_in_progress(js, mkstream):
    st = mkstream()
    s = st.name
    js.publish(f"{s}.a", b"poison")
    c = st.create_consumer(durable_name="T", ack_policy="explicit", ack_wait=1.0)
    m = pull(js, s, "T")
    m.in_progress()
    m.term()
    m.ack()  # ignored after a terminal ack
    assert m.is_acked
    js.conn.flush()
    assert pull(js, s, "T", expires=1.5) is None  # never redelivered
    wait_for(lambda: c.info().num_ack_pending == 0, what="term settles the message")
