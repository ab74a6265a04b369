"""How a write's abort collects the answers of its running tasks (``stop_tasks``, ``stop_others``; real server).

The tasks are played here by their real stop signals (``_StopSignal``) on their own
connections; only the publishing of rows is left out. A task that settles its PubAcks
slowly, answers after it stopped listening, or finishes while the abort collects is still
counted, and the collect says that every task of the write was heard of.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from jssync.spark import aborting
from jssync.spark.options import ConnectOptions
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(60)]


def _opts(url: str) -> SimpleNamespace:
    return SimpleNamespace(conn=ConnectOptions(servers=url), publish_timeout=5.0)


def _start_task(body: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    """Play a running task in a thread; what ``body`` raises goes to ``errors`` (the test asserts it empty)."""

    def run() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t


def _report(partition: int, stored: int) -> dict:
    return {"partition": partition, "attempt": 0, "rows": stored, "stored": stored, "duplicates": 0,
            "unsettled": 0}


def test_a_task_whose_answer_comes_after_it_stopped_listening_is_counted_by_the_drivers_abort(nats_server, unique):
    opts = _opts(nats_server.url)
    conn = opts.conn.connect("writer-1")
    errors: list[BaseException] = []
    try:
        stop = aborting._StopSignal(conn, unique, 0, 1)

        def task() -> None:
            wait_for(lambda: stop.requested, timeout=10 * FACTOR, what="the stop request")
            time.sleep(0.6)  # behaviour: settling its PubAcks outlasts a request's reply window
            stop.quiet()
            time.sleep(0.6)  # behaviour: the stopper's next requests find nobody listening
            stop.report(_report(1, 30))

        t = _start_task(task, errors)
        reports, gone = aborting.stop_tasks(opts, unique, 0)
        t.join(timeout=10 * FACTOR)
    finally:
        conn.close()
    assert not errors
    assert [(r["partition"], r["stored"]) for r in reports] == [(1, 30)]
    assert gone


def test_a_task_that_finishes_while_a_failed_task_stops_the_write_counts_as_finished(nats_server, unique):
    opts = _opts(nats_server.url)
    failed = opts.conn.connect("writer-0")
    finishing = opts.conn.connect("writer-2")
    errors: list[BaseException] = []
    try:
        own = aborting._StopSignal(failed, unique, 0, 0)
        other = aborting._StopSignal(finishing, unique, 0, 2)

        def task() -> None:
            # the stop request came after its last row: it finishes instead of stopping
            wait_for(lambda: other.requested, timeout=10 * FACTOR, what="the stop request")
            time.sleep(0.6)  # behaviour: it ends its last PubAck wait after the request came
            other.announce_done({"partition": 2, "attempt": 0, "rows": 12, "stored": 12, "duplicates": 0})

        t = _start_task(task, errors)
        others = aborting.stop_others(failed, own, opts, unique, 0, 0, 0, True)
        t.join(timeout=10 * FACTOR)
    finally:
        finishing.close()
        failed.close()
    assert not errors
    assert others.asked and others.gone
    assert {p: aborting.in_stream(r) for p, r in others.finished.items()} == {2: 12}
    assert others.stopped == {}


def test_a_task_that_finishes_without_a_stop_request_during_the_collect_is_counted(nats_server, unique):
    opts = _opts(nats_server.url)
    failed = opts.conn.connect("writer-0")
    finishing = opts.conn.connect("writer-3")
    try:
        own = aborting._StopSignal(failed, unique, 0, 0)
        other = aborting._StopSignal(finishing, unique, 0, 3)
        # it announces its end just before the failed task asks: its report is the only trace of it
        other.announce_done({"partition": 3, "attempt": 0, "rows": 7, "stored": 7, "duplicates": 0})
        others = aborting.stop_others(failed, own, opts, unique, 0, 0, 0, True)
    finally:
        finishing.close()
        failed.close()
    assert others.gone
    assert {p: aborting.in_stream(r) for p, r in others.finished.items()} == {3: 7}


def test_a_task_that_failed_on_its_own_after_a_stop_request_does_not_hold_up_the_abort(nats_server, unique):
    opts = _opts(nats_server.url)
    conn = opts.conn.connect("writer-5")
    errors: list[BaseException] = []
    try:
        stop = aborting._StopSignal(conn, unique, 0, 5)

        def task() -> None:
            # a bad row fails it before it looks at the request again
            wait_for(lambda: stop.requested, timeout=10 * FACTOR, what="the stop request")
            stop.decline()
            stop.quiet()

        t = _start_task(task, errors)
        reports, gone = aborting.stop_tasks(opts, unique, 0)
        t.join(timeout=10 * FACTOR)
    finally:
        conn.close()
    assert not errors
    assert gone  # it did not wait for an answer that never comes
    assert [(r["partition"], r.get("failed")) for r in reports] == [(5, True)]
    assert aborting.abort_counts({}, reports) == ({}, {})
