"""What a user sees when something goes wrong: tracebacks, error texts, Ctrl-C inside
asyncio.run, types that catch mistakes. Against a real server wherever a server is involved."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jssync
from tests.conftest import FACTOR

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(code: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=_env(), timeout=timeout * FACTOR, cwd=str(ROOT))


def _assert_clean_traceback(stderr: str, final: str) -> None:
    """One exception, no internal one printed before it."""
    assert "During handling of the above exception" not in stderr, stderr
    assert "_queue.Empty" not in stderr and "queue.Empty" not in stderr, stderr
    assert "concurrent.futures" not in stderr, stderr
    assert stderr.count("Traceback (most recent call last)") == 1, stderr
    assert stderr.rstrip().splitlines()[-1].startswith(final), stderr


def _no_internal_context(exc: BaseException) -> None:
    assert exc.__context__ is None, repr(exc.__context__)
    assert exc.__cause__ is None, repr(exc.__cause__)


# -- 1. tracebacks ----------------------------------------------------------------------------


def test_timeout_of_next_msg_has_no_context(nc):
    sub = nc.subscribe("nu.quiet")
    with pytest.raises(jssync.TimeoutError) as ei:
        sub.next_msg(timeout=0.2)
    _no_internal_context(ei.value)


def test_timeout_of_push_next_msg_has_no_context(js, stream):
    sub = js.subscribe(f"{stream.name}.quiet")
    try:
        with pytest.raises(jssync.TimeoutError) as ei:
            sub.next_msg(timeout=0.2)
        _no_internal_context(ei.value)
    finally:
        sub.unsubscribe()


def test_timeout_of_consume_next_has_no_context(js, stream):
    """ConsumeContext.next() and the consume iterator wait outside any except block."""
    c = stream.create_consumer(durable_name="NUQUIET", ack_policy="explicit")
    cc = c.consume(max_messages=10, expires=2.0)
    try:
        with pytest.raises(jssync.TimeoutError) as ei:
            cc.next(timeout=0.2)
        _no_internal_context(ei.value)
    finally:
        cc.stop()
    stream.delete_consumer("NUQUIET")


def test_errors_raised_by_fetch_and_consume_iteration_have_no_context(js, stream):
    """A fetch ending with an error and a consume ended by a deleted consumer raise clean errors."""
    stream.create_consumer(durable_name="NUPUSH", deliver_subject=f"nu.push.{stream.name}", ack_policy="explicit")
    with pytest.raises(jssync.ConsumerIsPushBasedError) as ei:
        list(stream.consumer("NUPUSH").fetch(1, expires=1.0))
    _no_internal_context(ei.value)
    stream.delete_consumer("NUPUSH")
    c = stream.create_consumer(durable_name="NUGONE", ack_policy="explicit")
    cc = c.consume(max_messages=10, expires=2.0, idle_heartbeat=0.5)
    try:
        stream.delete_consumer("NUGONE")
        with pytest.raises(jssync.ConsumerDeletedError) as ei2:
            for _ in cc:
                pass
        # the cause may be the jssync error that proved it (the consumer lookup), never an internal one
        for linked in (ei2.value.__context__, ei2.value.__cause__):
            assert linked is None or isinstance(linked, jssync.Error), repr(linked)
    finally:
        cc.stop()


def test_timeout_of_request_has_no_context(nc):
    nc.subscribe("nu.hang")
    with pytest.raises(jssync.TimeoutError) as ei:
        nc.request("nu.hang", b"", timeout=0.2)
    _no_internal_context(ei.value)


@pytest.mark.parametrize("call", ["sub.next_msg(timeout=0.3)", "nc.request('nu.hang', b'', timeout=0.3)",
                                  "js.subscribe('NUTB.x').next_msg(timeout=0.3)"])
def test_timeout_traceback_prints_one_jssync_error(nats_server, call):
    r = _run(f"""
        import sys, jssync
        nc = jssync.connect(sys.argv[1])
        js = nc.jetstream()
        try:
            js.delete_stream("NUTB")
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name="NUTB", subjects=["NUTB.>"], storage="memory")
        sub = nc.subscribe("nu.hang")
        try:
            {call}
        finally:
            js.delete_stream("NUTB")
        """, nats_server.url)
    assert r.returncode == 1
    # a request's timeout is the RequestTimeoutError (a jssync.TimeoutError) that says why
    _assert_clean_traceback(r.stderr, "jssync.RequestTimeoutError: " if "request" in call else "jssync.TimeoutError: ")


def test_ctrl_c_traceback_has_no_queue_empty(nats_server):
    r = _run("""
        import os, signal, sys, threading, jssync
        signal.signal(signal.SIGINT, signal.default_int_handler)
        nc = jssync.connect(sys.argv[1])
        sub = nc.subscribe("nu.ctrlc")
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        sub.next_msg(timeout=30)
        """, nats_server.url)
    assert r.returncode != 0
    _assert_clean_traceback(r.stderr, "KeyboardInterrupt")


def test_other_user_facing_errors_have_no_internal_context(js, unique):
    kv = js.create_key_value(bucket=f"KV{unique}", storage="memory")
    try:
        with pytest.raises(jssync.KeyNotFoundError) as ei:
            kv.get("missing")
        _no_internal_context(ei.value)
        w = kv.watch(">")
        try:
            assert w.next(timeout=2) is None  # the end of the (empty) initial values
            with pytest.raises(jssync.TimeoutError) as ei2:
                w.next(timeout=0.3)
            _no_internal_context(ei2.value)
        finally:
            w.stop()
    finally:
        js.delete_key_value(f"KV{unique}")
    with pytest.raises(jssync.NoRespondersError) as ei3:
        js.publish(f"nobody.{unique}", b"x")
    _no_internal_context(ei3.value)


def test_exceptions_print_as_jssync_names():
    assert repr(jssync.TimeoutError) == "<class 'jssync.TimeoutError'>"
    for name in jssync.__all__:
        obj = getattr(jssync, name)
        if isinstance(obj, type) and obj.__module__.startswith("jssync"):
            assert obj.__module__ == "jssync", name
    import pickle

    e = pickle.loads(pickle.dumps(jssync.StreamNotFoundError(404, 10059, "stream not found")))
    assert type(e) is jssync.StreamNotFoundError


def test_validation_errors_are_jssync_errors(js):
    with pytest.raises(jssync.ValidationError) as ei:
        js.create_stream(name="bad name", subjects=["x"])
    assert isinstance(ei.value, jssync.Error) and isinstance(ei.value, ValueError)
    assert "bad name" in str(ei.value)


def test_no_plain_value_error_is_raised_in_jssync():
    left = []
    for path in sorted((ROOT / "jssync").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "raise ValueError(" in line:
                left.append(f"{path.name}:{i}: {line.strip()}")
    assert not left, left


# -- 3. Ctrl-C inside asyncio.run -------------------------------------------------------------


@pytest.mark.parametrize("call", ["sub.next_msg(timeout=8)", "nc.request('nu.async', b'', timeout=8)",
                                  "js.subscribe('NUAS.x').next_msg(timeout=8)"])
def test_ctrl_c_in_asyncio_run_interrupts_a_blocking_call(nats_server, call):
    code = textwrap.dedent(f"""
        import asyncio, signal, sys, time, jssync
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored

        async def main():
            nc = jssync.connect(sys.argv[1])
            js = nc.jetstream()
            try:
                js.delete_stream("NUAS")
            except jssync.StreamNotFoundError:
                pass
            js.create_stream(name="NUAS", subjects=["NUAS.>"], storage="memory")
            sub = nc.subscribe("nu.async")
            print("ready", flush=True)
            try:
                {call}  # legacy code: a blocking call inside a coroutine
            except BaseException as exc:
                print("interrupted", time.monotonic(), type(exc).__name__, flush=True)
                raise
            finally:
                js.delete_stream("NUAS")
                nc.close()

        asyncio.run(main())
        """)
    proc = subprocess.Popen([sys.executable, "-c", code, nats_server.url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=str(ROOT))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2 * FACTOR)  # behaviour: SIGINT finds the call waiting (no event says so)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20 * FACTOR)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in err, err
    _, when, kind = out.split()
    assert kind == "CancelledError", out
    # the same system-wide monotonic clock in both processes
    assert float(when) - t0 < 0.2 + 0.3 * FACTOR, f"Ctrl-C took {float(when) - t0:.2f}s: {err}"


@pytest.mark.parametrize("when", ["after_first_slice", "before_the_wait"])
def test_deadline_slice_notices_task_cancellation(when):
    # after_first_slice: what asyncio's SIGINT handler does while the loop is blocked.
    # before_the_wait: Ctrl-C lands while the coroutine still runs plain code, before the
    # blocking call's first slice; the cancel is pending (not yet delivered) and the wait
    # must not swallow it and run to its timeout.
    import asyncio

    from jssync.base.deadline import Deadline

    took: list[float] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        d = Deadline(5)
        if when == "after_first_slice":
            d.slice()  # the first slice records the task
        task.cancel()
        t0 = time.monotonic()
        try:
            while True:
                time.sleep(d.slice())  # behaviour: waiting in the deadline's slices is under test
        finally:
            took.append(time.monotonic() - t0)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert took[0] < 0.2 * FACTOR


def test_deadline_slice_lets_a_task_that_caught_its_cancellation_wait():
    # a task that was already cancelling before the wait began (and caught it) is not
    # interrupted again
    import asyncio

    from jssync.base.deadline import Deadline

    async def cleanup() -> bool:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            d = Deadline(0.3)
            while not d.expired():
                time.sleep(d.slice())  # behaviour: waiting in the deadline's slices is under test
            return True
        return False

    assert asyncio.run(cleanup())


# -- 2. errors that say what ------------------------------------------------------------------


def test_stream_not_found_names_the_stream(js, unique):
    name = f"NOPE{unique}"
    for call in (lambda: js.stream(name), lambda: js.delete_stream(name), lambda: js.consumer(name, "c")):
        with pytest.raises(jssync.StreamNotFoundError) as ei:
            call()
        assert ei.value.stream == name and repr(name) in str(ei.value), str(ei.value)
        assert ei.value.err_code == 10059 and ei.value.description  # the server's text is kept


def test_consumer_not_found_names_stream_and_consumer(js, stream):
    for call in (lambda: js.consumer(stream.name, "ghost"), lambda: js.delete_consumer(stream.name, "ghost")):
        with pytest.raises(jssync.ConsumerNotFoundError) as ei:
            call()
        assert (ei.value.stream, ei.value.consumer) == (stream.name, "ghost")
        assert "'ghost'" in str(ei.value) and repr(stream.name) in str(ei.value), str(ei.value)


def test_subjects_overlap_names_the_stream_that_holds_them(js, stream, unique):
    with pytest.raises(jssync.APIError) as ei:
        js.create_stream(name=f"O{unique}", subjects=[f"{stream.name}.x", f"free.{unique}"], storage="memory")
    assert ei.value.err_code == 10065
    assert f"stream {stream.name!r}" in str(ei.value) and f"'{stream.name}.x'" in str(ei.value), str(ei.value)


def test_refused_connection_fails_at_once_and_suggests_jssync_server():
    from jssync.server import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(jssync.NoServersError) as ei:
        jssync.connect(url, timeout=5)
    assert time.monotonic() - t0 < 1.0 * FACTOR, "waited for the connect timeout"
    assert "connection refused" in str(ei.value) and "jssync server" in str(ei.value), str(ei.value)
    assert url in str(ei.value)
    _no_internal_context(ei.value)
    # two servers, both down: the same; one down, one up: connects (tested elsewhere)
    t0 = time.monotonic()
    with pytest.raises(jssync.NoServersError):
        jssync.connect([url, f"nats://127.0.0.1:{free_port()}"], timeout=5)
    assert time.monotonic() - t0 < 1.0 * FACTOR


def test_refused_connection_to_one_of_two_servers_connects(nats_server):
    from jssync.server import free_port

    with jssync.connect([f"nats://127.0.0.1:{free_port()}", nats_server.url], timeout=5) as nc:
        nc.flush()


@pytest.fixture(scope="module")
def auth_server():
    from jssync.server import NatsServer

    with NatsServer(jetstream=False, config="authorization { user: ann, password: s3cret }") as srv:
        yield srv


@pytest.mark.parametrize("kwargs, method", [
    ({"user": "ann", "password": "wrong-pw"}, "user 'ann' with a password"),
    ({"token": "wrong-token"}, "a token"),
    ({}, "no credentials"),
])
def test_authorization_failure_names_url_and_method(auth_server, kwargs, method):
    with pytest.raises(jssync.AuthorizationError) as ei:
        jssync.connect(auth_server.url, timeout=3, **kwargs)
    text = str(ei.value)
    assert auth_server.url in text and method in text, text
    assert "wrong-pw" not in text and "wrong-token" not in text


def test_authorization_failure_redacts_the_url(auth_server):
    url = auth_server.url.replace("nats://", "nats://ann:wrong-pw@")
    with pytest.raises(jssync.AuthorizationError) as ei:
        jssync.connect(url, timeout=3)
    text = str(ei.value)
    assert "wrong-pw" not in text and "ann:***@" in text and "from the URL" in text, text


# -- 6. types that catch mistakes -------------------------------------------------------------

_SNIPPET = """
import jssync

