"""Per-message TTL, counters, atomic batches and message schedules (nats-server 2.12+).

Run: python examples/js_features.py   (starts its own local nats-server)
"""

from __future__ import annotations

import datetime as dt
import time

import jssync
from jssync.server import NatsServer


def wait_until(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.1)


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()

        # per-message TTL (ADR-43): the stream opts in; markers tell watchers a subject emptied
        # (with max_msgs_per_subject other than 1 the marker TTL is also the shortest message TTL)
        sessions = js.create_stream(name="SESSIONS", subjects=["SESSIONS.>"], storage="memory",
                                    allow_msg_ttl=True, subject_delete_marker_ttl=60, max_msgs_per_subject=1)
        js.publish("SESSIONS.alice", b"token", ttl=1)
        js.publish("SESSIONS.config", b"forever", ttl="never")
        wait_until(lambda: (sessions.get_msg(last_by_subject="SESSIONS.alice").headers or {})
                   .get("Nats-Marker-Reason") == "MaxAge")
        print("SESSIONS.alice expired; marker left:", sessions.get_msg(last_by_subject="SESSIONS.alice").headers)

        # counters (ADR-49): values of any size, returned by the PubAck
        js.create_stream(name="COUNTS", subjects=["COUNTS.>"], storage="memory", allow_msg_counter=True)
        hits = js.counter("COUNTS.hits")
        hits.add(5)
        print("hits after +5, -2, +10**30:", hits.add(-2), hits.add(10**30))
        print("hits now:", hits.get())

        # atomic batch (ADR-50): all stored or none
        js.create_stream(name="ACCOUNTS", subjects=["ACCOUNTS.>"], storage="memory", allow_atomic=True)
        with js.batch_publish() as batch:
            batch.add("ACCOUNTS.alice", b"-10")
            batch.add("ACCOUNTS.bob", b"+10")
        print("batch committed:", batch.ack.batch_size if batch.ack else None, "messages")
        try:
            with js.batch_publish() as batch:
                batch.add("ACCOUNTS.alice", b"-10")
                batch.add("ACCOUNTS.bob", b"+10", expected_last_subject_seq=1)  # bob is at seq 2: fails
        except jssync.WrongLastSequenceError as exc:
            print("batch refused, nothing stored:", exc.description)
        print("ACCOUNTS holds", js.stream("ACCOUNTS").info().state.messages, "messages")

        # message schedules (ADR-51): the stream holds the schedule and publishes to the target
        jobs = js.create_stream(name="JOBS", subjects=["JOBS.>"], storage="memory",
                                allow_msg_schedules=True, allow_msg_ttl=True)
        soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        js.publish_scheduled("JOBS.schedule.report", b"build the report", target="JOBS.run", at=soon, ttl=60)
        js.publish_scheduled("JOBS.schedule.tick", b"tick", target="JOBS.tick", every=1)
        js.publish_scheduled("JOBS.schedule.nightly", b"backup", target="JOBS.run", cron="0 30 2 * * *",
                             time_zone="Europe/Amsterdam")

        def fired() -> int:
            subjects = jobs.info(subjects_filter="JOBS.>").state.subjects or {}
            return min(subjects.get("JOBS.run", 0), subjects.get("JOBS.tick", 0))

        wait_until(lambda: fired() >= 1)
        print("scheduled message:", jobs.get_msg(last_by_subject="JOBS.run").data)
        jobs.purge(subject="JOBS.schedule.tick")  # stops that schedule

        for name in ("SESSIONS", "COUNTS", "ACCOUNTS", "JOBS"):
            js.delete_stream(name)


if __name__ == "__main__":
    main()
