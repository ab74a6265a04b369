"""What the kombu transport tests share: a subject prefix of the test's own, a kombu connection
through the transport, a drain of its events until a condition holds, and a Celery worker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR

TRANSPORT = "jssync.kombu:Transport"
ROOT = Path(__file__).resolve().parents[3]


def start_celery_worker(tmp: Path, app_module: str, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``celery -A <app_module> worker -n <name> <args>`` run in ``tmp`` (where the app module is), its
    output in ``tmp/worker.log``; returns the process (a session of its own) and the log's path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT)]))
    env.pop("CELERY_BROKER_URL", None)
    log_path = tmp / "worker.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the child holds it
    try:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", app_module, "worker", "--loglevel=WARNING",
                                 "--without-heartbeat", "--without-mingle", "--without-gossip", "-n", name, *args],
                                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()
    return proc, log_path


def kill_celery_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's whole process group (its pool children too) unless it ended."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


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
