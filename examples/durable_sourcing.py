"""Sourcing work-queue streams reliably (ADR-60; nats-server 2.14+).

Two aggregates of two work queues: one with the plain source config (the server makes and
keeps a durable flow-control consumer on the work queue, ``JS_SRC_...``), one through a
consumer created beforehand with ``ack_policy="flow_control"``, which can be paused to hold
the sourcing and resumed. Every message ends up in the aggregate once and leaves the work queue.

Run: python examples/durable_sourcing.py   (starts its own local nats-server)
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import jssync
from jssync.server import NatsServer


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait (polling) until ``cond()`` is true; raise TimeoutError after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def count(js: jssync.JetStream, stream: str) -> int:
    return int(js.stream(stream).info().state.messages)


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        print("API level", js.api_level())  # 4+ (nats-server 2.14+) has the flow_control ack policy

        # 1. the plain config: nothing new to set, the server upgrades to a durable consumer
        js.create_stream(name="ORDERS", subjects=["ORDERS.>"], retention="workqueue", storage="file")
        js.create_stream(name="ALL_ORDERS", storage="file", sources=[jssync.StreamSource(name="ORDERS")])
        for i in range(100):
            js.publish("ORDERS.new", b"order %d" % i)
        wait_until(lambda: count(js, "ALL_ORDERS") == 100 and count(js, "ORDERS") == 0, "orders sourced")
        made = next(js.consumers("ORDERS"))
        print(f"ALL_ORDERS holds {count(js, 'ALL_ORDERS')}, ORDERS {count(js, 'ORDERS')}; server's consumer "
              f"{made.name[:7]}... ack policy {made.config.ack_policy}")

        # 2. through a consumer you create (and can pause): durable sourcing
        js.create_stream(name="JOBS", subjects=["JOBS.>"], retention="workqueue", storage="file")
        js.create_consumer("JOBS", durable_name="TO_ARCHIVE", ack_policy="flow_control",
                           deliver_subject="archive.jobs")  # the server fills in flow control, 1 s heartbeat
        js.create_stream(name="ARCHIVE", storage="file", sources=[jssync.StreamSource(
            name="JOBS", consumer=jssync.StreamConsumerSource(name="TO_ARCHIVE", deliver_subject="archive.jobs"))])
        for i in range(50):
            js.publish("JOBS.run", b"job %d" % i)
        wait_until(lambda: count(js, "ARCHIVE") == 50 and count(js, "JOBS") == 0, "jobs sourced")
        print(f"ARCHIVE holds {count(js, 'ARCHIVE')}, JOBS {count(js, 'JOBS')}")
        print("ARCHIVE sources through", js.stream("ARCHIVE").info().config.sources[0].consumer)

        js.pause_consumer("JOBS", "TO_ARCHIVE", datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
        for i in range(50, 60):
            js.publish("JOBS.run", b"job %d" % i)
        time.sleep(0.5)
        print(f"paused: ARCHIVE holds {count(js, 'ARCHIVE')}, JOBS {count(js, 'JOBS')} waiting")
        js.resume_consumer("JOBS", "TO_ARCHIVE")
        wait_until(lambda: count(js, "ARCHIVE") == 60 and count(js, "JOBS") == 0, "jobs sourced after resume")
        print(f"resumed: ARCHIVE holds {count(js, 'ARCHIVE')}, JOBS {count(js, 'JOBS')}")

        # checked before sending: a flow_control consumer must be a push consumer, and so on
        try:
            js.create_consumer("JOBS", durable_name="BAD", ack_policy="flow_control", ack_wait=30)
        except jssync.ValidationError as exc:
            print("refused:", exc)


if __name__ == "__main__":
    main()
