"""The kombu transport (jssync.kombu:Transport) against a real nats-server, with real kombu and Celery.

Each test uses its own subject prefix (so its own streams and bindings bucket) and deletes the
streams it made. Celery workers run as subprocesses, stopped in ``finally`` blocks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import kombu
import pytest
from kombu import Consumer, Exchange, Producer, Queue

import jssync
from jssync.server import NatsServer, free_port
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import TRANSPORT, drain_until, kombu_conn

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[3]


def _stored(server: NatsServer, stream: str) -> int:
    with jssync.connect(server.url) as nc:
        return nc.jetstream().stream(stream).info().state.messages


def test_connect_and_declare_a_queue_as_a_work_queue_stream(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        conn.connect()
        assert conn.connected
        assert conn.transport.driver_name == "jssync"
        Queue("tasks.default")(conn.default_channel).declare()
    with jssync.connect(nats_server.url) as nc:
        info = nc.jetstream().stream(f"{prefix}_tasks_2edefault").info()
    assert info.config.retention == jssync.RetentionPolicy.WORK_QUEUE
    assert info.config.storage == jssync.StorageType.FILE
    assert info.config.subjects == [f"{prefix}.q.tasks_2edefault"]


def test_a_failed_connect_raises_one_of_the_connection_errors() -> None:
    conn = kombu.Connection(f"nats://127.0.0.1:{free_port()}", transport=TRANSPORT, connect_timeout=1)
    try:
        with pytest.raises(conn.connection_errors) as info:
            conn.connect()
        assert isinstance(info.value, jssync.Error)
        # kombu's retry logic gives up after max_retries with its OperationalError
        with pytest.raises(kombu.exceptions.OperationalError):
            conn.ensure_connection(max_retries=1, interval_start=0)
    finally:
        conn.release()


def test_a_bad_transport_option_is_refused_by_name(nats_server: NatsServer) -> None:
    with pytest.raises(jssync.ValidationError, match="ack_wait"):
        kombu_conn(nats_server.url, "kbad", ack_wait=-1).connect()


def test_simple_queue_round_trip_with_headers_and_empty(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("work")
        q.put({"n": 1}, headers={"trace": "abc"})
        msg = q.get(timeout=5 * FACTOR)
        assert msg.payload == {"n": 1} and msg.headers["trace"] == "abc"
        msg.ack()
        with pytest.raises(q.Empty):
            q.get(block=False)
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)
        q.close()


def test_simple_buffer_delivers_with_headers(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        buf = conn.SimpleBuffer("buf")
        buf.put("hello", headers={"k": "v"})
        msg = buf.get(timeout=5 * FACTOR)
        assert msg.payload == "hello" and msg.headers["k"] == "v"
        buf.close()


def test_a_no_ack_consumer_settles_on_receipt(nats_server: NatsServer, prefix: str) -> None:
    """SimpleBuffer consumes with no_ack: a message taken is acked, never delivered again."""
    with kombu_conn(nats_server.url, prefix, ack_wait=1.0, keepalive=False) as conn:
        buf = conn.SimpleBuffer("noack")
        buf.put("once")
        assert buf.get(timeout=5 * FACTOR).payload == "once"
        wait_for(lambda: _stored(nats_server, f"{prefix}_noack") == 0, timeout=5, what="the stream to drop it")
        with pytest.raises(buf.Empty):
            buf.get(timeout=3 * FACTOR)  # past ack_wait
        buf.close()
        ch = conn.channel()
        q = Queue("noack2", Exchange("nx"), routing_key="n")(ch)
        q.declare()
        Producer(ch).publish("got", exchange="nx", routing_key="n")
        msg = q.get(no_ack=True)
        assert msg is not None and msg.payload == "got"
        wait_for(lambda: _stored(nats_server, f"{prefix}_noack2") == 0, timeout=5, what="basic_get(no_ack) to ack")
        ch.close()


def test_direct_topic_and_fanout_exchanges_route_across_connections(nats_server: NatsServer, prefix: str) -> None:
    direct, topic, fanout = Exchange("d", "direct"), Exchange("t", "topic"), Exchange("f", "fanout")
    queues = [Queue("dq", direct, routing_key="rk"), Queue("tq", topic, routing_key="orders.#"),
              Queue("f1", fanout), Queue("f2", fanout)]
    got: list[tuple[str, Any]] = []
    with kombu_conn(nats_server.url, prefix) as consumer_conn, kombu_conn(nats_server.url, prefix) as producer_conn:
        ch = consumer_conn.channel()
        for q in queues:
            q(ch).declare()
        # the producer never declared the queues or bindings: it routes by the stored bindings
        producer = Producer(producer_conn.channel())
        producer.publish("direct", exchange=direct, routing_key="rk", declare=[direct])
        producer.publish("nobody", exchange=direct, routing_key="other", declare=[direct])
        producer.publish("topic", exchange=topic, routing_key="orders.eu.new", declare=[topic])
        producer.publish("skipped", exchange=topic, routing_key="invoices.new", declare=[topic])
        producer.publish("fan", exchange=fanout, declare=[fanout])

        def on_message(body: Any, message: Any) -> None:
            got.append((message.delivery_info["routing_key"], body))
            message.ack()

        with Consumer(ch, queues, callbacks=[on_message]):
            drain_until(consumer_conn, lambda: len(got) >= 4)
            with pytest.raises(TimeoutError):
                consumer_conn.drain_events(timeout=0.5)
        sizes = {q.name: q(ch).queue_declare(passive=True).message_count for q in queues}
    assert sorted(body for _, body in got) == ["direct", "fan", "fan", "topic"]
    assert sizes == {"dq": 0, "tq": 0, "f1": 0, "f2": 0}


_BINDER = '''
import sys
import kombu
from kombu import Exchange, Queue

url, prefix, action = sys.argv[1:4]
with kombu.Connection(url, transport="jssync.kombu:Transport", transport_options={"subject_prefix": prefix}) as conn:
    ch = conn.channel()
    queue = Queue("late", Exchange("bx", "direct"), routing_key="k")(ch)
    if action == "bind":
        queue.declare()
    else:
        queue.unbind_from(Exchange("bx", "direct"), routing_key="k")
    ch.close()
'''


def _in_another_process(tmp_path: Path, url: str, prefix: str, action: str) -> None:
    script = tmp_path / "binder.py"
    script.write_text(_BINDER)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script), url, prefix, action], env=env, capture_output=True,
                          timeout=60 * FACTOR)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")


def test_bindings_made_and_removed_in_another_process_are_seen_by_a_publisher(
        nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    """The publisher keeps the bindings in a cache a key-value watch keeps current."""
    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        early = Queue("early", Exchange("bx", "direct"), routing_key="k")(ch)
        early.declare()
        producer = Producer(ch)
        producer.publish("first", exchange="bx", routing_key="k")
        assert early.queue_declare(passive=True).message_count == 1
        _in_another_process(tmp_path, nats_server.url, prefix, "bind")
        wait_for(lambda: ("k", "late") in {(rk, q) for rk, _p, q in ch.get_table("bx")}, timeout=5,
                 what="the binding stored by the other process")
        producer.publish("both", exchange="bx", routing_key="k")
        assert _stored(nats_server, f"{prefix}_late") == 1
        assert early.queue_declare(passive=True).message_count == 2
        _in_another_process(tmp_path, nats_server.url, prefix, "unbind")
        wait_for(lambda: ("k", "late") not in {(rk, q) for rk, _p, q in ch.get_table("bx")}, timeout=5,
                 what="the binding removed by the other process to go")
        producer.publish("early only", exchange="bx", routing_key="k")
        assert _stored(nats_server, f"{prefix}_late") == 1
        assert early.queue_declare(passive=True).message_count == 3
        ch.close()


def test_a_publish_through_an_exchange_does_not_read_the_bindings_bucket_each_time(
        nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn, jssync.connect(nats_server.url) as spy:
        ch = conn.channel()
        queue = Queue("cached", Exchange("cx2", "topic"), routing_key="a.#")(ch)
        queue.declare()
        producer = Producer(ch)
        producer.publish(0, exchange="cx2", routing_key="a.b")  # the first one starts the cache
        api_calls: list[str] = []
        sub = spy.subscribe("$JS.API.>", callback=lambda m: api_calls.append(m.subject))
        spy.flush()
        for i in range(1, 21):
            producer.publish(i, exchange="cx2", routing_key="a.b")
        spy.flush()
        sub.unsubscribe()
        assert queue.queue_declare(passive=True).message_count == 21
        on_bucket = [s for s in api_calls if f"KV_{prefix}_bindings" in s]
        assert on_bucket == [], on_bucket
        ch.close()


def test_ack_reject_and_requeue(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("ackq")
        for i in range(3):
            q.put(i)
        first = q.get(timeout=5 * FACTOR)
        first.requeue()  # -NAK: delivered again
        seen = []
        for _ in range(3):
            m = q.get(timeout=5 * FACTOR)
            seen.append((m.payload, m.delivery_info.get("redelivered", False)))
            if m.payload == 1:
                m.reject()  # +TERM: gone
            else:
                m.ack()
        assert sorted(p for p, _ in seen) == [0, 1, 2]
        assert (first.payload, True) in seen
        with pytest.raises(q.Empty):
            q.get(timeout=0.5)
        assert q.qsize() == 0
        q.close()


def test_prefetch_count_limits_unacked_deliveries(nats_server: NatsServer, prefix: str) -> None:
    got: list[Any] = []
    with kombu_conn(nats_server.url, prefix, fetch_batch=10) as conn:
        ch = conn.channel()
        queue = Queue("pf", Exchange("pfx"), routing_key="pf")
        queue(ch).declare()
        producer = Producer(ch)
        for i in range(5):
            producer.publish(i, exchange="pfx", routing_key="pf")
        with Consumer(ch, [queue], callbacks=[lambda body, message: got.append(message)]) as consumer:
            consumer.qos(prefetch_count=2)
            drain_until(conn, lambda: len(got) >= 2)
            with pytest.raises(TimeoutError):
                conn.drain_events(timeout=1 * FACTOR)  # two unacked: no third
            assert len(got) == 2
            got[0].ack()
            drain_until(conn, lambda: len(got) >= 3)
            for m in got[1:]:
                m.ack()
            drain_until(conn, lambda: len(got) >= 5)
            for m in got[3:]:
                m.ack()
        assert sorted(m.payload for m in got) == [0, 1, 2, 3, 4]
        ch.close()


def test_ack_from_another_thread(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix, ack_wait=2.0, keepalive=False) as conn:
        q = conn.SimpleQueue("threads")
        q.put("x")
        msg = q.get(timeout=5 * FACTOR)
        t = threading.Thread(target=msg.ack)
        t.start()
        t.join(5 * FACTOR)
        # acked: the work-queue stream dropped it, and it is not delivered again after ack_wait
        wait_for(lambda: _stored(nats_server, f"{prefix}_threads") == 0, timeout=5, what="the ack")
        with pytest.raises(q.Empty):
            q.get(timeout=3 * FACTOR)
        q.close()


def test_unacked_message_is_delivered_again_after_ack_wait(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix, ack_wait=1.0, keepalive=False) as conn:
        q = conn.SimpleQueue("lost")
        q.put("job")
        first = q.get(timeout=5 * FACTOR)
        again = q.get(timeout=10 * FACTOR)  # never acked: back after ack_wait
        assert again.payload == first.payload == "job"
        assert again.delivery_info["redelivered"] is True
        again.ack()
        q.close()


def test_held_messages_are_kept_in_progress(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix, ack_wait=1.0) as conn:
        q = conn.SimpleQueue("held")
        q.put("long task")
        msg = q.get(timeout=5 * FACTOR)
        with pytest.raises(q.Empty):
            q.get(timeout=3 * FACTOR)  # three ack waits or more: in-progress keeps it with us
        msg.ack()
        q.close()


def test_message_ttl_per_message_and_per_queue(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("ttl")
        q.put("short", expiration=1)
        q.put("long")
        wait_for(lambda: q.qsize() == 1, timeout=10, interval=0.1, what="the message TTL to expire one")
        assert q.get(timeout=5 * FACTOR).payload == "long"
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)
        q.close()
        qq = conn.SimpleQueue(Queue("qttl", Exchange("qttl"), routing_key="qttl", message_ttl=1))
        qq.put("gone")
        assert qq.qsize() == 1
        wait_for(lambda: qq.qsize() == 0, timeout=10, interval=0.1, what="the queue's TTL to expire it")
        with pytest.raises(qq.Empty):
            qq.get(timeout=0.3)
        qq.close()
        with jssync.connect(nats_server.url) as nc:
            assert nc.jetstream().stream(f"{prefix}_qttl").info().config.max_age == 1.0


def test_purge_delete_and_counts(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        ch = conn.channel()
        queue = Queue("counted", Exchange("cx"), routing_key="c")(ch)
        queue.declare()
        producer = Producer(ch)
        for i in range(5):
            producer.publish(i, exchange="cx", routing_key="c")
        assert queue.queue_declare(passive=True).message_count == 5
        got = queue.get()
        assert got is not None
        assert queue.queue_declare(passive=True).message_count == 4  # one delivered, not acked
        got.ack()
        assert queue.purge() == 4
        assert queue.queue_declare(passive=True).message_count == 0
        producer.publish("x", exchange="cx", routing_key="c")
        queue.delete()
        with pytest.raises(conn.channel_errors):
            queue.queue_declare(passive=True)
        ch.close()
    with jssync.connect(nats_server.url) as nc:
        assert f"{prefix}_counted" not in list(nc.jetstream().stream_names())


def test_jssync_and_nats_url_schemes_name_the_transport_after_the_import(nats_server: NatsServer, prefix: str) -> None:
    """Importing jssync.kombu adds the schemes to kombu's aliases: no ``transport=`` needed."""
    import jssync.kombu  # noqa: F401 - the import registers the aliases

    for url in (f"jssync://127.0.0.1:{nats_server.port}", nats_server.url):
        with kombu.Connection(url, transport_options={"subject_prefix": prefix}) as conn:
            assert conn.transport.driver_name == "jssync"
            q = conn.SimpleQueue("alias")
            q.put(url)
            msg = q.get(timeout=5 * FACTOR)
            assert msg.payload == url
            msg.ack()
            q.close()


