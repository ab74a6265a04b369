"""The framework examples (Flask/gunicorn, Django, Celery, Jupyter) run against a real server.

Each test uses this module's own nats-server (the examples use fixed subjects, ``orders.>``,
which must not overlap other tests' streams), a unique stream name, and deletes what it made.
Subprocesses (gunicorn, manage.py, celery) are stopped in ``finally`` blocks, with timeouts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import jssync
from jssync.server import NatsServer, free_port
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FLASK_DIR = EXAMPLES / "flask_app"
DJANGO_DIR = EXAMPLES / "django_app"


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer(jetstream=True) as srv:
        yield srv


@pytest.fixture
def stream_name(server: NatsServer, unique: str) -> Iterator[str]:
    """A unique stream name for the example; the stream is deleted after the test."""
    name = f"ORDERS_{unique}"
    yield name
    with jssync.connect(server.url) as nc:
        try:
            nc.jetstream().delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def _load(name: str, path: Path) -> ModuleType:
    """Import an example file as a module called ``name``."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra.get("PYTHONPATH"), str(ROOT)) if p)
    return env


def _stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
    """Signal ``proc`` and wait for it (kill it after ``timeout``); return its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout * FACTOR)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def _connection_names(srv: NatsServer) -> list[str]:
    return [c.get("name") or "" for c in srv.varz("connz?limit=1024")["connections"]]  # type: ignore[union-attr]


def _stream_messages(srv: NatsServer, stream: str, subject: str = "orders.new") -> list[dict[str, Any]]:
    with jssync.connect(srv.url) as nc:
        s = nc.jetstream().stream(stream)
        last = s.info().state.last_seq
        out = []
        for seq in range(1, last + 1):
            try:
                m = s.get_msg(seq)
            except jssync.MessageNotFoundError:
                continue
            if m.subject == subject:
                out.append(json.loads(m.data))
        return out


# --------------------------------------------------------------------------- Flask, in process


def test_flask_app_with_the_test_client(server: NatsServer, stream_name: str) -> None:
    mod = _load("jssync_example_flask_app", FLASK_DIR / "app.py")
    app = mod.create_app({"NATS_URL": server.url, "ORDERS_STREAM": stream_name, "ORDERS_WORKER": True,
                          "TESTING": True})
    nats = app.extensions["jssync"]
    try:
        client = app.test_client()
        r = client.post("/orders", json={"item": "book", "qty": 2}, headers={"Idempotency-Key": "order-1"})
        assert r.status_code == 201, r.get_json()
        first = r.get_json()
        assert first == {"id": "order-1", "stream": stream_name, "seq": first["seq"], "duplicate": False}

        # the same Idempotency-Key again: stored once
        r = client.post("/orders", json={"item": "book", "qty": 2}, headers={"Idempotency-Key": "order-1"})
        assert r.status_code == 200 and r.get_json()["duplicate"] is True
        assert r.get_json()["seq"] == first["seq"]

        assert client.post("/orders", json={"item": "pen", "qty": 1}).status_code == 400  # no key
        assert client.post("/orders", json={"item": "pen"}, headers={"Idempotency-Key": "x"}).status_code == 400
        assert client.post("/orders", data="nope", headers={"Idempotency-Key": "x"}).status_code == 400
        assert client.get("/orders/next?n=0").status_code == 400
        assert client.get("/orders/next?n=5&wait=abc").status_code == 400

        r = client.post("/orders", json={"item": "pen", "qty": 3}, headers={"Idempotency-Key": "order-2"})
        assert r.status_code == 201

        # the background worker (this process) processes both; the route fetches the results
        got: list[dict[str, Any]] = []
        end = time.monotonic() + 15 * FACTOR
        while len(got) < 2 and time.monotonic() < end:
            r = client.get("/orders/next?n=5&wait=1")
            assert r.status_code == 200, r.get_json()
            got += r.get_json()["orders"]
        assert sorted(o["id"] for o in got) == ["order-1", "order-2"]
        assert {o["processed_by"] for o in got} == {os.getpid()}
        assert {o["id"]: o["qty"] for o in got} == {"order-1": 2, "order-2": 3}

        status = client.get("/worker").get_json()
        assert status["running"] is True and status["pid"] == os.getpid()
        assert sorted(status["processed"]) == ["order-1", "order-2"]

        # nothing more to fetch: the route returns an empty list after `wait`
        assert client.get("/orders/next?n=5&wait=0.3").get_json() == {"orders": []}
    finally:
        nats.close()
    assert not nats.worker_running
    nats.close()  # idempotent

    # everything was acked
    with jssync.connect(server.url) as nc:
        for durable in ("processor", "review"):
            info = nc.jetstream().consumer(stream_name, durable).info()
            assert info.num_ack_pending == 0 and info.num_pending == 0, (durable, info)


# --------------------------------------------------------------------------- Flask under gunicorn


def _gunicorn_has(setting: str) -> bool:
    import gunicorn.config

    return any(s.name == setting for s in gunicorn.config.KNOWN_SETTINGS)


def _http(url: str, data: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
          timeout: float = 15.0) -> tuple[int, dict[str, Any]]:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, method="GET" if data is None else "POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_flask_app_under_gunicorn_with_two_workers(server: NatsServer, stream_name: str, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gunicorn", "-c", str(FLASK_DIR / "gunicorn.conf.py")]
    if _gunicorn_has("control_socket_disable"):
        cmd.append("--no-control-socket")  # gunicorn >= 25: no shared ~/.gunicorn/gunicorn.ctl
    log_path = tmp_path / "gunicorn.log"
    env = _env(NATS_URL=server.url, ORDERS_STREAM=stream_name, BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="2")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def booted() -> list[int]:
        return [int(p) for p in re.findall(r"Booting worker with pid: (\d+)", log_path.read_text())]

    try:
        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()
            try:
                return _http(base + "/worker", timeout=2)[0] == 200
            except OSError:
                return False

        wait_for(up, timeout=30, interval=0.1, what="gunicorn to answer")
        # one connection per worker process, made after the fork (post_fork), none in the master
        wait_for(lambda: len([n for n in _connection_names(server) if n.startswith("orders-web-")]) == 2,
                 timeout=15, interval=0.05, what="both workers to connect")
        workers = set(booted())
        conn_pids = {int(n.rsplit("-", 1)[1]) for n in _connection_names(server) if n.startswith("orders-web-")}
        assert len(workers) == 2 and conn_pids == workers, (workers, conn_pids)
        assert proc.pid not in conn_pids

        for i in range(10):
            status, body = _http(base + "/orders", {"item": "book", "qty": i + 1}, {"Idempotency-Key": f"o-{i}"})
            assert status == 201, body
        status, body = _http(base + "/orders", {"item": "book", "qty": 1}, {"Idempotency-Key": "o-0"})
        assert status == 200 and body["duplicate"] is True

        got: dict[str, dict[str, Any]] = {}
        end = time.monotonic() + 30 * FACTOR
        while len(got) < 10 and time.monotonic() < end:
            status, body = _http(base + "/orders/next?n=5&wait=1")
            assert status == 200, body
            got.update((o["id"], o) for o in body["orders"])
        assert sorted(got) == sorted(f"o-{i}" for i in range(10))
        # processed by the background workers in the gunicorn worker processes
        assert {o["processed_by"] for o in got.values()} <= workers
        assert all(o["qty"] == int(o["id"][2:]) + 1 for o in got.values())
    finally:
        code = _stop(proc)
    text = log_path.read_text()
    assert code == 0, text
    # worker_exit drained each consumer and closed each connection
    assert text.count("jssync consumer drained, connection closed") == 2, text
    assert "Traceback" not in text, text
    wait_for(lambda: not [n for n in _connection_names(server) if n.startswith("orders-web-")],
             timeout=10, what="the workers' connections to go")
    with jssync.connect(server.url) as nc:
        info = nc.jetstream().consumer(stream_name, "processor").info()
        assert info.num_ack_pending == 0 and info.num_pending == 0


# --------------------------------------------------------------------------- Django


@pytest.fixture
def django_site(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Django set up in this process with the example's settings; yields ``orders.nats``."""
    monkeypatch.syspath_prepend(str(DJANGO_DIR))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "orders_site.settings")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    from orders import nats  # type: ignore[import-not-found]

    try:
        yield nats
    finally:
        nats.close()


