"""A wrong keyword for a config call is refused at once, naming the call and the closest real option."""

from __future__ import annotations

import pytest

import jssync

pytestmark = pytest.mark.timeout(60)


def _refused(call, *args, **kwargs) -> jssync.ValidationError:
    with pytest.raises(jssync.ValidationError) as ei:
        call(*args, **kwargs)
    assert isinstance(ei.value, TypeError)
    return ei.value


def test_unknown_stream_option_suggests_the_right_one(js, unique):
    name = f"UO{unique}"
    err = _refused(js.create_stream, name=name, subject=[f"{name}.>"])
    assert str(err) == "unknown option 'subject' for create_stream; did you mean 'subjects'?"
    err = _refused(js.create_or_update_stream, name=name, subjects=[f"{name}.>"], max_mesages=5)
    assert "unknown option 'max_mesages' for create_or_update_stream; did you mean 'max_msgs'?" in str(err)
    with pytest.raises(jssync.StreamNotFoundError):
        js.stream(name)
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        err = _refused(js.update_stream, name=name, maxage=10)
        assert "unknown option 'maxage' for update_stream; did you mean 'max_age'?" in str(err)
        err = _refused(js.update_stream, jssync.StreamConfig(name=name, subjects=[f"{name}.>"]), retension="limits")
        assert "unknown option 'retension' for update_stream; did you mean 'retention'?" in str(err)
        # nothing close: no guess, but the call is named
        err = _refused(js.update_stream, name=name, zzz=1)
        assert str(err) == "unknown option 'zzz' for update_stream"
    finally:
        js.delete_stream(name)


def test_unknown_consumer_option_suggests_the_right_one(js, stream):
    err = _refused(js.create_consumer, stream.name, durable="C")
    assert "unknown option 'durable' for create_consumer; did you mean 'durable_name'?" in str(err)
    err = _refused(stream.create_consumer, durable_name="C", ackwait=5)
    assert "unknown option 'ackwait' for create_consumer; did you mean 'ack_wait'?" in str(err)
    err = _refused(js.update_consumer, stream.name, durable_name="C", filter_subjet="x")
    assert "did you mean 'filter_subject'?" in str(err) and "update_consumer" in str(err)
    err = _refused(js.create_or_update_consumer, stream.name, durable_name="C", max_delivers=3)
    assert "did you mean 'max_deliver'?" in str(err)
    assert list(js.consumer_names(stream.name)) == []


def test_unknown_bucket_option_suggests_the_right_one(js, unique):
    err = _refused(js.create_key_value, bucket=f"UK{unique}", histroy=5)
    assert "unknown option 'histroy' for create_key_value; did you mean 'history'?" in str(err)
    err = _refused(js.create_object_store, bucket=f"UB{unique}", max_byte=10)
    assert "unknown option 'max_byte' for create_object_store; did you mean 'max_bytes'?" in str(err)
    assert list(js.stream_names(subject=f"$KV.UK{unique}.>")) == []


def test_fetch_with_timeout_names_expires(js, stream):
    c = js.create_consumer(stream.name, durable_name="F")
    for call in (c.fetch, c.fetch_bytes):
        with pytest.raises(TypeError) as ei:
            call(10, timeout=5)
        assert isinstance(ei.value, jssync.ValidationError)
        assert "expires=" in str(ei.value) and "timeout" in str(ei.value), ei.value
    assert c.info().num_waiting == 0
