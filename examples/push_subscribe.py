"""Push subscriptions (ADR-15): callbacks with auto-ack, a queue group, an ordered replay.

Starts its own nats-server, so it runs anywhere jssync is installed::

    python examples/push_subscribe.py
"""

from __future__ import annotations

import threading
from collections import Counter

import jssync
from jssync.server import NatsServer


def main() -> None:
    with NatsServer() as srv, jssync.connect(srv.url, error_cb=lambda e: print("error:", e)) as nc:
        js = nc.jetstream()
        js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory")
        for i in range(10):
            js.publish("ORDERS.new", f"order {i}".encode())

        # 1. A callback subscription. The stream is found from the subject; the ephemeral
        #    consumer is created here (and deleted by drain); each message is acked once the
        #    callback returns.
        done = threading.Event()
        seen: list[str] = []

        def handle(msg: jssync.Msg) -> None:
            seen.append(msg.data.decode())
            if len(seen) == 10:
                done.set()

        sub = js.subscribe("ORDERS.new", callback=handle, idle_heartbeat=1.0, flow_control=True)
        assert done.wait(5), seen
        print(f"callback got {len(seen)} orders from consumer {sub.consumer_name!r}")
        sub.drain()  # every callback ran, then the consumer this subscription created is deleted

        # 2. A queue group: the queue name is the durable name, so both members share one
        #    consumer and each message goes to one of them.
        counts: Counter[str] = Counter()
        lock = threading.Lock()
        all_in = threading.Event()

        def member(name: str):  # noqa: ANN202
            def cb(msg: jssync.Msg) -> None:
                with lock:
                    counts[name] += 1
                    if sum(counts.values()) == 10:
                        all_in.set()
            return cb

        a = js.subscribe("ORDERS.new", queue="dispatch", callback=member("a"), deliver_policy="new")
        b = js.subscribe("ORDERS.new", queue="dispatch", callback=member("b"), deliver_policy="new")
        for i in range(10, 20):
            js.publish("ORDERS.new", f"order {i}".encode())
        assert all_in.wait(5), counts
        print(f"queue group 'dispatch' split the orders: {dict(counts)}")

        # A second non-queue subscription on the same durable is refused (ADR-15 checks).
        try:
            js.subscribe("ORDERS.new", durable="dispatch")
        except jssync.JetStreamError as exc:
            print(f"refused as expected: {type(exc).__name__}: {exc}")
        b.unsubscribe()  # b did not create the consumer: it stays
        a.unsubscribe()  # a created it: it is deleted
        assert list(js.consumer_names("ORDERS")) == []

        # 3. An ordered subscription: every message once, in order, no acks; it recreates its
        #    consumer by itself after a gap, a missed heartbeat or a reconnect.
        ordered = js.subscribe("ORDERS.new", ordered=True, idle_heartbeat=0.5)
        replay = [ordered.next_msg(timeout=2).metadata.sequence.stream for _ in range(10)]
        ordered.unsubscribe()
        print(f"ordered replay of stream sequences {replay}")
        assert replay == list(range(1, 11))  # (the stream holds 20: the first 10 are enough here)

        js.delete_stream("ORDERS")


if __name__ == "__main__":
    main()
