"""A JetStream backend for Django's Tasks framework (``django.tasks``, Django 6; or the ``django-tasks`` backport).

::

    TASKS = {"default": {"BACKEND": "jssync.contrib.django.tasks.JetStreamBackend"}}

``task.enqueue(...)`` publishes the task to the backend's stream (one stream per backend
alias, subject ``<subject>.<queue>.<band>``) and stores its result record (status READY) in
the backend's key-value bucket; ``manage.py jssync_tasks_worker`` runs it and writes the
outcome there; ``backend.get_result(id)`` / ``task.get_result(id)`` / ``result.refresh()`` read
it. Priorities: three bands (``priority > 0``, ``== 0``, ``< 0``), a worker takes the next task
from the highest band that has one; FIFO inside a band. ``run_after``: a message schedule of
the server (nats-server 2.12+) publishes the task then; on older servers the worker holds it
back (a nak with the delay left). See docs/django.md.

The stream, the bucket and the workers' consumers are made on first use, with the
connection of :mod:`jssync.contrib.django` (the ``JSSYNC`` setting).
"""

from __future__ import annotations

import importlib
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils.module_loading import import_string

import jssync

from .client import connection, jetstream
from .conf import Problem
from .taskconf import BANDS, TaskOptions, band_of, option_problems, task_options


def _framework() -> tuple[Any, Any, Any, Any, Any]:
    """(package, base, backends.base, exceptions, signals modules) of django.tasks or django_tasks."""
    for pkg in ("django.tasks", "django_tasks"):
        try:
            package = importlib.import_module(pkg)
        except ImportError:
            continue
        return (package, importlib.import_module(f"{pkg}.base"), importlib.import_module(f"{pkg}.backends.base"),
                importlib.import_module(f"{pkg}.exceptions"), importlib.import_module(f"{pkg}.signals"))
    raise ImportError("jssync.contrib.django.tasks needs Django's Tasks framework: Django 6 (django.tasks) or, "
                      "on Django 4.2/5.2, the backport: pip install django-tasks (and add \"django_tasks\" to "
                      "INSTALLED_APPS)")


_package, _base, _backends_base, _exceptions, signals = _framework()
#: Django's registry of the TASKS backends (``task_backends[alias]``)
task_backends: Any = _package.task_backends
Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskError: Any = _base.TaskError
TaskContext: Any = _base.TaskContext
#: raised by get_result for an unknown id (Django's own exception class)
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
_BaseTaskBackend: Any = _backends_base.BaseTaskBackend

try:
    normalize_json: Any = importlib.import_module("django.utils.json").normalize_json  # Django 6
except (ImportError, AttributeError):
    normalize_json = importlib.import_module("django_tasks.utils").normalize_json

#: the result record's format version (the ``v`` field)
RECORD_VERSION = 1


