"""jssync's kombu transport vs kombu's Redis transport, same machine, same run (not part of CI).

    python bench/kombu_vs_redis.py                       # 20,000 messages, 5,000 Celery tasks, 3 runs
    python bench/kombu_vs_redis.py --count 200 --tasks 100 --runs 1    # does it work end to end?
    python bench/kombu_vs_redis.py --fetch-batch 16 --pool prefork --concurrency 4

Needs ``redis-server`` (Debian: ``apt-get install -y redis-server``) and the ``redis`` Python
package (``pip install 'jssync[bench]'``). It starts its own nats-server (JetStream, file
storage, as the transport's default) and its own redis-server on 127.0.0.1 at free ports
(no persistence: ``--save "" --appendonly no``, Redis's own default for the AOF), in temporary
directories it removes.

Scenarios, each run with both transports and printed as msgs/s (or tasks/s) and the ratio
jssync / redis (above 1: jssync is faster), median of ``--runs``:

- ``publish``: kombu ``Producer.publish`` of ``--count`` messages (``--size`` bytes) through a
  direct exchange to one queue, one thread; each publish returns once the broker has it
  (a JetStream PubAck; a Redis LPUSH reply).
- ``consume_ack``: kombu ``Consumer`` with ``prefetch_count=--prefetch`` draining those messages,
  acking each in the callback, until all arrived.
- ``celery``: ``--tasks`` no-op Celery tasks sent by this process (default exchange and queue)
  while a ``celery worker`` (``--pool``, ``--concurrency``) runs them; tasks/s is tasks over
  the time from the first send to the last run (each run appends one byte to a file).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kombu  # noqa: E402
import kombu.pools  # noqa: E402
from kombu import Consumer, Exchange, Producer, Queue  # noqa: E402

from jssync.server import NatsServer, free_port  # noqa: E402

_TASKS = '''
import os
from celery import Celery

app = Celery("bench_tasks", broker={url!r})
app.conf.update(broker_transport={transport!r}, broker_transport_options={options!r},
                task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True)
RUNS = {runs!r}


@app.task(name="bench_tasks.noop")
def noop(i):
    fd = os.open(RUNS, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
'''


@contextmanager
def redis_server() -> Iterator[tuple[str, int]]:
    """A redis-server on 127.0.0.1 at a free port, in a temporary directory; yields its URL and pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: apt-get install -y redis-server")
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="jssync-bench-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", tmp, "--logfile", os.path.join(tmp, "redis.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"redis-server did not start (see {tmp}/redis.log)")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)


class Broker:
    """One transport under test: how kombu and Celery reach it."""

    def __init__(self, name: str, url: str, transport: str | None, options: dict[str, Any], pid: int) -> None:
        self.name = name
        self.pid = pid  # the broker server's process
        self.url = url
        self.transport = transport
        self.options = options

    def connection(self) -> kombu.Connection:
        return kombu.Connection(self.url, transport=self.transport, transport_options=dict(self.options))


def _queue(run: int) -> tuple[Exchange, Queue]:
    exchange = Exchange(f"bench{run}", "direct", durable=True)
    return exchange, Queue(f"bench{run}", exchange, routing_key=f"bench{run}")


def publish(broker: Broker, count: int, size: int, run: int) -> float:
    """Messages/s of ``count`` publishes (returns after each is stored)."""
    body = b"x" * size
    exchange, queue = _queue(run)
    with broker.connection() as conn:
        ch = conn.channel()
        queue(ch).declare()
        producer = Producer(ch, exchange=exchange, routing_key=queue.routing_key, serializer="raw")
        producer.publish(body)  # warm up: the bindings, the stream
        start = time.perf_counter()
        for _ in range(count):
            producer.publish(body)
        took = time.perf_counter() - start
        ch.close()
    return count / took


def consume_ack(broker: Broker, count: int, prefetch: int, run: int) -> float:
    """Messages/s of draining what :func:`publish` left (``count`` + 1), acking each."""
    _, queue = _queue(run)
    got = 0

    def on_message(body: Any, message: Any) -> None:
        nonlocal got
        message.ack()
        got += 1

    total = count + 1
    with broker.connection() as conn:
        ch = conn.channel()
        with Consumer(ch, [queue], callbacks=[on_message], accept=["application/data", "json"]) as consumer:
            consumer.qos(prefetch_count=prefetch)
            start = time.perf_counter()
            end = time.monotonic() + max(60.0, count / 100)
            while got < total:
                if time.monotonic() > end:
                    raise SystemExit(f"{broker.name}: consumed {got} of {total} before the deadline")
                try:
                    conn.drain_events(timeout=1.0)
                except TimeoutError:
                    pass
            took = time.perf_counter() - start
        queue(ch).delete()
        ch.close()
    return total / took


def _cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` and, recursively, its live children (clock ticks); 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = int(fields[11]) + int(fields[12])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, IndexError, ValueError):
        return 0
    return total + sum(_cpu_ticks(int(c)) for c in children)


LOAD: list[tuple[float, float, float]] = []
#: CPU microseconds per task of the last celery round, per process: worker, broker, sender
CPU: dict[str, dict[str, list[float]]] = {}


def celery_tasks(broker: Broker, tasks: int, pool: str, concurrency: int, run: int) -> float:
    """Tasks/s through a real ``celery worker``: first send to last run.

    Also notes in :data:`CPU` the CPU time per task of the worker (with its pool's children),
    the broker server and this (sending) process, and the share of the time the sends took.
    """
    from celery import Celery

    tmp = Path(tempfile.mkdtemp(prefix="jssync-bench-celery-"))
    runs = tmp / "runs"
    runs.touch()
    options = dict(broker.options)
    (tmp / "bench_tasks.py").write_text(_TASKS.format(url=broker.url, transport=broker.transport or "redis",
                                                      options=options, runs=str(runs)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), str(ROOT)]))
    env.pop("CELERY_BROKER_URL", None)
    log = open(tmp / "worker.log", "ab")  # noqa: SIM115 - the child holds it
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench_tasks", "worker", f"--pool={pool}",
         f"--concurrency={concurrency}", "--loglevel=WARNING", "--without-heartbeat", "--without-mingle",
         "--without-gossip", "-n", f"bench{run}@%h"],
        cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    sender = Celery("bench_sender", broker=broker.url)
    sender.conf.broker_transport = broker.transport or "redis"
    sender.conf.broker_transport_options = options
    try:
        sender.send_task("bench_tasks.noop", args=[-1])  # warm up: the worker is up once it ran
        _wait(lambda: runs.stat().st_size >= 1 or worker.poll() is not None, 60, "the worker to start", tmp)
        tick = os.sysconf("SC_CLK_TCK")
        w0, b0, s0 = _cpu_ticks(worker.pid), _cpu_ticks(broker.pid), time.process_time()
        start = time.perf_counter()
        for i in range(tasks):
            sender.send_task("bench_tasks.noop", args=[i])
        sent = time.perf_counter() - start
        s1 = time.process_time()
        _wait(lambda: runs.stat().st_size >= tasks + 1 or worker.poll() is not None, max(120.0, tasks / 50),
              f"{tasks} tasks to run", tmp)
        took = time.perf_counter() - start
        w1, b1 = _cpu_ticks(worker.pid), _cpu_ticks(broker.pid)
        row = CPU.setdefault(broker.name, {})
        row.setdefault("worker", []).append((w1 - w0) / tick / tasks * 1e6)
        row.setdefault("broker", []).append((b1 - b0) / tick / tasks * 1e6)
        row.setdefault("sender", []).append((s1 - s0) / tasks * 1e6)
        row.setdefault("send share", []).append(sent / took)
        if worker.poll() is not None:
            raise SystemExit(f"{broker.name}: the worker exited; see {tmp}/worker.log")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
        sender.pool.force_close_all()
        sender.close()
        # kombu keeps producer and connection pools per broker URL and options in process-wide
        # groups (kombu.pools); Celery's send_task takes its producer from there. The next round's
        # app has the same URL, so without this it would get the pool closed above
        # ("Acquire on closed pool").
        kombu.pools.reset()
    shutil.rmtree(tmp, ignore_errors=True)
    return tasks / took


def _wait(cond: Callable[[], bool], timeout: float, what: str, tmp: Path) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}; see {tmp}/worker.log")
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000, help="messages for publish and consume_ack")
    ap.add_argument("--tasks", type=int, default=5_000, help="Celery tasks")
    ap.add_argument("--size", type=int, default=128, help="message body bytes")
    ap.add_argument("--prefetch", type=int, default=100, help="prefetch_count of the kombu consumer")
    ap.add_argument("--fetch-batch", type=int, default=None, help="jssync transport option fetch_batch")
    ap.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", action="append", choices=["publish", "consume_ack", "celery"])
    args = ap.parse_args(argv)
    LOAD.append(os.getloadavg())
    only = set(args.only or ["publish", "consume_ack", "celery"])
    if "consume_ack" in only:
        only.add("publish")  # consume_ack drains what publish stored

    jssync_options: dict[str, Any] = {"subject_prefix": f"bench{os.getpid()}"}
    if args.fetch_batch is not None:
        jssync_options["fetch_batch"] = args.fetch_batch
    results: dict[str, dict[str, list[float]]] = {}
    with NatsServer(jetstream=True) as nats_server, redis_server() as (redis_url, redis_pid):
        brokers = [Broker("jssync", nats_server.url, "jssync.kombu:Transport", jssync_options,
                          nats_server._proc.pid if nats_server._proc else 0),
                   Broker("redis", redis_url, None, {}, redis_pid)]
        for run in range(args.runs):
            for broker in brokers:  # both transports in each round: the machine's drift hits both
                row = results.setdefault(broker.name, {})
                if "publish" in only:
                    row.setdefault("publish", []).append(publish(broker, args.count, args.size, run))
                if "consume_ack" in only:
                    row.setdefault("consume_ack", []).append(consume_ack(broker, args.count, args.prefetch, run))
                if "celery" in only:
                    row.setdefault("celery", []).append(
                        celery_tasks(broker, args.tasks, args.pool, args.concurrency, run))
    print(f"kombu transports: jssync vs redis; {args.count} messages of {args.size} B, prefetch {args.prefetch}, "
          f"{args.tasks} Celery tasks ({args.pool} x {args.concurrency}); median of {args.runs}; "
          f"jssync options {jssync_options}")
    print(f"{'scenario':<14}{'jssync /s':>12}{'redis /s':>12}{'jssync/redis':>14}")
    for name in ("publish", "consume_ack", "celery"):
        if name not in results.get("jssync", {}):
            continue
        j = statistics.median(results["jssync"][name])
        r = statistics.median(results["redis"][name])
        print(f"{name:<14}{j:>12,.0f}{r:>12,.0f}{j / r:>14.2f}")
    if CPU:
        print("Celery CPU per task (us, median; worker with its pool children, broker server, sender) "
              "and the share of the time the sends took")
        print(f"{'':<14}{'worker':>10}{'broker':>10}{'sender':>10}{'total':>10}{'send share':>12}")
        for name, row in CPU.items():
            med = {k: statistics.median(v) for k, v in row.items()}
            total = med["worker"] + med["broker"] + med["sender"]
            print(f"{name:<14}{med['worker']:>10,.0f}{med['broker']:>10,.0f}{med['sender']:>10,.0f}"
                  f"{total:>10,.0f}{med['send share']:>12.2f}")
    print(f"load average before and after: {LOAD[0]} / {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
