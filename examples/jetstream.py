"""JetStream with jssync: streams, publishing with de-duplication, consumers.

Run: python examples/jetstream.py   (starts its own local nats-server)
"""

from __future__ import annotations

import jssync
from jssync.server import NatsServer


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        stream = js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory",
                                  duplicate_window=60.0)
        print("created", stream.name)

        ack = js.publish("ORDERS.new", b"order 1", msg_id="order-1")
        again = js.publish("ORDERS.new", b"order 1", msg_id="order-1")
        print(f"published seq={ack.seq}; the retry was a duplicate: {again.duplicate}")

        try:
            js.publish("ORDERS.new", b"order 2", expected_last_subject_seq=99)
        except jssync.WrongLastSequenceError as exc:
            print(f"conditional publish refused: {exc.description} (err_code {exc.err_code})")

        futures = [js.publish_async("ORDERS.bulk", b"item %d" % i) for i in range(1000)]
        js.publish_async_completed(timeout=30.0)
        print("bulk published up to seq", futures[-1].result().seq)

        consumer = stream.create_consumer(durable_name="DISPATCH", ack_policy="explicit",
                                          filter_subject="ORDERS.new")
        print("consumer", consumer.name, "pending", consumer.info().num_pending)
        print("last ORDERS.new:", stream.get_msg(last_by_subject="ORDERS.new").data)
        print("purged", stream.purge(subject="ORDERS.bulk"), "bulk messages")
        js.delete_stream("ORDERS")


if __name__ == "__main__":
    main()
