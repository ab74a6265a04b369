"""Celery on the kombu transport: many tasks through real workers, and a broker restart mid-flow.

Every task records its run in a file (one line per run: ``<id> <pid>``, appended); a test
asserts the multiset of runs. ``JSSYNC_KOMBU_TASKS`` sets how many tasks the exactly-once
tests send (default 3,000: 90 to 190 of the worker's prefetch windows, or 190 pulls of 16, while
the tasks are still being sent; about 8 s each on 2 busy cores; raise it for a soak).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import TRANSPORT

ROOT = Path(__file__).resolve().parents[3]
TASKS = int(os.environ.get("JSSYNC_KOMBU_TASKS", "3000"))

pytestmark = pytest.mark.timeout(int(max(300, TASKS / 25) * FACTOR))

_APP = '''
import os
import time
from celery import Celery

app = Celery("kombu_runs", broker={url!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={options!r},
    task_ignore_result=True,
    task_acks_late={acks_late!r},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
RUNS = {runs!r}
GATE, GATE_FROM = {gate!r}, {gate_from!r}


@app.task(name="kombu_runs.record")
def record(ident):
    if GATE_FROM is not None and ident >= GATE_FROM:  # held until the test opens the gate (5 min at most)
        end = time.monotonic() + 300
        while not os.path.exists(GATE) and time.monotonic() < end:
            time.sleep(0.005)  # poll: for the gate file, which the test creates
    # one write of one short line to a file opened for appending: whole lines, from any process
    with open(RUNS, "a") as f:
        f.write(f"{{ident}} {{os.getpid()}}\\n")
'''


def _write_app(tmp_path: Path, url: str, options: dict[str, Any], acks_late: bool = False,
               gate_from: int | None = None) -> Path:
    """The Celery app of the workers; tasks from ``gate_from`` on wait until the file
    ``tmp_path / "gate"`` exists before they record their run."""
    runs = tmp_path / "runs.txt"
    runs.touch()
    (tmp_path / "kombu_runs.py").write_text(_APP.format(url=url, options=options, runs=str(runs),
                                                        acks_late=acks_late, gate=str(tmp_path / "gate"),
                                                        gate_from=gate_from))
    return runs


def _sender(url: str, options: dict[str, Any]) -> Any:
    from celery import Celery

    sender = Celery("sender", broker=url)
    sender.conf.broker_transport = TRANSPORT
    sender.conf.broker_transport_options = options
    return sender


def _close(app: Any) -> None:
    app.pool.force_close_all()
    app.close()


def _worker(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("CELERY_BROKER_URL", None)
    cmd = [sys.executable, "-m", "celery", "-A", "kombu_runs", "worker", *args, "--loglevel=WARNING",
           "--without-heartbeat", "--without-mingle", "--without-gossip", "-n", f"w{time.monotonic_ns()}@%h"]
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            proc.wait(60 * FACTOR)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def _runs(path: Path) -> collections.Counter[int]:
    return collections.Counter(int(line.split()[0]) for line in path.read_text().splitlines() if line)


def _queue_settled(url: str, stream: str) -> bool:
    """Nothing left in the queue's stream: every task was acked (work-queue retention)."""
    with jssync.connect(url) as nc:
        return nc.jetstream().stream(stream).info().state.messages == 0


