"""A push subscribe's ADR-15 checks of an existing consumer, on CONSUMER.INFO replies recorded from
nats-server (tests/unit/jetstream/replies/push.json; tools/record_api_replies.py).

``subscribe`` looks the consumer up (``_consumer_info_raw``, through the context's API
transport) and runs :func:`jssync.jetstream.push.check_consumer` on the reply with the
configuration the user asked for (``_user_config``); these tests run the same two steps.
"""

from __future__ import annotations

from typing import Any

import pytest

import jssync
from jssync.jetstream.push import _consumer_info_raw, _user_config, check_consumer
from tests.replay import recorded_context

pytestmark = pytest.mark.timeout(30)


def _info(name: str) -> dict[str, Any] | None:
    js, replay = recorded_context("jetstream", "push", name)
    info = _consumer_info_raw(js, "PUSH", name, 5.0)
    assert replay.sent == [(f"$JS.API.CONSUMER.INFO.PUSH.{name}", None, None)]
    return info


def _check(name: str, subject: str, queue: str | None = None, **options: Any) -> None:
    info = _info(name)
    assert info is not None
    user, given = _user_config(None, options, None, False)
    check_consumer(info, subject=subject, queue=queue, pull=False, config=user, compare=given)


def test_a_missing_consumer_is_none_so_that_subscribe_creates_it():
    assert _info("ghost") is None


def test_a_pull_consumer_refuses_a_push_subscription():
    with pytest.raises(jssync.ConsumerIsPullBasedError):
        _check("puller", subject="")


def test_a_consumer_made_for_a_queue_group_refuses_a_plain_subscription_and_another_group():
    with pytest.raises(jssync.DeliverGroupError):
        _check("grouped", subject="")
    with pytest.raises(jssync.DeliverGroupError):
        _check("grouped", subject="", queue="other")
    _check("grouped", subject="", queue="q")  # its own group passes


def test_a_subject_other_than_the_consumers_filter_is_a_mismatch():
    with pytest.raises(jssync.SubjectMismatchError):
        _check("filtered", subject="push.b")
    _check("filtered", subject="push.a")


def test_a_field_set_to_another_value_than_the_consumers_is_a_config_mismatch():
    with pytest.raises(jssync.ConsumerConfigMismatchError) as err:
        _check("slow", subject="", ack_wait=10.0)
    assert err.value.field == "ack_wait"
    _check("slow", subject="", ack_wait=30.0)  # the same value passes
    _check("slow", subject="", max_deliver=-1)  # and so does a field left at the server's value


def test_heartbeats_are_compared_and_a_consumer_without_a_group_refuses_a_queue_subscription():
    _check("beating", subject="", idle_heartbeat=5.0, flow_control=True)
    with pytest.raises(jssync.ConsumerConfigMismatchError) as err:
        _check("beating", subject="", idle_heartbeat=2.0)
    assert err.value.field == "idle_heartbeat"
    with pytest.raises(jssync.DeliverGroupError):
        _check("beating", subject="", queue="q")


def test_a_consumer_bound_to_a_subscription_refuses_a_second_one():
    info = _info("bound")
    assert info is not None and info["push_bound"] is True
    with pytest.raises(jssync.DuplicateSubscriptionError):
        check_consumer(info, subject="", queue=None)
