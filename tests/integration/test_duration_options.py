"""Every duration option takes seconds, a timedelta or a Go duration string, and refuses bad ones at once.

Against a real server: the values the server stores are read back from the stream, consumer and
bucket infos; a refused value leaves nothing created.
"""

from __future__ import annotations

import datetime
import time

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)


def test_stream_durations_take_go_strings_and_timedeltas(js, unique):
    name = f"DS{unique}"
    t0 = time.monotonic()
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", max_age="1h",
                          duplicate_window=datetime.timedelta(seconds=30), allow_msg_ttl=True,
                          subject_delete_marker_ttl="1m30s")
    try:
        assert time.monotonic() - t0 < 5 * FACTOR
        cfg = st.info().config
        assert (cfg.max_age, cfg.duplicate_window, cfg.subject_delete_marker_ttl) == (3600.0, 30.0, 90.0)
        st = js.update_stream(name=name, max_age="2h30m")
        assert st.info().config.max_age == 9000.0
    finally:
        js.delete_stream(name)


def test_consumer_durations_take_go_strings_and_timedeltas(js, stream):
    t0 = time.monotonic()
    c = js.create_consumer(stream.name, durable_name="C2", ack_wait="30s",
                           inactive_threshold=datetime.timedelta(minutes=5))
    assert time.monotonic() - t0 < 5 * FACTOR
    cfg = c.info().config
    assert (cfg.ack_wait, cfg.inactive_threshold) == (30.0, 300.0)
    c = js.update_consumer(stream.name, durable_name="C2", ack_wait="1m", inactive_threshold="5m")
    assert c.info().config.ack_wait == 60.0
    c = js.create_consumer(stream.name, durable_name="B2", max_deliver=4, backoff=["1s", "1500ms", 2])
    assert c.info().config.backoff == [1.0, 1.5, 2.0]
    push = js.create_consumer(stream.name, durable_name="P2", deliver_subject=f"dlv.{stream.name}",
                              idle_heartbeat="5s", flow_control=True)
    assert push.info().config.idle_heartbeat == 5.0


def test_bucket_and_publish_durations_take_go_strings(js, unique):
    kv = js.create_key_value(bucket=f"DK{unique}", ttl="1h", storage="memory")
    try:
        assert kv.status().ttl == 3600.0
    finally:
        js.delete_key_value(f"DK{unique}")
    obs = js.create_object_store(bucket=f"DO{unique}", ttl=datetime.timedelta(minutes=10), storage="memory")
    try:
        assert obs.status().ttl == 600.0
    finally:
        js.delete_object_store(f"DO{unique}")
    name = f"DT{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", allow_msg_ttl=True)
    try:
        ack = js.publish(f"{name}.a", b"x", ttl="1m")
        assert st.get_msg(ack.seq).headers["Nats-TTL"] == "60s"
    finally:
        js.delete_stream(name)


def test_pull_durations_take_go_strings(js, stream):
    c = js.create_consumer(stream.name, durable_name="PULL", ack_policy="explicit")
    js.publish(f"{stream.name}.a", b"1")
    got = list(c.fetch(5, expires="1s"))
    assert [m.data for m in got] == [b"1"]
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        c.next(timeout="500ms")
    assert time.monotonic() - t0 < 5 * FACTOR
    with pytest.raises(jssync.ValidationError, match="expires"):
        c.fetch(1, expires="soon")


@pytest.mark.parametrize("option, value, said", [
    ("ack_wait", "30 seconds", "'30 seconds'"),
    ("ack_wait", -1, "negative"),
    ("inactive_threshold", float("nan"), "nan"),
    ("ack_wait", True, "bool"),
    ("backoff", ["1s", "x"], "'x'"),
    ("max_deliver", True, "bool"),
])
def test_bad_consumer_values_are_refused_naming_the_option(js, stream, option, value, said):
    t0 = time.monotonic()
    extra = {"max_deliver": 3} if option == "backoff" else {}
    with pytest.raises(jssync.ValidationError) as ei:
        js.create_consumer(stream.name, durable_name="BAD", **{option: value}, **extra)
    assert time.monotonic() - t0 < 2 * FACTOR
    assert option in str(ei.value) and said in str(ei.value), ei.value
    assert list(js.consumer_names(stream.name)) == []


@pytest.mark.parametrize("option, value", [("max_age", "1 hour"), ("max_age", -5), ("duplicate_window", "inf"),
                                           ("max_age", float("inf")), ("max_msgs", True)])
def test_bad_stream_values_are_refused_naming_the_option(js, unique, option, value):
    name = f"DB{unique}"
    with pytest.raises(jssync.ValidationError, match=option):
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", **{option: value})
    with pytest.raises(jssync.StreamNotFoundError):
        js.stream(name)


def test_bad_bucket_and_publish_durations_are_refused(js, unique):
    with pytest.raises(jssync.ValidationError, match="ttl"):
        js.create_key_value(bucket=f"DK{unique}", ttl="forever")
    with pytest.raises(jssync.ValidationError, match="ttl"):
        js.create_object_store(bucket=f"DO{unique}", ttl=-1)
    with pytest.raises(jssync.ValidationError, match="ttl"):
        js.publish(f"nowhere{unique}", b"x", ttl="1 minute")
    assert list(js.stream_names(subject=f"$KV.DK{unique}.>")) == []
