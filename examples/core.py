"""Core NATS with jssync: publish, subscribe (iterator and callback), request/reply.

Run: python examples/core.py   (starts its own local nats-server)
"""

from __future__ import annotations

import threading

import jssync
from jssync.server import NatsServer


def main() -> None:
    with NatsServer(jetstream=False) as srv, jssync.connect(srv.url, name="core-example") as nc:
        # iterator form
        sub = nc.subscribe("greet.*")
        for name in ("joe", "ann"):
            nc.publish(f"greet.{name}", f"hello {name}".encode(), headers={"Lang": "en"})
        for _ in range(2):
            msg = sub.next_msg(timeout=2.0)
            print(f"{msg.subject}: {msg.data.decode()} {msg.headers}")

        # callback form: runs on the worker pool, in order; may call blocking APIs
        done = threading.Event()
        seen: list[int] = []

        def on_tick(msg: jssync.Msg) -> None:
            seen.append(int(msg.data))
            if len(seen) == 100:
                done.set()

        nc.subscribe("ticks", callback=on_tick)
        for i in range(100):
            nc.publish("ticks", str(i).encode())
        assert done.wait(5.0) and seen == list(range(100))
        print("callback saw 100 ticks in order")

        # request/reply with a queue group of responders
        nc.subscribe("svc.upper", queue="svc", callback=lambda m: m.respond(m.data.upper()))
        print("reply:", nc.request("svc.upper", b"shout", timeout=2.0).data.decode())
        try:
            nc.request("svc.nobody", b"", timeout=1.0)
        except jssync.NoRespondersError as exc:
            print("as expected:", exc)


if __name__ == "__main__":
    main()
