"""The Celery commands of a working day against a real worker on the kombu transport.

One nats-server (the session's), one ``celery worker -P prefork -c 2`` for the module, and a
file-system result backend (``file://``, shared by the worker and the test's process):
``inspect ping/active/stats``, ``control rate_limit``, ``revoke``, countdown and ETA, a retry with
a countdown, a soft time limit, ``purge``, canvas (group, chain), and ``control shutdown``.
"""

from __future__ import annotations

import datetime
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import kill_celery_worker, start_celery_worker

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.timeout(int(120 * FACTOR))

_APP = '''
import time
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

app = Celery("kombu_daily", broker={url!r}, backend={backend!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}}},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_extended=True,
)


@app.task(name="kombu_daily.add")
def add(x, y):
    return x + y


@app.task(name="kombu_daily.sleep")
def sleep(seconds):
    time.sleep(seconds)  # behaviour: the task takes that long
    return seconds


@app.task(name="kombu_daily.flaky", bind=True, max_retries=3)
def flaky(self):
    if self.request.retries == 0:
        raise self.retry(countdown=1)
    return self.request.retries


@app.task(name="kombu_daily.slow", soft_time_limit=0.5)
def slow():
    try:
        time.sleep(10)  # behaviour: longer than its soft time limit
    except SoftTimeLimitExceeded:
        return "soft limit"
    return "ran out"
'''


def _app(url: str, backend: str, prefix: str) -> Any:
    from celery import Celery

    app = Celery("kombu_daily", broker=url, backend=backend)
    app.conf.broker_transport = "jssync.kombu:Transport"
    app.conf.broker_transport_options = {"subject_prefix": prefix}
    return app


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], app: Any, name: str, log: Path) -> None:
        self.proc, self.app, self.name, self.log = proc, app, name, log


@pytest.fixture(scope="module")
def worker(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A prefork worker of 2 with a file-system result backend, shared by the module's tests."""
    tmp = tmp_path_factory.mktemp("celery_daily")
    (tmp / "results").mkdir()
    backend = f"file://{tmp / 'results'}"
    prefix = f"kday{uuid.uuid4().hex[:8]}"
    (tmp / "kombu_daily.py").write_text(_APP.format(url=nats_server.url, backend=backend, prefix=prefix))
    name = f"day{time.monotonic_ns()}@localhost"
    proc, log_path = start_celery_worker(tmp, "kombu_daily", name, "-P", "prefork", "-c", "2")
    app = _app(nats_server.url, backend, prefix)
    try:
        wait_for(lambda: bool(app.control.inspect(timeout=1.0).ping()) or proc.poll() is not None, 60)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        yield Worker(proc, app, name, log_path)
    finally:
        kill_celery_worker(proc)
        app.pool.force_close_all()
        app.close()


def test_inspect_ping_active_and_stats(worker: Worker) -> None:
    inspect = worker.app.control.inspect(destination=[worker.name], timeout=2.0 * FACTOR)
    assert inspect.ping() == {worker.name: {"ok": "pong"}}
    result = worker.app.send_task("kombu_daily.sleep", args=[1.5 * FACTOR])
    wait_for(lambda: bool((inspect.active() or {}).get(worker.name)), 10)
    (active,) = inspect.active()[worker.name]
    assert active["id"] == result.id and active["name"] == "kombu_daily.sleep"
    stats = inspect.stats()[worker.name]
    assert stats["broker"]["transport"] == "jssync.kombu:Transport", stats["broker"]
    assert stats["pool"]["max-concurrency"] == 2
    assert result.get(timeout=10 * FACTOR) == 1.5 * FACTOR


def test_results_countdown_and_eta(worker: Worker) -> None:
    app = worker.app
    assert app.send_task("kombu_daily.add", args=[2, 3]).get(timeout=10 * FACTOR) == 5
    t0 = time.monotonic()
    later = app.send_task("kombu_daily.add", args=[1, 1], countdown=1.0)
    eta = app.send_task("kombu_daily.add", args=[2, 2],
                        eta=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1))
    assert later.get(timeout=10 * FACTOR) == 2 and eta.get(timeout=10 * FACTOR) == 4
    assert time.monotonic() - t0 >= 0.9  # neither ran before its time


def test_a_retry_with_a_countdown_runs_again(worker: Worker) -> None:
    t0 = time.monotonic()
    assert worker.app.send_task("kombu_daily.flaky").get(timeout=15 * FACTOR) == 1
    assert time.monotonic() - t0 >= 0.9


def test_a_soft_time_limit_stops_a_task(worker: Worker) -> None:
    assert worker.app.send_task("kombu_daily.slow").get(timeout=15 * FACTOR) == "soft limit"


def test_revoke_keeps_a_task_from_running(worker: Worker) -> None:
    app = worker.app
    result = app.send_task("kombu_daily.add", args=[5, 5], countdown=2.0)  # held by the worker until then
    result.revoke()
    wait_for(lambda: result.id in {i for ids in (app.control.inspect(timeout=1.0).revoked() or {}).values()
                                   for i in ids}, 10)
    from celery.exceptions import TaskRevokedError

    with pytest.raises(TaskRevokedError):
        result.get(timeout=15 * FACTOR)


def test_rate_limit_is_applied(worker: Worker) -> None:
    app = worker.app
    replies = app.control.rate_limit("kombu_daily.add", "60/m", destination=[worker.name], reply=True,
                                     timeout=2.0 * FACTOR)
    assert replies and "ok" in replies[0][worker.name], replies
    try:
        t0 = time.monotonic()
        results = [app.send_task("kombu_daily.add", args=[i, 0]) for i in range(3)]
        assert [r.get(timeout=20 * FACTOR) for r in results] == [0, 1, 2]
        assert time.monotonic() - t0 >= 1.5  # 60/m: one a second
    finally:
        app.control.rate_limit("kombu_daily.add", None, destination=[worker.name], reply=True, timeout=2.0 * FACTOR)


def test_group_and_chain_with_the_file_backend(worker: Worker) -> None:
    from celery import chain, group

    app = worker.app
    add = app.signature("kombu_daily.add")
    assert group(add.clone((i, i)) for i in range(5)).apply_async().get(timeout=20 * FACTOR) == [0, 2, 4, 6, 8]
    assert chain(add.clone((1, 2)), add.clone((10,))).apply_async().get(timeout=20 * FACTOR) == 13


def test_purge_removes_queued_tasks(nats_server: NatsServer) -> None:
    # a queue nobody consumes: purge counts and removes what it holds
    prefix = f"kpurge{uuid.uuid4().hex[:8]}"
    app = _app(nats_server.url, "disabled://", prefix)
    try:
        for i in range(5):
            app.send_task("kombu_daily.add", args=[i, i])
        assert app.control.purge() == 5
        assert app.control.purge() == 0
    finally:
        app.pool.force_close_all()
        app.close()


def test_control_shutdown_stops_the_worker(worker: Worker) -> None:  # last: the module's worker ends here
    worker.app.control.shutdown(destination=[worker.name])
    try:
        worker.proc.wait(20 * FACTOR)
    except subprocess.TimeoutExpired:
        pass
    assert worker.proc.poll() is not None, worker.log.read_text()[-3000:]
