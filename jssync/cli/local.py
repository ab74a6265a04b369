"""``jssync demo`` and ``jssync server``: the commands that start a local nats-server."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType
from typing import Any

from ..base.errors import _Stop
from .common import add_command

# -- demo and server ---------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    import jssync
    from jssync.server import NatsServer

    out = print
    out("jssync demo: starting a local nats-server with JetStream ...")
    with NatsServer(jetstream=True) as srv:
        out(f"  server running at {srv.url}")
        with jssync.connect(srv.url, name="jssync-demo") as nc:
            out(f"  connected: {nc!r}")
            sub = nc.subscribe("demo.hello")
            nc.publish("demo.hello", b"hello from jssync", headers={"Demo": "1"})
            msg = sub.next_msg(timeout=2.0)
            out(f"  core pub/sub: got {msg.data!r} with headers {msg.headers}")
            nc.subscribe("demo.echo", callback=lambda m: m.respond(b"echo: " + m.data))
            reply = nc.request("demo.echo", b"ping", timeout=2.0)
            out(f"  request/reply: {reply.data!r}")
            _demo_js(nc, args.count)
        out("  connection closed")
    out("demo finished: server stopped")
    return 0


def _demo_js(nc: Any, count: int) -> None:
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


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be listened on (as nats-server would: SO_REUSEADDR set)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _port_taken(port: int) -> int:
    """Say (one line on stderr) that ``port`` is taken; exit status 1."""
    sys.stderr.write(f"jssync: port {port} on 127.0.0.1 is already in use (another nats-server?): "
                     f"pick another with --port, e.g. --port {port + 1}\n")
    return 1


def _server(args: argparse.Namespace) -> int:
    from jssync.server import NatsServer, ServerError

    # SIGTERM, SIGHUP and SIGINT all stop the server the same way: the nats-server child is stopped and
    # the temporary directory (with the store, unless --store-dir) removed. A signal that comes before
    # there is anything to clean up is held until there is; one that comes while stopping is ignored.
    state: dict[str, Any] = {"armed": False, "stopping": False, "signal": None}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if state["stopping"]:
            return
        state["signal"] = signum
        if state["armed"]:
            state["stopping"] = True
            raise _Stop(signum)

    sigs = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    old = {sig: signal.signal(sig, on_signal) for sig in sigs}
    srv: NatsServer | None = None
    try:
        if not _port_free(args.port):
            return _port_taken(args.port)
        srv = NatsServer(jetstream=True, port=args.port, store_dir=args.store_dir)
        state["armed"] = True
        if state["signal"] is not None:
            state["stopping"] = True
            raise _Stop(state["signal"])
        try:
            srv.start()
        except ServerError as exc:
            if "address already in use" in str(exc):  # taken between the check and the start
                return _port_taken(args.port)
            fatal = [ln for ln in str(exc).splitlines() if "[FTL]" in ln or "[ERR]" in ln]
            sys.stderr.write(f"jssync: nats-server did not start: "
                             f"{(fatal[-1].split('] ', 2)[-1] if fatal else str(exc).splitlines()[0])}\n")
            return 1
        kind = "kept" if args.store_dir else "temporary: removed on exit"
        print(f"nats-server running at {srv.url}, store {srv.store_dir} ({kind}); Ctrl-C to stop", flush=True)
        while srv.running:
            time.sleep(0.2)
        sys.stderr.write(f"jssync: nats-server exited:\n{srv.logs()[-2000:]}\n")
        return 1
    except _Stop:
        return 0
    finally:
        state["stopping"] = True
        if srv is not None:
            srv.stop()
            srv.cleanup()
        for sig, handler in old.items():
            signal.signal(sig, handler)


def register(sub: Any) -> None:
    """Add this group's commands to the top-level sub-parsers ``sub``."""
    d = add_command(sub, "demo", help="run the quick start against a local server it starts")
    d.add_argument("--count", type=int, default=10000, help="messages to publish and consume")
    d.set_defaults(func=_demo, _local=True)
    s = add_command(sub, "server", help="run a local nats-server with JetStream",
             description="Run a local nats-server with JetStream on 127.0.0.1 until Ctrl-C, SIGTERM or SIGHUP. "
                         "Its store is a temporary directory, removed when it stops, unless --store-dir is given.")
    s.add_argument("--port", type=int, default=4222)
    s.add_argument("--store-dir", metavar="DIR",
                   help="keep the JetStream store in DIR between runs (default: a temporary directory, "
                        "removed on exit)")
    s.set_defaults(func=_server, _local=True)
