"""Push subscriptions at run time (ADR-15): acks, drain, flow control, heartbeats, gaps,
statuses, ordered resets and replay pacing, against a real server."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

import jssync
from jssync.jetstream.push import (
    ConsumerSequenceMismatchError,
    HeartbeatAlarmError,
    StatusError,
)
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stream(js, unique):
    """A memory stream ``R<unique>`` on ``r<unique>.*``; yields (name, subject prefix)."""
    name = f"R{unique}"
    js.create_stream(name=name, subjects=[f"r{unique}.*"], storage="memory")
    try:
        yield name, f"r{unique}"
    finally:
        js.delete_stream(name)


class Errors:
    """Collects what a subscription's error_cb gets; ``wait_for(cls)`` blocks until one arrives."""

    def __init__(self) -> None:
        self.items: list[Exception] = []
        self._cond = threading.Condition()

    def __call__(self, exc: Exception) -> None:
        with self._cond:
            self.items.append(exc)
            self._cond.notify_all()

    def of(self, cls: type) -> list:
        with self._cond:
            return [e for e in self.items if isinstance(e, cls)]

    def wait_for(self, cls: type, timeout: float = 5.0) -> list:
        end = time.monotonic() + timeout * FACTOR
        with self._cond:
            while not [e for e in self.items if isinstance(e, cls)]:
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {cls.__name__} reported; got {self.items!r}")
                self._cond.wait(min(left, 0.1))
        return self.of(cls)


def raw_publish(url: str, subject: str, header_block: bytes, reply: str = "", count: int = 1) -> None:
    """Publish a message with a raw header block (status line included) through the real server,
    as the server itself sends status messages; returns once the server processed it."""
    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=5) as s:
        s.recv(4096)  # INFO
        out = b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n'
        for _ in range(count):
            n = len(header_block)
            out += f"HPUB {subject} {reply} {n} {n}\r\n".replace("  ", " ").encode() + header_block + b"\r\n"
        s.sendall(out + b"PING\r\n")
        buf = b""
        while b"PONG" not in buf:
            chunk = s.recv(4096)
            assert chunk, "server closed the raw connection"
            buf += chunk


# -- acks ------------------------------------------------------------------------------------


def test_callback_auto_acks_after_return(js, stream):
    name, p = stream
    got = []
    done = threading.Event()

    def cb(msg):
        assert not msg.is_acked  # acked after the callback returns
        got.append(msg)
        if len(got) == 50:
            done.set()

    for i in range(50):
        js.publish_async(f"{p}.a", b"%d" % i)
    js.publish_async_completed(5)
    # max_ack_pending=10: all 50 can only arrive if the callbacks' messages are acked
    sub = js.subscribe(f"{p}.a", callback=cb, max_ack_pending=10)
    try:
        assert done.wait(5 * FACTOR)
        assert [m.data for m in got] == [b"%d" % i for i in range(50)]
        wait_for(lambda: all(m.is_acked for m in got), 5, what="auto acks")
        wait_for(lambda: sub.consumer_info().num_ack_pending == 0, 5, what="ack floor")
    finally:
        sub.unsubscribe()


def test_manual_ack_leaves_acking_to_the_callback(js, stream):
    name, p = stream
    got = []
    for i in range(5):
        js.publish(f"{p}.a", b"%d" % i)
    sub = js.subscribe(f"{p}.a", callback=got.append, manual_ack=True)
    try:
        wait_for(lambda: len(got) == 5, 5, what="5 messages")
        wait_for(lambda: sub.consumer_info().num_ack_pending == 5, 5, what="5 unacked")
        assert not any(m.is_acked for m in got)
        for m in got:
            m.ack()
        wait_for(lambda: sub.consumer_info().num_ack_pending == 0, 5, what="acks")
    finally:
        sub.unsubscribe()


def test_callback_error_reported_and_not_acked(js, stream):
    name, p = stream
    errors = Errors()
    calls = []

    def cb(msg):
        calls.append(msg.metadata.num_delivered)
        if len(calls) == 1:
            raise RuntimeError("handler failed")

    js.publish(f"{p}.a", b"x")
    sub = js.subscribe(f"{p}.a", callback=cb, ack_wait=0.5, error_cb=errors)
    try:
        assert str(errors.wait_for(RuntimeError)[0]) == "handler failed"
        wait_for(lambda: len(calls) == 2, 5, what="redelivery")  # not acked: redelivered
        assert calls == [1, 2]
        wait_for(lambda: sub.consumer_info().num_ack_pending == 0, 5, what="ack of the redelivery")
    finally:
        sub.unsubscribe()


