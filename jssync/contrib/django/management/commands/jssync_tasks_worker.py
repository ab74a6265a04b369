"""``python manage.py jssync_tasks_worker [--backend ALIAS] [--queue NAME ...]``: run Django tasks from JetStream.

Runs the tasks enqueued on a ``jssync.contrib.django.tasks.JetStreamBackend`` (``--backend``,
default ``default``) for the given queues (``--queue``, repeatable; default: every queue of
the backend's ``QUEUES``), one at a time, highest priority band first. Each task's result is
stored in the backend's bucket and its message acked after the task; a task that raises is a
FAILED result (acked: the task failed, not the worker). A worker that dies mid-task leaves
its task to be redelivered after the backend's ``ack_wait``.

SIGTERM or SIGINT: the running task finishes and is acked, no more fetching, a task fetched
but not started is nak'ed (another worker gets it at once), the connection is closed, exit
status 0. A second signal interrupts the running task (KeyboardInterrupt in it; its message
is left to ``ack_wait``) and exits with status 1. Logs go to the ``jssync`` logger.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import jssync
from jssync.base.validate import positive_int
from jssync.contrib.django.client import close


class Command(BaseCommand):
    help = ("Run the Django tasks of a jssync JetStream task backend: fetch by priority, run, store the result, "
            "ack; drain on SIGTERM/SIGINT.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", metavar="ALIAS",
                            help="the TASKS alias of the JetStreamBackend (default: default)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="NAME",
                            help="a queue to run (repeatable; default: every queue of the backend's QUEUES)")
        parser.add_argument("--max-tasks", type=positive_int, default=None, metavar="N",
                            help="exit (status 0) after running N tasks")

    def handle(self, *args: Any, backend: str, queues: list[str] | None, max_tasks: int | None,
               **options: Any) -> None:
        try:
            from jssync.contrib.django.tasks import JetStreamBackend, task_backends
        except ImportError as exc:
            raise CommandError(str(exc)) from None
        from jssync.contrib.django.taskworker import Worker

        try:
            be = task_backends[backend]
        except Exception as exc:
            raise CommandError(f"--backend {backend!r}: {exc}") from None
        if not isinstance(be, JetStreamBackend):
            raise CommandError(f"--backend {backend!r} is a {type(be).__name__}, not a "
                               "jssync.contrib.django.tasks.JetStreamBackend")
        names = queues if queues else sorted(be.queues)
        for q in names:
            if be.queues and q not in be.queues:
                raise CommandError(f"--queue {q!r} is not in TASKS[{backend!r}]['QUEUES'] "
                                   f"({', '.join(sorted(be.queues))})")
        stopping = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if stopping.is_set():
                raise KeyboardInterrupt
            stopping.set()
            # (os.write, not logging: a signal handler must not wait for the logging lock)
            os.write(2, b"jssync_tasks_worker: stopping: the running task finishes, no more fetching\n")

        old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        failure: str | None = None
        try:
            try:
                worker = Worker(be, names, stopping)
            except jssync.ValidationError as exc:
                raise CommandError(str(exc)) from None
            except jssync.Error as exc:
                raise CommandError(f"cannot start: {type(exc).__name__}: {exc}") from None
            if max_tasks is not None:
                _stop_after(worker, max_tasks)
            try:
                worker.run()
            except KeyboardInterrupt:
                failure = "interrupted by a second signal: the running task is redelivered after ack_wait"
            except jssync.Error as exc:
                failure = f"the worker stopped: {type(exc).__name__}: {exc}"
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            close(timeout=5.0)  # flushes the acks and naks
        if failure:
            raise CommandError(failure)
        self.stderr.write(f"jssync_tasks_worker: stopped after {worker.ran} task(s)")


def _stop_after(worker: Any, n: int) -> None:
    """Make ``worker`` set its stop flag once it has run ``n`` tasks."""
    handle = worker.handle

    def counted(msg: jssync.Msg) -> None:
        handle(msg)
        if worker.ran >= n:
            worker.stopping.set()

    worker.handle = counted
