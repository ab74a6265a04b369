"""The JetStream API layer (jssync.jetstream.apicalls): request in, parsed reply or jssync error out,
on server replies recorded from nats-server (tests/unit/jetstream/replies/management.json)."""

from __future__ import annotations

import pytest

import jssync
from tests.replay import recorded_context

pytestmark = pytest.mark.timeout(30)


def test_the_subject_is_the_prefix_and_the_suffix_and_a_dict_payload_is_sent_as_json():
    js, replay = recorded_context("jetstream", "management", "find_stream_name_by_subject")
    resp = js._api("STREAM.NAMES", {"subject": "orders.new", "offset": 0})
    assert resp["streams"] == ["ORDERS"]
    assert replay.sent == [("$JS.API.STREAM.NAMES", {"subject": "orders.new", "offset": 0}, None)]


def test_a_request_above_the_servers_api_level_raises_not_supported():
    js, replay = recorded_context("jetstream", "management", "api_level_refused")
    with pytest.raises(jssync.NotSupportedError) as err:
        js._api("CONSUMER.INFO.ORDERS.worker", None, 5.0, feature=("consumer reset", 99))
    assert err.value.feature == "consumer reset"
    assert isinstance(err.value.__cause__, jssync.APIError) and err.value.__cause__.err_code == 10185
    assert replay.done()



def test_a_not_found_error_names_the_stream_and_consumer_of_the_request():
    js, replay = recorded_context("jetstream", "management", "consumer_not_found")
    with pytest.raises(jssync.ConsumerNotFoundError) as err:
        js._api("CONSUMER.INFO.ORDERS.ghost")
    assert "consumer 'ghost'" in str(err.value) and "stream 'ORDERS'" in str(err.value)
    assert err.value.description == "consumer not found"
    assert replay.done()


def test_a_subjects_overlap_with_a_dict_payload_looks_up_the_holder():
    js, replay = recorded_context("jetstream", "management", "create_stream_subjects_overlap")
    body = replay.exchanges[0]["request"]
    with pytest.raises(jssync.APIError) as err:
        js._api("STREAM.CREATE.SHADOW", body)
    assert err.value.err_code == 10065 and "stream 'ORDERS' holds subjects" in str(err.value)
    assert replay.done()