def test_priority_is_carried_but_delivery_keeps_the_stream_order(nats_server: NatsServer, prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("prio")
        q.put("low", priority=0)
        q.put("high", priority=9)
        first, second = q.get(timeout=5 * FACTOR), q.get(timeout=5 * FACTOR)
        assert (first.payload, second.payload) == ("low", "high")  # publish order, not priority
        assert (first.properties["priority"], second.properties["priority"]) == (0, 9)
        first.ack()
        second.ack()
        q.close()


def test_a_channel_error_is_raised_at_once_and_keeps_the_connection(nats_server: NatsServer, prefix: str) -> None:
    """kombu's ensure() reconnects only on the transport's recoverable connection errors: a
    message too big for the server (jssync.MaxPayloadError, a channel error) is raised as is,
    on the same connection, not after a reconnect and a second try."""
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("big")
        nc = conn.transport._nc
        assert nc is not None
        with pytest.raises(jssync.MaxPayloadError):
            Producer(conn.default_channel).publish("x" * 2_000_000, routing_key="big", retry=True)
        assert conn.transport._nc is nc and nc.is_connected
        q.put("small")
        msg = q.get(timeout=5 * FACTOR)
        assert msg.payload == "small"
        msg.ack()
        q.close()


def test_kombu_publish_retry_carries_a_publish_over_a_broker_restart(prefix: str) -> None:
    """The transport's connection errors make kombu's ``ensure`` reconnect and publish again:
    here the jssync connection waits 60 s before it reconnects by itself, so the publish times
    out (jssync.TimeoutError after the 5 s API timeout, a connection error); kombu closes that
    connection (its buffered publish goes with it) and makes a new one to the restarted server."""
    with NatsServer(jetstream=True) as server:
        with kombu_conn(server.url, prefix, connect_options={"reconnect_time_wait": 60.0}) as conn:
            ch = conn.channel()
            queue = Queue("rs", Exchange("rs"), routing_key="rs")(ch)
            queue.declare()
            producer = Producer(ch, exchange=Exchange("rs"), routing_key="rs")
            producer.publish("before")
            first = conn.transport._nc
            assert first is not None
            server.stop()
            restarter = threading.Timer(1.0 * FACTOR, server.start)
            restarter.start()
            try:
                producer.publish("during", retry=True, retry_policy={
                    "max_retries": 200, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.2})
            finally:
                restarter.join()
            assert first.is_closed and conn.transport._nc is not first  # kombu made a new connection
            got = []
            with conn.SimpleQueue(queue) as q:
                for _ in range(2):
                    msg = q.get(timeout=10 * FACTOR)
                    got.append(msg.payload)
                    msg.ack()
                with pytest.raises(q.Empty):
                    q.get(timeout=0.5)
            assert got == ["before", "during"]


def test_a_consumer_deleted_by_someone_else_is_made_again_by_the_next_poll(nats_server: NatsServer,
                                                                             prefix: str) -> None:
    with kombu_conn(nats_server.url, prefix) as conn:
        q = conn.SimpleQueue("recreated")
        q.put(1)
        q.get(timeout=5 * FACTOR).ack()
        with jssync.connect(nats_server.url) as nc:
            nc.jetstream().delete_consumer(f"{prefix}_recreated", prefix)
        q.put(2)
        msg = q.get(timeout=10 * FACTOR)
        assert msg.payload == 2
        msg.ack()
        q.close()


def test_failover_to_a_second_server(prefix: str) -> None:
    with NatsServer(jetstream=True) as a, NatsServer(jetstream=True) as b:
        dead = f"nats://127.0.0.1:{free_port()}"
        # the first URL is down: the second one serves
        with kombu_conn(f"{dead};{b.url}", prefix, connect_options={"reconnect_time_wait": 0.1}) as conn:
            q = conn.SimpleQueue("fo")
            q.put("on b")
            msg = q.get(timeout=5 * FACTOR)
            assert msg.payload == "on b"
            msg.ack()
            q.close()
        # one kombu host with comma-separated URLs: jssync tries each
        with kombu_conn(f"{dead},{b.url}", prefix) as conn:
            q = conn.SimpleQueue("fo")
            q.put("comma")
            assert q.get(timeout=5 * FACTOR).payload == "comma"
            q.close()
        # connected to a, a stops: the connection moves to b and the queue is made there again
        with kombu_conn(f"{a.url};{b.url}", prefix, connect_options={"reconnect_time_wait": 0.1}) as conn:
            q = conn.SimpleQueue("fo2")
            q.put("on a")
            q.get(timeout=5 * FACTOR).ack()
            a.stop()

            def put_works() -> bool:
                try:
                    q.put("after failover")
                    return True
                except conn.connection_errors + conn.channel_errors:
                    return False

            wait_for(put_works, timeout=20, interval=0.2, what="a publish through the second server")
            assert q.get(timeout=10 * FACTOR).payload == "after failover"
            assert conn.transport._nc is not None and conn.transport._nc.connected_url == b.url
            q.close()


# --------------------------------------------------------------------------- Celery workers

_CELERY_APP = '''
import os, time
from celery import Celery

app = Celery("kombu_tasks", broker={url!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}, "ack_wait": 2.0}},
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
RUNS = {runs!r}


def _log(line):
    with open(RUNS, "a") as f:
        f.write(line + "\\n")


@app.task(name="kombu_tasks.record")
def record(ident):
    _log(f"done {{ident}} {{os.getpid()}}")


@app.task(name="kombu_tasks.slow", acks_late=True)
def slow(ident):
    marker = RUNS + ".started"
    _log(f"start {{ident}}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(120)  # behaviour: the first run is killed here
    _log(f"done {{ident}}")
'''


def _worker(tmp_path: Path, pool: str, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("CELERY_BROKER_URL", None)
    cmd = [sys.executable, "-m", "celery", "-A", "kombu_tasks", "worker", f"--pool={pool}", *extra,
           "--loglevel=INFO", "--without-heartbeat", "--without-mingle", "--without-gossip",
           "-n", f"w{time.monotonic_ns()}@%h"]
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - closed by the child's exit
    try:
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30 * FACTOR)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode


def _app(tmp_path: Path, url: str, prefix: str) -> Any:
    runs = tmp_path / "runs.txt"
    runs.touch()
    (tmp_path / "kombu_tasks.py").write_text(_CELERY_APP.format(url=url, prefix=prefix, runs=str(runs)))
    from celery import Celery

    sender = Celery("sender", broker=url)
    sender.conf.broker_transport = TRANSPORT
    sender.conf.broker_transport_options = {"subject_prefix": prefix}
    return sender


def _close(app: Any) -> None:
    """Close the app's pooled broker connections (Celery's close() only drops the pool)."""
    app.pool.force_close_all()
    app.close()


def _lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "runs.txt").read_text().splitlines()


