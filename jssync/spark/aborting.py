"""How a failed write stops its other tasks and counts what the whole write left in the stream.

Every write task listens on two core NATS subjects of its write (``<token>`` is made by the
driver once per write, ``<batch>`` is the micro-batch, 0 for a batch write):

- ``_JSSYNC.SPARK.STOP.<token>.<batch>`` (:func:`stop_subject`): a request there is
  acknowledged at once and stops the task before its next row (it looks every 256 rows and
  before each Arrow batch); it waits for its PubAcks, answers with what it stored (and what
  it heard of finished tasks) and fails. All requests of one stopper carry one reply
  address, read for the whole collect, so a late answer is still counted. The driver's
  abort sends it (:func:`stop_tasks`), and so does a task whose failure is its last
  attempt (:func:`stop_others`), before it raises.
- ``_JSSYNC.SPARK.DONE.<token>.<batch>`` (:func:`done_subject`): a task that finished announces
  there what it stored, together with the last :data:`RELAYED` finished tasks it heard of,
  before it stops listening for stop requests and closes its connection. The tasks still running keep these reports (a
  short-lived record: it lives as long as some task of the write runs), so the failed
  task's error can count them.

A task stopped by a failed task waits (a few seconds at most) for the failed task's summary
of the whole write, so whichever of the two errors Spark reports says the same total.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import _Stopped

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg
    from .rowpub import RowPublisher

log = logging.getLogger("jssync.spark")

#: The subjects on which a write's running tasks are stopped:
#: ``_JSSYNC.SPARK.STOP.<write token>.<micro-batch>`` (a core NATS request; each task still
#: publishing answers with what it stored, once it has stopped).
STOP_SUBJECT_PREFIX = "_JSSYNC.SPARK.STOP"

#: The subjects on which a write's finished tasks announce what they stored:
#: ``_JSSYNC.SPARK.DONE.<write token>.<micro-batch>``.
DONE_SUBJECT_PREFIX = "_JSSYNC.SPARK.DONE"

#: The Spark local property that tells the tasks how many attempts a task has
#: (``spark.task.maxFailures``, or what the local master allows); set on the driver by
#: :func:`note_max_failures`.
MAX_FAILURES_PROPERTY = "jssync.spark.taskMaxFailures"

#: The finished tasks' reports a finishing task relays in its own (the most recent ones): a
#: done report stays small however many partitions the write has.
RELAYED = 64

_LOCAL_FAILURES = re.compile(r"local\[\s*(?:\d+|\*)\s*,\s*(\d+)\s*\]\Z")


def stop_subject(token: str, batch_id: int) -> str:
    """The subject on which the abort of write ``token`` (micro-batch ``batch_id``) stops its tasks."""
    return f"{STOP_SUBJECT_PREFIX}.{token}.{batch_id}"


def done_subject(token: str, batch_id: int) -> str:
    """The subject on which the finished tasks of write ``token`` (micro-batch ``batch_id``) report."""
    return f"{DONE_SUBJECT_PREFIX}.{token}.{batch_id}"


def task_max_failures(master: str, configured: str | None) -> int:
    """The attempts Spark gives a task: 1 for ``local`` and ``local[N]``, F for ``local[N,F]``,
    ``spark.task.maxFailures`` (``configured``, default 4) for any other master."""
    m = master.strip()
    if m == "local" or re.fullmatch(r"local\[\s*(?:\d+|\*)\s*\]", m):
        return 1
    lf = _LOCAL_FAILURES.match(m)
    if lf:
        return max(1, int(lf.group(1)))
    try:
        return max(1, int(configured)) if configured is not None else 4
    except ValueError:
        return 4


def note_max_failures(spark: Any) -> None:
    """Set :data:`MAX_FAILURES_PROPERTY` on the calling thread's Spark jobs (classic Spark only;
    Spark Connect has no SparkContext here: nothing is set). Never raises."""
    try:
        sc = spark.sparkContext
        n = task_max_failures(str(sc.master), spark.conf.get("spark.task.maxFailures", None))
        sc.setLocalProperty(MAX_FAILURES_PROPERTY, str(n))
    except Exception as exc:  # noqa: BLE001 - Spark Connect, a stopped session: the tasks then do not know
        log.debug("jssync.spark: cannot tell the write's tasks how many attempts they have: %s: %s",
                  type(exc).__name__, exc)


def in_stream(report: Mapping[str, Any]) -> int:
    """The rows a task's report says are in the stream (stored now or already there)."""
    return int(report.get("stored", 0)) + int(report.get("duplicates", 0))


