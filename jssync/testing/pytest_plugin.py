"""pytest fixtures for testing applications against a real nats-server.

Installed as a pytest plugin with jssync (entry point ``pytest11``)::

    def test_orders(js):
        js.create_stream(name="ORDERS", subjects=["ORDERS.*"])

Fixtures: ``nats_server`` (one JetStream server per session), ``nats_cluster`` (one
3-node cluster per session), ``nc`` (a connection per test), ``js`` (its JetStream
context). When a test fails, the servers' logs are added to the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .server import NatsCluster, NatsServer

_LOG_KEY = pytest.StashKey[list[Any]]()


def _remember(request: pytest.FixtureRequest, server: Any) -> None:
    item = request.node
    if isinstance(item, pytest.Item):
        item.stash.setdefault(_LOG_KEY, []).append(server)


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """A JetStream-enabled nats-server for the whole session (memory and file storage)."""
    with NatsServer(jetstream=True) as srv:
        yield srv


@pytest.fixture(scope="session")
def nats_cluster() -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster on loopback for the whole session."""
    with NatsCluster(size=3) as cluster:
        yield cluster


@pytest.fixture
def nc(nats_server: NatsServer, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A :class:`jssync.Connection` to ``nats_server``, closed after the test."""
    import jssync

    _remember(request, nats_server)
    conn = jssync.connect(nats_server.url, name=request.node.name[:60])
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def js(nc: Any) -> Any:
    """The JetStream context of ``nc``."""
    return nc.jetstream()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        for srv in item.stash.get(_LOG_KEY, []):
            try:
                text = srv.logs()[-4000:]
            except Exception:  # pragma: no cover
                continue
            report.sections.append((f"nats-server log ({getattr(srv, 'url', '?')})", text))
