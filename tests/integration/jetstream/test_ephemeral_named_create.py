"""Ephemeral consumers are created with a client-chosen name on the named-create subject
(``$JS.API.CONSUMER.CREATE.<stream>.<name>``, ADR-37 / nats.go), so an account whose permissions
allow only that form (not the older ``$JS.API.CONSUMER.CREATE.<stream>``) can create them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)

# the named form has six tokens or more; "$JS.API.CONSUMER.CREATE.*" is only the unnamed form
_PERMS = """
authorization {
  users: [
    {user: admin, password: adminpw},
    {user: named, password: namedpw, permissions: {
        publish: {deny: ["$JS.API.CONSUMER.CREATE.*", "$JS.API.CONSUMER.DURABLE.CREATE.>"]}}}
  ]
}
"""


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer(jetstream=True, config=_PERMS) as srv:
        yield srv


@pytest.fixture
def named(server, unique) -> Iterator[tuple[jssync.Connection, str]]:
    """A connection of the restricted user, and a stream S<unique> with 3 messages."""
    with jssync.connect(server.url, user="admin", password="adminpw") as admin:
        ajs = admin.jetstream()
        name = f"S{unique}"
        ajs.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        for i in range(3):
            ajs.publish(f"{name}.a", str(i).encode())
        try:
            with jssync.connect(server.url, user="named", password="namedpw", error_cb=lambda exc: None) as nc:
                yield nc, name
        finally:
            ajs.delete_stream(name)


def _sent_creates(nc, stream: str) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    nc.subscribe(f"$JS.API.CONSUMER.CREATE.{stream}.>",
                 callback=lambda m: seen.append((m.subject, json.loads(m.data))))
    nc.subscribe(f"$JS.API.CONSUMER.CREATE.{stream}", callback=lambda m: seen.append((m.subject, json.loads(m.data))))
    nc.flush()
    return seen


def test_an_ephemeral_consumer_with_default_options_is_created_under_a_chosen_name(named):
    nc, stream = named
    js = nc.jetstream(timeout=5.0)
    sent = _sent_creates(nc, stream)
    consumer = js.create_consumer(stream)
    cfg = consumer.cached_info.config
    assert cfg.durable_name is None
    assert re.fullmatch(r"[0-9A-Za-z]{8}", consumer.name), consumer.name
    nc.flush()
    assert [s for s, _ in sent] == [f"$JS.API.CONSUMER.CREATE.{stream}.{consumer.name}"]
    assert sent[0][1]["config"]["name"] == consumer.name and "durable_name" not in sent[0][1]["config"]
    assert [m.data for m in consumer.fetch(3, expires=2 * FACTOR)] == [b"0", b"1", b"2"]


def test_a_named_ephemeral_with_an_inactive_threshold_keeps_its_name(named):
    nc, stream = named
    js = nc.jetstream(timeout=5.0)
    consumer = js.create_consumer(stream, name="eph", inactive_threshold=30.0, filter_subject=f"{stream}.a")
    cfg = consumer.info().config
    assert (consumer.name, cfg.name, cfg.durable_name, cfg.inactive_threshold) == ("eph", "eph", None, 30.0)
    assert consumer.next(timeout=2 * FACTOR).data == b"0"


def test_the_consumers_jssync_makes_itself_are_created_under_a_chosen_name(named):
    nc, stream = named
    js = nc.jetstream(timeout=5.0)
    oc = js.stream(stream).ordered_consumer()
    assert oc.next(timeout=5 * FACTOR).data == b"0"
    sub = js.subscribe(f"{stream}.a")
    try:
        assert sub.next_msg(timeout=5 * FACTOR).data == b"0"
    finally:
        sub.unsubscribe()
