"""Partitioned consumer groups: a static group, then an elastic group whose members come and go.

The groups are stored the way orbit.go's pcgroups (and its Java and .NET ports) store them,
so the members below could as well be Go or Java services.

Run: python examples/consumer_groups.py   (starts its own local nats-server)
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import jssync
from jssync import pcgroups
from jssync.server import NatsServer


class Tally:
    """Counts what each member processed, per key; checks each key stays in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_member: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.last: dict[str, int] = {}
        self.seen: set[int] = set()
        self.total = 0
        self.out_of_order = 0

    def handler(self, member: str) -> Callable[[jssync.Msg], None]:
        def handle(msg: jssync.Msg) -> None:
            n = int(msg.data)
            with self.lock:
                # msg.subject is the original subject: the partition token is taken off
                if n <= self.last.get(msg.subject, -1):
                    self.out_of_order += 1
                self.last[msg.subject] = n
                self.seen.add(n)
                self.by_member[member][msg.subject] += 1
                self.total += 1
            msg.ack()  # after processing

        return handle


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def static_group(js: jssync.JetStream) -> None:
    # the stream puts the partition number (from the customer id, token 2) in front of each subject
    js.create_stream(name="ORDERS", subjects=["orders.*"], storage="memory",
                     subject_transform={"src": "orders.*", "dest": "{{Partition(4,1)}}.orders.{{Wildcard(1)}}"})
    pcgroups.create_static(js, "ORDERS", "billing", 4, members=["alice", "bob"])
    tally = Tally()
    members = [pcgroups.static_consume(js, "ORDERS", "billing", m, tally.handler(m)) for m in ("alice", "bob")]
    for i in range(200):
        js.publish_async(f"orders.customer{i % 8}", b"%d" % i)
    js.publish_async_completed()
    wait_until(lambda: tally.total == 200, "200 orders")
    assert len(tally.seen) == 200 and tally.out_of_order == 0
    for m in members:
        m.stop()
        m.wait(10)
    for name, keys in sorted(tally.by_member.items()):
        print(f"static  {name}: {sum(keys.values())} orders of {sorted(keys)}")
    pcgroups.delete_static(js, "ORDERS", "billing")


def elastic_group(js: jssync.JetStream) -> None:
    js.create_stream(name="EVENTS", subjects=["events.*"], storage="memory")
    pcgroups.create_elastic(js, "EVENTS", "audit", 6, partitioning_filters=[("events.*", [1])])
    tally = Tally()
    running = {m: pcgroups.elastic_consume(js, "EVENTS", "audit", m, tally.handler(m)) for m in ("m1", "m2", "m3")}
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            js.publish_async(f"events.device{sent % 30}", b"%d" % sent)
            sent += 1
        js.publish_async_completed()

    print("members:", pcgroups.add_members(js, "EVENTS", "audit", ["m1"]))
    send(1000)
    print("members:", pcgroups.add_members(js, "EVENTS", "audit", ["m2", "m3"]))
    send(1000)
    print("members:", pcgroups.delete_members(js, "EVENTS", "audit", ["m1"]))
    send(1000)
    wait_until(lambda: tally.total == sent, f"{sent} events")
    for ctx in running.values():
        ctx.stop()
    for ctx in running.values():
        ctx.wait(30)
    for name, keys in sorted(tally.by_member.items()):
        print(f"elastic {name}: {sum(keys.values())} events")
    assert len(tally.seen) == tally.total == sent and tally.out_of_order == 0
    print(f"elastic: {tally.total} events processed, each once, every key in order")
    pcgroups.delete_elastic(js, "EVENTS", "audit")


def main() -> None:
    with NatsServer() as server, jssync.connect(server.url) as nc:
        js = nc.jetstream()
        static_group(js)
        elastic_group(js)


if __name__ == "__main__":
    main()
