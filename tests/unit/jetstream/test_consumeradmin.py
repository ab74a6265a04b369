"""The JetStream context's consumer room, driven with server replies recorded from nats-server
(tests/unit/jetstream/replies/management.json; tools/record_api_replies.py)."""

from __future__ import annotations

import datetime as _dt

import pytest
from nats.js import api

import jssync
from tests.replay import recorded_context, reply_of

pytestmark = pytest.mark.timeout(30)


def test_create_consumer_names_it_and_its_filter_in_the_subject():
    js, replay = recorded_context("jetstream", "management", "create_consumer")
    consumer = js.create_consumer("ORDERS", durable_name="worker", filter_subject="orders.new", ack_wait=30.0)
    assert isinstance(consumer, jssync.Consumer)
    assert consumer.name == "worker" and consumer.cached_info.config.ack_wait == 30.0
    subject, body, _ = replay.sent[0]
    assert subject == "$JS.API.CONSUMER.CREATE.ORDERS.worker.orders.new"
    assert body["action"] == "create" and body["config"]["ack_wait"] == 30_000_000_000
    assert replay.done()


def test_an_existing_consumer_with_another_config_raises_consumer_exists_10148():
    js, replay = recorded_context("jetstream", "management", "create_consumer_exists")
    with pytest.raises(jssync.ConsumerExistsError) as err:
        js.create_consumer("ORDERS", durable_name="worker", filter_subject="orders.new", ack_wait=10.0)
    assert (err.value.code, err.value.err_code) == (400, 10148)
    assert replay.done()


def test_a_consumer_on_a_missing_stream_raises_stream_not_found_naming_the_stream():
    js, replay = recorded_context("jetstream", "management", "create_consumer_stream_not_found")
    with pytest.raises(jssync.StreamNotFoundError) as err:
        js.create_consumer("MISSING", durable_name="worker")
    assert err.value.err_code == 10059 and "'MISSING'" in str(err.value)
    assert replay.done()


def test_an_ephemeral_consumer_is_created_under_a_name_the_client_chose(monkeypatch):
    import jssync.jetstream.consumeradmin as admin

    names = iter(["wO8EXjx1"])
    monkeypatch.setattr(admin, "ephemeral_name", lambda: next(names))
    js, replay = recorded_context("jetstream", "management", "create_ephemeral_consumer")
    config = jssync.ConsumerConfig(inactive_threshold=60.0)
    consumer = js.create_consumer("ORDERS", config)
    assert consumer.name == reply_of("jetstream", "management", "create_ephemeral_consumer")["name"] == "wO8EXjx1"
    subject, body, _ = replay.sent[0]
    assert subject == "$JS.API.CONSUMER.CREATE.ORDERS.wO8EXjx1"  # the named form (ADR-37), as nats.go
    assert body["config"]["name"] == "wO8EXjx1" and "durable_name" not in body["config"]
    assert config.name is None  # the caller's config is left as it was
    assert replay.done()


def test_ephemeral_names_are_eight_letters_or_digits_and_differ():
    from jssync.jetstream.consumeradmin import ephemeral_name

    names = {ephemeral_name() for _ in range(200)}
    assert len(names) == 200
    assert all(len(n) == 8 and n.isalnum() and n.isascii() for n in names)


def test_update_consumer_sends_the_update_action():
    js, replay = recorded_context("jetstream", "management", "update_consumer")
    # a whole config object: one request, no lookup first (keyword-only updates read the config first)
    config = jssync.ConsumerConfig(durable_name="worker", filter_subject="orders.new", ack_wait=10.0)
    consumer = js.update_consumer("ORDERS", config)
    assert consumer.cached_info.config.ack_wait == 10.0
    assert replay.sent[0][1]["action"] == "update"
    assert replay.done()


