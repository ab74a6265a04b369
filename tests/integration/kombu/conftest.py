"""What the kombu transport tests share: a subject prefix of the test's own, a kombu connection
through the transport, and a drain of its events until a condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import kombu
import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR

TRANSPORT = "jssync.kombu:Transport"


def kombu_conn(url: str, prefix: str, **options: Any) -> kombu.Connection:
    """A kombu connection through the jssync transport, its streams under ``prefix``."""
    return kombu.Connection(url, transport=TRANSPORT, transport_options={"subject_prefix": prefix, **options})


def drain_until(conn: kombu.Connection, until: Callable[[], bool], timeout: float = 10.0) -> None:
    """``conn.drain_events`` until ``until()`` holds; fail after ``timeout`` (times FACTOR) seconds."""
    end = time.monotonic() + timeout * FACTOR
    while not until():
        if time.monotonic() > end:
            raise AssertionError("timed out draining events")
        try:
            conn.drain_events(timeout=0.2)
        except TimeoutError:
            pass


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
