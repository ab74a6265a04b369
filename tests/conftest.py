"""Shared test setup: the jssync pytest plugin's fixtures, plus a thread-leak check."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

#: The Django test project runs under Django's own test runner (tests/integration/contrib/test_django.py
#: starts it in a subprocess), not under pytest.
collect_ignore = ["django_project"]


def _hypothesis_profile() -> str:
    """Load the hypothesis profile every property test runs under (this file is imported before
    the test modules, whose ``settings(...)`` inherit from it): with CI set (CI runs with
    CI=true) the examples are derived from each test's name, so a run on main never fails on a
    draw the previous run did not make; elsewhere they are random, and a failure prints the
    ``@reproduce_failure`` blob. JSSYNC_HYPOTHESIS_PROFILE=ci|random picks one; pytest's
    ``--hypothesis-seed=N`` replays a random run. Returns the profile's name."""
    try:
        from hypothesis import settings
    except ImportError:  # (not a test run: only the ``test`` extra has hypothesis)
        return ""
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.register_profile("random", print_blob=True)
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
    name = os.environ.get("JSSYNC_HYPOTHESIS_PROFILE") or ("ci" if ci else "random")
    settings.load_profile(name)
    return name


HYPOTHESIS_PROFILE = _hypothesis_profile()

#: The Python subprocesses the tests start (a Django command, a Celery worker, the CLI) write each
#: line as it comes: several tests wait for a line in their output while they run. Not left to the
#: caller's environment (tox passes none of it).
os.environ.setdefault("PYTHONUNBUFFERED", "1")


def _time_factor() -> float:
    """JSSYNC_TEST_TIME_FACTOR when set; otherwise from the machine's load when the run starts
    (load average per core, between 1 and 4), exported so that subprocesses use the same."""
    env = os.environ.get("JSSYNC_TEST_TIME_FACTOR")
    if env:
        return float(env)
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 0.0
    factor = round(min(4.0, max(1.0, per_core)), 2)
    os.environ["JSSYNC_TEST_TIME_FACTOR"] = str(factor)
    return factor


#: The one time unit of the tests: every wait and every "took at most N s" bound is multiplied by
#: it (tests/test_lint.py checks the bounds). JSSYNC_TEST_TIME_FACTOR=2 doubles them.
FACTOR = _time_factor()


def wait_for(cond, timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> None:
    """Poll ``cond`` until true; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout * FACTOR
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(interval)  # poll: wait_for's interval, inside its deadline
    raise AssertionError(f"timed out waiting for {what}")


def echo(nc, subject: str):
    """Answer every request on ``subject`` with its own payload and headers (callback)."""

    def respond(msg) -> None:
        msg.respond(msg.data, headers=msg.headers)

    sub = nc.subscribe(subject, callback=respond)
    nc.flush()
    return sub


def wait_answered(nc, subject: str, timeout: float = 20.0) -> None:
    """After a reconnect: wait until a request on ``subject`` gets its echo back."""
    import jssync

    def answered() -> bool:
        try:
            return nc.request(subject, b"2", timeout=1).data == b"2"
        except jssync.TimeoutError:
            return False

    wait_for(answered, timeout, interval=0.1, what="a reply after the reconnect")


@pytest.fixture
def sigint() -> Iterator[None]:
    """For a test that sends itself SIGINT: Python's own handler (raise KeyboardInterrupt)
    for its duration, even when the suite was started with SIGINT ignored (a background
    job, ``nohup``), where the signal would otherwise do nothing."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


#: for a test that checks the fast paths themselves (on, or simulated broken): skipped in the
#: run with every fast path turned off (``JSSYNC_FAST_PATHS=0``, see .ci/run)
needs_fast_paths = pytest.mark.skipif(os.environ.get("JSSYNC_FAST_PATHS", "").strip() == "0",
                                      reason="JSSYNC_FAST_PATHS=0: every fast path is off in this run")


@pytest.fixture
def unique() -> str:
    """A short unique token for stream and subject names."""
    return uuid.uuid4().hex[:10].upper()


def _jssync_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("jssync-") and t.is_alive()]


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    before = set(_jssync_threads())
    yield
    end = time.monotonic() + 5 * FACTOR
    while time.monotonic() < end:
        leaked = [t for t in _jssync_threads() if t not in before]
        if not leaked:
            return
        time.sleep(0.02)  # poll: for the threads to end, inside the deadline
    pytest.fail(f"test left jssync threads running: {[t.name for t in leaked]}")


@pytest.fixture(autouse=True)
def _no_leaked_signal_mask() -> Iterator[None]:
    # jssync's queue waits mask signals for a moment on Python < 3.13 (base/deadline.py
    # wait_get); a mask left behind would be inherited by every process the suite starts
    # afterwards (servers, examples under test would ignore SIGTERM/SIGINT), so fail here.
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    yield
    after = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    if after != before:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        pytest.fail(f"test left the main thread's signal mask changed: {sorted(after - before)}")


@pytest.fixture
def stream(js, unique):
    """A memory stream ``S<unique>`` capturing ``S<unique>.>``, deleted after the test."""
    import jssync

    name = f"S{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        yield st
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


@pytest.fixture
def proxy(nats_server):
    """A TCP proxy in front of the session's server (tests/proxy.py): cut, stall or refuse the link."""
    from tests.proxy import TcpProxy

    with TcpProxy(("127.0.0.1", nats_server.port)) as p:
        yield p
