"""Updating a consumer keeps what the server holds: keyword updates edit on top of the current
config, and a read-modify-write sends back the fields jssync does not model."""

from __future__ import annotations

import json


def _server_config(nc, stream: str, name: str) -> dict:
    """The consumer's config as the server holds it (a raw CONSUMER.INFO request, not jssync's view)."""
    reply = nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=5.0)
    return json.loads(reply.data)["config"]


def test_keyword_update_of_a_consumer_keeps_the_fields_not_given(nc, js, stream):
    s = stream.name
    js.create_consumer(s, durable_name="D", ack_policy="explicit", ack_wait=60, max_deliver=5, max_ack_pending=7)
    js.update_consumer(s, durable_name="D", description="edited")
    cfg = _server_config(nc, s, "D")
    assert cfg["description"] == "edited"
    assert cfg["ack_wait"] == 60 * 1_000_000_000
    assert cfg["max_deliver"] == 5
    assert cfg["max_ack_pending"] == 7


def test_read_modify_write_of_a_consumer_keeps_fields_jssync_does_not_model(nc, js, stream):
    s = stream.name
    # made by another tool: the pull request limits nats-py's dataclass lacks
    body = {"stream_name": s, "action": "create",
            "config": {"durable_name": "R", "ack_policy": "explicit", "max_batch": 10,
                       "max_expires": 5_000_000_000, "max_bytes": 1024}}
    reply = json.loads(nc.request(f"$JS.API.CONSUMER.CREATE.{s}.R", json.dumps(body).encode(), timeout=5.0).data)
    assert "error" not in reply, reply
    cfg = js.consumer(s, "R").info().config
    cfg.description = "edited"
    js.update_consumer(s, cfg)
    raw = _server_config(nc, s, "R")
    assert raw["description"] == "edited"
    assert raw.get("max_batch") == 10
    assert raw.get("max_expires") == 5_000_000_000
    assert raw.get("max_bytes") == 1024

