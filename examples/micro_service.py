"""A micro service (ADR-32) with jssync.micro, and a client that finds and calls it.

Run: python examples/micro_service.py   (starts its own local nats-server)
"""

from __future__ import annotations

import json
import time

import jssync
from jssync import micro
from jssync.server import NatsServer


def add(req: micro.Request) -> None:
    """Runs on the connection's worker pool; an exception becomes a 500 service error."""
    numbers = json.loads(req.data)
    if not isinstance(numbers, list):
        req.respond_error(400, "send a JSON list of numbers")
        return
    req.respond_json(sum(numbers))


def divide(req: micro.Request) -> None:
    a, b = json.loads(req.data)
    if b == 0:
        raise micro.ServiceError(422, "division by zero")
    req.respond_json(a / b)


def main() -> None:
    with NatsServer(jetstream=False) as srv, \
            jssync.connect(srv.url, name="calc-service") as svc_nc, \
            jssync.connect(srv.url, name="calc-client") as nc:
        svc = micro.add_service(svc_nc, name="calc", version="1.0.0", description="adds and divides",
                                metadata={"team": "math"})
        math = svc.add_group("math")                      # endpoints on math.<name>, queue group "q"
        math.add_endpoint("add", add, metadata={"input": "JSON list"})
        math.add_endpoint("divide", divide)

        # discovery, as `nats micro ls` does it: $SRV.INFO, every reply until 300 ms of silence
        for reply in nc.request_many("$SRV.INFO", max_wait=2.0, stall=0.3):
            info = json.loads(reply.data)
            subjects = [e["subject"] for e in info["endpoints"]]
            print(f"found {info['name']} {info['version']} id={info['id']} endpoints={subjects}")

        print("1+2+3 =", json.loads(nc.request("math.add", b"[1, 2, 3]", timeout=2.0).data))
        for subject, payload in (("math.add", b'{"not": "a list"}'), ("math.divide", b"[1, 0]")):
            try:
                micro.check_response(nc.request(subject, payload, timeout=2.0))  # raises on an error reply
            except micro.ServiceError as exc:
                print(f"service error {exc.code}: {exc.description}")

        # a request is counted once its handler has returned, just after its reply went out:
        # ask again (for up to 2 s) until the last one shows
        deadline = time.monotonic() + 2.0
        while True:
            stats = json.loads(nc.request(f"$SRV.STATS.calc.{svc.id}", timeout=2.0).data)
            if sum(ep["num_requests"] for ep in stats["endpoints"]) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for ep in stats["endpoints"]:
            print(f"{ep['name']}: {ep['num_requests']} requests, {ep['num_errors']} errors, "
                  f"last error {ep['last_error']!r}, average {ep['average_processing_time']} ns")
        assert sum(ep["num_requests"] for ep in stats["endpoints"]) == 3

        svc.drain(timeout=5.0)                            # finish what was received, then stop
        print("stopped:", svc.stopped)


if __name__ == "__main__":
    main()
