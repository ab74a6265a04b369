"""What the `jssync` logger says about the connection: one prefix, a close is no disconnect,
a lost server is named along with the reconnect."""

from __future__ import annotations

import logging

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def _texts(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("jssync")]


def test_close_logs_no_disconnect_and_no_double_prefix(nats_server, caplog):
    caplog.set_level(logging.DEBUG, logger="jssync")
    nc = jssync.connect(nats_server.url)
    nc.flush(timeout=5)
    nc.close()
    texts = _texts(caplog)
    assert not [t for t in texts if "disconnect" in t.lower()], texts
    assert not [t for t in texts if t.startswith("jssync:")], texts


def test_server_restart_names_the_server_and_the_reconnect(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="jssync")
    with NatsServer(jetstream=False) as srv:
        reconnected = []
        nc = jssync.connect(srv.url, reconnect_time_wait=0.2, reconnected_cb=lambda: reconnected.append(1))
        try:
            nc.flush(timeout=5)
            srv.restart()
            wait_for(lambda: reconnected, 20, what="the reconnect")
            texts = _texts(caplog)
            lost = [t for t in texts if "disconnected" in t.lower()]
            assert len(lost) == 1, texts
            assert srv.url in lost[0] and "reconnecting" in lost[0], lost
            assert [t for t in texts if "reconnected to" in t and srv.url in t], texts
            assert not [t for t in texts if t.startswith("jssync:")], texts
        finally:
            nc.close()
