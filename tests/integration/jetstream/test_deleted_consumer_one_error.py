"""Every reader whose consumer is deleted under it ends the same way: with
``jssync.ConsumerDeletedError``, which is also a ``jssync.ConsumerNotFoundError``, so one
``except jssync.ConsumerNotFoundError`` handles a consumer missing at the start and one deleted
while being read. Real server, default options."""

from __future__ import annotations

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stream(js, unique):
    name = f"DEL{unique}"
    st = js.create_stream(name=name, subjects=[f"del{unique}.*"], storage="memory")
    js.publish(f"del{unique}.m", b"0")
    try:
        yield st
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def test_a_pull_consume_of_a_deleted_consumer_ends_with_a_consumer_not_found_error(js, stream):
    consumer = stream.create_consumer(durable_name="D")
    got = []
    with pytest.raises(jssync.ConsumerNotFoundError) as info, consumer.consume() as messages:
        for msg in messages:
            got.append(msg.data)
            msg.ack()
            js.delete_consumer(stream.name, "D")
    assert got == [b"0"]
    assert type(info.value) is jssync.ConsumerDeletedError
    assert (info.value.stream, info.value.consumer) == (stream.name, "D")
    assert not info.value.retriable


def test_a_push_iterator_of_a_deleted_consumer_ends_with_the_same_error(js, stream):
    sub = js.subscribe(f"del{stream.name[3:]}.m", durable="P", idle_heartbeat=1.0)
    try:
        sub.next_msg(timeout=5 * FACTOR).ack()
        js.delete_consumer(stream.name, "P")
        with pytest.raises(jssync.ConsumerNotFoundError) as info:
            sub.next_msg(timeout=10 * FACTOR)
        assert type(info.value) is jssync.ConsumerDeletedError
    finally:
        sub.unsubscribe()


def test_a_missing_consumer_and_a_deleted_one_share_one_except_clause(js, stream):
    with pytest.raises(jssync.ConsumerNotFoundError) as missing:
        js.consumer(stream.name, "NOPE")
    assert type(missing.value) is jssync.ConsumerNotFoundError  # a lookup: not found, not deleted
    consumer = stream.create_consumer(durable_name="C")
    errors: list[BaseException] = []
    cc = consumer.consume(lambda m: m.ack(), error_cb=errors.append)
    wait_for(lambda: consumer.info().num_waiting >= 1, what="the consume's pull")
    consumer.delete()
    cc.wait(10 * FACTOR)
    assert cc.closed and isinstance(cc.error, jssync.ConsumerNotFoundError)
    assert any(type(e) is jssync.ConsumerDeletedError for e in errors), errors