nc = jssync.connect()
js = nc.jetstream()
js.create_stream(name="S", subjects=["s.>"], storag="memory")
js.create_stream(name="S", subjects=["s.>"], storage="memroy")
js.update_stream(name="S", subject_delete_marker_ttl=5.0, max_age=60.0)
js.create_consumer("S", durable_name="d", ack_polcy="explicit")
js.stream("S").create_consumer(durable_name="d", deliver_policy="neww")
ack = js.publish("s.x", b"1")
reveal_type(ack.duplicate)
js.create_key_value(bucket="b", histroy=5)
js.create_object_store(bucket="o", storage="memory", compression=True)
"""


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the snippet runs of this session: the second run reads the standard library,
    nats and jssync (same contents, any path) from it; snippet.py is new each time, so checked again."""
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(snippet_dir: Path, cache: Path, *args: str, env: dict[str, str] | None = None) -> str:
    (snippet_dir / "snippet.py").write_text(_SNIPPET)
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *args, "snippet.py"],
                       cwd=snippet_dir, capture_output=True, text=True, timeout=240, env=env)
    return r.stdout + r.stderr


def _assert_typos_flagged(out: str) -> None:
    assert 'Unexpected keyword argument "storag"' in out, out
    assert "Literal['memroy']" in out, out
    assert 'Unexpected keyword argument "ack_polcy"' in out, out
    assert "Literal['neww']" in out, out
    assert 'Revealed type is "builtins.bool"' in out or 'Revealed type is "bool"' in out, out
    assert 'Unexpected keyword argument "histroy"' in out, out
    assert "snippet.py:8:" not in out, out  # a valid call (subject_delete_marker_ttl included) passes
    assert "snippet.py:14:" not in out, out
    assert "Cannot find implementation" not in out, out


