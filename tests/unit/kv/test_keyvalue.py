"""A bucket's configuration: create, open, update and delete on server replies recorded from
nats-server (tests/unit/kv/replies/kv.json; tools/record_api_replies.py).

The bucket calls build the bucket's stream config (history, ttl, limit markers, placement,
replicas...) and go through the JetStream context's API transport: the replay checks each
request against what the server got, and answers with what it sent back.
"""

from __future__ import annotations

import pytest
from nats.js import api

import jssync
from tests.replay import recorded_context, reply_of

pytestmark = pytest.mark.timeout(30)

MEM = api.StorageType.MEMORY
PROFILES = dict(bucket="profiles", history=5, ttl=3600.0, storage=MEM, max_value_size=1024,
                description="user profiles")


def test_create_bucket_makes_its_stream_with_history_ttl_and_kv_settings():
    js, replay = recorded_context("kv", "kv", "create_bucket")
    kv = js.create_key_value(**PROFILES)
    assert isinstance(kv, jssync.KeyValue) and kv.bucket == "profiles"
    subject, body, _ = replay.sent[0]
    assert subject == "$JS.API.STREAM.CREATE.KV_profiles"
    assert body["subjects"] == ["$KV.profiles.>"]
    assert body["max_msgs_per_subject"] == 5  # history
    assert body["max_age"] == 3600 * 10**9  # ttl
    assert body["duplicate_window"] == 120 * 10**9  # under a long ttl: 2 minutes
    assert body["max_msg_size"] == 1024
    assert (body["discard"], body["deny_delete"], body["allow_rollup_hdrs"], body["allow_direct"]) == \
        ("new", True, True, True)
    cfg = kv.stream.cached_info.config  # the config the server answered with
    assert (cfg.max_msgs_per_subject, cfg.max_age, cfg.storage) == (5, 3600.0, MEM)
    assert replay.done()


def test_creating_a_bucket_again_with_the_same_config_returns_it():
    js, replay = recorded_context("kv", "kv", "create_bucket_same_config")
    assert js.create_key_value(**PROFILES).bucket == "profiles"
    assert replay.done()


def test_a_bucket_that_exists_with_another_config_raises_bucket_exists():
    js, replay = recorded_context("kv", "kv", "create_bucket_exists")
    with pytest.raises(jssync.BucketExistsError) as err:
        js.create_key_value(bucket="profiles", history=2, storage=MEM)
    assert err.value.err_code == 10058 and "'profiles'" in str(err.value)
    assert replay.done()


def test_limit_marker_ttl_checks_the_api_level_and_turns_on_per_message_ttl():
    js, replay = recorded_context("kv", "kv", "create_bucket_limit_marker_ttl")
    kv = js.create_key_value(bucket="sessions", ttl=60.0, limit_marker_ttl=5.0, storage=MEM)
    assert [s for s, _, _ in replay.sent] == ["$JS.API.INFO", "$JS.API.STREAM.CREATE.KV_sessions"]
    body = replay.sent[1][1]
    assert body["allow_msg_ttl"] is True and body["subject_delete_marker_ttl"] == 5 * 10**9
    assert body["duplicate_window"] == 60 * 10**9  # a ttl under 2 minutes is the window
    assert kv.stream.cached_info.config.subject_delete_marker_ttl == 5.0
    assert replay.done()


def test_placement_goes_into_the_stream_config():
    js, replay = recorded_context("kv", "kv", "create_bucket_placement")
    kv = js.create_key_value(bucket="placed", storage=MEM, placement=api.Placement(tags=["ssd"]))
    assert replay.sent[0][1]["placement"] == {"tags": ["ssd"]}
    assert kv.stream.cached_info.config.placement == api.Placement(tags=["ssd"])
    assert replay.done()


def test_replicas_a_single_server_cannot_have_raise_the_servers_api_error():
    js, replay = recorded_context("kv", "kv", "create_bucket_replicas")
    with pytest.raises(jssync.APIError) as err:
        js.create_key_value(bucket="replicated", storage=MEM, replicas=3)
    assert (err.value.code, err.value.err_code) == (500, 10074)
    assert replay.sent[0][1]["num_replicas"] == 3
    assert replay.done()