def _manage(*args: str, server: NatsServer, stream: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=DJANGO_DIR, capture_output=True, text=True,
                          env=_env(NATS_URL=server.url, ORDERS_STREAM=stream), timeout=timeout * FACTOR,
                          stdin=subprocess.DEVNULL)


def test_django_view_publishes_and_command_consumes(server: NatsServer, stream_name: str,
                                                    django_site: ModuleType) -> None:
    from django.test import Client, override_settings

    with override_settings(NATS_URL=server.url, ORDERS_STREAM=stream_name, ALLOWED_HOSTS=["testserver"]):
        client = Client()
        for i, item in enumerate(["book", "pen", "lamp"], start=1):
            r = client.post("/orders/", data=json.dumps({"item": item, "qty": i}), content_type="application/json",
                            headers={"Idempotency-Key": f"dj-{i}"})
            assert r.status_code == 201, r.content
            assert r.json()["stream"] == stream_name and r.json()["duplicate"] is False
        r = client.post("/orders/", data=json.dumps({"item": "book", "qty": 1}), content_type="application/json",
                        headers={"Idempotency-Key": "dj-1"})
        assert r.status_code == 200 and r.json()["duplicate"] is True
        assert client.post("/orders/", data="{}", content_type="application/json").status_code == 400
        assert client.post("/orders/", data="[1]", content_type="application/json",
                           headers={"Idempotency-Key": "x"}).status_code == 400
        assert client.get("/orders/").status_code == 405
        django_site.close()

    proc = _manage("consume_orders", "--count", "3", "--timeout", "30", server=server, stream=stream_name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handled = re.findall(r"handled order (\S+): (\d+) x (\w+)", proc.stdout)
    assert handled == [("dj-1", "1", "book"), ("dj-2", "2", "pen"), ("dj-3", "3", "lamp")], proc.stdout
    assert "done: handled 3 orders" in proc.stdout

    with jssync.connect(server.url) as nc:  # the acks were flushed when the command closed
        info = nc.jetstream().consumer(stream_name, "orders-command").info()
        assert info.num_ack_pending == 0 and info.num_pending == 0 and info.delivered.stream_seq == 3

    # nothing left: --timeout makes it fail instead of waiting forever
    proc = _manage("consume_orders", "--count", "1", "--timeout", "0.5", server=server, stream=stream_name)
    assert proc.returncode != 0
    assert "timed out: handled 0 of 1 orders" in proc.stderr


def test_django_command_stops_cleanly_on_sigterm(server: NatsServer, stream_name: str, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "manage.py", "consume_orders", "--batch", "2"], cwd=DJANGO_DIR,
                                env=_env(NATS_URL=server.url, ORDERS_STREAM=stream_name), stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: "consuming orders.new" in out.read_text(), timeout=30, interval=0.05,
                 what="the command to start")
        with jssync.connect(server.url) as nc:
            nc.jetstream().publish("orders.new", json.dumps({"item": "cup", "qty": 4}).encode(), msg_id="sig-1")
        wait_for(lambda: "handled order sig-1: 4 x cup" in out.read_text(), timeout=15, interval=0.05,
                 what="the order to be handled")
    finally:
        code = _stop(proc, timeout=15)
    text = out.read_text()
    assert code == 0, text
    assert "stopping" in text and "done: handled 1 orders" in text, text


