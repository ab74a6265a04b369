"""Play back JetStream API exchanges recorded from a real nats-server (tools/record_api_replies.py).

:class:`ReplayTransport` is an :class:`jssync.jetstream.transport.APITransport`: each request
must be the next one recorded (same subject, same JSON body, same headers), and gets the
server's recorded reply. A context over it (:func:`recorded_context`) runs the real
management, KV and Liftbridge code with no server, and the test sees every request it built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jssync.jetstream.context import JetStream, context_over

UNIT = Path(__file__).resolve().parent / "unit"


class ReplayTransport:
    """Answers each request with the recorded reply; a request other than the recorded one fails the test."""

    def __init__(self, exchanges: list[dict[str, Any]]) -> None:
        self.exchanges = list(exchanges)
        self.sent: list[tuple[str, Any, dict[str, str] | None]] = []

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float | None) -> bytes:
        body = json.loads(data) if data else None
        self.sent.append((subject, body, headers))
        assert self.exchanges, f"a request not recorded: {subject} {body}"
        want = self.exchanges.pop(0)
        assert subject == want["subject"], (subject, want["subject"])
        assert body == want["request"], f"request on {subject} differs from the recorded one: {body} {want['request']}"
        assert headers == want["headers"], (headers, want["headers"])
        assert "reply" in want, f"the recorded request on {subject} raised {want.get('raised')}"
        return str(want["reply"]).encode()

    def done(self) -> bool:
        """Every recorded exchange was played."""
        return not self.exchanges


def load(layer: str, name: str) -> dict[str, Any]:
    """tests/unit/<layer>/replies/<name>.json."""
    doc: dict[str, Any] = json.loads((UNIT / layer / "replies" / f"{name}.json").read_text())
    assert doc["server_version"].startswith("2."), doc["server_version"]
    return doc


def recorded_context(layer: str, name: str, scenario: str) -> tuple[JetStream, ReplayTransport]:
    """A JetStream context (no connection) whose API requests play ``scenario`` of ``<layer>/replies/<name>.json``."""
    transport = ReplayTransport(load(layer, name)["scenarios"][scenario])
    return context_over(transport), transport


def reply_of(layer: str, name: str, scenario: str, index: int = 0) -> dict[str, Any]:
    """The parsed server reply of exchange ``index`` of ``scenario``."""
    reply: dict[str, Any] = json.loads(load(layer, name)["scenarios"][scenario][index]["reply"])
    return reply
