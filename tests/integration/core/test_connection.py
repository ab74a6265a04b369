"""Core NATS through jssync against a real nats-server."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(60)


def test_connect_close_twice(nats_server):
    nc = jssync.connect(nats_server.url, name="t")
    assert nc.is_connected
    assert nc.connected_url == nats_server.url
    assert nc.server_info["port"] == nats_server.port
    nc.close()
    nc.close()
    assert nc.is_closed
    assert not nc.is_connected
    with pytest.raises(jssync.ConnectionClosedError):
        nc.publish("x", b"1")
    with pytest.raises(jssync.ConnectionClosedError):
        nc.request("x", b"1")


def test_context_manager_and_url_list(nats_server):
    with jssync.connect([nats_server.url]) as nc:
        assert nc.is_connected
    assert nc.is_closed
    with jssync.connect(f"{nats_server.url}, {nats_server.url}") as nc:
        assert nc.is_connected


def test_connect_default_url_from_env(nats_server, monkeypatch):
    monkeypatch.setenv("NATS_URL", nats_server.url)
    with jssync.connect() as nc:
        assert nc.connected_url == nats_server.url


def test_no_server_raises_no_servers_error():
    from jssync.server import free_port

    t0 = time.monotonic()
    with pytest.raises(jssync.NoServersError) as ei:
        jssync.connect(f"nats://user:secret@127.0.0.1:{free_port()}", timeout=1.0)
    assert time.monotonic() - t0 < 5 * FACTOR
    assert "secret" not in str(ei.value)


def test_publish_subscribe_headers(nc):
    sub = nc.subscribe("core.hdr")
    nc.publish("core.hdr", b"one", headers={"X-Id": "1", "Other": "a b"})
    nc.publish("core.hdr", b"two")
    m1 = sub.next_msg(timeout=2)
    m2 = sub.next_msg(timeout=2)
    assert (m1.data, m1.headers) == (b"one", {"X-Id": "1", "Other": "a b"})
    assert (m2.data, m2.headers) == (b"two", None)
    assert m1.subject == "core.hdr"


def test_wildcards_and_iterator_ends_on_unsubscribe(nc):
    sub = nc.subscribe("core.wc.>")
    for i in range(5):
        nc.publish(f"core.wc.{i}.x", str(i).encode())
    got = []
    for msg in sub:
        got.append(msg.data)
        if len(got) == 5:
            sub.unsubscribe()
    assert got == [b"0", b"1", b"2", b"3", b"4"]
    with pytest.raises(jssync.SubscriptionClosedError):
        sub.next_msg(timeout=0.1)


def test_iterator_ends_when_connection_closes(nats_server):
    nc = jssync.connect(nats_server.url)
    sub = nc.subscribe("core.end")
    done = threading.Event()

    def reader():
        for _ in sub:
            pass
        done.set()

    t = threading.Thread(target=reader)
    t.start()
    nc.close()
    assert done.wait(5)
    t.join(5)


def test_next_msg_timeout(nc):
    sub = nc.subscribe("core.nothing")
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        sub.next_msg(timeout=0.3)
    assert 0.25 <= time.monotonic() - t0 < 1.5 * FACTOR
    with pytest.raises(TimeoutError):  # also the builtin
        sub.next_msg(timeout=0.05)


def test_request_reply_with_headers(nc):
    def handler(msg):
        msg.respond(msg.data.upper(), headers={"Echo": msg.headers["Q"]})

    nc.subscribe("core.svc", callback=handler)
    r = nc.request("core.svc", b"hello", headers={"Q": "x"}, timeout=2)
    assert r.data == b"HELLO"
    assert r.headers == {"Echo": "x"}


def test_request_no_responders(nc):
    with pytest.raises(jssync.NoRespondersError):
        nc.request("core.nobody.home", b"", timeout=2)


def test_request_timeout(nc):
    nc.subscribe("core.silent")  # listens, never answers
    t0 = time.monotonic()
    with pytest.raises(jssync.TimeoutError):
        nc.request("core.silent", b"", timeout=0.3)
    assert time.monotonic() - t0 < 1.5 * FACTOR


def test_queue_groups_share_work(nc):
    a = nc.subscribe("core.q", queue="workers")
    b = nc.subscribe("core.q", queue="workers")
    for i in range(200):
        nc.publish("core.q", str(i).encode())
    nc.flush()
    wait_for(lambda: a.pending_msgs + b.pending_msgs == 200, what="200 messages over the group")
    assert a.pending_msgs > 0 and b.pending_msgs > 0


def test_callback_order_per_subscription(nc):
    n = 2000
    seen: dict[str, list[int]] = {"a": [], "b": []}
    done = threading.Event()
    threads = set()

    def make(key):
        def cb(msg):
            threads.add(threading.current_thread().name)
            seen[key].append(int(msg.data))
            if len(seen["a"]) == n and len(seen["b"]) == n:
                done.set()

        return cb

    nc.subscribe("core.order.a", callback=make("a"))
    nc.subscribe("core.order.b", callback=make("b"))
    for i in range(n):
        nc.publish("core.order.a", str(i).encode())
        nc.publish("core.order.b", str(i).encode())
    assert done.wait(20 * FACTOR)
    assert seen["a"] == list(range(n))
    assert seen["b"] == list(range(n))
    assert all(t.startswith("jssync-") and "-cb-" in t for t in threads)


def test_blocking_calls_from_callback(nc):
    nc.subscribe("core.inner", callback=lambda m: m.respond(b"inner"))
    results = []
    done = threading.Event()

    def outer(msg):
        results.append(nc.request("core.inner", b"", timeout=2).data)
        nc.flush()
        done.set()

    nc.subscribe("core.outer", callback=outer)
    nc.publish("core.outer", b"")
    assert done.wait(5 * FACTOR)
    assert results == [b"inner"]


def test_blocking_call_on_io_thread_raises(nc):
    errors = []

    async def on_loop():
        try:
            nc.flush()
        except RuntimeError as e:
            errors.append(e)

    nc.run(on_loop(), 2)
    assert errors and "I/O thread" in str(errors[0])
    nc.flush()  # still usable


def test_callback_exception_goes_to_error_cb(nats_server):
    errs = []
    got = threading.Event()

    def on_err(e):
        errs.append(e)
        got.set()

    with jssync.connect(nats_server.url, error_cb=on_err) as nc:
        calls = []

        def bad(msg):
            calls.append(msg.data)
            raise ValueError("boom")

        nc.subscribe("core.bad", callback=bad)
        nc.publish("core.bad", b"1")
        nc.publish("core.bad", b"2")
        assert got.wait(5)
        wait_for(lambda: len(calls) == 2, what="both messages")
        assert isinstance(errs[0], ValueError)


def test_slow_consumer_drops_and_reports(nats_server):
    errs = []
    with jssync.connect(nats_server.url, error_cb=errs.append) as nc:
        sub = nc.subscribe("core.slow", pending_msgs_limit=10)
        for i in range(50):
            nc.publish("core.slow", str(i).encode())
        nc.flush()
        wait_for(lambda: sub.dropped == 40, what="40 drops")
        assert sub.pending_msgs == 10
        wait_for(lambda: any(isinstance(e, jssync.SlowConsumerError) for e in errs), what="slow consumer report")
        assert [sub.next_msg(1).data for _ in range(10)] == [str(i).encode() for i in range(10)]


def test_bad_input_raises_before_sending(nc):
    with pytest.raises(jssync.BadSubjectError, match="invalid subject"):
        nc.publish("", b"x")
    with pytest.raises(jssync.BadSubjectError, match="'a b'"):
        nc.publish("a b", b"x")
    with pytest.raises(jssync.BadHeaderError, match="CR or LF"):
        nc.publish("ok", b"x", headers={"A": "1\r\nPUB evil 1"})
    with pytest.raises(jssync.BadHeaderError, match="invalid header name"):
        nc.publish("ok", b"x", headers={"A B": "1"})
    with pytest.raises(TypeError):
        nc.publish("ok", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(jssync.MaxPayloadError, match="max_payload"):
        nc.publish("ok", b"x" * (nc.max_payload + 1))
    with pytest.raises(jssync.BadSubjectError):
        nc.subscribe("a..b")
    with pytest.raises(jssync.BadSubjectError):
        nc.request("a.*", b"")
    assert isinstance(jssync.BadSubjectError("x"), ValueError)


def test_many_threads_publish_nothing_lost(nc):
    threads_n, per = 32, 10_000
    received = []
    lock = threading.Lock()
    done = threading.Event()
    count = [0]

    def cb(msg):
        with lock:
            count[0] += 1
            if count[0] == threads_n * per:
                done.set()

    sub = nc.subscribe("core.load.*", callback=cb, pending_msgs_limit=threads_n * per)

    def worker(i):
        subj = f"core.load.{i}"
        for j in range(per):
            nc.publish(subj, b"%d" % j)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    nc.flush(timeout=10)
    assert done.wait(60 * FACTOR), f"got {count[0]} of {threads_n * per}"
    assert sub.dropped == 0
    del received


def test_ctrl_c_during_blocking_request(nc, sigint):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread for SIGINT")  # pragma: no cover
    nc.subscribe("core.hang")  # never answers
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        nc.request("core.hang", b"", timeout=10)
    elapsed = time.monotonic() - t0
    timer.join()
    assert elapsed < 0.3 + 0.2 * FACTOR + 0.1, elapsed
    # the connection still works
    nc.subscribe("core.after", callback=lambda m: m.respond(b"ok"))
    assert nc.request("core.after", b"", timeout=2).data == b"ok"


def test_ctrl_c_during_next_msg(nc, sigint):
    sub = nc.subscribe("core.hang2")
    timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sub.next_msg(timeout=10)
    assert time.monotonic() - t0 < 0.2 + 0.2 * FACTOR + 0.1
    timer.join()
    nc.publish("core.hang2", b"x")
    assert sub.next_msg(2).data == b"x"


def test_works_inside_running_event_loop(nats_server):
    async def main():
        # like a Jupyter cell: an event loop runs in this thread
        with jssync.connect(nats_server.url) as nc:
            sub = nc.subscribe("core.aio")
            nc.publish("core.aio", b"from a coroutine")
            return sub.next_msg(2).data

    assert asyncio.run(main()) == b"from a coroutine"


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_fork_child_gets_fork_error_and_can_reconnect(nc, nats_server):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            try:
                nc.publish("core.fork", b"x")
                code = 10
            except jssync.ForkError:
                pass
            try:
                nc.request("core.fork", b"x", timeout=0.5)
                code = 11
            except jssync.ForkError:
                pass
            nc.close()  # must not hang
            with jssync.connect(nats_server.url) as nc2:
                nc2.flush()
            os.write(w, b"ok")
        except BaseException:
            code = 12
        os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    data = os.read(r, 10)
    os.close(r)
    assert os.WEXITSTATUS(status) == 0 and data == b"ok"
    nc.flush()  # the parent's connection is fine


def test_interpreter_exit_flushes_and_does_not_hang(nats_server, tmp_path):
    import subprocess

    with jssync.connect(nats_server.url) as nc:
        sub = nc.subscribe("core.exit")
        nc.flush()
        script = tmp_path / "s.py"
        script.write_text(
            "import jssync\n"
            f"nc = jssync.connect({nats_server.url!r})\n"
            "for i in range(1000):\n"
            "    nc.publish('core.exit', b'%d' % i)\n"
            "def cb(m):\n"
            "    import time; time.sleep(3600)\n"  # behaviour: a callback that never returns
            "nc.subscribe('core.exit.cb', callback=cb)\n"
            "nc.publish('core.exit.cb', b'')\n"
            "nc.flush()\n"
            "# no close: exit must flush and not hang\n"
        )
        t0 = time.monotonic()
        subprocess.run([sys.executable, str(script)], check=True, timeout=20)
        assert time.monotonic() - t0 < 15 * FACTOR
        got = [sub.next_msg(5).data for _ in range(1000)]
        assert got[-1] == b"999"


@pytest.mark.slow
def test_reconnect_after_server_restart(tmp_path):
    with NatsServer(jetstream=False) as srv:
        disc, reco = threading.Event(), threading.Event()
        with jssync.connect(
            srv.url, reconnect_time_wait=0.1, disconnected_cb=disc.set, reconnected_cb=reco.set
        ) as nc:
            sub = nc.subscribe("core.re")
            nc.publish("core.re", b"before")
            assert sub.next_msg(2).data == b"before"
            srv.restart()
            assert disc.wait(10)
            assert reco.wait(15 * FACTOR)
            nc.publish("core.re", b"after")
            assert sub.next_msg(5).data == b"after"


def test_repr_has_no_password(nats_server):
    from jssync.core.urls import redact_url

    assert redact_url("nats://bob:hunter2@h:4222") == "nats://bob:***@h:4222"
    assert redact_url("nats://tok@h:4222") == "nats://***@h:4222"
    assert "hunter2" not in repr(jssync.Connection.__repr__)
