"""ADR-42 priority groups: the pure parts (config fields, pull options, pin ids)."""

from __future__ import annotations

import threading

import pytest
from nats.js import api

from jssync.jetstream.priority import (
    NO_PRIORITY,
    Pins,
    PriorityConfig,
    config_fields,
    from_reply,
    pull_options,
    wire_fields,
)


def test_config_fields_from_keywords_and_from_a_returned_config():
    params = {"priority_policy": "pinned_client", "priority_groups": ["jobs"], "priority_timeout": 2, "x": 1}
    prio = config_fields(None, params)
    assert prio == PriorityConfig("pinned_client", ("jobs",), 2.0) and params == {"x": 1}
    assert wire_fields(prio) == {"priority_policy": "pinned_client", "priority_groups": ["jobs"],
                                 "priority_timeout": 2_000_000_000}
    cfg = api.ConsumerConfig(durable_name="D")
    cfg.priority_policy = "overflow"  # type: ignore[attr-defined]  # as put back on info.config
    cfg.priority_groups = ["a", "b"]  # type: ignore[attr-defined]
    assert config_fields(cfg, {}) == PriorityConfig("overflow", ("a", "b"), None)
    assert config_fields(api.ConsumerConfig(), {}) is NO_PRIORITY and wire_fields(NO_PRIORITY) == {}


def test_from_reply_is_lenient():
    assert from_reply(None) is NO_PRIORITY
    assert from_reply({"priority_policy": "none"}) is NO_PRIORITY
    assert from_reply({"priority_policy": "prioritized", "priority_groups": ["g"]}) == ("prioritized", ("g",), None)
    assert from_reply({"priority_policy": "pinned_client", "priority_groups": ["g"],
                       "priority_timeout": 120_000_000_000}).timeout == 120.0


def test_pull_options():
    pinned = PriorityConfig("pinned_client", ("jobs",), None)
    assert pull_options(NO_PRIORITY, "C", None, None, None, None) is None
    p = pull_options(pinned, "C", "jobs", None, None, None)
    assert p is not None and p.pinned and (p.min_pending, p.min_ack_pending, p.priority) == (0, 0, 0)
    o = pull_options(PriorityConfig("overflow", ("jobs",), None), "C", "jobs", 0, 7, None)
    assert o is not None and not o.pinned and (o.min_pending, o.min_ack_pending) == (0, 7)
    r = pull_options(PriorityConfig("prioritized", ("jobs",), None), "C", "jobs", None, None, 9)
    assert r is not None and r.priority == 9
    with pytest.raises(ValueError, match="pass group="):
        pull_options(pinned, "C", None, None, None, None)


def test_pins_forget_only_the_id_that_was_sent():
    pins = Pins()
    pins.seen("g", None)
    pins.seen("g", {"Other": "1"})
    assert pins.get("g") is None
    pins.seen("g", {"Nats-Pin-Id": "A"})
    assert pins.get("g") == "A"
    pins.seen("g", {"Nats-Pin-Id": "B"})  # a newer pin replaces it
    assert not pins.lost("g", "A")  # a 423 for a pull that carried the old id: B stays
    assert pins.get("g") == "B"
    assert not pins.lost("g", None)
    assert pins.lost("g", "B") and pins.get("g") is None
    pins.seen("h", {"Nats-Pin-Id": "C"})
    pins.clear("h")
    assert pins.get("h") is None


def test_pins_are_thread_safe():
    pins = Pins()

    def work(n: int) -> None:
        for i in range(2000):
            pins.seen("g", {"Nats-Pin-Id": f"{n}-{i}"})
            pins.lost("g", f"{n}-{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pins.get("g") is None or pins.get("g").count("-") == 1