def test_non_jetstream_message_passed_on(nc, js, stream):
    # (a malformed $JS.ACK reply cannot be faked: the server refuses such replies from clients)
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", error_cb=errors)
    try:
        nc.publish(sub.deliver_subject, b"plain", reply="somewhere")
        js.publish(f"{p}.a", b"js")
        msg = sub.next_msg(2)
        assert (msg.data, msg.reply) == (b"plain", "somewhere")
        assert sub.next_msg(2).data == b"js"
        assert errors.items == []
    finally:
        sub.unsubscribe()


def test_ack_policy_none_ignores_acks(js, stream):
    name, p = stream
    js.publish(f"{p}.a", b"x")
    sub = js.subscribe(f"{p}.a", ack_policy="none")
    try:
        msg = sub.next_msg(2)
        msg.ack()  # ignored, no error
        assert not msg.is_acked
    finally:
        sub.unsubscribe()


# -- drain -----------------------------------------------------------------------------------


def test_drain_deletes_consumer_after_callbacks(js, stream):
    name, p = stream
    seen = []
    existed_in_last_callback = []

    def cb(msg):
        seen.append(msg.data)
        time.sleep(0.01)  # behaviour: the handler is slow, so the drain has work left
        if len(seen) == 30:
            existed_in_last_callback.append(list(js.consumer_names(name)))

    for i in range(30):
        js.publish_async(f"{p}.a", b"%d" % i)
    js.publish_async_completed(5)
    sub = js.subscribe(f"{p}.a", callback=cb)
    wait_for(lambda: sub.delivered == 30, 5, what="30 messages received")
    assert len(seen) < 30  # callbacks still running
    sub.drain(timeout=10)
    assert len(seen) == 30
    assert existed_in_last_callback == [[sub.consumer_name]]  # still there while draining
    assert list(js.consumer_names(name)) == []


def test_drain_iterator_form_deletes_consumer(js, stream):
    name, p = stream
    js.publish(f"{p}.a", b"1")
    sub = js.subscribe(f"{p}.a", durable="DRAINED")
    wait_for(lambda: sub.pending_msgs == 1, 5, what="message")
    sub.drain()
    assert sub.next_msg(1).data == b"1"  # the rest stays readable
    with pytest.raises(jssync.SubscriptionClosedError):
        sub.next_msg(0.1)
    assert list(js.consumer_names(name)) == []


@pytest.mark.parametrize("with_callback", [False, True])
def test_drain_delete_failure_goes_to_error_cb(js, stream, with_callback):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", durable="GONE", error_cb=errors,
                       callback=(lambda m: None) if with_callback else None)
    js.delete_consumer(name, "GONE")
    sub.drain()  # does not raise
    assert errors.wait_for(jssync.ConsumerNotFoundError)


def test_unsubscribe_delete_failure_is_raised(js, stream):
    name, p = stream
    sub = js.subscribe(f"{p}.a", durable="GONE2")
    js.delete_consumer(name, "GONE2")
    with pytest.raises(jssync.ConsumerNotFoundError):
        sub.unsubscribe()
    sub.unsubscribe()  # idempotent


# -- flow control ------------------------------------------------------------------------------


@pytest.mark.parametrize("with_callback", [False, True])
def test_flow_control_large_backlog(js, stream, with_callback):
    name, p = stream
    n = 2500
    payload = b"x" * 1000  # 2.5 MB: several flow control windows
    for _ in range(n):
        js.publish_async(f"{p}.a", payload)
    js.publish_async_completed(10)
    count = [0]
    done = threading.Event()

    def cb(msg):
        count[0] += 1
        if count[0] == n:
            done.set()

    sub = js.subscribe(f"{p}.a", flow_control=True, idle_heartbeat=1.0, max_ack_pending=n,
                       callback=cb if with_callback else None)
    try:
        if with_callback:
            assert done.wait(10 * FACTOR), f"only {count[0]} of {n} messages arrived"
        else:
            for _ in range(n):
                sub.next_msg(5).ack()
        assert sub.flow_control_replies >= 1
        wait_for(lambda: sub.consumer_info().num_ack_pending == 0, 5, what="acks")
    finally:
        sub.unsubscribe()