@pytest.mark.slow
@pytest.mark.parametrize(("pool", "acks_late", "fetch_batch"), [
    (["--pool=prefork", "--concurrency=4"], False, None),
    (["--pool=threads", "--concurrency=8"], False, None),
    (["--pool=prefork", "--concurrency=4"], True, 16),
], ids=["prefork-4", "threads-8", "prefork-4-acks-late-fetch-batch-16"])
def test_many_tasks_each_run_exactly_once_through_a_celery_worker(
        nats_server: NatsServer, prefix: str, tmp_path: Path, pool: list[str], acks_late: bool,
        fetch_batch: int | None) -> None:
    """Default transport options (ack_wait 1800 s: a stranded message would hang the test, not
    come back in time to hide it) and Celery's defaults (ack on receipt), and once with late
    acks and pulls of 16; the worker runs while the tasks are sent."""
    options: dict[str, Any] = {"subject_prefix": prefix}
    if fetch_batch is not None:
        options["fetch_batch"] = fetch_batch
    runs = _write_app(tmp_path, nats_server.url, options, acks_late)
    sender = _sender(nats_server.url, options)
    proc = _worker(tmp_path, *pool)
    started = time.monotonic()
    try:
        for i in range(TASKS):
            sender.send_task("kombu_runs.record", args=[i])
        sent = time.monotonic()
        wait_for(lambda: sum(_runs(runs).values()) >= TASKS or proc.poll() is not None,
                 timeout=max(120, TASKS / 50), interval=0.2, what=f"{TASKS} tasks to run")
        ran = time.monotonic()
        # settled: the stream is empty, so nothing can be delivered again; then stop the worker
        wait_for(lambda: _queue_settled(nats_server.url, f"{prefix}_celery"), timeout=30, interval=0.1,
                 what="every task to be acked")
    finally:
        code = _stop(proc)
        _close(sender)
    log = (tmp_path / "worker.log").read_text()
    print(f"{TASKS} tasks {pool}: sent in {sent - started:.1f}s, all ran after {ran - started:.1f}s")
    assert code == 0, log[-5000:]
    counts = _runs(runs)
    missing = [i for i in range(TASKS) if i not in counts]
    twice = {i: n for i, n in counts.items() if n != 1}
    assert not missing and not twice and sum(counts.values()) == TASKS, (missing[:20], list(twice.items())[:20],
                                                                        log[-3000:])


@pytest.mark.slow
@pytest.mark.fault
def test_every_task_runs_when_the_broker_restarts_mid_flow(prefix: str, tmp_path: Path) -> None:
    """File storage; tasks are sent, the worker runs them, nats-server is stopped and started
    again (same port, same store) while tasks are queued and running; the worker's connection
    reconnects and every task runs. A task whose ack or delivery was on the wire when the server
    went down runs again after ``ack_wait`` (at least once); the rest run exactly once."""
    count = 300
    with NatsServer(jetstream=True) as server:
        options = {"subject_prefix": prefix, "ack_wait": 4.0 * FACTOR, "storage": "file",
                   "connect_options": {"reconnect_time_wait": 0.1}}
        runs = _write_app(tmp_path, server.url, options)
        sender = _sender(server.url, options)
        proc = _worker(tmp_path, "--pool=threads", "--concurrency=4")
        try:
            for i in range(count):
                sender.send_task("kombu_runs.record", args=[i])
            wait_for(lambda: sum(_runs(runs).values()) >= count // 3, timeout=60, interval=0.02,
                     what="a third of the tasks to run")
            # counted as the restart begins (after it, the reconnected worker may have run the rest already)
            before = sum(_runs(runs).values())
            server.restart()
            assert before < count, "every task ran before the restart: nothing was mid-flow"
            # the sender's pooled connection reconnects too: more tasks after the restart
            done = threading.Event()

            def send_more() -> None:
                for i in range(count, count + 50):
                    sender.send_task("kombu_runs.record", args=[i], retry=True,
                                     retry_policy={"max_retries": 50, "interval_start": 0.1,
                                                   "interval_step": 0.1, "interval_max": 0.5})
                done.set()

            t = threading.Thread(target=send_more)
            t.start()
            t.join(60 * FACTOR)
            assert done.is_set(), "sending after the restart did not finish"
            wait_for(lambda: set(_runs(runs)) >= set(range(count + 50)) or proc.poll() is not None,
                     timeout=60, interval=0.1, what="every task to run after the restart")
            wait_for(lambda: _queue_settled(server.url, f"{prefix}_celery"), timeout=30, interval=0.1,
                     what="every task to be acked")
        finally:
            code = _stop(proc)
            _close(sender)
        log = (tmp_path / "worker.log").read_text()
        assert code == 0, log[-5000:]
        counts = _runs(runs)
        assert set(counts) == set(range(count + 50)), log[-3000:]
        again = {i: n for i, n in counts.items() if n > 1}
        print(f"broker restart: {len(again)} of {count + 50} tasks ran more than once: {sorted(again)[:20]}")


