"""The task worker of ``manage.py jssync_tasks_worker``: fetch by priority band, run, store the result, ack.

One task at a time (run more processes for more at once). For each task message:

1. ``run_after`` in the future (a stream without message schedules delivers it at once):
   nak'ed with the delay left (the server redelivers it then).
2. Its result already finished (a redelivery after the result was written): acked, not run again.
3. Otherwise the result is set RUNNING (``started_at``, ``last_attempted_at``, the worker id
   appended to ``worker_ids``), the task runs on this thread while another sends in-progress
   acks every third of ``ack_wait``, the result is stored SUCCESSFUL (with the return value)
   or FAILED (an exception: its class and traceback), and the message is acked, confirmed.

A worker that dies mid-task (kill -9) sends no more in-progress acks: the server redelivers
the task after ``ack_wait`` to another worker, which runs it again (``attempts`` counts both).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import traceback
from datetime import datetime
from typing import Any

import jssync

from .taskconf import BANDS
from .tasks import (
    JetStreamBackend,
    TaskContext,
    TaskError,
    TaskResultStatus,
    _dt,
    normalize_json,
    now,
    result_from_record,
    result_record,
    signals,
    task_from_record,
)

log = logging.getLogger("jssync")

#: how long an idle worker waits on one pull before it looks at the other bands and its stop flag
IDLE_POLL = 0.25


def new_worker_id() -> str:
    """``host-pid-random``: names this worker in the results' ``worker_ids``."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def _error_of(exc: BaseException) -> Any:
    t = type(exc)
    return TaskError(exception_class_path=f"{t.__module__}.{t.__qualname__}",
                     traceback="".join(traceback.format_exception(exc)))


class Worker:
    """Runs the tasks of ``queues`` of ``backend``, highest priority band first, until ``stopping`` is set."""

    def __init__(self, backend: JetStreamBackend, queues: list[str], stopping: threading.Event,
                 worker_id: str | None = None) -> None:
        self.backend = backend
        self.queues = queues
        self.stopping = stopping
        self.worker_id = worker_id or new_worker_id()
        self.cfg = backend.config
        self.kv = backend.ensure()
        #: (band, queue, consumer), the order the worker looks for work in
        self.consumers = [(band, q, backend.consumer(q, band)) for band in BANDS for q in queues]
        self.ran = 0

    def _next(self) -> jssync.Msg | None:
        """The next task message, highest band first; waits up to IDLE_POLL on the first queue's default band."""
        for _, _, cons in self.consumers:
            for msg in cons.fetch_no_wait(1):
                return msg
        idle = next(c for band, q, c in self.consumers if band == "default" and q == self.queues[0])
        for msg in idle.fetch(1, expires=IDLE_POLL):
            return msg
        return None

    def run(self) -> None:
        """Fetch and run tasks until ``stopping`` is set; a task fetched after that is nak'ed, not run.

        Blocks the calling thread (the task runs on it).
        """
        log.info("jssync_tasks_worker %s: running queue(s) %s of backend %r (stream %s)", self.worker_id,
                 ", ".join(self.queues), self.backend.alias, self.cfg.stream)
        while not self.stopping.is_set():
            msg = self._next()
            if msg is None:
                continue
            if self.stopping.is_set():
                msg.nak()  # fetched but not started: the server gives it to another worker at once
                break
            self.handle(msg)

    def handle(self, msg: jssync.Msg) -> None:
        """Run the task of one message (see the module docstring) and ack it."""
        try:
            body = json.loads(msg.data)
            rid = body["id"]
        except (ValueError, KeyError, TypeError):
            log.error("jssync_tasks_worker: not a task message on %s (stream seq %d): terminated", msg.subject,
                      msg.metadata.sequence.stream)
            msg.term(reason="not a task message")
            return
        run_after = _dt(body["task"].get("run_after"))
        if run_after is not None:  # not yet (a server without message schedules delivers it at once)
            wait = (run_after - (now() if run_after.tzinfo else datetime.now())).total_seconds()
            if wait > 0:
                msg.nak(delay=wait)
                return
        try:
            rec = json.loads(self.kv.get(rid).value)
        except (jssync.KeyNotFoundError, jssync.KeyDeletedError):
            rec = {**body, "status": "READY", "started_at": None, "finished_at": None, "last_attempted_at": None,
                   "errors": [], "worker_ids": [], "return_value": None}
        if rec["status"] in ("SUCCESSFUL", "FAILED"):
            msg.ack_sync()  # already run (its ack was lost): not again
            return
        try:
            task = task_from_record(rec["task"])
        except ValueError as exc:
            self._finish_unrunnable(msg, rec, exc)
            return
        result = result_from_record(rec, task)
        start = now()
        object.__setattr__(result, "status", TaskResultStatus.RUNNING)
        object.__setattr__(result, "started_at", start)
        object.__setattr__(result, "last_attempted_at", start)
        result.worker_ids.append(self.worker_id)
        self._store(result)
        signals.task_started.send(type(self.backend), task_result=result)
        done = threading.Event()
        beat = threading.Thread(target=self._in_progress, args=(msg, done), name="jssync_tasks_worker-wpi",
                                daemon=True)
        beat.start()

        def stop_beat() -> None:
            done.set()
            beat.join()

        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = task.call(*result.args, **result.kwargs)
            value = normalize_json(value)
            json.dumps(value)
        except KeyboardInterrupt:
            stop_beat()
            raise
        except BaseException as exc:  # the task failed, not the worker: a FAILED result, acked
            stop_beat()
            result.errors.append(_error_of(exc))
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", now())
            log.warning("task %s (%s) failed: %s: %s", rid, task.module_path, type(exc).__name__, exc)
            self._complete(msg, result)  # inside the handler: task_finished's receivers see the exception
        else:
            stop_beat()
            object.__setattr__(result, "_return_value", value)
            object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "finished_at", now())
            self._complete(msg, result)
        finally:
            done.set()

    def _complete(self, msg: jssync.Msg, result: Any) -> None:
        """Store the finished result, ack the message (confirmed), send ``task_finished``."""
        self._store(result)
        msg.ack_sync(timeout=self.cfg.timeout)
        self.ran += 1
        signals.task_finished.send(type(self.backend), task_result=result)

    def _finish_unrunnable(self, msg: jssync.Msg, rec: dict[str, Any], exc: BaseException) -> None:
        """The task's function cannot be imported: a FAILED result (it would fail every time), acked."""
        stamp = now().isoformat()
        rec.update(status="FAILED", started_at=stamp, finished_at=stamp, last_attempted_at=stamp,
                   worker_ids=[*rec.get("worker_ids", []), self.worker_id],
                   errors=[*rec.get("errors", []), {"exception_class_path": f"{type(exc).__module__}."
                                                                             f"{type(exc).__qualname__}",
                                                   "traceback": "".join(traceback.format_exception(exc))}])
        self.kv.put(rec["id"], json.dumps(rec).encode())
        log.error("task %s cannot run: %s", rec["id"], exc)
        msg.ack_sync(timeout=self.cfg.timeout)

    def _store(self, result: Any) -> None:
        self.kv.put(result.id, json.dumps(result_record(result)).encode())

    def _in_progress(self, msg: jssync.Msg, done: threading.Event) -> None:
        """Tell the server the task still runs, every third of ack_wait, until ``done``."""
        every = max(self.cfg.ack_wait / 3, 0.05)
        while not done.wait(every):
            try:
                msg.in_progress()
            except jssync.Error as exc:
                log.warning("could not extend the ack wait of task message %s: %s", msg.subject, exc)


__all__ = ["IDLE_POLL", "Worker", "new_worker_id"]
