"""Celery's results in a JetStream key-value bucket (jssync.kombu.backend:KeyValueBackend), with a real
``celery worker -P prefork -c 2`` on the kombu transport: nothing but NATS.

The module's worker uses the backend with all its defaults (the bucket ``celery_results``, the
broker's server); a task's result, forget(), a group, a chain, a chord (counted with ``incr``),
the bucket's TTL from ``result_expires`` and a result that expires.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import kill_celery_worker, start_celery_worker

pytestmark = pytest.mark.timeout(int(120 * FACTOR))

BACKEND = "jssync.kombu.backend:KeyValueBackend"

_APP = '''
from celery import Celery

app = Celery("kv_results", broker={url!r}, backend={backend!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}}},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="kv_results.add")
def add(x, y):
    return x + y


@app.task(name="kv_results.total")
def total(values):
    return sum(values)
'''


def _app(url: str, prefix: str, backend: str = BACKEND, **conf: Any) -> Any:
    from celery import Celery

    app = Celery("kv_results", broker=url, backend=backend)
    app.conf.broker_transport = "jssync.kombu:Transport"
    app.conf.broker_transport_options = {"subject_prefix": prefix}
    app.conf.update(conf)
    return app


def _close(app: Any) -> None:
    app.backend.close()
    app.pool.force_close_all()
    app.close()


def _drop_bucket(url: str, bucket: str) -> None:
    """A test's cleanup: delete its result bucket."""
    with jssync.connect(url) as nc:
        nc.jetstream().delete_key_value(bucket)


class Worker:
    def __init__(self, app: Any, name: str) -> None:
        self.app, self.name = app, name