def now() -> datetime:
    """The current time, aware (UTC)."""
    return datetime.now(UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def task_record(task: Any) -> dict[str, Any]:
    """The JSON form of a Task: its module path and the options it was enqueued with."""
    return {"module_path": task.module_path, "priority": task.priority, "queue_name": task.queue_name,
            "run_after": _iso(task.run_after), "takes_context": task.takes_context, "backend": task.backend}


def result_record(result: Any) -> dict[str, Any]:
    """The JSON form of a TaskResult, as stored in the results bucket."""
    return {"v": RECORD_VERSION, "id": result.id, "task": task_record(result.task), "status": str(result.status),
            "enqueued_at": _iso(result.enqueued_at), "started_at": _iso(result.started_at),
            "finished_at": _iso(result.finished_at), "last_attempted_at": _iso(result.last_attempted_at),
            "args": result.args, "kwargs": result.kwargs,
            "errors": [{"exception_class_path": e.exception_class_path, "traceback": e.traceback}
                       for e in result.errors],
            "worker_ids": list(result.worker_ids),
            "return_value": result._return_value}


def task_from_record(rec: Mapping[str, Any]) -> Any:
    """The Task a record names (imported by its module path, with the options it was enqueued with).

    Raises:
        jssync.ValidationError (a ValueError): the module path does not name a Task (any more).
    """
    path = rec["module_path"]
    try:
        obj = import_string(path)
    except ImportError as exc:
        raise jssync.ValidationError(f"Expected {path!r} to point to a Task instance: {exc}") from exc
    if not isinstance(obj, Task):
        raise jssync.ValidationError(f"Expected {path!r} to point to a Task instance, got {type(obj).__name__}")
    return obj.using(priority=rec["priority"], queue_name=rec["queue_name"], run_after=_dt(rec.get("run_after")),
                     backend=rec["backend"])


def result_from_record(rec: Mapping[str, Any], task: Any | None = None) -> Any:
    """The TaskResult of a stored record (``task``: the Task, else imported from the record)."""
    result = TaskResult(
        task=task if task is not None else task_from_record(rec["task"]), id=rec["id"],
        status=TaskResultStatus(rec["status"]), enqueued_at=_dt(rec.get("enqueued_at")),
        started_at=_dt(rec.get("started_at")), finished_at=_dt(rec.get("finished_at")),
        last_attempted_at=_dt(rec.get("last_attempted_at")), args=list(rec.get("args") or []),
        kwargs=dict(rec.get("kwargs") or {}), backend=rec["task"]["backend"],
        errors=[TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
                for e in rec.get("errors") or []],
        worker_ids=list(rec.get("worker_ids") or []))
    object.__setattr__(result, "_return_value", rec.get("return_value"))
    return result


class JetStreamBackend(_BaseTaskBackend):
    """Django Tasks on JetStream: enqueue publishes, ``manage.py jssync_tasks_worker`` runs, KV holds results.

    ``OPTIONS`` (all optional): ``stream`` (default ``DJANGO_TASKS_<ALIAS>``), ``subject``
    (``django.tasks.<alias>``), ``results_bucket`` (``django_tasks_<alias>``), ``ack_wait``
    (seconds a worker may go silent before its task is given to another worker; default 30),
    ``max_deliver`` (default -1: no limit), ``timeout`` (of each JetStream request, default 5),
    ``storage`` (``"file"``), ``replicas`` (1), ``result_ttl`` (seconds results are kept;
    default None: kept). ``manage.py check`` reports wrong options (``jssync.E011``-``E013``).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._params = params
        #: (the connection it was opened on, the results bucket, message schedules on the stream)
        self._opened: tuple[jssync.Connection, jssync.KeyValue, bool] | None = None

    # -- configuration ---------------------------------------------------------------------------------

    def problems(self) -> list[Problem]:
        """What is wrong with this backend's settings (as ``manage.py check`` reports them)."""
        return option_problems(self.alias, self._params)

    @property
    def config(self) -> TaskOptions:
        """The options with the defaults.

        Raises:
            jssync.ValidationError: wrong OPTIONS or QUEUES (the message names the check id).
        """
        found = self.problems()
        if found:
            p = found[0]
            raise jssync.ValidationError(f"{p.msg} ({p.id}{'; ' + p.hint if p.hint else ''})")
        return task_options(self.alias, self.options)

    def ensure(self) -> jssync.KeyValue:
        """Create the stream and the results bucket if missing; return the bucket.

        The stream is made with message schedules (``allow_msg_schedules``, nats-server 2.12+)
        where the server has them: ``run_after`` is then the server's job.

        Blocks for the JetStream requests (each at most the ``timeout`` option).

        Raises:
            jssync.ValidationError: wrong options. jssync.Error: the server refused or did not answer.
        """
        return self._open()[1]

    def _open(self) -> tuple[jssync.Connection, jssync.KeyValue, bool]:
        """(connection, results bucket, whether the stream has message schedules), made again on a new connection."""
        nc = connection()
        if self._opened is not None and self._opened[0] is nc:
            return self._opened
        cfg = self.config
        js = jetstream()
        try:
            info = js.stream(cfg.stream, timeout=cfg.timeout).cached_info
            schedules = bool(getattr(info.config, "allow_msg_schedules", False))
        except jssync.StreamNotFoundError:
            params: dict[str, Any] = {"name": cfg.stream, "subjects": [f"{cfg.subject}.>"], "retention": "workqueue",
                                      "storage": cfg.storage, "num_replicas": cfg.replicas, "timeout": cfg.timeout}
            try:
                js.create_stream(**params, allow_msg_schedules=True)
                schedules = True
            except jssync.NotSupportedError:  # before nats-server 2.12: the workers hold run_after back
                js.create_stream(**params)
                schedules = False
        try:
            kv = js.key_value(cfg.results_bucket, timeout=cfg.timeout)
        except jssync.BucketNotFoundError:
            kv = js.create_key_value(bucket=cfg.results_bucket, history=1, ttl=cfg.result_ttl,
                                     storage=cfg.storage, replicas=cfg.replicas, timeout=cfg.timeout)
        self._opened = (nc, kv, schedules)
        return self._opened

    def consumer(self, queue: str, band: str) -> jssync.Consumer:
        """The durable pull consumer of ``queue``'s ``band`` (created or updated to the options)."""
        cfg = self.config
        self.ensure()
        return jetstream().create_or_update_consumer(
            cfg.stream, durable_name=cfg.durable(queue, band), filter_subject=cfg.band_subject(queue, band),
            ack_policy="explicit", ack_wait=cfg.ack_wait, max_deliver=cfg.max_deliver, timeout=cfg.timeout)

    # -- the Tasks API ---------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Validate the task, store its READY result and publish it; return the TaskResult.

        Blocks for the result's write and the publish's acknowledgement (each at most the
        ``timeout`` option).

        Raises:
            InvalidTask (Django's): the task cannot run on this backend (queue, priority, ...).
            TypeError: args or kwargs are not JSON-serializable (nothing is sent).
            jssync.ValidationError: wrong options. jssync.Error: the server refused or did not answer.
        """
        self.validate_task(task)
        cfg = self.config
        result = TaskResult(task=task, id=secrets.token_hex(16), status=TaskResultStatus.READY, enqueued_at=now(),
                            started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
                            backend=self.alias, errors=[], worker_ids=[])
        record = json.dumps(result_record(result)).encode()
        body = json.dumps({"v": RECORD_VERSION, "id": result.id, "task": task_record(task), "args": result.args,
                           "kwargs": result.kwargs, "enqueued_at": _iso(result.enqueued_at)}).encode()
        _, kv, schedules = self._open()
        kv.put(result.id, record)
        target = cfg.band_subject(task.queue_name, band_of(task.priority))
        run_after = task.run_after
        try:
            if schedules and run_after is not None and run_after.tzinfo is not None and run_after > now():
                # the server publishes it to its band at run_after (rounded up to the second: the
                # schedule's resolution), so no worker holds it meanwhile
                at = run_after.replace(microsecond=0) + timedelta(seconds=1 if run_after.microsecond else 0)
                jetstream().publish_scheduled(f"{cfg.subject}._scheduled.{result.id}", body, target=target, at=at,
                                              timeout=cfg.timeout)
            else:
                jetstream().publish(target, body, msg_id=result.id, timeout=cfg.timeout)
        except BaseException:
            try:
                kv.delete(result.id)
            except jssync.Error:
                pass
            raise
        signals.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The TaskResult stored for ``result_id`` (a new object; ``result.refresh()`` reloads one).

        Blocks for one key-value read (at most the ``timeout`` option).

        Raises:
            TaskResultDoesNotExist (Django's): no such result (or it expired, ``result_ttl``).
            jssync.Error: the server did not answer.
        """
        kv = self.ensure()
        try:
            entry = kv.get(str(result_id))
        except (jssync.KeyNotFoundError, jssync.KeyDeletedError, jssync.InvalidKeyError):
            raise TaskResultDoesNotExist(result_id) from None
        return result_from_record(json.loads(entry.value or b"{}"))

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's backend checks, plus this backend's OPTIONS and QUEUES (``jssync.E011``-``E013``)
        when the app ``jssync.contrib.django`` is not installed (when it is, its system check reports them)."""
        found = list(super().check(**kwargs))
        if not apps.is_installed("jssync.contrib.django"):
            found += [checks.Error(p.msg, hint=p.hint, id=p.id) for p in self.problems()]
        return found


__all__ = ["BANDS", "JetStreamBackend", "TaskResultDoesNotExist"]
