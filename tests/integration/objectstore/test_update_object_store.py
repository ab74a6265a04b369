"""``update_object_store`` / ``create_or_update_object_store`` against a real nats-server.

Ported from nats.go jetstream/test/object_test.go (TestCreateObjectStore, TestUpdateObjectStore,
TestCreateOrUpdateObjectStore), plus which fields may change and what the update keeps.
"""

from __future__ import annotations

import json

import pytest
from nats.js import api

import jssync
from jssync.kv.keyvalue import BucketExistsError, BucketNotFoundError, InvalidBucketNameError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def bucket(js, unique):
    name = f"TEST{unique}"
    yield name
    try:
        js.delete_object_store(name)
    except BucketNotFoundError:
        pass


def _raw_config(nc, stream: str) -> dict:
    return json.loads(nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5.0).data)["config"]


def test_create_object_store_refuses_a_bad_name_and_a_different_existing_store(js, bucket):
    with pytest.raises(InvalidBucketNameError):
        js.create_object_store(bucket="TEST.", description="Test store")
    js.create_object_store(bucket=bucket, description="Test store")
    with pytest.raises(BucketExistsError) as err:
        js.create_object_store(bucket=bucket, description="New store")
    assert isinstance(err.value, jssync.StreamNameInUseError)  # as before: the stream's error too


def test_update_object_store_needs_an_existing_store_and_changes_it(js, bucket):
    with pytest.raises(BucketNotFoundError):
        js.update_object_store(bucket=bucket, description="Test store")
    js.create_object_store(bucket=bucket, description="Test store")
    store = js.update_object_store(bucket=bucket, description="New store")
    assert store.bucket == bucket
    assert store.status().description == "New store"


def test_create_or_update_object_store_creates_then_updates(js, bucket):
    with pytest.raises(InvalidBucketNameError):
        js.create_or_update_object_store(bucket="TEST.", description="Test store")
    store = js.create_or_update_object_store(bucket=bucket, description="Test store")
    assert store.status().description == "Test store"
    store = js.create_or_update_object_store(bucket=bucket, description="New store")
    assert store.status().description == "New store"


def test_update_changes_the_fields_that_may_change_and_keeps_the_objects(js, bucket):
    store = js.create_object_store(bucket=bucket, storage="memory", ttl=3600.0)
    store.put("doc", b"hello")
    updated = js.update_object_store(api.ObjectStoreConfig(bucket=bucket, storage=api.StorageType.MEMORY,
                                                           description="docs", ttl=7200.0, max_bytes=1 << 20),
                                     metadata={"team": "a"}, compression=True)
    status = updated.status()
    assert (status.description, status.ttl, status.is_compressed) == ("docs", 7200.0, True)
    assert status.metadata.get("team") == "a"
    assert status.stream_info.config.max_bytes == 1 << 20
    assert updated.get_bytes("doc") == b"hello"
    # options left out go back to their defaults, as on create
    js.update_object_store(bucket=bucket, storage="memory")
    status = js.object_store(bucket).status()
    assert (status.description, status.ttl, status.is_compressed) == (None, None, False)
    assert js.object_store(bucket).get_bytes("doc") == b"hello"


def test_update_cannot_change_the_storage(js, bucket):
    js.create_object_store(bucket=bucket, storage="memory")
    with pytest.raises(jssync.APIError):
        js.update_object_store(bucket=bucket, storage="file")
    assert js.object_store(bucket).status().storage == api.StorageType.MEMORY


def test_update_sends_back_what_no_store_option_covers(nc, js, bucket):
    js.create_object_store(bucket=bucket, storage="memory")
    # a field set by another tool: the store's stream with deny_delete
    raw = _raw_config(nc, f"OBJ_{bucket}")
    raw["deny_delete"] = True
    reply = json.loads(nc.request(f"$JS.API.STREAM.UPDATE.OBJ_{bucket}", json.dumps(raw).encode(), timeout=5.0).data)
    assert "error" not in reply, reply
    js.update_object_store(bucket=bucket, storage="memory", description="kept")
    after = _raw_config(nc, f"OBJ_{bucket}")
    assert after["deny_delete"] is True
    assert after["description"] == "kept"


def test_bad_update_options_are_refused_before_sending(js, bucket):
    with pytest.raises(jssync.UnknownOptionError, match="history"):
        js.update_object_store(bucket=bucket, history=3)
    with pytest.raises(TypeError, match="ObjectStoreConfig"):
        js.update_object_store(api.KeyValueConfig(bucket=bucket))
    with pytest.raises(jssync.UnknownOptionError):
        js.create_or_update_object_store(bucket=bucket, history=3)
    with pytest.raises(BucketNotFoundError):
        js.object_store(bucket)


def test_a_sealed_store_updates_and_stays_sealed(js, bucket):
    store = js.create_object_store(bucket=bucket, storage="memory")
    store.put("doc", b"hello")
    store.seal()
    updated = js.update_object_store(bucket=bucket, storage="memory", description="archive")
    status = updated.status()
    assert (status.sealed, status.description) == (True, "archive")
    assert updated.get_bytes("doc") == b"hello"
    with pytest.raises(jssync.Error):
        updated.put("more", b"x")
