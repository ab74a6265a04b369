"""Consuming with jssync: fetch, next, consume (iterator and callback), acks, ordered consumers.

Run: python examples/consume.py   (starts its own local nats-server)
"""

from __future__ import annotations

import threading
from typing import Any

import jssync
from jssync.server import NatsServer


def fetch_and_next(js: jssync.JetStream, stream: jssync.Stream) -> None:
    consumer = stream.create_consumer(durable_name="FETCHER", ack_policy="explicit", ack_wait=5.0)
    batch = consumer.fetch(5, expires=2.0)
    print("fetch(5):", [m.data.decode() for m in batch], "error:", batch.error)
    for msg in consumer.fetch(5, expires=2.0):
        msg.ack()
    print("fetch_no_wait(100) got", sum(1 for _ in consumer.fetch_no_wait(100)), "more")
    try:
        consumer.next(timeout=0.5)
    except jssync.TimeoutError:
        print("next(timeout=0.5): nothing left")
    js.publish("ORDERS.new", b"late order")
    msg = consumer.next(timeout=2.0)
    print("next():", msg.data, "seq", msg.metadata.sequence.stream, "delivered", msg.metadata.num_delivered)
    msg.nak(delay=0.2)                       # try again in 0.2 s
    again = consumer.next(timeout=2.0)
    print("redelivered after nak:", again.data, "delivered", again.metadata.num_delivered)
    again.ack_sync()                         # the server confirmed it


def consume_iterator(stream: jssync.Stream) -> None:
    consumer = stream.create_consumer(durable_name="ITER", ack_policy="explicit")
    seen = 0
    with consumer.consume(max_messages=20) as messages:
        for msg in messages:
            msg.ack()
            seen += 1
            if seen == 10:
                messages.drain()             # finish what is buffered, then the loop ends
    print(f"consume (iterator): {seen} messages, {messages.pull_requests} pull request(s)")


class OrderWorker:
    """A background consume worker: start() and stop() from an application's lifecycle hooks."""

    def __init__(self, url: str) -> None:
        self.nc = jssync.connect(url, name="order-worker")
        self.consumer = self.nc.jetstream().consumer("ORDERS", "WORKER")
        self.handled = 0
        self.all_done = threading.Event()
        self.cc: Any = None

    def handle(self, msg: jssync.Msg) -> None:
        self.handled += 1                    # one message at a time, in order
        msg.ack()
        if self.handled == 21:              # 20 orders + the late one
            self.all_done.set()

    def on_error(self, exc: BaseException) -> None:
        print("worker warning:", exc)

    def start(self) -> None:
        self.cc = self.consumer.consume(self.handle, error_cb=self.on_error, max_messages=50)

    def stop(self) -> None:
        self.cc.drain()
        self.cc.wait(timeout=10.0)
        self.nc.close()


def flask_route(url: str) -> None:
    try:
        from flask import Flask, jsonify
    except ImportError:
        print("(flask is not installed: skipping the Flask route)")
        return
    nc = jssync.connect(url)
    consumer = nc.jetstream().consumer("ORDERS", "WEB")
    app = Flask(__name__)

    @app.post("/orders/next")
    def next_orders():  # type: ignore[no-untyped-def]
        out = []
        for msg in consumer.fetch_no_wait(3):
            out.append({"seq": msg.metadata.sequence.stream, "order": msg.data.decode()})
            msg.ack()
        return jsonify(out)

    with app.test_client() as client:
        print("POST /orders/next ->", client.post("/orders/next").get_json())
    nc.close()


def ordered(js: jssync.JetStream, stream: jssync.Stream) -> None:
    oc = stream.ordered_consumer(filter_subjects="ORDERS.new")
    got = []
    with oc.consume() as messages:
        for msg in messages:
            got.append(msg.metadata.sequence.stream)
            if len(got) == 3:
                # even if its consumer disappears, it goes on at the next sequence
                stream.delete_consumer(oc.name)
                for i in range(5):
                    js.publish("ORDERS.new", b"more %d" % i)
            if len(got) == 26:
                break
    print("ordered consumer read stream sequences", got[:5], "...", got[-2:], "resets:", messages.resets)


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        stream = js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory")
        for i in range(20):
            js.publish_async("ORDERS.new", b"order %d" % i)
        js.publish_async_completed(timeout=10.0)

        fetch_and_next(js, stream)
        consume_iterator(stream)

        stream.create_consumer(durable_name="WORKER", ack_policy="explicit")
        worker = OrderWorker(srv.url)
        worker.start()
        worker.all_done.wait(10.0)
        worker.stop()
        print("background worker handled", worker.handled, "messages")

        stream.create_consumer(durable_name="WEB", ack_policy="explicit")
        flask_route(srv.url)
        ordered(js, stream)
        js.delete_stream("ORDERS")


if __name__ == "__main__":
    main()
