"""Priority groups (ADR-42): a pinned worker with a standby that takes over, and an overflow pull.

Run: python examples/priority_groups.py   (starts its own local nats-server)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jssync
from jssync.server import NatsServer


def worker(url: str, name: str, got: dict[str, list[bytes]], stop: threading.Event) -> None:
    """One client: consumes group "jobs" of JOBS/WORKERS until ``stop`` is set."""
    with jssync.connect(url, name=name) as nc:
        consumer = nc.jetstream().consumer("JOBS", "WORKERS")

        def handle(msg: jssync.Msg) -> None:
            got[name].append(msg.data)
            msg.ack()

        # each pull lives 1 s: the pinned worker renews its pin well within priority_timeout
        cc = consumer.consume(handle, group="jobs", expires=1.0, max_messages=10)
        stop.wait()
        cc.stop()
        cc.wait(10)


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait (polling) until ``cond()`` is true; raise TimeoutError after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        stream = js.create_stream(name="JOBS", subjects=["JOBS.*"], storage="memory")

        # pinned_client: one worker gets everything; if it stops pulling for priority_timeout
        # seconds the server pins one of the waiting standbys
        stream.create_consumer(durable_name="WORKERS", ack_policy="explicit", priority_policy="pinned_client",
                               priority_groups=["jobs"], priority_timeout=2.0)
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        stops = {name: threading.Event() for name in got}
        # daemon threads: if this main() fails, the process still exits
        threads = {name: threading.Thread(target=worker, args=(srv.url, name, got, stops[name]), daemon=True)
                   for name in got}
        for t in threads.values():
            t.start()
        time.sleep(0.5)
        for i in range(20):
            js.publish("JOBS.new", b"job %d" % i)
        wait_until(lambda: len(got["a"]) + len(got["b"]) >= 20, "all 20 jobs to be handled")
        pinned = "a" if got["a"] else "b"
        standby = "b" if pinned == "a" else "a"
        print(f"pinned worker {pinned} got {len(got[pinned])} jobs, standby {standby} got {len(got[standby])}")

        stops[pinned].set()  # the pinned worker goes away...
        threads[pinned].join(30)  # ...and is gone before the next job (else it may still take it)
        t0 = time.monotonic()
        js.publish("JOBS.new", b"job 20")
        wait_until(lambda: bool(got[standby]), "the standby to take over")
        print(f"standby {standby} took over after {time.monotonic() - t0:.1f}s: {got[standby]}")
        stops[standby].set()
        for t in threads.values():
            t.join(30)

        # overflow: a pull with min_pending is served only while that many messages are pending
        overflow = stream.create_consumer(durable_name="OVERFLOW", ack_policy="explicit", deliver_policy="new",
                                          priority_policy="overflow", priority_groups=["jobs"])
        for i in range(3):
            js.publish("JOBS.new", b"overflow %d" % i)
        msgs = list(overflow.fetch(5, group="jobs", min_pending=5, expires=1.0))
        print("3 pending, min_pending=5:", [m.data for m in msgs])
        for i in range(3, 5):
            js.publish("JOBS.new", b"overflow %d" % i)
        msgs = list(overflow.fetch(1, group="jobs", min_pending=5, expires=1.0))
        print("5 pending, min_pending=5:", [m.data for m in msgs])
        for m in msgs:
            m.ack()


if __name__ == "__main__":
    main()
