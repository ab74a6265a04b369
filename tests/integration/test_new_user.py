"""Issue 24, "feels right to a new user": tracebacks, error texts, Ctrl-C inside asyncio.run,
types that catch mistakes. Against a real server wherever a server is involved."""

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
    _assert_clean_traceback(r.stderr, "jssync.TimeoutError: ")


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
    for path in sorted((ROOT / "jssync").glob("*.py")):
        if path.name in ("_pull.py", "_ordered.py"):  # being rewritten elsewhere (issue 24 merge note)
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if "raise ValueError(" in line:
                left.append(f"{path.name}:{i}: {line.strip()}")
    assert not left, left


# -- 3. Ctrl-C inside asyncio.run -------------------------------------------------------------


@pytest.mark.parametrize("call", ["sub.next_msg(timeout=8)", "nc.request('nu.async', b'', timeout=8)",
                                  "js.subscribe('NUAS.x').next_msg(timeout=8)"])
def test_ctrl_c_in_asyncio_run_interrupts_a_blocking_call(nats_server, call):
    code = textwrap.dedent(f"""
        import asyncio, signal, sys, jssync
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
            finally:
                js.delete_stream("NUAS")
                nc.close()

        asyncio.run(main())
        """)
    proc = subprocess.Popen([sys.executable, "-c", code, nats_server.url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=str(ROOT))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)  # let the call start waiting
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20 * FACTOR)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in err, err
    assert elapsed < 0.2 + 1.0 * FACTOR, f"Ctrl-C took {elapsed:.2f}s: {err}"


def test_deadline_slice_notices_task_cancellation():
    import asyncio

    from jssync._deadline import Deadline

    took: list[float] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        d = Deadline(5)
        d.slice()  # the first slice records the task
        task.cancel()  # what asyncio's SIGINT handler does while the loop is blocked
        t0 = time.monotonic()
        try:
            while True:
                time.sleep(d.slice())
        finally:
            took.append(time.monotonic() - t0)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert took[0] < 0.2

    # a task that was already cancelling before the wait began is not interrupted again
    async def cleanup() -> bool:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            d = Deadline(0.3)
            while not d.expired():
                time.sleep(d.slice())
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