@pytest.mark.timeout(300)
def test_mypy_flags_typos_in_config_keywords(tmp_path, mypy_cache):
    env = dict(os.environ, MYPYPATH=str(ROOT))
    _assert_typos_flagged(_mypy(tmp_path, mypy_cache, env=env))


def _venv_seeing_this_environment(venv: Path) -> Path:
    """A new venv (no pip) that sees the site-packages of the environment running the tests, after its
    own; returns its python. Not ``--system-site-packages``: inside a virtualenv or a tox env that
    shows the base interpreter's site-packages, not the environment the tests run in (with nats-py)."""
    import site

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # (addsitedir: their .pth files count too, as the system site-packages' do)
    lines = [f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages() if Path(d).is_dir()]
    (Path(purelib) / "_outer_site.pth").write_text("".join(lines))
    return py


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_editable_install_is_visible_to_mypy(tmp_path, mypy_cache):
    """The README's ``pip install -e .``: mypy in that environment finds jssync."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes((ROOT / f).read_bytes())
    venv = tmp_path / "venv"
    # no pip of its own (ensurepip takes seconds): the running environment's pip, seen through its
    # site-packages, installs into the environment of the interpreter that runs it
    py = _venv_seeing_this_environment(venv)
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", str(src), "--no-deps"],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    snip = tmp_path / "snip"
    snip.mkdir()
    _assert_typos_flagged(_mypy(snip, mypy_cache, "--python-executable", str(py), env=env))


def test_enum_like_values_are_checked_before_sending(js, unique):
    with pytest.raises(jssync.ValidationError) as ei:
        js.create_stream(name=f"E{unique}", subjects=[f"E{unique}.>"], storage="memroy")  # type: ignore[arg-type]
    assert "'memroy'" in str(ei.value) and "'file', 'memory'" in str(ei.value), str(ei.value)
    with pytest.raises(jssync.StreamNotFoundError):
        js.stream(f"E{unique}")  # nothing was sent
    with pytest.raises(jssync.ValidationError) as ei:
        js.create_consumer(f"E{unique}", durable_name="d", ack_policy="explict")  # type: ignore[arg-type]
    assert "'explicit'" in str(ei.value) and "ack_policy" in str(ei.value)
    with pytest.raises(TypeError, match="ack_polcy"):
        js.create_consumer(f"E{unique}", durable_name="d", ack_polcy="explicit")  # type: ignore[call-arg]
    # enum members and their string values both work
    st = js.create_stream(name=f"E{unique}", subjects=[f"E{unique}.>"], storage=jssync.StorageType.MEMORY,
                          retention="limits")
    try:
        c = st.create_consumer(durable_name="d", ack_policy="explicit", deliver_policy=jssync.DeliverPolicy.ALL)
        assert c.info().config.ack_policy == jssync.AckPolicy.EXPLICIT
    finally:
        js.delete_stream(st.name)


def test_pub_ack_duplicate_is_a_bool(js, stream):
    first = js.publish(f"{stream.name}.d", b"1", msg_id=f"id-{stream.name}")
    again = js.publish(f"{stream.name}.d", b"1", msg_id=f"id-{stream.name}")
    assert first.duplicate is False and again.duplicate is True
    assert isinstance(first, jssync.PubAck) and repr(type(first)) == "<class 'jssync.PubAck'>"


@pytest.mark.timeout(300)
def test_no_unused_type_ignore_without_the_optional_extras(tmp_path):
    """The project's own mypy settings (warn_unused_ignores) pass with PySpark/pyarrow hidden
    too (test_lint.py runs them with whatever is installed): mypy looks at an environment whose
    site-packages hold only what jssync and its pytest plugin import (no optional extras)."""
    import importlib.util

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    shown = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    for name in ("nats", "nkeys", "pytest", "_pytest", "pluggy", "iniconfig", "packaging"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        loc = spec.submodule_search_locations
        path = Path(next(iter(loc))) if loc else Path(spec.origin or "")
        (shown / path.name).symlink_to(path)
    assert not any(shown.glob("pyspark*")) and not any(shown.glob("pyarrow*"))
    # The project's mypy cache, as test_lint.py's run leaves it: mypy reads a module from it only when
    # the module's source and what it imports are unchanged and it had no errors (no module with errors
    # is cached), so whichever of the two runs comes second checks again only the modules that import
    # what this environment lacks. The same installed packages as there (silent, not checked as ours).
    cmd = [sys.executable, "-m", "mypy", "--python-executable", str(py), "--warn-unused-ignores"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)
    ours = [line for line in r.stdout.splitlines() if line.startswith("jssync")]
    assert not ours, "\n".join(ours)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


# -- 7. docs ----------------------------------------------------------------------------------


def _doc_block(page: str, heading: str) -> str:
    """The first ```python block after ``heading`` in docs/``page``."""
    text = (ROOT / "docs" / page).read_text()
    rest = text[text.index(heading):]
    start = rest.index("```python\n") + len("```python\n")
    return rest[start:rest.index("```", start)]