def _merge(into: dict[int, dict[str, Any]], reports: Any) -> None:
    """Add finished-task reports (a list of dicts, each maybe with its own ``finished`` list)."""
    if not isinstance(reports, list):
        return
    for r in reports:
        if not isinstance(r, dict):
            continue
        try:
            p = int(r.get("partition", -1))
        except (TypeError, ValueError):
            continue
        _merge(into, r.get("finished"))
        flat = {k: v for k, v in r.items() if k != "finished"}
        old = into.get(p)
        if old is None or in_stream(flat) > in_stream(old):
            into[p] = flat


class _StopSignal:
    """A write task's ear for the write's stop requests and its finished tasks' reports.

    The stop subscription's callback (on the connection's worker pool) records the request
    and acknowledges it at once (``{"ack": true, "partition", "attempt"}`` to the request's
    reply address), so the stopper knows whose answer to wait for; the task's publishing
    loop polls :attr:`requested` between rows, stops publishing, waits for its PubAcks and
    answers every stopper that asked with :meth:`report` (or, when it finished meanwhile,
    with its done report from :meth:`announce_done`). The finished tasks' reports are
    merged by their subscription's callback as they come; :meth:`finished` first waits
    (1 s at most) until the callback has merged every report the connection received
    before the call, so a report that came before a later reply is always counted. A server that refuses
    the subscriptions (permissions) leaves the task without them: it then stops only when
    Spark kills it, and its error counts only its own partition.
    """

    __slots__ = ("requested", "_replies", "_summary_to", "_sub", "_done_sub", "_done", "_conn", "_finished",
                 "_lock", "partition", "attempt", "lossy", "_heard")

    #: The stoppers a task answers at most (the failed task's and the driver's are two).
    MAX_STOPPERS = 8

    def __init__(self, conn: Connection, token: str, batch_id: int, partition: int, attempt: int = 0) -> None:
        self.requested = False
        self.partition = partition
        self.attempt = attempt
        self._replies: list[str] = []
        self._summary_to: str | None = None
        self._conn = conn
        self._sub: Any = None
        self._done_sub: Any = None
        self._lock = threading.Lock()
        self._finished: dict[int, dict[str, Any]] = {}
        self._heard = 0  # DONE reports merged (or found unreadable) by the callback
        #: Whether a relayed report left out finished tasks (more than :data:`RELAYED`).
        self.lossy = False
        subject = stop_subject(token, batch_id)
        self._done = done_subject(token, batch_id)
        try:
            self._done_sub = conn.subscribe(self._done, callback=self._on_done)
            self._sub = conn.subscribe(subject, callback=self._on_stop)
        except Exception as exc:  # noqa: BLE001 - permissions: the task goes on without it
            log.info("jssync.spark: cannot listen for the write's abort on %r (the task stops only when Spark "
                     "kills it): %s: %s", subject, type(exc).__name__, exc)

    @property
    def listening(self) -> bool:
        """Whether the task listens for stop requests."""
        return self._sub is not None

    def _on_stop(self, msg: Msg) -> None:
        try:
            req = json.loads(msg.data) if msg.data else {}
        except ValueError:
            req = {}
        if isinstance(req, dict) and isinstance(req.get("summary"), str):
            self._summary_to = req["summary"]
        reply = msg.reply or None
        if reply is not None and reply not in self._replies and len(self._replies) < self.MAX_STOPPERS:
            self._replies.append(reply)
            try:
                self._conn.publish(reply, json.dumps({"ack": True, "partition": self.partition,
                                                      "attempt": self.attempt}).encode())
            except Exception as exc:  # noqa: BLE001 - a closed connection: the stopper does not wait for us
                log.debug("jssync.spark: cannot acknowledge the write's abort: %s: %s", type(exc).__name__, exc)
        self.requested = True

    def _on_done(self, msg: Msg) -> None:
        try:
            rep = json.loads(msg.data)
        except ValueError:
            rep = None
            log.debug("jssync.spark: ignoring a finished task's report that is not JSON on %r", self._done)
        with self._lock:
            self._heard += 1
            if rep is not None:
                _merge(self._finished, [rep])
                if isinstance(rep, dict) and rep.get("more"):
                    self.lossy = True

    def _caught_up(self, seconds: float = 1.0) -> None:
        # the DONE reports the connection received before this call have all been merged
        # (the callback runs on the worker pool, after the I/O thread delivered them)
        sub = self._done_sub
        if sub is None:
            return
        target = sub.delivered
        deadline = time.monotonic() + seconds
        while self._heard < target and time.monotonic() < deadline:
            time.sleep(0.005)

    def finished(self) -> dict[int, dict[str, Any]]:
        """The finished tasks heard of so far (every report the connection received before this
        call): partition -> report (this partition's excluded)."""
        self._caught_up()
        with self._lock:
            return {p: dict(r) for p, r in self._finished.items() if p != self.partition}

    def quiet(self) -> None:
        """Stop listening for stop requests (the request loops then get no-responders from this
        task); waits up to 2 s for the server to have it. Never raises."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        try:
            sub.unsubscribe(timeout=2.0)
            self._conn.flush(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - a closed connection listens to nothing
            log.debug("jssync.spark: cannot stop listening for the write's abort: %s: %s", type(exc).__name__, exc)

    def report(self, fields: Mapping[str, Any]) -> Any:
        """Answer the stop requests with ``fields`` and the finished tasks heard of (JSON); waits
        up to 2 s for the server to have it. Returns the subscription on which the failed task
        that asked sends its summary (None when only the driver asked)."""
        if not self._replies:
            return None
        summary = None
        try:
            if self._summary_to is not None:
                summary = self._conn.subscribe(self._summary_to)
            body = json.dumps({**fields, "finished": list(self.finished().values()), "lossy": self.lossy}).encode()
            for reply in list(self._replies):
                self._conn.publish(reply, body)
            self._conn.flush(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - the stopper then reports this task as not answering
            log.info("jssync.spark: cannot answer the write's abort: %s: %s", type(exc).__name__, exc)
        return summary

    def decline(self) -> None:
        """Tell every stopper that asked that this task failed on its own (``{"partition",
        "attempt", "failed": true}``: it is not counted, its own error says what it stored),
        so that none waits for its answer. Waits up to 2 s for the server to have it. Never raises."""
        if not self._replies:
            return
        body = json.dumps({"partition": self.partition, "attempt": self.attempt, "failed": True}).encode()
        try:
            for reply in list(self._replies):
                self._conn.publish(reply, body)
            self._conn.flush(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - the stopper then says some task did not stop in time
            log.info("jssync.spark: cannot tell the write's abort that this task failed: %s: %s",
                     type(exc).__name__, exc)

    def announce_done(self, fields: Mapping[str, Any]) -> None:
        """Tell the write's running tasks what this finished task stored (with the finished tasks
        it heard of), answer any stopper that asked meanwhile with the same report (marked
        ``"done"``), and only then stop listening for stop requests: a stopper that hears
        nobody listens any more has received this report before. Waits up to 2 s for the
        server to have it (and 2 s more for the unsubscription). Never raises."""
        if self._done_sub is None:
            return
        try:
            heard = list(self.finished().values())
            body = {**fields, "finished": heard[-RELAYED:], "more": self.lossy or len(heard) > RELAYED}
            self._conn.publish(self._done, json.dumps(body).encode())
            if self._replies:
                answer = json.dumps({**body, "done": True}).encode()
                for reply in list(self._replies):
                    self._conn.publish(reply, answer)
            self._conn.flush(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - the others then do not count this task
            log.info("jssync.spark: cannot announce the task's end: %s: %s", type(exc).__name__, exc)
        self.quiet()


#: Seconds between two stop requests of one collect (until nobody listens).
_REQUEST_EVERY = 0.25


def _collect(conn: Connection, subject: str, payload: bytes, seconds: float) -> tuple[list[dict[str, Any]], bool]:
    """Send stop requests on ``subject`` until nobody listens and every task that acknowledged
    one has answered; ``(answers, all of that happened within seconds)``.

    All requests carry the address of one reply inbox, subscribed for the whole collect, so
    an answer that comes at any time before the end is counted. The acknowledgements
    (``{"ack": true, ...}``) are not among the answers; an answer marked ``"done"`` is a
    task that finished instead of stopping, one marked ``"failed"`` a task that failed on its
    own (:meth:`_StopSignal.decline`)."""
    from ..base.errors import TimeoutError as _Timeout
    from ..base.status import is_no_responders

    answers: dict[tuple[int, int], dict[str, Any]] = {}
    acked: set[tuple[int, int]] = set()
    nobody = False
    inbox = conn.new_inbox()
    sub = conn.subscribe(inbox)
    try:
        deadline = time.monotonic() + seconds
        next_request = 0.0
        while True:
            now = time.monotonic()
            if nobody and acked <= answers.keys():
                return list(answers.values()), True
            if now >= deadline:
                return list(answers.values()), False
            if not nobody and now >= next_request:
                conn.publish(subject, payload, reply=inbox)
                next_request = now + _REQUEST_EVERY
            wait = deadline - now if nobody else min(deadline, next_request) - now
            try:
                msg = sub.next_msg(timeout=max(0.0, min(0.1, wait)))
            except _Timeout:
                continue
            if is_no_responders(msg.headers, msg.data):
                nobody = True  # no task of the write listens any more
                continue
            try:
                rep = json.loads(msg.data)
                key = (int(rep.get("partition", -1)), int(rep.get("attempt", 0)))
            except (ValueError, TypeError, AttributeError):
                log.debug("jssync.spark: ignoring an answer to the write's abort that is not a report on %r", subject)
                continue
            if rep.get("ack"):
                acked.add(key)
            elif key not in answers or rep.get("done"):  # a done report wins over a stopped one
                answers[key] = rep
    finally:
        try:
            sub.unsubscribe(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - a closed connection listens to nothing
            log.debug("jssync.spark: cannot remove the abort's reply inbox: %s: %s", type(exc).__name__, exc)


def stop_tasks(opts: Any, token: str, batch_id: int) -> tuple[list[dict[str, Any]], bool]:
    """Stop the tasks of write ``token`` that are still publishing; return ``(reports, gone)``.

    Sends requests on :func:`stop_subject` (from the driver's abort), all with one reply
    address. Every task of the write still publishing acknowledges at once, stops before its
    next row, waits for its PubAcks (up to ``min(5, publishTimeout)`` seconds) and answers
    with ``{"partition", "attempt", "rows", "stored", "duplicates", "unsettled", "finished"}``,
    then stops listening; one that finished meanwhile answers with its done report (marked
    ``"done"``). The request is repeated until the server says nobody listens any more
    (no-responders) and every task that acknowledged has answered: then every task has
    stopped publishing or closed its connection, and the server has read everything they
    sent (a task Spark killed may have left up to ``maxPending`` rows in its socket, stored
    meanwhile); ``gone`` says whether that happened within ``min(5, publishTimeout) + 2``
    seconds. Never raises: a failure is logged on the
    ``jssync.spark`` logger and gives the answers received so far.
    """
    subject = stop_subject(token, batch_id)
    try:
        conn = opts.conn.connect("aborter")
    except Exception as exc:  # noqa: BLE001 - the abort goes on; Spark kills the tasks
        log.warning("jssync.spark: cannot stop the write's tasks (no connection): %s: %s", type(exc).__name__, exc)
        return [], False
    try:
        return _collect(conn, subject, b"", min(5.0, opts.publish_timeout) + 2.0)
    except Exception as exc:  # noqa: BLE001 - permissions, a closed connection: Spark kills the tasks
        log.warning("jssync.spark: cannot stop the write's tasks on %r: %s: %s", subject, type(exc).__name__, exc)
        return [], False
    finally:
        conn.close()


def abort_counts(finished: Mapping[int, int],
                 reports: list[dict[str, Any]]) -> tuple[dict[int, int], dict[int, dict[str, Any]]]:
    """Merge what the driver's abort knows, once per partition: ``finished`` (partition -> rows in
    the stream, from the commit messages of the tasks that finished) and the ``reports`` of
    :func:`stop_tasks`. A finished report (a commit message, or an answer marked ``"done"``)
    wins over a stopped one of the same partition (a speculative copy, another attempt); of
    several stopped reports of one partition the one with the most rows in the stream counts
    (with message ids, a later attempt's duplicates are the earlier attempt's rows).
    Returns ``(finished: partition -> rows, stopped: partition -> report)``."""
    done = dict(finished)
    stopped: dict[int, dict[str, Any]] = {}
    for r in reports:
        try:
            p = int(r.get("partition", -1))
        except (TypeError, ValueError):
            continue
        if r.get("failed"):  # it failed on its own: its own error counts it
            continue
        if r.get("done"):
            done[p] = max(done.get(p, 0), in_stream(r))
            continue
        old = stopped.get(p)
        if old is None or in_stream(r) > in_stream(old):
            stopped[p] = r
    for p in done:
        stopped.pop(p, None)
    return done, stopped


class _Others:
    """What a failed task learned of the write's other tasks (for its error)."""

    __slots__ = ("stopped", "finished", "gone", "asked", "summary_to", "whole", "lossy")

    def __init__(self) -> None:
        self.whole = ""
        self.lossy = False
        self.stopped: dict[int, dict[str, Any]] = {}
        self.finished: dict[int, dict[str, Any]] = {}
        self.gone = False
        self.asked = False
        self.summary_to: str | None = None


