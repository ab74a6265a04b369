"""The ``jssync`` command line (also ``python -m jssync``)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    import jssync
    from jssync.server import NatsServer

    out = print
    out("jssync demo: starting a local nats-server with JetStream ...")
    with NatsServer(jetstream=True) as srv:
        out(f"  server running at {srv.url}")
        with jssync.connect(srv.url, name="jssync-demo") as nc:
            out(f"  connected: {nc!r}")
            # core NATS
            sub = nc.subscribe("demo.hello")
            nc.publish("demo.hello", b"hello from jssync", headers={"Demo": "1"})
            msg = sub.next_msg(timeout=2.0)
            out(f"  core pub/sub: got {msg.data!r} with headers {msg.headers}")
            nc.subscribe("demo.echo", callback=lambda m: m.respond(b"echo: " + m.data))
            reply = nc.request("demo.echo", b"ping", timeout=2.0)
            out(f"  request/reply: {reply.data!r}")
            _demo_js(nc, args.count, out)
        out("  connection closed")
    out("demo finished: server stopped")
    return 0


def _demo_js(nc: object, count: int, out: object) -> None:
    from jssync._connection import Connection

    assert isinstance(nc, Connection)

    js = nc.jetstream()
    stream = js.create_stream(name="DEMO", subjects=["demo.orders.*"], storage="memory")
    print(f"  created stream {stream.name}")
    t0 = time.perf_counter()
    for i in range(count):
        js.publish_async(f"demo.orders.{i % 3}", f"order {i}".encode())
    js.publish_async_completed(timeout=30.0)
    print(f"  published {count} messages with publish_async in {time.perf_counter() - t0:.3f}s")
    consumer = stream.create_consumer(durable_name="DEMO_WORKER", ack_policy="explicit")
    if not hasattr(consumer, "consume"):  # pragma: no cover - until consuming lands
        print(f"  consumer {consumer.name} has {consumer.info().num_pending} messages pending")
        js.delete_stream("DEMO")
        return
    got = 0
    t0 = time.perf_counter()
    with consumer.consume(max_messages=500) as messages:
        for m in messages:
            m.ack()
            got += 1
            if got == count:
                messages.stop()
    print(f"  consumed and acked {got} messages in {time.perf_counter() - t0:.3f}s")
    last = stream.get_msg(last_by_subject="demo.orders.0")
    print(f"  last message on demo.orders.0: seq={last.seq} data={last.data!r}")
    js.delete_stream("DEMO")
    print("  deleted stream DEMO")


def _server(args: argparse.Namespace) -> int:
    from jssync.server import NatsServer

    with NatsServer(jetstream=True, port=args.port) as srv:
        print(f"nats-server running at {srv.url} (Ctrl-C to stop)", flush=True)
        try:
            while srv.running:
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jssync", description="jssync: NATS JetStream from the command line")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the quick start against a local server it starts")
    d.add_argument("--count", type=int, default=10000, help="messages to publish and consume")
    d.set_defaults(func=_demo)
    s = sub.add_parser("server", help="run a local nats-server with JetStream")
    s.add_argument("--port", type=int, default=4222)
    s.set_defaults(func=_server)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