# --------------------------------------------------------------------------- Celery


def test_celery_task_publishes_with_an_in_process_worker(server: NatsServer, stream_name: str) -> None:
    from celery.contrib.testing.worker import start_worker

    mod = _load("celery_app", EXAMPLES / "celery_app.py")
    app = mod.app
    app.conf.nats_url = server.url
    app.conf.orders_stream = stream_name
    app.conf.worker_hijack_root_logger = False  # leave pytest's logging alone
    assert app.conf.broker_url.startswith("memory://"), "CELERY_BROKER_URL is set in the environment"
    try:
        # threads pool: the tasks share this process's connection (made lazily on first use)
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, loglevel="WARNING",
                          shutdown_timeout=30):
            results = [mod.publish_order.delay({"item": "book", "qty": i}, f"celery-{i}") for i in range(1, 5)]
            acks = [r.get(timeout=20 * FACTOR) for r in results]
            again = mod.publish_order.delay({"item": "book", "qty": 1}, "celery-1").get(timeout=20 * FACTOR)
    finally:
        mod.close_connection()
    assert [a["stream"] for a in acks] == [stream_name] * 4
    assert sorted(a["seq"] for a in acks) == [1, 2, 3, 4]
    assert not any(a["duplicate"] for a in acks)
    assert again["duplicate"] is True and again["seq"] == acks[0]["seq"]
    assert sorted(m["qty"] for m in _stream_messages(server, stream_name)) == [1, 2, 3, 4]


_CELERY_FS_WORKER = '''
from celery_app import app  # noqa: F401 - `celery -A celery_fs_worker` finds the app here

app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={{"data_folder_in": {q!r}, "data_folder_out": {q!r}, "control_folder": {ctl!r},
                               "polling_interval": 0.1}},
    result_backend={results!r},
)
'''


