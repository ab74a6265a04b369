"""The config codec (jssync/jetstream/model.py): server fields beside nats-py's dataclasses, pure."""

from __future__ import annotations

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