def test_flow_control_answered_when_reached_and_once(nc, js, nats_server, stream):
    name, p = stream
    watcher = nc.subscribe(f"fc.{name}")
    sub = js.subscribe(f"{p}.a")
    try:
        fc = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
        raw_publish(nats_server.url, sub.deliver_subject, fc, reply=f"fc.{name}", count=2)
        js.publish(f"{p}.a", b"after")
        wait_for(lambda: sub.pending_msgs == 3, 5, what="2 flow control requests and a message")
        nc.flush()
        assert watcher.pending_msgs == 0  # not answered before the application reaches it
        assert sub.next_msg(2).data == b"after"  # answered on the way, then the message
        nc.flush()
        nc.flush()
        wait_for(lambda: watcher.pending_msgs >= 1, 5, what="flow control reply")
        assert watcher.next_msg(1).data == b""
        assert watcher.pending_msgs == 0  # the same subject is answered once
    finally:
        sub.unsubscribe()
        watcher.unsubscribe()


def test_stalled_heartbeat_answered_once(nc, js, nats_server, stream):
    name, p = stream
    watcher = nc.subscribe(f"stall.{name}")
    sub = js.subscribe(f"{p}.a")
    try:
        hb = f"NATS/1.0 100 Idle Heartbeat\r\nNats-Consumer-Stalled: stall.{name}\r\n\r\n".encode()
        raw_publish(nats_server.url, sub.deliver_subject, hb, count=2)
        wait_for(lambda: watcher.pending_msgs >= 1, 5, what="stalled reply")
        nc.flush()
        nc.flush()
        assert watcher.pending_msgs == 1 and sub.flow_control_replies == 1
        assert sub.pending_msgs == 0  # heartbeats never reach the application
    finally:
        sub.unsubscribe()
        watcher.unsubscribe()


# -- statuses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "text"), [(409, "Consumer Deleted"), (503, ""), (418, "Teapot")])
def test_error_statuses_raised_and_reported(js, nats_server, stream, code, text):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", error_cb=errors)
    try:
        status = f"NATS/1.0 {code} {text}".rstrip().encode() + b"\r\n\r\n"
        raw_publish(nats_server.url, sub.deliver_subject, status)
        js.publish(f"{p}.a", b"next")
        with pytest.raises(StatusError) as ei:
            sub.next_msg(2)
        assert ei.value.code == code and ei.value.description == text
        assert sub.next_msg(2).data == b"next"  # the subscription goes on
        assert errors.wait_for(StatusError)[0].code == code
    finally:
        sub.unsubscribe()


def test_error_status_ends_iteration(js, nats_server, stream):
    name, p = stream
    sub = js.subscribe(f"{p}.a", error_cb=lambda e: None)
    try:
        js.publish(f"{p}.a", b"1")
        wait_for(lambda: sub.pending_msgs == 1, 5, what="message")
        raw_publish(nats_server.url, sub.deliver_subject, b"NATS/1.0 409 Conflict\r\n\r\n")
        got = []
        with pytest.raises(StatusError):
            for msg in sub:
                got.append(msg.data)
        assert got == [b"1"]
    finally:
        sub.unsubscribe()


