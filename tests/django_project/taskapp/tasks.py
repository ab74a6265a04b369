"""Tasks for the JetStreamBackend tests: each appends a line ``<event> <label> <wall time> <pid>`` to $TASKS_LOG."""

from __future__ import annotations

import os
import time
from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django 4.2/5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


def _log(event: str, label: str) -> None:
    with open(os.environ["TASKS_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{event} {label} {time.time():.3f} {os.getpid()}\n")


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def record(label: str) -> str:
    """Log ``ran <label>``; return the label."""
    _log("ran", label)
    return label


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def slow(label: str, seconds: float) -> str:
    """Log ``start``, take ``seconds``, log ``done``."""
    _log("start", label)
    time.sleep(seconds)  # behaviour: a long task
    _log("done", label)
    return label


@task(takes_context=True)
def hang_on_first_attempt(context: Any, label: str) -> int:
    """On the first attempt, log ``start`` and hang (the test kills the worker); later, log ``ran``."""
    if context.attempt == 1:
        _log("start", label)
        time.sleep(600)  # behaviour: the worker is killed during this
    _log("ran", label)
    return int(context.attempt)


@task
async def add_async(a: int, b: int) -> int:
    return a + b