def stop_others(conn: Connection, stop: _StopSignal | None, opts: Any, token: str, batch_id: int,
                partition: int, attempt: int, final: bool) -> _Others:
    """From a failed task: stop the write's other running tasks (only when ``final``: this was
    the task's last attempt, the job fails with it) and gather what they and the finished
    tasks stored. Blocks up to ``min(5, publishTimeout) + 2`` seconds. Never raises."""
    others = _Others()
    if stop is None:
        return others
    if final and stop.listening:
        stop.quiet()  # this task is not one of those to stop
        try:
            others.summary_to = conn.new_inbox()
            payload = json.dumps({"partition": partition, "attempt": attempt,
                                  "summary": others.summary_to}).encode()
            reports, others.gone = _collect(conn, stop_subject(token, batch_id), payload,
                                            min(5.0, opts.publish_timeout) + 2.0)
            others.asked = True
        except Exception as exc:  # noqa: BLE001 - a closed connection: the others are not counted
            log.info("jssync.spark: cannot stop the write's other tasks: %s: %s", type(exc).__name__, exc)
            reports = []
        for r in reports:
            try:
                p = int(r.get("partition", -1))
            except (TypeError, ValueError):
                continue
            _merge(others.finished, r.get("finished"))
            others.lossy = others.lossy or bool(r.get("lossy") or r.get("more"))
            if r.get("failed"):  # it failed on its own: its own error counts it
                continue
            if r.get("done"):  # it finished instead of stopping
                _merge(others.finished, [{k: v for k, v in r.items() if k not in ("done", "more")}])
                continue
            old = others.stopped.get(p)
            if p != partition and (old is None or in_stream(r) > in_stream(old)):
                others.stopped[p] = r
    others.lossy = others.lossy or stop.lossy
    for p, r in stop.finished().items():
        old = others.finished.get(p)
        if old is None or in_stream(r) > in_stream(old):
            others.finished[p] = r
    others.finished.pop(partition, None)
    for p in list(others.finished):  # a partition that finished (another attempt) counts as finished
        others.stopped.pop(p, None)
    return others


