"""The pull request limits of a consumer (max_batch, max_expires, max_bytes, the server's names):
set on create and update, read back by info(), refused when bad, and checked by fetch."""

from __future__ import annotations

import json

import pytest

import jssync

pytestmark = pytest.mark.timeout(60)

_NS = 1_000_000_000


def _server_config(nc, stream: str, name: str) -> dict:
    """The consumer's config as the server holds it (a raw CONSUMER.INFO request)."""
    reply = nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{name}", b"", timeout=5.0)
    return json.loads(reply.data)["config"]


def test_create_consumer_sets_the_pull_request_limits_the_server_holds(nc, js, stream):
    c = js.create_consumer(stream.name, durable_name="L", ack_policy="explicit",
                           max_batch=10, max_expires="5s", max_bytes=4096)
    raw = _server_config(nc, stream.name, "L")
    assert (raw.get("max_batch"), raw.get("max_expires"), raw.get("max_bytes")) == (10, 5 * _NS, 4096)
    cfg = c.info().config
    assert (cfg.max_batch, cfg.max_expires, cfg.max_bytes) == (10, 5.0, 4096)  # type: ignore[attr-defined]


def test_update_consumer_changes_one_pull_request_limit_and_keeps_the_others(nc, js, stream):
    js.create_consumer(stream.name, durable_name="U", ack_policy="explicit", max_batch=10, max_expires=5.0)
    js.update_consumer(stream.name, durable_name="U", max_batch=20)
    raw = _server_config(nc, stream.name, "U")
    assert (raw.get("max_batch"), raw.get("max_expires")) == (20, 5 * _NS)
    cfg = js.consumer(stream.name, "U").info().config
    cfg.max_expires = 7  # type: ignore[attr-defined]
    js.update_consumer(stream.name, cfg)
    raw = _server_config(nc, stream.name, "U")
    assert (raw.get("max_batch"), raw.get("max_expires")) == (20, 7 * _NS)


def test_a_consumer_without_pull_request_limits_reads_them_as_none(js, stream):
    cfg = js.create_consumer(stream.name, durable_name="N", ack_policy="explicit").cached_info.config
    assert (cfg.max_batch, cfg.max_expires, cfg.max_bytes) == (None, None, None)  # type: ignore[attr-defined]


@pytest.mark.parametrize("option, value, words", [
    ("max_batch", "10", "max_batch"),
    ("max_batch", 1.5, "max_batch"),
    ("max_batch", -1, "max_batch"),
    ("max_bytes", True, "max_bytes"),
    ("max_expires", "soon", "max_expires"),
    ("max_expires", -2.0, "max_expires"),
])
def test_a_bad_pull_request_limit_is_refused_before_anything_is_sent(js, stream, option, value, words):
    with pytest.raises(jssync.ValidationError, match=words):
        js.create_consumer(stream.name, durable_name="B", ack_policy="explicit", **{option: value})
    with pytest.raises(jssync.ConsumerNotFoundError):
        js.consumer(stream.name, "B")


def test_a_fetch_larger_than_max_batch_is_refused_naming_both_numbers(js, stream):
    c = js.create_consumer(stream.name, durable_name="F", ack_policy="explicit", max_batch=5)
    js.publish(f"{stream.name}.a", b"x")
    with pytest.raises(jssync.ValidationError, match=r"fetch of 10 .*max_batch 5"):
        c.fetch(10, expires=1.0)
    with pytest.raises(jssync.ValidationError, match=r"10 .*max_batch 5"):
        c.fetch_no_wait(10)
    got = list(c.fetch(5, expires=2.0))
    assert len(got) == 1
    # fetch_bytes asks for as many messages as max_batch allows, not a batch the server refuses
    res = c.fetch_bytes(1024, expires=0.5)
    assert list(res) == [] and res.error is None


def _watch_pulls(nc, stream: str, consumer: str) -> list[bytes]:
    seen: list[bytes] = []
    nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", callback=lambda m: seen.append(m.data))
    nc.flush()
    return seen


def test_a_fetch_or_consume_expiring_later_than_max_expires_is_refused_naming_both(nc, js, stream):
    c = js.create_consumer(stream.name, durable_name="E", ack_policy="explicit", max_expires="5s")
    pulls = _watch_pulls(nc, stream.name, "E")
    with pytest.raises(jssync.ValidationError, match=r"fetch with expires 10s: .*max_expires 5s"):
        c.fetch(1, expires=10.0)
    with pytest.raises(jssync.ValidationError, match=r"fetch_bytes with expires 6s: .*max_expires 5s"):
        c.fetch_bytes(1024, expires="6s")
    with pytest.raises(jssync.ValidationError, match=r"consume with expires 30s: .*max_expires 5s"):
        c.consume()  # the default expiry (30 s) is over the limit too
    nc.flush()
    assert pulls == []
    js.publish(f"{stream.name}.a", b"x")
    assert len(list(c.fetch(1, expires=5.0))) == 1  # at the limit: sent, and answered


def test_a_consume_buffer_over_max_batch_is_refused_and_the_default_one_fits(nc, js, stream):
    c = js.create_consumer(stream.name, durable_name="C", ack_policy="explicit", max_batch=10)
    pulls = _watch_pulls(nc, stream.name, "C")
    with pytest.raises(jssync.ValidationError, match=r"consume of 20 messages: .*max_batch 10"):
        c.consume(max_messages=20)
    nc.flush()
    assert pulls == []
    for _ in range(3):
        js.publish(f"{stream.name}.a", b"x")
    errors: list[BaseException] = []
    with c.consume(error_cb=errors.append) as messages:  # default options: a buffer of max_batch
        for _ in range(3):
            messages.next(timeout=5.0).ack()
    nc.flush()
    assert pulls and all(json.loads(p)["batch"] <= 10 for p in pulls), pulls
    assert errors == []