@pytest.mark.slow
@pytest.mark.parametrize("pool", [["--pool=prefork", "--concurrency=4"], ["--pool=threads", "--concurrency=8"]],
                         ids=["prefork-4", "threads-8"])
def test_a_warm_shutdown_mid_flow_hands_the_rest_to_the_next_worker_exactly_once(
        nats_server: NatsServer, prefix: str, tmp_path: Path, pool: list[str]) -> None:
    """A rolling restart: the first worker is stopped (SIGTERM, Celery's warm shutdown) while
    tasks are queued and prefetched; what it received and did not start goes back to the queue
    (-NAK on channel close) and the second worker runs it. Nothing failed: exactly once."""
    count = min(TASKS, 3000)
    options = {"subject_prefix": prefix}
    # the tasks from a twentieth on wait for a gate, opened once the warm shutdown took hold:
    # a worker runs a few thousand of these no-op tasks a second, faster than they are sent
    # on a quiet machine, so without the gate the first worker could run them all
    held = count // 20
    runs = _write_app(tmp_path, nats_server.url, options, gate_from=held)
    sender = _sender(nats_server.url, options)
    first = _worker(tmp_path, *pool)
    code = -1
    second = None
    try:
        for i in range(count):
            sender.send_task("kombu_runs.record", args=[i])
        wait_for(lambda: sum(_runs(runs).values()) >= held, timeout=120, interval=0.01,
                 what="the tasks before the gate to run")
        first.send_signal(signal.SIGTERM)  # warm shutdown: stop taking tasks, finish those started
        wait_for(lambda: "Warm shutdown" in (tmp_path / "worker.log").read_text(errors="replace"),
                 timeout=30, interval=0.01, what="the warm shutdown to start")
        (tmp_path / "gate").touch()
        try:
            first.wait(60 * FACTOR)
        except subprocess.TimeoutExpired:
            pass
        assert _stop(first) == 0, (tmp_path / "worker.log").read_text()[-5000:]
        stopped_at = sum(_runs(runs).values())
        assert stopped_at < count, "every task ran before the first worker stopped"
        second = _worker(tmp_path, *pool)
        wait_for(lambda: sum(_runs(runs).values()) >= count or second.poll() is not None,
                 timeout=max(120, count / 50), interval=0.1, what=f"{count} tasks to run")
        wait_for(lambda: _queue_settled(nats_server.url, f"{prefix}_celery"), timeout=30, interval=0.1,
                 what="every task to be acked")
    finally:
        _stop(first)
        if second is not None:
            code = _stop(second)
        _close(sender)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-5000:]
    assert stopped_at < count, "every task ran before the first worker stopped"
    counts = _runs(runs)
    missing = [i for i in range(count) if i not in counts]
    twice = {i: n for i, n in counts.items() if n != 1}
    assert not missing and not twice, (missing[:20], list(twice.items())[:20], log[-3000:])


@pytest.mark.fault
def test_tasks_queued_before_a_broker_restart_run_exactly_once_after_it(prefix: str, tmp_path: Path) -> None:
    """Nothing in flight: the tasks wait in the file-stored stream while nats-server restarts."""
    count = 300
    with NatsServer(jetstream=True) as server:
        options = {"subject_prefix": prefix, "storage": "file"}
        runs = _write_app(tmp_path, server.url, options)
        sender = _sender(server.url, options)
        proc = None
        try:
            for i in range(count):
                sender.send_task("kombu_runs.record", args=[i])
            _close(sender)
            server.restart()
            proc = _worker(tmp_path, "--pool=prefork", "--concurrency=4")
            wait_for(lambda: sum(_runs(runs).values()) >= count or proc.poll() is not None, timeout=120,
                     interval=0.1, what="every queued task to run")
            wait_for(lambda: _queue_settled(server.url, f"{prefix}_celery"), timeout=30, interval=0.1,
                     what="every task to be acked")
        finally:
            code = _stop(proc) if proc is not None else -1
            _close(sender)
        assert code == 0, (tmp_path / "worker.log").read_text()[-5000:]
        assert _runs(runs) == collections.Counter(range(count))
