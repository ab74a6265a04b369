"""Celery's remote control and warm shutdown with a prefork worker on the kombu transport.

A real nats-server and a real ``celery worker -P prefork -c 4`` (a subprocess): a control
command (``inspect ping``) is answered while every pool process runs a 3 s task, and the
worker, once its tasks are done, finishes a warm shutdown (SIGTERM) within seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import TRANSPORT

ROOT = Path(__file__).resolve().parents[3]
#: the worker process, the app to talk to it, its file of finished tasks
Worker = tuple[subprocess.Popen[bytes], Any, Path]

pytestmark = pytest.mark.timeout(int(120 * FACTOR))

_APP = '''
import time
from celery import Celery

app = Celery("kombu_ctl", broker={url!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}}},
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="kombu_ctl.sleep")
def sleep(seconds):
    time.sleep(seconds)  # behaviour: the task keeps its pool process busy
    with open({done!r}, "a") as f:
        f.write("x\\n")
'''


def _app(url: str, prefix: str) -> Any:
    from celery import Celery

    app = Celery("kombu_ctl", broker=url)
    app.conf.broker_transport = TRANSPORT
    app.conf.broker_transport_options = {"subject_prefix": prefix}
    return app


def _start_worker(tmp_path: Path, url: str, prefix: str) -> subprocess.Popen[bytes]:
    done = tmp_path / "done.txt"
    done.touch()
    (tmp_path / "kombu_ctl.py").write_text(_APP.format(url=url, prefix=prefix, done=str(done)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("CELERY_BROKER_URL", None)
    cmd = [sys.executable, "-m", "celery", "-A", "kombu_ctl", "worker", "-P", "prefork", "-c", "4",
           "--loglevel=WARNING", "--without-heartbeat", "--without-mingle", "--without-gossip",
           "-n", f"ctl{time.monotonic_ns()}@%h"]
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def worker(nats_server: NatsServer, tmp_path: Path, unique: str) -> Iterator[Worker]:
    """A prefork worker of 4 that answers pings, the app to talk to it, and its done file."""
    prefix = f"kctl{unique}"
    proc = _start_worker(tmp_path, nats_server.url, prefix)
    app = _app(nats_server.url, prefix)
    try:
        wait_for(lambda: bool(app.control.inspect(timeout=1.0).ping()) or proc.poll() is not None, 60)
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        yield proc, app, tmp_path / "done.txt"
    finally:
        _kill(proc)
        app.pool.force_close_all()
        app.close()


def _done(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_ping_is_answered_while_every_prefork_process_runs_a_long_task(
        worker: Worker) -> None:
    _proc, app, done = worker
    for _ in range(4):
        app.send_task("kombu_ctl.sleep", args=[3.0 * FACTOR])
    # the four processes are busy (inspect active lists their tasks) ...
    wait_for(lambda: sum(len(v) for v in (app.control.inspect(timeout=0.5).active() or {}).values()) >= 4,
             30)
    for _ in range(4):  # ... and four more wait for a free process
        app.send_task("kombu_ctl.sleep", args=[3.0 * FACTOR])
    # (``celery inspect ping`` waits its whole timeout for more workers: the time to the one
    # worker's reply is what counts)
    t0 = time.monotonic()
    first = app.control.ping(timeout=5.0 * FACTOR, limit=1)
    took = time.monotonic() - t0
    assert first and all(r == {"ok": "pong"} for one in first for r in one.values()), first
    assert took < 1.0 * FACTOR, f"ping answered after {took:.2f} s with every pool process busy"
    wait_for(lambda: _done(done) == 8, 60)


def test_a_prefork_worker_that_finished_its_tasks_shuts_down_warm_within_seconds(
        worker: Worker) -> None:
    proc, app, done = worker
    for _ in range(4):
        app.send_task("kombu_ctl.sleep", args=[0.1])
    wait_for(lambda: _done(done) == 4, 30)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60 * FACTOR)
    except subprocess.TimeoutExpired:
        pass
    took = time.monotonic() - t0
    assert proc.poll() is not None and took < 3.5 * FACTOR, f"warm shutdown took {took:.1f} s"