def test_open_reads_the_bucket_and_a_missing_one_raises_bucket_not_found():
    js, replay = recorded_context("kv", "kv", "open_bucket")
    assert js.key_value("profiles").bucket == "profiles"
    assert replay.done()
    js, replay = recorded_context("kv", "kv", "open_bucket_missing")
    with pytest.raises(jssync.BucketNotFoundError) as err:
        js.key_value("nothing")
    assert err.value.err_code == 10059 and "'nothing'" in str(err.value)
    assert replay.done()


def test_status_asks_for_the_stream_info_again():
    js, replay = recorded_context("kv", "kv", "bucket_status")
    status = js.key_value("profiles").status()
    assert status.bucket == "profiles" and status.history == 5
    assert [s for s, _, _ in replay.sent] == ["$JS.API.STREAM.INFO.KV_profiles"] * 2
    assert replay.done()


def test_update_sends_the_whole_config_and_a_missing_bucket_raises_bucket_not_found():
    js, replay = recorded_context("kv", "kv", "update_bucket")
    kv = js.update_key_value(bucket="profiles", history=10, ttl=3600.0, storage=MEM, max_value_size=1024,
                             description="user profiles")
    # the current stream config first (its fields no bucket option covers are sent back), then the update
    assert [x[0] for x in replay.sent] == ["$JS.API.STREAM.INFO.KV_profiles", "$JS.API.STREAM.UPDATE.KV_profiles"]
    assert replay.sent[1][1]["max_msgs_per_subject"] == 10
    assert kv.stream.cached_info.config.max_msgs_per_subject == 10
    js, replay = recorded_context("kv", "kv", "update_bucket_missing")
    with pytest.raises(jssync.BucketNotFoundError):
        js.update_key_value(bucket="nothing", storage=MEM)
    assert replay.done()


def test_bucket_names_are_the_kv_streams():
    js, replay = recorded_context("kv", "kv", "bucket_names")
    names = list(js.key_value_store_names())
    streams = [s["config"] for s in reply_of("kv", "kv", "bucket_names")["streams"]]
    assert sorted(names) == sorted(c["name"][3:] for c in streams
                                   if c["name"].startswith("KV_") and f"$KV.{c['name'][3:]}.>" in c["subjects"])
    assert "profiles" in names and "ORDERS" not in names
    assert replay.done()


def test_delete_removes_the_stream_and_a_missing_bucket_raises_bucket_not_found():
    js, replay = recorded_context("kv", "kv", "delete_bucket")
    assert js.delete_key_value("sessions") is True
    js, replay = recorded_context("kv", "kv", "delete_bucket_missing")
    with pytest.raises(jssync.BucketNotFoundError):
        js.delete_key_value("sessions")
    assert replay.done()


def test_bad_bucket_options_are_refused_before_anything_is_sent():
    js, replay = recorded_context("kv", "kv", "create_bucket")
    with pytest.raises(jssync.InvalidBucketNameError):
        js.create_key_value(bucket="bad name")
    with pytest.raises(jssync.KeyHistoryTooLargeError):
        js.create_key_value(bucket="profiles", history=65)
    with pytest.raises(ValueError):
        js.create_key_value(bucket="profiles", limit_marker_ttl=0.5)
    assert replay.sent == []


def test_a_source_that_is_the_same_bucket_in_another_domain_gets_no_subject_transform():
    from jssync.kv.admin import _stream_config

    ext = api.ExternalStream(api="$JS.HUB.API")
    scfg = _stream_config(None, {"bucket": "orders", "sources": [api.StreamSource(name="orders", external=ext),
                                                                   api.StreamSource(name="other", external=ext)]})
    same, other = scfg.sources
    assert (same.name, same.subject_transforms) == ("KV_orders", None)
    assert other.subject_transforms == [api.SubjectTransform(src="$KV.other.>", dest="$KV.orders.>")]
    assert scfg.subjects == ["$KV.orders.>"]