@pytest.fixture(scope="module")
def worker(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A prefork worker of 2 storing its results with the key-value backend's defaults."""
    tmp = tmp_path_factory.mktemp("celery_kv")
    prefix = f"kkv{uuid.uuid4().hex[:8]}"
    (tmp / "kv_results.py").write_text(_APP.format(url=nats_server.url, backend=BACKEND, prefix=prefix))
    name = f"kv{time.monotonic_ns()}@localhost"
    proc, log_path = start_celery_worker(tmp, "kv_results", name, "-P", "prefork", "-c", "2")
    app = _app(nats_server.url, prefix)
    try:
        wait_for(lambda: bool(app.control.inspect(timeout=1.0).ping()) or proc.poll() is not None, 60)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        _ = app.backend.bucket  # the backend's connection: the module's, not a test's
        yield Worker(app, name)
    finally:
        kill_celery_worker(proc)
        _close(app)


def test_a_tasks_result_is_a_key_of_the_bucket_and_forget_removes_it(worker: Worker, nats_server: NatsServer) -> None:
    result = worker.app.send_task("kv_results.add", args=[2, 3])
    assert result.get(timeout=20 * FACTOR) == 5
    assert result.state == "SUCCESS"
    with jssync.connect(nats_server.url) as nc:
        kv = nc.jetstream().key_value("celery_results")
        keys = kv.keys()
        assert f"celery-task-meta-{result.id}" in keys
        assert kv.status().ttl == 86400  # Celery's default result_expires: one day
        result.forget()
        keys = kv.keys()
        assert f"celery-task-meta-{result.id}" not in keys
    assert worker.app.AsyncResult(result.id).state == "PENDING"


def test_a_group_and_its_saved_result(worker: Worker) -> None:
    from celery import group
    from celery.result import GroupResult

    add = worker.app.signature("kv_results.add")
    res = group(add.clone((i, i)) for i in range(5)).apply_async()
    assert res.get(timeout=20 * FACTOR) == [0, 2, 4, 6, 8]
    res.save()
    restored = GroupResult.restore(res.id, app=worker.app)
    assert restored is not None and [r.id for r in restored.results] == [r.id for r in res.results]
    restored.delete()
    assert GroupResult.restore(res.id, app=worker.app) is None


def test_a_chain(worker: Worker) -> None:
    from celery import chain

    add = worker.app.signature("kv_results.add")
    assert chain(add.clone((1, 2)), add.clone((10,)), add.clone((100,))).apply_async().get(timeout=20 * FACTOR) == 113


def test_a_chord_runs_its_body_once_every_part_is_counted(worker: Worker) -> None:
    from celery import chord

    app = worker.app
    add = app.signature("kv_results.add")
    result = chord((add.clone((i, i)) for i in range(6)), app.signature("kv_results.total")).apply_async()
    assert result.get(timeout=30 * FACTOR) == 30


def test_result_expires_is_the_bucket_ttl_and_a_result_goes_after_it(nats_server: NatsServer, unique: str) -> None:
    bucket = f"res_{unique}"
    app = _app(nats_server.url, f"kx{unique}", result_expires=1,
               result_backend_transport_options={"bucket": bucket, "storage": "memory"})
    try:
        backend = app.backend
        task_id = uuid.uuid4().hex
        backend.store_result(task_id, 42, "SUCCESS")
        assert app.AsyncResult(task_id).get(timeout=5 * FACTOR) == 42
        assert backend.bucket.status().ttl == 1
        wait_for(lambda: app.AsyncResult(task_id).state == "PENDING", 10)
    finally:
        _close(app)
        _drop_bucket(nats_server.url, bucket)


def test_incr_from_many_threads_and_two_processes_counts_every_call(nats_server: NatsServer, unique: str) -> None:
    bucket = f"res_{unique}"
    opts = {"bucket": bucket, "storage": "memory"}
    apps = [_app(nats_server.url, f"ki{unique}", result_backend_transport_options=opts) for _ in range(2)]
    try:
        backends = [a.backend for a in apps]
        errors: list[BaseException] = []

        def bump(backend: Any) -> None:
            try:
                for _ in range(10):
                    backend.incr("chord-unlock-x")
            except BaseException as exc:  # noqa: BLE001 - reported by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=bump, args=(backends[i % 2],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30 * FACTOR)
        assert not errors, errors
        assert int(backends[0].get("chord-unlock-x")) == 40
    finally:
        for a in apps:
            _close(a)
        _drop_bucket(nats_server.url, bucket)


def test_a_bad_option_is_refused_before_anything_is_sent(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, "kbad", result_backend_transport_options={"bucket": "no spaces"})
    try:
        with pytest.raises(jssync.ValidationError, match="bucket 'no spaces'"):
            _ = app.backend
    finally:
        app.close()


def test_the_backend_url_after_the_class_path_names_the_servers(nats_server: NatsServer, unique: str) -> None:
    bucket = f"res_{unique}"
    app = _app("memory://", f"ku{unique}", backend=f"{BACKEND}+{nats_server.url}",
               result_backend_transport_options={"bucket": bucket, "storage": "memory"})
    try:
        backend = app.backend
        assert backend.servers == [nats_server.url]
        backend.store_result("t1", [1, 2], "SUCCESS")
        assert app.AsyncResult("t1").get(timeout=5 * FACTOR) == [1, 2]
    finally:
        _close(app)
        _drop_bucket(nats_server.url, bucket)


def test_the_nats_scheme_from_the_entry_point_setup_cfg_declares(nats_server: NatsServer, tmp_path: Any) -> None:
    # setup.cfg's celery.result_backends entry points, as an installed distribution carries them: a
    # Celery app in another process then takes result_backend = "nats://..." to be this backend
    import configparser
    import subprocess
    import sys

    from tests.integration.kombu.conftest import ROOT

    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    group = parser["options.entry_points"]["celery.result_backends"]
    dist = tmp_path / "jssync_celery_entry-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jssync-celery-entry\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[celery.result_backends]\n{group.strip()}\n")
    code = ("from celery import Celery\n"
            f"app = Celery('x', broker='memory://', backend={nats_server.url!r})\n"
            "b = app.backend\n"
            "print(type(b).__module__, type(b).__name__, b.servers)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60 * FACTOR,
                         env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split(None, 2) == ["jssync.kombu.backend", "KeyValueBackend", f"['{nats_server.url}']\n"], out


def test_every_thread_and_every_backend_of_a_process_share_one_connection(nats_server: NatsServer,
                                                                          unique: str) -> None:
    bucket = f"res_{unique}"
    opts = {"bucket": bucket, "storage": "memory"}
    apps = [_app(nats_server.url, f"kt{unique}", result_backend_transport_options=opts) for _ in range(2)]
    try:
        seen: list[Any] = []
        errors: list[BaseException] = []

        def use(app: Any, i: int) -> None:
            try:
                backend = app.backend
                backend.store_result(f"t{i}", i, "SUCCESS")
                seen.append(backend)
            except BaseException as exc:  # noqa: BLE001 - reported by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=use, args=(apps[i % 2], i)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30 * FACTOR)
        assert not errors, errors
        assert {id(b) for b in seen} == {id(apps[0].backend), id(apps[1].backend)}  # one backend per app
        assert apps[0].backend._nc is apps[1].backend._nc  # one connection for the process
        assert [apps[i % 2].AsyncResult(f"t{i}").get(timeout=5 * FACTOR) for i in range(6)] == list(range(6))
        apps[0].backend.close()
        assert not apps[1].backend._nc.is_closed  # still held by the other backend
        assert apps[1].AsyncResult("t1").get(timeout=5 * FACTOR) == 1
    finally:
        for a in apps:
            _close(a)
        _drop_bucket(nats_server.url, bucket)


def test_a_forked_child_opens_its_own_connection_and_the_process_exits_promptly(
        nats_server: NatsServer, unique: str, tmp_path: Any) -> None:
    # the parent is connected before the fork; the child stores a result over its own connection
    # and exits through the interpreter (atexit closes that connection) without hanging
    import subprocess
    import sys

    from tests.integration.kombu.conftest import ROOT

    bucket = f"res_{unique}"
    code = f'''
import os, sys
from celery import Celery
app = Celery("x", broker="memory://", backend="{BACKEND}+{nats_server.url}")
app.conf.result_backend_transport_options = {{"bucket": "{bucket}", "storage": "memory"}}
b = app.backend
b.store_result("parent", 1, "SUCCESS")
parent_nc = b._nc
pid = os.fork()
if pid == 0:
    b.store_result("child", 2, "SUCCESS")
    assert b._nc is not parent_nc and not b._nc.is_closed
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert not parent_nc.is_closed and b._nc is parent_nc  # the child never closed the parent's
assert app.AsyncResult("child").get(timeout=5) == 2
print("ok")
'''
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30 * FACTOR,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0 and out.stdout.strip() == "ok", out
    finally:
        _drop_bucket(nats_server.url, bucket)


def test_incr_reads_the_counter_from_the_stream_leader_not_by_direct_get(nats_server: NatsServer,
                                                                         unique: str) -> None:
    bucket = f"res_{unique}"
    app = _app(nats_server.url, f"kd{unique}",
               result_backend_transport_options={"bucket": bucket, "storage": "memory"})
    try:
        backend = app.backend
        with jssync.connect(nats_server.url) as watcher:
            direct = watcher.subscribe(f"$JS.API.DIRECT.GET.KV_{bucket}.>")
            watcher.flush()
            assert [backend.incr("chord-unlock-d") for _ in range(3)] == [1, 2, 3]
            backend.delete("chord-unlock-d")
            assert backend.incr("chord-unlock-d") == 1  # a delete marker counts from 0 again
            backend._nc.flush()
            watcher.flush()
            with pytest.raises(jssync.TimeoutError):
                direct.next_msg(timeout=0.2)  # no direct get answered by any replica
    finally:
        _close(app)
        _drop_bucket(nats_server.url, bucket)


def test_a_deleted_bucket_is_created_again_by_the_next_set_and_get(nats_server: NatsServer, unique: str) -> None:
    bucket = f"res_{unique}"
    app = _app(nats_server.url, f"kg{unique}", result_expires=600,
               result_backend_transport_options={"bucket": bucket, "storage": "memory"})
    try:
        backend = app.backend
        backend.store_result("before", 1, "SUCCESS")
        _drop_bucket(nats_server.url, bucket)
        assert app.AsyncResult("before").state == "PENDING"  # the get re-creates the bucket
        backend.store_result("after", 2, "SUCCESS")
        assert app.AsyncResult("after").get(timeout=5 * FACTOR) == 2
        _drop_bucket(nats_server.url, bucket)
        backend.store_result("again", 3, "SUCCESS")  # a set re-creates it too
        assert backend.incr("chord-unlock-g") == 1
        with jssync.connect(nats_server.url) as nc:
            kv = nc.jetstream().key_value(bucket)
            assert kv.status().ttl == 600
            keys = kv.keys()
            assert "celery-task-meta-again" in keys
    finally:
        _close(app)
        _drop_bucket(nats_server.url, bucket)


def test_which_errors_celery_may_retry_and_kombus_server_separators(nats_server: NatsServer) -> None:
    from jssync.kombu.backend import server_urls

    app = _app(nats_server.url, "kr")
    try:
        backend = app.backend
        assert backend.exception_safe_to_retry(jssync.NoRespondersError())
        assert backend.exception_safe_to_retry(jssync.RequestTimeoutError())
        assert backend.exception_safe_to_retry(jssync.ConnectionClosedError("closed"))
        assert not backend.exception_safe_to_retry(jssync.ValidationError("bad key"))
        assert not backend.exception_safe_to_retry(KeyError("x"))
    finally:
        _close(app)
    assert server_urls("nats://a:4222;nats://b:4222", None) == ["nats://a:4222", "nats://b:4222"]
    assert server_urls(None, "jssync://a:1;b:2,c:3") == ["nats://a:1", "nats://b:2", "nats://c:3"]


def test_result_chord_expires_is_not_honoured_and_says_so(nats_server: NatsServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="jssync"):
        app = _app(nats_server.url, "kc", result_chord_expires=60)
        try:
            _ = app.backend
        finally:
            _close(app)
    assert any("result_chord_expires is not honoured" in r.getMessage() for r in caplog.records)


def test_incr_waits_between_tries_and_gives_up_at_its_deadline_when_others_always_win(
        nats_server: NatsServer, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from jssync.kombu import backend as backend_module

    bucket = f"res_{unique}"
    app = _app(nats_server.url, f"kw{unique}",
               result_backend_transport_options={"bucket": bucket, "storage": "memory"})
    monkeypatch.setattr(backend_module, "INCR_DEADLINE", 2.0, raising=False)
    tries: list[float] = []

    try:
        backend = app.backend
        backend.set("chord-unlock-w", b"0")
        kv_type = type(backend.bucket)
        update = kv_type.update

        def raced(kv: Any, name: str, value: bytes, last: int, **kw: Any) -> int:
            tries.append(time.monotonic())
            kv.put(name, b"100")  # another worker's write lands between the read and the update
            return update(kv, name, value, last, **kw)  # type: ignore[no-any-return]

        monkeypatch.setattr(kv_type, "update", raced)
        with pytest.raises(jssync.KeyWrongLastSequenceError, match="changed by others"):
            backend.incr("chord-unlock-w")
        assert 3 <= len(tries) < 40  # a backoff between tries, not a hundred tries at once
        assert tries[-1] - tries[0] >= 0.2
    finally:
        _close(app)
        _drop_bucket(nats_server.url, bucket)
