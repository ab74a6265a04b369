"""A read-modify-write of a stream config sends back everything the server holds (the codec in
jetstream/model.py keeps the keys nats-py does not model); compared on the raw STREAM.INFO."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(60)


def _server_config(nc, name: str) -> dict:
    reply = nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5.0)
    return json.loads(reply.data)["config"]


def test_read_modify_write_of_a_stream_changes_only_the_field_edited(nc, js, unique):
    name = f"RW{unique}"
    body = {"name": name, "subjects": [f"{name}.>"], "storage": "memory", "max_msgs_per_subject": 3,
            "allow_direct": True, "allow_rollup_hdrs": True, "deny_delete": True, "discard": "new",
            "duplicate_window": 30_000_000_000, "metadata": {"team": "a"}, "allow_msg_ttl": True}
    reply = json.loads(nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), timeout=5.0).data)
    assert "error" not in reply, reply
    try:
        before = _server_config(nc, name)
        cfg = js.stream(name).info().config
        cfg.description = "edited"
        js.update_stream(cfg)
        after = _server_config(nc, name)
        assert after.pop("description") == "edited"
        before.pop("description", None)
        assert after == before
    finally:
        js.delete_stream(name)


def test_sealing_an_object_store_changes_only_sealed(nc, js, unique):
    bucket = f"SO{unique}"
    obs = js.create_object_store(bucket=bucket, storage="memory", description="kept", metadata={"k": "v"})
    try:
        before = _server_config(nc, f"OBJ_{bucket}")
        obs.seal()
        after = _server_config(nc, f"OBJ_{bucket}")
        assert after.pop("sealed") is True and before.pop("sealed", False) is False
        for key in ("deny_delete", "deny_purge", "allow_rollup_hdrs"):  # the server sets these on a sealed stream
            before.pop(key, None)
            after.pop(key, None)
        assert after == before
    finally:
        js.delete_object_store(bucket)


def test_update_key_value_keeps_the_stream_fields_bucket_options_do_not_cover(nc, js, unique):
    bucket = f"KU{unique}"
    js.create_key_value(bucket=bucket, storage="memory", history=2)
    stream = f"KV_{bucket}"
    # set by another tool on the bucket's stream: fields no bucket option covers
    raw = _server_config(nc, stream)
    raw.update(allow_atomic=True)
    reply = json.loads(nc.request(f"$JS.API.STREAM.UPDATE.{stream}", json.dumps(raw).encode(), timeout=5.0).data)
    assert "error" not in reply, reply
    try:
        js.update_key_value(bucket=bucket, storage="memory", history=5)
        after = _server_config(nc, stream)
        assert after["max_msgs_per_subject"] == 5
        assert after.get("allow_atomic") is True, after
    finally:
        js.delete_key_value(bucket)
