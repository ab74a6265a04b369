"""Why a request failed: no responders, a timeout, a close from another thread, no JetStream.

Each failure is its own class (and still the class it was before, so older ``except`` clauses
keep working); each says ``.reason``, ``.subject`` and ``.retriable``.

Run: python examples/request_errors.py   (starts its own local nats-servers)
"""

from __future__ import annotations

import threading

import jssync
from jssync.server import NatsServer


def main() -> None:
    with NatsServer(jetstream=False) as srv, jssync.connect(srv.url, name="why-example") as nc:
        # nobody listens: retriable (a responder may come up)
        try:
            nc.request("svc.none", b"hi", timeout=2.0)
        except jssync.NoRespondersError as exc:
            print(f"no responders: reason={exc.reason} subject={exc.subject} retriable={exc.retriable}")

        # somebody listens but does not answer: a timeout (also the builtin TimeoutError)
        nc.subscribe("svc.slow", callback=lambda msg: None)
        nc.flush()
        try:
            nc.request("svc.slow", b"hi", timeout=0.2)
        except TimeoutError as exc:
            assert isinstance(exc, jssync.RequestTimeoutError)
            print(f"timed out: reason={exc.reason} disconnected={exc.disconnected} retriable={exc.retriable}")

        # JetStream is off on this server: the API says so, and it is not worth retrying
        try:
            nc.jetstream().account_info()
        except jssync.JetStreamNotEnabledError as exc:
            print(f"JetStream not enabled: retriable={exc.retriable}")

    # a close from another thread ends a waiting request at once, and says so
    with NatsServer(jetstream=False) as srv:
        nc = jssync.connect(srv.url, name="why-example-close")
        nc.subscribe("svc.slow", callback=lambda msg: None)
        nc.flush()
        threading.Timer(0.2, nc.close).start()
        try:
            nc.request("svc.slow", b"hi", timeout=30.0)
        except jssync.RequestCancelledError as exc:
            assert isinstance(exc, jssync.ConnectionClosedError)
            print(f"cancelled: reason={exc.reason} subject={exc.subject}")
        finally:
            nc.close()


if __name__ == "__main__":
    main()
