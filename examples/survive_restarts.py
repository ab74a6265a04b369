"""Consume with explicit acks through server restarts and lose nothing.

Starts its own file-storage nats-server, publishes 5,000 orders, and processes them with
``consumer.consume()`` while the server is restarted twice. Every order is processed;
an order seen twice is a redelivery (``msg.metadata.num_delivered > 1``: its ack was lost
with the restart), so the handler is idempotent. Run it: ``python examples/survive_restarts.py``.
"""

from __future__ import annotations

import tempfile
import threading
import time

import jssync
from jssync.server import NatsServer

ORDERS = 5000


def main() -> None:
    with tempfile.TemporaryDirectory() as store, NatsServer(store_dir=store) as srv:
        # retry forever, quickly: the restarts below take a fraction of a second
        with jssync.connect(srv.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1) as nc:
            js = nc.jetstream()
            js.create_stream(name="ORDERS", subjects=["orders.>"], storage="file")
            for i in range(ORDERS):
                js.publish_async("orders.new", b"order %d" % i, msg_id=f"order-{i}")
            js.publish_async_completed(timeout=30)

            consumer = js.create_consumer("ORDERS", durable_name="BILLING", ack_policy="explicit",
                                          ack_wait=2.0)  # a lost ack is redelivered after 2 s
            done: set[int] = set()
            redelivered = 0
            lock = threading.Lock()
            finished = threading.Event()

            def handle(msg: jssync.Msg) -> None:
                nonlocal redelivered
                seq = msg.metadata.sequence.stream
                with lock:
                    if seq in done:  # already billed: an idempotent handler only acks again
                        redelivered += 1
                    else:
                        done.add(seq)  # ... bill the order here ...
                        if len(done) == ORDERS:
                            finished.set()
                msg.ack()

            with consumer.consume(handle, max_messages=200, expires=5, idle_heartbeat=1):
                for fraction in (1 / 3, 2 / 3):
                    deadline = time.monotonic() + 30
                    while len(done) < ORDERS * fraction and time.monotonic() < deadline:
                        finished.wait(0.01)
                    srv.restart()  # SIGTERM, then start again on the same port and store
                    print(f"server restarted after {len(done)} orders")
                if not finished.wait(60):
                    raise SystemExit(f"only {len(done)} of {ORDERS} orders processed")
            print(f"{len(done)} orders processed, {redelivered} redeliveries, "
                  f"{nc.stats['reconnects']} reconnects")
            assert done == set(range(1, ORDERS + 1))


if __name__ == "__main__":
    main()
