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


def _readme_log_lines() -> list[str]:
    """The log lines README.md quotes for a lost server (``WARNING jssync: ...``, ``INFO jssync: ...``)."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[3] / "README.md").read_text().split())
    section = text[text.index("a lost server logs"):]
    section = section[:section.index("your own `close()`")]
    return [q for q in re.findall(r"`((?:WARNING|INFO) jssync: [^`]+)`", section)]


def test_the_readme_shows_the_lines_a_lost_server_logs(caplog):
    """README.md's lines, with its URL, numbers and the cause in parentheses taken as placeholders,
    are the ones logged (format ``%(levelname)s %(name)s: %(message)s``, as the CLI's)."""
    import re

    quoted = _readme_log_lines()
    assert len(quoted) == 2, quoted
    caplog.set_level(logging.INFO, logger="jssync")
    with NatsServer(jetstream=False) as srv:
        reconnected = []
        nc = jssync.connect(srv.url, reconnect_time_wait=0.2, reconnected_cb=lambda: reconnected.append(1))
        try:
            nc.flush(timeout=5)
            srv.restart()
            wait_for(lambda: reconnected, 20, what="the reconnect")
            wait_for(lambda: any("reconnected to" in r.getMessage() for r in caplog.records), 5,
                     what="the reconnect's log line")
        finally:
            nc.close()
    logged = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records if r.name == "jssync"]
    for line in quoted:
        shape = re.sub(r"nats://[0-9.]+:[0-9]+", "\x01", line)
        shape = re.sub(r"\(UnexpectedEOF:[^)]*\)", "\x02", shape)
        shape = re.sub(r"[0-9]+(\.[0-9]+)?", "\x03", shape)
        pattern = (re.escape(shape).replace("\x01", r"nats://127\.0\.0\.1:[0-9]+").replace("\x02", r"\(.+\)")
                   .replace("\x03", r"[0-9]+(\.[0-9]+)?"))
        assert [t for t in logged if re.fullmatch(pattern, t)], (line, logged)
