"""``timeout=0`` means one thing everywhere: no wait (docs/threading.md "The timeout rule").

A call that needs the server's answer raises jssync.TimeoutError at once and sends nothing (its
answer could not come without a wait); a read of what already arrived returns it, or raises
jssync.TimeoutError when nothing is there. A setting (``nc.jetstream(timeout=...)``) is not a
wait: it must be a number > 0, and anything else is a ValidationError naming the option.
"""

from __future__ import annotations

import threading

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def seen(nats_server, unique):
    """Every message published on a subject naming this test (a second connection watches)."""
    got: list[str] = []
    lock = threading.Lock()

    def on(msg: jssync.Msg) -> None:
        with lock:
            got.append(msg.subject)

    with jssync.connect(nats_server.url) as other:
        other.subscribe(">", callback=on)
        other.flush()
        yield lambda: [s for s in got if unique in s]


def _calls(nc, js, unique, kv, obj, st):
    return {
        "nc.request": lambda: nc.request(f"svc{unique}", b"x", timeout=0),
        "nc.flush": lambda: nc.flush(timeout=0),
        "js.stream": lambda: js.stream(f"S{unique}", timeout=0),
        "js.publish": lambda: js.publish(f"S{unique}.a", b"x", timeout=0),
        "js.create_consumer": lambda: js.create_consumer(f"S{unique}", durable_name=f"C{unique}", timeout=0),
        "stream.direct_get": lambda: st.direct_get(1, timeout=0),
        "kv.get": lambda: kv.get("k", timeout=0),
        "kv.put": lambda: kv.put(f"k{unique}", b"v", timeout=0),
        "obj.get_info": lambda: obj.get_info(f"o{unique}", timeout=0),
    }


def test_timeout_zero_on_a_round_trip_raises_timeout_at_once_and_sends_nothing(nc, js, unique, seen):
    st = js.create_stream(name=f"S{unique}", subjects=[f"S{unique}.>"], storage="memory", allow_direct=True)
    kv = js.create_key_value(bucket=f"B{unique}", storage="memory")
    obj = js.create_object_store(bucket=f"O{unique}", storage="memory")
    js.publish(f"S{unique}.a", b"x")
    nc.flush()
    try:
        before = len(seen())
        for name, call in _calls(nc, js, unique, kv, obj, st).items():
            with pytest.raises(jssync.TimeoutError, match="timeout=0"):
                call()
            assert name
        nc.request(f"$JS.API.STREAM.INFO.S{unique}", b"", timeout=5.0)  # a marker after them all
        wait_for(lambda: len(seen()) > before, 10 * FACTOR, what="the marker")
        assert seen()[before:] == [f"$JS.API.STREAM.INFO.S{unique}"], "a call with timeout=0 sent something"
    finally:
        js.delete_object_store(f"O{unique}")
        js.delete_key_value(f"B{unique}")
        js.delete_stream(f"S{unique}")


def test_timeout_zero_on_a_read_returns_what_arrived_or_raises_timeout(nc, unique):
    sub = nc.subscribe(f"r{unique}")
    try:
        with pytest.raises(jssync.TimeoutError):
            sub.next_msg(timeout=0)
        nc.publish(f"r{unique}", b"1")
        nc.flush()
        wait_for(lambda: sub.pending_msgs >= 1, 10 * FACTOR, what="the message buffered")
        assert sub.next_msg(timeout=0).data == b"1"
    finally:
        sub.unsubscribe()


def test_ack_sync_with_timeout_zero_raises_timeout_and_leaves_the_message_unacked(js, stream):
    js.publish(f"{stream.name}.a", b"x")
    c = stream.create_consumer(durable_name="Z", ack_policy="explicit")
    m = c.next(timeout=5)
    with pytest.raises(jssync.TimeoutError, match="timeout=0"):
        m.ack_sync(timeout=0)
    assert not m.is_acked
    m.ack_sync(timeout=5)


@pytest.mark.parametrize("bad", ["5", 0, -1, True, None, float("nan")])
def test_the_jetstream_context_timeout_is_a_number_above_zero(nc, bad):
    with pytest.raises(jssync.ValidationError, match="timeout"):
        nc.jetstream(timeout=bad)


@pytest.mark.parametrize("bad", ["5", -1, True])
def test_a_bad_timeout_is_a_validation_error_naming_it(nc, js, bad):
    with pytest.raises(jssync.ValidationError, match="timeout"):
        nc.request("x", b"", timeout=bad)
    with pytest.raises(jssync.ValidationError, match="timeout"):
        js.stream("X", timeout=bad)