def test_updating_a_missing_consumer_raises_consumer_not_found_10149():
    js, replay = recorded_context("jetstream", "management", "update_consumer_not_found")
    with pytest.raises(jssync.ConsumerNotFoundError) as err:
        js.update_consumer("ORDERS", jssync.ConsumerConfig(durable_name="ghost"))
    assert err.value.err_code == 10149
    assert replay.done()


def test_consumer_looks_up_its_info():
    js, replay = recorded_context("jetstream", "management", "consumer_info")
    consumer = js.consumer("ORDERS", "worker")
    assert consumer.name == "worker" and consumer.cached_info.stream_name == "ORDERS"
    assert replay.done()


def test_a_missing_consumer_raises_consumer_not_found_10014_naming_consumer_and_stream():
    js, replay = recorded_context("jetstream", "management", "consumer_not_found")
    with pytest.raises(jssync.ConsumerNotFoundError) as err:
        js.consumer("ORDERS", "ghost")
    assert (err.value.code, err.value.err_code) == (404, 10014)
    assert "'ghost'" in str(err.value) and "'ORDERS'" in str(err.value)
    assert replay.done()


def test_consumer_names_and_consumers_list_every_consumer_of_the_stream():
    js, replay = recorded_context("jetstream", "management", "consumer_names")
    names = list(js.consumer_names("ORDERS"))
    assert names == reply_of("jetstream", "management", "consumer_names")["consumers"] and "worker" in names
    assert replay.sent == [("$JS.API.CONSUMER.NAMES.ORDERS", {"offset": 0}, None)]
    js, replay = recorded_context("jetstream", "management", "consumers")
    infos = list(js.consumers("ORDERS"))
    assert all(isinstance(i, api.ConsumerInfo) for i in infos)
    assert sorted(i.name for i in infos) == sorted(names)
    assert replay.done()


def test_pause_checks_the_api_level_then_sends_the_time_and_resume_sends_none():
    js, replay = recorded_context("jetstream", "management", "pause_consumer")
    state = js.pause_consumer("ORDERS", "worker", _dt.datetime(2030, 1, 1, tzinfo=_dt.UTC))
    assert state["paused"] is True
    assert [s for s, _, _ in replay.sent] == ["$JS.API.INFO", "$JS.API.CONSUMER.PAUSE.ORDERS.worker"]
    assert replay.sent[1][1] == {"pause_until": "2030-01-01T00:00:00Z"}
    js, replay = recorded_context("jetstream", "management", "resume_consumer")
    assert js.resume_consumer("ORDERS", "worker")["paused"] is False
    assert replay.done()


def test_reset_carries_the_api_level_it_needs_and_returns_the_sequence_delivery_restarts_at():
    js, replay = recorded_context("jetstream", "management", "reset_consumer")
    seq = js.reset_consumer("ORDERS", "worker")
    assert seq == reply_of("jetstream", "management", "reset_consumer", 1)["reset_seq"]
    assert replay.sent[1] == ("$JS.API.CONSUMER.RESET.ORDERS.worker", None, {"Nats-Required-Api-Level": "4"})
    assert replay.done()


def test_delete_consumer_returns_success_and_a_missing_one_raises_10014():
    js, replay = recorded_context("jetstream", "management", "delete_consumer")
    assert js.delete_consumer("ORDERS", "worker") is True
    js, replay = recorded_context("jetstream", "management", "delete_consumer_not_found")
    with pytest.raises(jssync.ConsumerNotFoundError) as err:
        js.delete_consumer("ORDERS", "worker")
    assert err.value.err_code == 10014
    assert replay.done()


def test_bad_names_are_refused_before_anything_is_sent():
    js, replay = recorded_context("jetstream", "management", "consumer_info")
    with pytest.raises(ValueError):
        js.consumer("ORDERS", "bad.name")
    with pytest.raises(ValueError):
        js.reset_consumer("ORDERS", "worker", 0)
    with pytest.raises(TypeError):
        js.pause_consumer("ORDERS", "worker", "tomorrow")
    assert replay.sent == []