def whole_write_text(own: int, partition: int, others: _Others, own_unsettled: int = 0) -> str:
    """The sentence of a failed task's error on what the whole write left in the stream."""
    stopped = sum(in_stream(r) for r in others.stopped.values())
    finished = sum(in_stream(r) for r in others.finished.values())
    unsettled = own_unsettled + sum(int(r.get("unsettled", 0)) for r in others.stopped.values())
    total = own + stopped + finished
    text = (f"{total} row(s) of this write are in the stream in all ({own} of partition {partition}, "
            f"{finished} of {len(others.finished)} finished task(s) {sorted(others.finished)}, "
            f"{stopped} of {len(others.stopped)} task(s) stopped by this failure {sorted(others.stopped)}")
    if unsettled:
        text += f"; {unsettled} more were published without a PubAck yet (they may be stored)"
    text += ")"
    if not others.asked:
        text += ("; the write's tasks still running were not stopped from here and are not counted (Spark may "
                 "retry this task; if the job fails, its abort stops them and logs what they stored)")
    elif not others.gone:
        text += "; some task of the write did not stop in time and is not counted"
    text += ("; not counted: tasks Spark killed, tasks that failed on their own, what earlier attempts of "
             "other partitions stored beyond their last attempt, and tasks that finished while no running task "
             "of the write listened yet")
    if others.lossy:
        text += f" or long before this failure (a finished task relays the last {RELAYED} it heard of)"
    return text


