"""Shared by the tests: time factor, waiting, a stream per test, running manage.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jssync

#: every timing bound is ``n * FACTOR`` (slow machines: JSSYNC_TEST_TIME_FACTOR=2)
FACTOR = float(os.environ.get("JSSYNC_TEST_TIME_FACTOR", "1"))
PROJECT = Path(__file__).resolve().parents[1]


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> None:
    """Poll ``cond`` until true; fail after ``timeout * FACTOR`` seconds."""
    end = time.monotonic() + timeout * FACTOR
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(interval)  # poll: wait_for's interval, inside its deadline
    raise AssertionError(f"timed out waiting for {what}")


def unique() -> str:
    return uuid.uuid4().hex[:10].upper()


def connz() -> list[dict[str, Any]]:
    """The server's client connections (its monitoring endpoint; the runner sets TEST_NATS_HTTP)."""
    with urllib.request.urlopen(os.environ["TEST_NATS_HTTP"] + "/connz?limit=1024", timeout=5) as r:  # noqa: S310
        return list(json.loads(r.read())["connections"] or [])


class StreamMixin:
    """A memory stream ``S<unique>`` on ``S<unique>.>`` and a durable pull consumer ``C``, deleted after."""

    nc: jssync.Connection
    js: jssync.JetStream
    stream: str
    subject: str

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.nc = jssync.connect(os.environ["NATS_URL"], name="test-helper")
        self.js = self.nc.jetstream()
        self.stream = f"S{unique()}"
        self.subject = f"{self.stream}.in"
        self.js.create_stream(name=self.stream, subjects=[f"{self.stream}.>"], storage="memory")
        self.js.create_consumer(self.stream, durable_name="C", ack_policy="explicit", ack_wait=30.0)

    def tearDown(self) -> None:
        try:
            self.js.delete_stream(self.stream)
        except jssync.StreamNotFoundError:
            pass
        self.nc.close()
        super().tearDown()  # type: ignore[misc]

    def publish(self, n: int, prefix: str = "m") -> list[str]:
        out = [f"{prefix}{i}" for i in range(n)]
        for data in out:
            self.js.publish(self.subject, data.encode())
        return out


def manage(*args: str, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python manage.py ARGS`` in the test project; waits up to ``timeout * FACTOR`` s."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=timeout * FACTOR, stdin=subprocess.DEVNULL)


def start_manage(*args: str, out: Path, **env: str) -> subprocess.Popen[bytes]:
    """Start ``python manage.py ARGS``, stdout and stderr to the file ``out``."""
    with open(out, "wb") as f:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(os.environ, **env))


def stop(proc: subprocess.Popen[bytes], sig: int | None, timeout: float) -> int:
    """Send ``sig`` (None: none) and wait up to ``timeout * FACTOR`` s; kill it after that (then fail)."""
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout * FACTOR)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"manage.py did not exit within {timeout * FACTOR}s") from None
