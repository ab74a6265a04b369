"""The config codec (jssync/jetstream/model.py): server fields beside nats-py's dataclasses, pure."""

from __future__ import annotations

import copy
import json

import pytest
from nats.js import api

import jssync
from jssync.jetstream import model
from jssync.jetstream.consumeradmin import consumer_model, consumer_wire
from jssync.jetstream.params import ConsumerParams, _consumer_config

pytestmark = pytest.mark.timeout(60)


def test_every_consumer_field_row_is_a_typed_keyword_of_the_consumer_calls() -> None:
    hints = ConsumerParams.__annotations__  # strings (the module's annotations are postponed)
    for field in model.CONSUMER_FIELDS:
        assert field.name in hints, f"add {field.name} to ConsumerParams"
        hint = hints[field.name]
        text = getattr(hint, "__forward_arg__", hint)
        assert str(text).replace(" ", "") == f"{field.kind.__name__}|None", field.name


def test_the_pull_request_limits_go_out_in_the_servers_units_and_come_back_in_seconds() -> None:
    cfg = _consumer_config(None, {"durable_name": "D", "max_batch": 10, "max_expires": "1m30s", "max_bytes": 0})
    body = consumer_wire(cfg)
    assert body["max_batch"] == 10 and body["max_expires"] == 90_000_000_000 and body["max_bytes"] == 0
    info = consumer_model({"stream_name": "S", "name": "D", "created": "2026-01-01T00:00:00Z",
                           "config": {"durable_name": "D", **body}})
    assert (info.config.max_batch, info.config.max_expires) == (10, 90.0)  # type: ignore[attr-defined]
    assert model.extra_fields(info.config) == {}, "a modeled field is not kept as an unknown one"


def test_keyword_options_leave_the_callers_config_as_it_was() -> None:
    base = api.ConsumerConfig(durable_name="D")
    out = _consumer_config(base, {"max_batch": 3})
    assert out.max_batch == 3 and getattr(base, "max_batch", None) is None  # type: ignore[attr-defined]


def test_a_field_row_with_a_higher_api_level_asks_for_it() -> None:
    row = model.ServerField("x", int, False, 3, "")
    assert model.required_level({"x": 1}, (row,)) == 3
    assert model.required_level({"x": None}, (row,)) == 0


@pytest.mark.parametrize("value", ["3", 2.5, True, -1])
def test_a_bad_count_names_the_option(value: object) -> None:
    with pytest.raises(jssync.ValidationError, match="max_batch"):
        _consumer_config(None, {"durable_name": "D", "max_batch": value})


# -- round trips of recorded server replies (tests/unit/*/replies, tools/record_api_replies.py) --

_FUTURE = {"future_field": {"nested": [1, "two"]}, "future_flag": True}


def _recorded(layer: str, name: str, wanted: str) -> list[dict]:
    """The parsed replies of ``layer/replies/name.json`` whose request subject contains ``wanted``."""
    from tests.replay import load

    out = []
    for exchanges in load(layer, name)["scenarios"].values():
        for ex in exchanges:
            if wanted in ex["subject"] and "reply" in ex:
                reply = json.loads(ex["reply"])
                if isinstance(reply.get("config"), dict):
                    out.append(reply)
    assert out, f"no recorded {wanted} replies in {layer}/{name}.json"
    return out


def _stream_replies() -> list[dict]:
    return (_recorded("jetstream", "management", "STREAM.INFO") + _recorded("jetstream", "management", "STREAM.CREATE")
            + _recorded("kv", "kv", "STREAM."))


@pytest.mark.parametrize("reply", _stream_replies())
def test_a_recorded_stream_config_goes_back_with_every_key_unknown_ones_included(reply: dict) -> None:
    from jssync.jetstream.sourcing import stream_wire
    from jssync.jetstream.streamadmin import stream_config, stream_model

    raw = dict(reply["config"], **_FUTURE)
    info = stream_model(dict(reply, config=copy.deepcopy(raw)))
    assert model.extra_fields(info.config) == _FUTURE
    # a read-modify-write: one field changed on the config read back
    cfg = info.config
    cfg.description = "edited"
    body = stream_wire(stream_config(cfg, {}, "update_stream"))
    assert body["description"] == "edited"
    for key, value in _FUTURE.items():
        assert body[key] == value
    missing = {k for k, v in raw.items() if k not in body and v not in (None, False, 0, "", [], {})}
    assert not missing, f"keys of the reply not sent back: {missing}"


@pytest.mark.parametrize("reply", _recorded("jetstream", "management", "CONSUMER.INFO")
                         + _recorded("jetstream", "management", "CONSUMER.CREATE"))
def test_a_recorded_consumer_config_goes_back_with_every_key_unknown_ones_included(reply: dict) -> None:
    raw = dict(reply["config"], **_FUTURE)
    info = consumer_model(dict(reply, config=copy.deepcopy(raw)))
    assert model.extra_fields(info.config) == _FUTURE
    body = consumer_wire(_consumer_config(info.config, {"description": "edited"}, "update_consumer"))
    assert body["description"] == "edited"
    for key, value in _FUTURE.items():
        assert body[key] == value
    missing = {k for k, v in raw.items() if k not in body and v not in (None, False, 0, "", [], {})}
    assert not missing, f"keys of the reply not sent back: {missing}"


def test_the_codec_keeps_what_the_dataclass_lacks_and_sends_it_back() -> None:
    raw = {"name": "S", "subjects": ["s.>"], **_FUTURE}
    cfg = model.from_reply(api.StreamConfig, raw)
    assert cfg.name == "S" and model.extra_fields(cfg) == _FUTURE
    assert model.to_wire(cfg) == {**cfg.as_dict(), **_FUTURE}
    cfg.name = "T"  # a modeled field wins over a kept key of the same name
    assert model.to_wire(cfg)["name"] == "T"