@pytest.mark.parametrize("pool", [["threads", "--concurrency=4"], ["prefork", "--concurrency=2"]],
                         ids=["threads", "prefork"])
def test_celery_worker_runs_each_task_exactly_once(nats_server: NatsServer, prefix: str, tmp_path: Path,
                                                   pool: list[str]) -> None:
    sender = _app(tmp_path, nats_server.url, prefix)
    proc = _worker(tmp_path, pool[0], pool[1])
    try:
        for i in range(20):
            sender.send_task("kombu_tasks.record", args=[i])
        wait_for(lambda: len(_lines(tmp_path)) >= 20, timeout=60, interval=0.1, what="20 tasks to run")
        time.sleep(1 * FACTOR)  # nothing happens: a duplicate would show up now
    finally:
        code = _stop(proc)
        _close(sender)
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log
    done = sorted(int(line.split()[1]) for line in _lines(tmp_path))
    assert done == list(range(20)), log


def test_celery_task_with_acks_late_runs_again_after_its_worker_was_killed(
        nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    sender = _app(tmp_path, nats_server.url, prefix)
    first = _worker(tmp_path, "threads", "--concurrency=2")
    second = None
    try:
        sender.send_task("kombu_tasks.slow", args=["job"])
        wait_for(lambda: "start job" in _lines(tmp_path), timeout=60, interval=0.1, what="the task to start")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        second = _worker(tmp_path, "threads", "--concurrency=2")
        wait_for(lambda: "done job" in _lines(tmp_path), timeout=60, interval=0.1,
                 what="the task to run again on the second worker")
        time.sleep(3 * FACTOR)  # nothing happens: more than one ack wait, nothing else arrives
    finally:
        _stop(first, signal.SIGKILL)
        if second is not None:
            _stop(second)
        _close(sender)
    assert _lines(tmp_path) == ["start job", "start job", "done job"], (tmp_path / "worker.log").read_text()


def test_celery_remote_control_reaches_the_worker(nats_server: NatsServer, prefix: str, tmp_path: Path) -> None:
    """``control.ping``: a fanout broadcast to the worker's pidbox queue and a direct reply back, both
    routed by bindings the other process stored."""
    sender = _app(tmp_path, nats_server.url, prefix)
    proc = _worker(tmp_path, "threads", "--concurrency=1")
    replies: list[Any] = []
    try:
        def pinged() -> bool:
            replies[:] = sender.control.ping(timeout=1.0 * FACTOR)
            return bool(replies)

        # each ping waits its whole timeout for replies: ping once the worker says it is ready, not before
        wait_for(lambda: " ready." in (tmp_path / "worker.log").read_text(), timeout=60, interval=0.05,
                 what="the worker ready")
        wait_for(pinged, timeout=60, interval=0.1, what="a pong from the worker")
    finally:
        code = _stop(proc)
        _close(sender)
    assert len(replies) == 1 and list(replies[0].values()) == [{"ok": "pong"}], replies
    assert code == 0, (tmp_path / "worker.log").read_text()