@pytest.mark.timeout(120)
def test_consuming_flask_example_works_under_gunicorn_preload(tmp_path):
    """docs/consuming.md's Flask route, run as written under ``gunicorn --preload`` with two
    workers: every request is served (a connection made at import would raise ForkError)."""
    import json
    import urllib.request

    from jssync.server import NatsServer, free_port

    (tmp_path / "app.py").write_text(_doc_block("consuming.md", "### A Flask route that fetches"))
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:  # its own: the example names ORDERS
        js = nc.jetstream()
        js.create_stream(name="ORDERS", subjects=["orders.>"], storage="memory")
        js.create_consumer("ORDERS", durable_name="DISPATCH", ack_policy="explicit")
        for i in range(6):
            js.publish("orders.new", f"order-{i}".encode())
        port = free_port()
        env = dict(_env(), NATS_URL=srv.url)
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-b", f"127.0.0.1:{port}",
                                 "app:app"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            got: list[str] = []
            end = time.monotonic() + 30 * FACTOR
            while len(got) < 6 and time.monotonic() < end:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/orders/next", method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        got += [o["order"] for o in json.loads(resp.read())]
                except urllib.error.HTTPError as exc:
                    raise AssertionError(f"the route failed: HTTP {exc.code}") from None
                except (ConnectionError, urllib.error.URLError):
                    time.sleep(0.1)  # poll: gunicorn is still starting, inside the deadline
            assert sorted(got) == [f"order-{i}" for i in range(6)]
        finally:
            proc.terminate()
            try:
                out = proc.communicate(timeout=20)[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                proc.kill()
                out = proc.communicate()[0].decode(errors="replace")
            js.delete_stream("ORDERS")
        assert "ForkError" not in out, out[-3000:]


@pytest.mark.parametrize("page", ["README.md", "docs/jetstream.md"])
def test_error_tree_lists_every_public_error(page):
    import inspect
    import re

    text = (ROOT / page).read_text()
    start = text.index("Everything a user can catch derives from `jssync.Error`")
    a = text.index("```\n", start) + 4
    tree = text[a:text.index("```\n", a)]
    listed = set(re.findall(r"\b(?:[A-Z]\w*)?Error\b", tree))
    public = {name for name in jssync.__all__
              if inspect.isclass(getattr(jssync, name)) and issubclass(getattr(jssync, name), BaseException)}
    assert public - listed == set(), f"missing from the tree in {page}"
    assert listed - public - {"JetStreamAPIError", "ValueError"} == set(), f"not public, but in the tree in {page}"
    # each "A > B" says B derives from A
    for line in tree.splitlines():
        parts = [p for p in re.split(r"\s>\s", line) if p.strip()]
        for parent_text, child_text in zip(parts, parts[1:], strict=False):
            parent = re.findall(r"\b(?:[A-Z]\w*)?Error\b", parent_text)[-1]
            for child in re.findall(r"\b(?:[A-Z]\w*)?Error\b", child_text)[:1]:
                assert issubclass(getattr(jssync, child), getattr(jssync, parent)), (child, parent)


def test_plain_api_reference_is_current():
    """docs/api.md (the docstrings as Markdown, readable without building the site) matches
    the code: regenerate it with ``python3 tools/gen_api_md.py``."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_api_md.py"), "--check"], capture_output=True,
                       text=True, env=_env(), cwd=str(ROOT), timeout=120)
    assert r.returncode == 0, r.stderr
    text = (ROOT / "docs" / "api.md").read_text()
    for name in ("JetStream.create_stream", "Consumer.fetch", "KeyValue.put", "Connection.request"):
        assert f"`{name}`" in text, name


def test_plain_api_reference_shows_no_raw_sphinx_roles():
    """The docstrings' :class:`X` / :meth:`X.y` roles are rendered as Markdown code in docs/api.md."""
    import re

    text = (ROOT / "docs" / "api.md").read_text()
    raw = re.findall(r":(?:py:)?[a-z]+:`[^`]*`", text)
    assert not raw, raw[:10]
    assert "`jssync.ConnectionClosedError`" in text


def test_permission_refusal_is_reported_once(tmp_path):
    """Raised on the calling thread and not also printed (error_cb default, logging's
    last-resort handler) or handed to error_cb; a refusal nothing waits for is printed once."""
    from jssync.server import NatsServer

    conf = 'authorization { users: [ {user: eve, password: evepw, permissions: ' \
           '{publish: {deny: ["secret.>"]}, subscribe: {deny: ["secret.>"]}}} ] }'
    with NatsServer(jetstream=False, config=conf) as srv:
        r = _run("""
            import sys, jssync
            nc = jssync.connect(sys.argv[1], user="eve", password="evepw")
            for call in (lambda: nc.subscribe("secret.sub"), lambda: nc.request("secret.req", b"", timeout=2)):
                try:
                    call()
                except jssync.PermissionDeniedError as exc:
                    print("raised:", exc.subject)
            nc.flush()
            nc.publish("secret.pub", b"x")  # nothing waits for this one: it goes to the log
            nc.flush()
            nc.close()
            """, srv.url)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["raised: secret.sub", "raised: secret.req"], r.stdout
    assert "secret.sub" not in r.stderr and "secret.req" not in r.stderr, r.stderr
    assert r.stderr.count("secret.pub") == 1, r.stderr
