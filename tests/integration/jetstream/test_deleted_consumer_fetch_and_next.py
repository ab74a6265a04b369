"""``fetch`` and ``next`` of a consumer deleted while no pull of it waits end like every other
reader of a deleted consumer: with ``jssync.ConsumerDeletedError`` (a
``ConsumerNotFoundError``), not with a bare "no responders". Real server, default options."""

from __future__ import annotations

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def consumer(js, stream):
    js.publish(f"{stream.name}.m", b"0")
    c = stream.create_consumer(durable_name="D")
    for msg in c.fetch(1, expires=5 * FACTOR):
        msg.ack()  # the handle has read from the consumer
    js.delete_consumer(stream.name, "D")  # ... and then it is deleted, no pull waiting
    return c


def test_fetch_of_a_consumer_deleted_while_no_pull_waits_raises_consumer_deleted(consumer, stream) -> None:
    with pytest.raises(jssync.ConsumerNotFoundError) as info:
        list(consumer.fetch(1, expires=2 * FACTOR))
    assert type(info.value) is jssync.ConsumerDeletedError
    assert (info.value.stream, info.value.consumer) == (stream.name, "D")


def test_next_of_a_consumer_deleted_while_no_pull_waits_raises_consumer_deleted(consumer, stream) -> None:
    with pytest.raises(jssync.ConsumerNotFoundError) as info:
        consumer.next(timeout=2 * FACTOR)
    assert type(info.value) is jssync.ConsumerDeletedError
    assert (info.value.stream, info.value.consumer) == (stream.name, "D")


def test_fetch_no_wait_of_a_consumer_deleted_while_no_pull_waits_raises_consumer_deleted(consumer) -> None:
    with pytest.raises(jssync.ConsumerNotFoundError) as info:
        list(consumer.fetch_no_wait(1))
    assert type(info.value) is jssync.ConsumerDeletedError