def test_celery_prefork_worker_connects_in_each_child(server: NatsServer, stream_name: str, tmp_path: Path) -> None:
    """A real ``celery worker`` (prefork, 2 children) on a broker that works across processes."""
    from celery import Celery

    q, ctl, res = tmp_path / "queue", tmp_path / "control", tmp_path / "results"
    for d in (q, ctl, res):
        d.mkdir()
    results_url = "file://" + str(res)
    (tmp_path / "celery_fs_worker.py").write_text(
        _CELERY_FS_WORKER.format(q=str(q), ctl=str(ctl), results=results_url))
    log_path = tmp_path / "worker.log"
    env = _env(NATS_URL=server.url, ORDERS_STREAM=stream_name,
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(EXAMPLES)]))
    env.pop("CELERY_BROKER_URL", None)
    env.pop("CELERY_RESULT_BACKEND", None)
    cmd = [sys.executable, "-m", "celery", "-A", "celery_fs_worker", "worker", "--pool=prefork", "--concurrency=2",
           "--loglevel=INFO", "--without-heartbeat", "--without-mingle", "--without-gossip"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    sender = Celery("sender", broker="filesystem://", backend=results_url)
    sender.conf.broker_transport_options = {"data_folder_in": str(q), "data_folder_out": str(q),
                                            "control_folder": str(ctl), "polling_interval": 0.1}
    try:
        results = [sender.send_task("celery_app.publish_order", args=[{"item": "mug", "qty": i}, f"pf-{i}"])
                   for i in range(1, 5)]
        acks = [r.get(timeout=30 * FACTOR) for r in results]
        # worker_process_init connects each pool child as it starts (a loaded machine may start the
        # second child after the first has run all four tasks); the main worker process never connects
        def child_pids() -> set[int]:
            names = [n for n in _connection_names(server) if n.startswith("orders-celery-")]
            return {int(n.rsplit("-", 1)[1]) for n in names}

        wait_for(lambda: len(child_pids()) == 2, timeout=30 * FACTOR, interval=0.1,
                 what="both pool children to connect")
        assert proc.pid not in child_pids(), (child_pids(), proc.pid)
    finally:
        code = _stop(proc, timeout=30)
        sender.close()
    text = log_path.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text
    assert sorted(a["seq"] for a in acks) == [1, 2, 3, 4]
    assert sorted(m["qty"] for m in _stream_messages(server, stream_name)) == [1, 2, 3, 4]
    # worker_process_shutdown closed them
    wait_for(lambda: not [n for n in _connection_names(server) if n.startswith("orders-celery-")],
             timeout=10, what="the children's connections to go")


# --------------------------------------------------------------------------- Jupyter


def _nats_server_children(pid: int) -> set[int]:
    """nats-server processes whose parent is ``pid`` (Linux /proc; empty elsewhere)."""
    found: set[int] = set()
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return found
    for d in proc_dir.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"nats-server" in (d / "cmdline").read_bytes():
                found.add(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_notebook_runs(tmp_path: Path) -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(EXAMPLES / "explore_stream.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    servers: set[int] = set()

    def remember_servers(**_: Any) -> None:
        # so a failing notebook does not leave its nats-server behind
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid:
            servers.update(_nats_server_children(pid))

    client.on_cell_executed = remember_servers
    try:
        client.execute(env=_env())  # the kernel imports jssync from this checkout
    except BaseException:
        for pid in servers:  # the kernel is gone; stop its server if it is still running
            try:
                if b"nats-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        raise
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "published 72 readings" in text
    assert "closed: True" in text


def test_frameworks_page_helper_closes_its_connection_through_js_conn(server: NatsServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/frameworks.md's per-process helper hands out a JetStream; rule 4 says close its connection:
    the page shows how (``js.conn.close()``), and ``JetStream.conn`` is a documented, typed property."""
    text = (ROOT / "docs" / "frameworks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    helper = next(b for b in blocks if "def jetstream()" in b)
    assert ".conn.close()" in helper, "the helper shows no way to close the connection it made"
    prop = jssync.JetStream.__dict__.get("conn")
    assert isinstance(prop, property) and "close" in (prop.__doc__ or ""), "JetStream.conn is not documented"
    assert prop.fget.__annotations__["return"] in ("Connection", jssync.Connection), "JetStream.conn is not typed"
    monkeypatch.setenv("NATS_URL", server.url)
    ns: dict[str, Any] = {}
    exec(compile(helper, "frameworks.md", "exec"), ns)  # noqa: S102 - the page's own code
    js = ns["jetstream"]()
    assert isinstance(js, jssync.JetStream) and ns["jetstream"]() is js
    nc = js.conn
    assert nc.is_connected
    ns["close_jetstream"]()
    assert nc.is_closed
    ns["close_jetstream"]()  # twice: nothing to close
