"""A stand-in for an older nats-server's JetStream API, for the tests of features a newer server needs."""

from __future__ import annotations

import json
import threading

import jssync


class OldServer:
    """A JetStream API on ``prefix`` that says it is at ``level`` and records every other request."""

    def __init__(self, nc, prefix: str, level: int) -> None:
        self.requests: list[str] = []
        self.lock = threading.Lock()

        def answer(msg: jssync.Msg) -> None:
            if msg.subject == f"{prefix}.INFO":
                msg.respond(json.dumps({"type": "io.nats.jetstream.api.v1.account_info_response",
                                        "memory": 0, "storage": 0, "streams": 0, "consumers": 0,
                                        "limits": {}, "api": {"level": level, "total": 0, "errors": 0}}).encode())
            else:
                with self.lock:
                    self.requests.append(msg.subject)

        self.sub = nc.subscribe(f"{prefix}.>", callback=answer)
        nc.flush()