def test_404_and_408_ignored(js, nats_server, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", error_cb=errors)
    try:
        raw_publish(nats_server.url, sub.deliver_subject, b"NATS/1.0 404 No Messages\r\n\r\n")
        raw_publish(nats_server.url, sub.deliver_subject, b"NATS/1.0 408 Request Timeout\r\n\r\n")
        js.publish(f"{p}.a", b"only")
        assert sub.next_msg(2).data == b"only"
        with pytest.raises(jssync.TimeoutError):
            sub.next_msg(0.1)
        assert errors.items == []
    finally:
        sub.unsubscribe()


# -- gaps ----------------------------------------------------------------------------------------


def test_gap_detected_from_consumer_sequence(js, stream):
    name, p = stream
    errors = Errors()
    # 3 fit, the next 3 are dropped by this client (slow consumer): a gap of consumer sequences
    sub = js.subscribe(f"{p}.a", ack_policy="none", pending_msgs_limit=3, error_cb=errors)
    try:
        for i in range(6):
            js.publish(f"{p}.a", b"%d" % i)
        wait_for(lambda: sub.dropped == 3, 5, what="3 drops")
        assert [sub.next_msg(1).data for _ in range(3)] == [b"0", b"1", b"2"]
        js.publish(f"{p}.a", b"6")
        assert sub.next_msg(2).data == b"6"  # delivered, and the gap is reported
        gap = errors.wait_for(ConsumerSequenceMismatchError)[0]
        assert (gap.last_consumer_sequence, gap.consumer_sequence, gap.stream_resume_sequence) == (3, 7, 4)
    finally:
        sub.unsubscribe()


def test_gap_detected_from_heartbeat(js, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", ack_policy="none", pending_msgs_limit=3, idle_heartbeat=0.2,
                       error_cb=errors)
    try:
        for i in range(5):
            js.publish(f"{p}.a", b"%d" % i)
        gap = errors.wait_for(ConsumerSequenceMismatchError)[0]  # the next heartbeat tells
        assert (gap.last_consumer_sequence, gap.consumer_sequence, gap.stream_resume_sequence) == (3, 5, 4)
        for _ in range(3):
            sub.next_msg(1)
        js.publish(f"{p}.a", b"5")
        assert sub.next_msg(2).data == b"5"
        assert len(errors.of(ConsumerSequenceMismatchError)) == 1  # reported once
    finally:
        sub.unsubscribe()


def test_gap_detected_from_heartbeat_headers(js, nats_server, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", error_cb=errors)
    try:
        hb = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 9\r\nNats-Last-Stream: 12\r\n\r\n"
        raw_publish(nats_server.url, sub.deliver_subject, hb)
        gap = errors.wait_for(ConsumerSequenceMismatchError)[0]
        assert (gap.last_consumer_sequence, gap.consumer_sequence) == (0, 9)
    finally:
        sub.unsubscribe()


def test_no_gap_detection_for_queue_subscriptions(js, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", queue="q", ack_policy="none", pending_msgs_limit=3, error_cb=errors)
    try:
        for i in range(6):
            js.publish(f"{p}.a", b"%d" % i)
        wait_for(lambda: sub.dropped == 3, 5, what="3 drops")
        for _ in range(3):
            sub.next_msg(1)
        js.publish(f"{p}.a", b"6")
        assert sub.next_msg(2).data == b"6"
        assert errors.of(ConsumerSequenceMismatchError) == []
    finally:
        sub.unsubscribe()


# -- heartbeats ------------------------------------------------------------------------------------


def test_heartbeats_keep_the_alarm_quiet(js, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", idle_heartbeat=0.1, heartbeat_alarm=0.6, error_cb=errors)
    try:
        assert sub.heartbeat_alarm == 0.6
        with pytest.raises(AssertionError):
            errors.wait_for(HeartbeatAlarmError, timeout=1.0)
        assert sub.alarms == 0
    finally:
        sub.unsubscribe()


@pytest.mark.slow
def test_heartbeat_alarm_when_server_stopped(unique):
    errors = Errors()
    with NatsServer() as srv:
        nc = jssync.connect(srv.url, reconnect_time_wait=0.2)
        try:
            js = nc.jetstream()
            js.create_stream(name=f"H{unique}", subjects=[f"h{unique}.*"], storage="memory")
            sub = js.subscribe(f"h{unique}.a", idle_heartbeat=0.25, error_cb=errors)
            assert sub.heartbeat_alarm == 0.75  # 3x the idle heartbeat
            with pytest.raises(AssertionError):
                errors.wait_for(HeartbeatAlarmError, timeout=1.0)  # heartbeats arrive
            t0 = time.monotonic()
            srv.stop()
            alarm = errors.wait_for(HeartbeatAlarmError, timeout=5.0)[0]
            assert time.monotonic() - t0 < 3 * FACTOR
            assert alarm.alarm == 0.75 and alarm.idle_heartbeat == 0.25
        finally:
            nc.close()


# -- ordered ---------------------------------------------------------------------------------------


def test_ordered_survives_consumer_deletion(js, stream):
    name, p = stream
    errors = Errors()
    sub = js.subscribe(f"{p}.a", ordered=True, idle_heartbeat=0.2, error_cb=errors)
    try:
        info = sub.consumer_info().config
        assert info.ack_policy == jssync.AckPolicy.NONE and info.flow_control and info.mem_storage
        assert info.num_replicas == 1 and info.max_deliver == 1
        for i in range(5):
            js.publish(f"{p}.a", b"%d" % i)
        assert [sub.next_msg(2).data for _ in range(5)] == [b"%d" % i for i in range(5)]
        first = sub.consumer_name
        js.delete_consumer(name, first)
        for i in range(5, 10):
            js.publish(f"{p}.a", b"%d" % i)
        assert [sub.next_msg(5).data for _ in range(5)] == [b"%d" % i for i in range(5, 10)]
        wait_for(lambda: sub.consumer_name != first, 5, what="the new consumer's name")
        assert sub.resets >= 1  # (after the first missed heartbeat's lookup, or at the alarm)
        with pytest.raises(jssync.TimeoutError):
            sub.next_msg(0.2)  # exactly once
    finally:
        sub.unsubscribe()
    assert list(js.consumer_names(name)) == []


def test_ordered_resets_on_gap(js, stream):
    name, p = stream
    n = 40
    for i in range(n):
        js.publish_async(f"{p}.a", b"%d" % i)
    js.publish_async_completed(5)
    # a tiny pending limit: this client drops messages, the consumer sequence jumps, the
    # ordered subscription starts a new consumer after the last message it delivered
    sub = js.subscribe(f"{p}.a", ordered=True, pending_msgs_limit=4, error_cb=lambda e: None)
    try:
        got = [sub.next_msg(5).data for _ in range(n)]
        assert got == [b"%d" % i for i in range(n)]
        assert sub.resets >= 1
        with pytest.raises(jssync.TimeoutError):
            sub.next_msg(0.2)
    finally:
        sub.unsubscribe()
    assert list(js.consumer_names(name)) == []


@pytest.mark.slow
def test_ordered_survives_server_restart(unique, tmp_path):
    with NatsServer(store_dir=tmp_path) as srv:
        nc = jssync.connect(srv.url, reconnect_time_wait=0.1)
        try:
            js = nc.jetstream()
            js.create_stream(name=f"O{unique}", subjects=[f"o{unique}.*"], storage="file")
            sub = js.subscribe(f"o{unique}.a", ordered=True, idle_heartbeat=0.3, error_cb=lambda e: None)
            for i in range(3):
                js.publish(f"o{unique}.a", b"%d" % i)
            assert [sub.next_msg(2).data for _ in range(3)] == [b"0", b"1", b"2"]
            first = sub.consumer_name
            srv.restart()  # the ordered consumer (memory storage) is gone; the stream is on disk
            wait_for(lambda: nc.is_connected, 10, what="reconnect")
            for i in range(3, 6):
                js.publish(f"o{unique}.a", b"%d" % i, timeout=5)
            assert [sub.next_msg(10).data for _ in range(3)] == [b"3", b"4", b"5"]
            wait_for(lambda: sub.consumer_name != first, 5, what="a new consumer")
            sub.unsubscribe()
        finally:
            nc.close()


def test_ordered_rejects_conflicting_options(js, stream):
    name, p = stream
    for bad in ({"durable": "D"}, {"queue": "q"}, {"ack_policy": "explicit"}, {"max_deliver": 3}):
        with pytest.raises(ValueError, match="ordered"):
            js.subscribe(f"{p}.a", ordered=True, **bad)


# -- replay policy -------------------------------------------------------------------------------


def test_replay_original_paces_messages(js, stream):
    name, p = stream
    gap = 0.3
    for i in range(3):
        if i:
            time.sleep(gap)  # behaviour: publish paced, so the stream holds the original timing
        js.publish(f"{p}.a", b"%d" % i)
    instant = js.subscribe(f"{p}.a", ack_policy="none")
    original = js.subscribe(f"{p}.a", ack_policy="none", replay_policy="original")
    try:
        t_inst = []
        for _ in range(3):
            instant.next_msg(2)
            t_inst.append(time.monotonic())
        t_orig = []
        for _ in range(3):
            original.next_msg(3)
            t_orig.append(time.monotonic())
        assert t_inst[2] - t_inst[0] < 0.15
        for a, b in zip(t_orig, t_orig[1:], strict=False):
            assert gap * 0.6 <= b - a <= gap * 2.5, t_orig
    finally:
        instant.unsubscribe()
        original.unsubscribe()