def send_summary(conn: Connection, others: _Others) -> None:
    """Hand the whole write's sentence (:attr:`_Others.whole`) to the tasks this failure stopped.
    Never raises."""
    if others.summary_to is None or not others.stopped or not others.whole:
        return
    try:
        conn.publish(others.summary_to, others.whole.encode())
        conn.flush(timeout=2.0)
    except Exception as exc:  # noqa: BLE001 - their errors then say only their own partition
        log.info("jssync.spark: cannot send the whole write's count to the stopped tasks: %s: %s",
                 type(exc).__name__, exc)


def failed_write_text(cause: str, opts: Any, pub: RowPublisher | None, prefix: str, batch_id: int,
                      partition: int, others: _Others | None = None, attempt: int = 0) -> str:
    """The text of a failed task's error: the cause, the rows in the stream, how to re-run.

    Waits up to 5 s for the PubAcks still missing (what the server stores anyway), then
    counts the rows of this partition that are in the stream, and adds what ``others``
    says of the write's other tasks.
    """
    stored = duplicates = pending = 0
    if pub is not None:
        pub.settle_quietly(min(5.0, opts.publish_timeout))
        stored, duplicates, pending = pub.stored, pub.duplicates, pub.pending
    text = (f"{cause}. {stored + duplicates} row(s) of partition {partition} are in the stream "
            f"({duplicates} of them were already there)")
    if others is not None:
        others.whole = whole_write_text(stored + duplicates, partition, others, pending)
        if attempt and not opts.derive_msg_id and opts.msg_id_column is None:
            others.whole += (f"; the {attempt} earlier attempt(s) of partition {partition} stored their rows too "
                             "(without message ids: not counted)")
        text += "; " + others.whole
    else:
        text += "; what the write's other tasks stored stays too"
    if opts.derive_msg_id:
        text += (f". Derived message ids of this write start with '{prefix}.{batch_id}.': write the same rows "
                 f"again with option msgIdPrefix='{prefix}' within the stream's duplicate window and none "
                 "of them is stored twice")
    return text


