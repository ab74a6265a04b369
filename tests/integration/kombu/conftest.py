"""What the kombu transport tests share: a subject prefix of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsServer


@pytest.fixture
def prefix(nats_server: NatsServer, unique: str) -> Iterator[str]:
    """A subject prefix of the test's own; its streams (queues, bindings) are deleted after the test."""
    pfx = f"k{unique}"
    yield pfx
    with jssync.connect(nats_server.url) as nc:
        js = nc.jetstream()
        for name in list(js.stream_names()):
            if name.startswith(f"{pfx}_") or name == f"KV_{pfx}_bindings":
                js.delete_stream(name)
