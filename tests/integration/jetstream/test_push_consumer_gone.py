"""A push subscription whose consumer or stream is deleted ends with the error that says so
(ConsumerDeletedError, a ConsumerNotFoundError too, as the pull consume / StreamNotFoundError),
promptly after the first missed heartbeat, as every other reader does; real server."""

from __future__ import annotations

import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)

HB = 1.0  # idle heartbeat: the server's only sign of life towards a push subscription
#: the end comes after 1.5 x the idle heartbeat without traffic (one heartbeat missed) plus one lookup
PROMPT = 1.5 * HB + 1.5


@pytest.fixture
def stream(js, unique):
    """A memory stream ``G<unique>`` on ``g<unique>.*`` with 3 messages; yields (name, subject)."""
    name = f"G{unique}"
    js.create_stream(name=name, subjects=[f"g{unique}.*"], storage="memory")
    for i in range(3):
        js.publish(f"g{unique}.m", b"%d" % i)
    try:
        yield name, f"g{unique}.m"
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def _read_to_the_end(sub, n: int) -> BaseException:
    """Read the ``n`` buffered messages, then what ends the iteration (within PROMPT)."""
    for _ in range(n):
        sub.next_msg(timeout=5 * FACTOR).ack()
    start = time.monotonic()
    with pytest.raises(jssync.Error) as info:
        for _m in sub:
            pass
    took = time.monotonic() - start
    assert took < PROMPT * FACTOR, f"the end came after {took:.1f}s"
    return info.value


def test_durable_iterator_ends_when_its_consumer_is_deleted(js, stream):
    name, subject = stream
    sub = js.subscribe(subject, durable="D", idle_heartbeat=HB)
    try:
        wait_for(lambda: sub.pending_msgs == 3, timeout=5, what="3 buffered")
        js.delete_consumer(name, "D")
        err = _read_to_the_end(sub, 3)
        assert type(err) is jssync.ConsumerDeletedError, repr(err)  # what the pull consume raises
        assert isinstance(err, jssync.ConsumerNotFoundError)
        assert (err.stream, err.consumer) == (name, "D")
        assert sub.is_closed
        with pytest.raises(jssync.ConsumerDeletedError):  # and again
            sub.next_msg(timeout=0.1)
    finally:
        sub.unsubscribe()


def test_durable_iterator_ends_when_its_stream_is_deleted(js, stream):
    name, subject = stream
    sub = js.subscribe(subject, durable="D", idle_heartbeat=HB)
    try:
        wait_for(lambda: sub.pending_msgs == 3, timeout=5, what="3 buffered")
        js.delete_stream(name)
        err = _read_to_the_end(sub, 3)
        assert type(err) is jssync.StreamNotFoundError, repr(err)
    finally:
        sub.unsubscribe()


def test_callback_subscription_reports_its_deleted_consumer_once_and_ends(js, stream):
    name, subject = stream
    errors: list[BaseException] = []
    got: list[jssync.Msg] = []
    gone = threading.Event()

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        if isinstance(exc, jssync.NotFoundError):
            gone.set()

    sub = js.subscribe(subject, durable="D", idle_heartbeat=HB, callback=got.append, error_cb=on_error)
    try:
        wait_for(lambda: len(got) == 3, timeout=5, what="3 handled")
        js.delete_consumer(name, "D")
        start = time.monotonic()
        assert gone.wait(PROMPT * FACTOR), f"no ConsumerDeletedError; got {errors!r}"
        assert time.monotonic() - start < PROMPT * FACTOR
        wait_for(lambda: sub.is_closed, timeout=2, what="the subscription ended")
        assert [type(e) for e in errors if isinstance(e, jssync.NotFoundError)] == [jssync.ConsumerDeletedError]
        assert sub.error is not None
    finally:
        sub.unsubscribe()


def test_ordered_iterator_ends_when_its_stream_is_deleted(js, stream):
    name, subject = stream
    sub = js.subscribe(subject, ordered=True, idle_heartbeat=HB)
    try:
        wait_for(lambda: sub.pending_msgs == 3, timeout=5, what="3 buffered")
        js.delete_stream(name)
        for _ in range(3):
            sub.next_msg(timeout=5 * FACTOR)
        start = time.monotonic()
        with pytest.raises(jssync.StreamNotFoundError):
            for _m in sub:
                pass
        took = time.monotonic() - start
        assert took < PROMPT * FACTOR, f"the end came after {took:.1f}s"
    finally:
        sub.unsubscribe()


def test_ordered_iterator_with_default_options_ends_when_its_stream_is_deleted(js, stream):
    """Default idle heartbeat (5 s): the end comes after the first missed heartbeat (7.5 s), not
    at the heartbeat alarm (15 s)."""
    name, subject = stream
    sub = js.subscribe(subject, ordered=True)
    try:
        for _ in range(3):
            sub.next_msg(timeout=5 * FACTOR)
        js.delete_stream(name)
        start = time.monotonic()
        with pytest.raises(jssync.StreamNotFoundError):
            sub.next_msg(timeout=30 * FACTOR)
        took = time.monotonic() - start
        assert took < (1.5 * 5.0 + 2) * FACTOR, f"the end came after {took:.1f}s"
    finally:
        sub.unsubscribe()


def test_a_quiet_subscription_whose_consumer_exists_goes_on(js, stream):
    """Silence alone ends nothing: the lookup finds the consumer, the subscription stays open."""
    name, subject = stream
    sub = js.subscribe(subject, durable="D", idle_heartbeat=HB, heartbeat_alarm=60)
    try:
        for _ in range(3):
            sub.next_msg(timeout=5 * FACTOR).ack()
        # make it silent towards the subscription: the server's heartbeats keep coming, so
        # the lookup runs only when they stop; here they do not, and nothing ends
        with pytest.raises(jssync.TimeoutError):
            sub.next_msg(timeout=3 * HB)
        assert not sub.is_closed
        js.publish(subject, b"more")
        assert sub.next_msg(timeout=5 * FACTOR).data == b"more"
    finally:
        sub.unsubscribe()


def test_ordered_subscription_recreates_its_deleted_consumer_before_the_alarm(js, stream):
    """An ordered subscription whose consumer was deleted goes on from the next stream
    sequence after the first missed heartbeat, not only at its heartbeat alarm (here 60 s)."""
    name, subject = stream
    sub = js.subscribe(subject, ordered=True, idle_heartbeat=HB, heartbeat_alarm=60)
    try:
        for _ in range(3):
            sub.next_msg(timeout=5 * FACTOR)
        js.delete_consumer(name, sub.consumer_name)
        js.publish(subject, b"after")
        start = time.monotonic()
        msg = sub.next_msg(timeout=30 * FACTOR)
        took = time.monotonic() - start
        assert msg.data == b"after" and sub.resets == 1
        assert took < (PROMPT + 1) * FACTOR, f"recreated after {took:.1f}s"
        assert not sub.is_closed
    finally:
        sub.unsubscribe()
