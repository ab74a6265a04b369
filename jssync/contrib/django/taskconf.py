"""The ``OPTIONS`` of a ``jssync.contrib.django.tasks.JetStreamBackend`` in ``settings.TASKS``: defaults and checks.

This module does not import Django's Tasks framework, so ``manage.py check`` reports wrong
options (ids ``jssync.E011`` to ``jssync.E013``) whether or not ``django.tasks`` (Django 6)
or the ``django-tasks`` backport is installed::

    TASKS = {
        "default": {
            "BACKEND": "jssync.contrib.django.tasks.JetStreamBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"ack_wait": 30.0, "timeout": 5.0},
        },
    }
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from django.conf import settings

from .conf import Problem

#: the dotted path of the backend, as ``TASKS[alias]["BACKEND"]`` names it
BACKEND_PATH = "jssync.contrib.django.tasks.JetStreamBackend"
#: the priority bands, highest first: priority > 0, == 0, < 0
BANDS = ("high", "default", "low")
#: what ``OPTIONS`` may hold
OPTION_NAMES = ("stream", "subject", "results_bucket", "ack_wait", "max_deliver", "timeout", "storage",
                "replicas", "result_ttl")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SUBJECT = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


@dataclass(frozen=True)
class TaskOptions:
    """A backend's options with the defaults filled in (see :func:`task_options`)."""

    stream: str
    subject: str
    results_bucket: str
    ack_wait: float
    max_deliver: int
    timeout: float
    storage: Literal["file", "memory"]
    replicas: int
    result_ttl: float | None

    def band_subject(self, queue: str, band: str) -> str:
        """The subject tasks of ``queue`` in priority ``band`` are published on."""
        return f"{self.subject}.{queue}.{band}"

    def durable(self, queue: str, band: str) -> str:
        """The durable pull consumer the workers of ``queue`` read ``band`` with."""
        return f"{queue}-{band}"


def band_of(priority: int) -> str:
    """The band of a Django task priority (-100..100, higher runs first): high, default or low."""
    return "high" if priority > 0 else "low" if priority < 0 else "default"


def _token(alias: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", alias)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def option_problems(alias: str, params: Any) -> list[Problem]:
    """What is wrong with ``TASKS[alias]`` (a JetStreamBackend's entry): no I/O."""
    where = f"TASKS[{alias!r}]"
    if not isinstance(params, Mapping):
        return [Problem("jssync.E012", f"{where} must be a dict, got {type(params).__name__}")]
    out: list[Problem] = []
    queues = params.get("QUEUES", ["default"])
    if not isinstance(queues, list | tuple | set | frozenset) or not queues:
        out.append(Problem("jssync.E013", f"{where}['QUEUES'] must be a non-empty list of queue names, got "
                                          f"{queues!r}"))
    else:
        for q in queues:
            if not isinstance(q, str) or not _NAME.match(q):
                out.append(Problem("jssync.E013", f"{where}['QUEUES'] has the queue name {q!r}",
                                   "a queue name is letters, digits, '_' and '-' (it is a subject token "
                                   "and part of a consumer name)"))
    options = params.get("OPTIONS", {})
    if not isinstance(options, Mapping):
        return [*out, Problem("jssync.E012", f"{where}['OPTIONS'] must be a dict, got {type(options).__name__}")]
    o = f"{where}['OPTIONS']"
    for key in options:
        if key not in OPTION_NAMES:
            close = difflib.get_close_matches(str(key), OPTION_NAMES, n=1, cutoff=0.6)
            out.append(Problem("jssync.E011", f"{o} has an unknown option {key!r}",
                               f"did you mean {close[0]!r}?" if close else f"the options are "
                                                                          f"{', '.join(OPTION_NAMES)}"))

    def bad(key: str, want: str) -> None:
        out.append(Problem("jssync.E012", f"{o}[{key!r}] must be {want}, got {options[key]!r} "
                                          f"({type(options[key]).__name__})"))

    for key in ("stream", "results_bucket"):
        if key in options and not (isinstance(options[key], str) and _NAME.match(options[key])):
            bad(key, "a name of letters, digits, '_' and '-'")
    if "subject" in options and not (isinstance(options["subject"], str) and _SUBJECT.match(options["subject"])):
        bad("subject", "a subject without wildcards (tokens of letters, digits, '_' and '-')")
    for key in ("ack_wait", "timeout"):
        if key in options and not (_number(options[key]) and options[key] > 0):
            bad(key, "a number of seconds > 0")
    if "result_ttl" in options and options["result_ttl"] is not None and not (
            _number(options["result_ttl"]) and options["result_ttl"] > 0):
        bad("result_ttl", "a number of seconds > 0, or None (results are kept)")
    if "max_deliver" in options and not (isinstance(options["max_deliver"], int)
                                         and not isinstance(options["max_deliver"], bool)
                                         and (options["max_deliver"] >= 1 or options["max_deliver"] == -1)):
        bad("max_deliver", "a whole number >= 1, or -1 (no limit)")
    if "replicas" in options and not (isinstance(options["replicas"], int) and not isinstance(options["replicas"], bool)
                                      and 1 <= options["replicas"] <= 5):
        bad("replicas", "a whole number from 1 to 5")
    if "storage" in options and options["storage"] not in ("file", "memory"):
        bad("storage", "'file' or 'memory'")
    return out


def task_options(alias: str, options: Mapping[str, Any]) -> TaskOptions:
    """The options of backend ``alias`` with the defaults (no checks: see :func:`option_problems`)."""
    tok = _token(alias)
    return TaskOptions(
        stream=options.get("stream") or f"DJANGO_TASKS_{tok.upper()}",
        subject=options.get("subject") or f"django.tasks.{tok}",
        results_bucket=options.get("results_bucket") or f"django_tasks_{tok}",
        ack_wait=float(options.get("ack_wait", 30.0)),
        max_deliver=int(options.get("max_deliver", -1)),
        timeout=float(options.get("timeout", 5.0)),
        storage=cast(Literal["file", "memory"], options.get("storage", "file")),
        replicas=int(options.get("replicas", 1)),
        result_ttl=None if options.get("result_ttl") is None else float(options["result_ttl"]),
    )


def backend_problems() -> list[Problem]:
    """What is wrong with the JetStreamBackend entries of ``settings.TASKS`` (no I/O)."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, Mapping):
        return []
    out: list[Problem] = []
    for alias, params in tasks.items():
        if isinstance(params, Mapping) and params.get("BACKEND") == BACKEND_PATH:
            out += option_problems(str(alias), params)
    return out