def stopped(stop: _StopSignal, opts: Any, pub: RowPublisher, partition: int, attempt: int, rows: int) -> None:
    """Stop publishing: wait for the PubAcks still missing, answer the stop request, raise :class:`_Stopped`.

    A failed PubAck counts as not stored; a missing one as unsettled. When a failed task
    asked, waits (up to ``min(5, publishTimeout) + 3`` seconds) for its summary of the whole
    write, which the raised report carries as ``"whole"``."""
    pub.settle_quietly(min(5.0, opts.publish_timeout))
    report: dict[str, Any] = {"partition": partition, "attempt": attempt, "rows": rows, "stored": pub.stored,
                              "duplicates": pub.duplicates, "unsettled": pub.pending}
    stop.quiet()
    summary = stop.report(report)
    if summary is not None:
        try:
            from ..base.errors import TimeoutError as _Timeout

            deadline = time.monotonic() + min(5.0, opts.publish_timeout) + 3.0
            while time.monotonic() < deadline:
                try:
                    m = summary.next_msg(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
                except _Timeout:
                    continue
                report["whole"] = m.data.decode(errors="replace")
                break
        except Exception as exc:  # noqa: BLE001 - a closed connection: the error says only this partition
            log.info("jssync.spark: partition %d did not get the failed task's count of the whole write: %s: %s",
                     partition, type(exc).__name__, exc)
    raise _Stopped(report)


def stopped_text(exc: _Stopped, opts: Any, prefix: str, batch_id: int, partition: int) -> str:
    """The text of a stopped task's error."""
    r = exc.report
    text = (f"partition {partition} stopped publishing: the write was aborted (another task failed). "
            f"{r['stored'] + r['duplicates']} row(s) of partition {partition} are in the stream "
            f"({r['duplicates']} of them were already there)")
    if r["unsettled"]:
        text += f"; {r['unsettled']} more were published without a PubAck yet"
    if r.get("whole"):
        text += f". The failed task counted: {r['whole']}"
    if opts.derive_msg_id:
        text += (f". Derived message ids of this write start with '{prefix}.{batch_id}.': write the same rows "
                 f"again with option msgIdPrefix='{prefix}' within the stream's duplicate window")
    return text
