"""``JSSYNC_FAST_PATHS=0`` turns every shortcut into nats-py's internals off, and all still works.

The switch is read at each connect: a connection made with it set reports every fast path off,
logs no warning (they were asked to be off), and publishes, subscribes, requests, publishes to
JetStream and pulls through nats-py's public paths. .ci/run runs the core, JetStream, consuming
and KV tests once more with it set.
"""

from __future__ import annotations

import logging

import pytest

import jssync
from jssync.core import natspy as _natspy
from jssync.server import NatsServer
from tests.conftest import echo

pytestmark = pytest.mark.timeout(60)


def test_the_switch_turns_every_fast_path_off_and_everything_still_works(
        nats_server: NatsServer, unique: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("JSSYNC_FAST_PATHS", "0")
    caplog.set_level(logging.DEBUG, logger="jssync")
    with jssync.connect(nats_server.url) as nc:
        assert set(nc._fast_paths()) == set(_natspy.FAST_PATHS)
        assert not any(nc._fast_paths().values()), nc._fast_paths()
        assert not _natspy.msg_parser_installed(nc.internal.nc)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        # core: a subscription, a request (its reply read by the I/O thread), headers
        sub = nc.subscribe(f"SW.{unique}.sub")
        nc.publish(f"SW.{unique}.sub", b"one", headers={"K": "v"})
        m = sub.next_msg(timeout=5)
        assert (m.data, m.headers) == (b"one", {"K": "v"})
        with jssync.connect(nats_server.url) as responder:
            echo(responder, f"SW.{unique}.rr")
            responder.flush()
            for i in range(20):
                assert nc.request(f"SW.{unique}.rr", str(i).encode(), timeout=5).data == str(i).encode()
        # JetStream: publish, fetch with acks, consume
        js = nc.jetstream()
        js.create_stream(name=f"SW{unique}", subjects=[f"SWJ.{unique}.>"], storage="memory")
        try:
            for i in range(50):
                js.publish(f"SWJ.{unique}.x", str(i).encode())
            c = js.create_consumer(f"SW{unique}", durable_name="d", ack_policy="explicit")
            got = [m.data for m in c.fetch(50, expires=5)]
            assert got == [str(i).encode() for i in range(50)]
            for m in c.fetch(1, expires=0.5):
                raise AssertionError(f"nothing was left: got {m}")
        finally:
            js.delete_stream(f"SW{unique}")
    # the switch is read at each connect: without it the next connection has them back
    monkeypatch.delenv("JSSYNC_FAST_PATHS")
    with jssync.connect(nats_server.url) as nc:
        assert all(nc._fast_paths().values()), nc._fast_paths()


def test_any_other_value_leaves_the_fast_paths_on(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JSSYNC_FAST_PATHS", "1")
    with jssync.connect(nats_server.url) as nc:
        assert all(nc._fast_paths().values()), nc._fast_paths()
