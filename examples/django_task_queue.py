"""Django's Tasks framework on JetStream: enqueue tasks, run them with the worker, read their results.

Needs Django 6 (``django.tasks``) or Django 5.2 with the backport (``pip install 'jssync[django]'``
brings ``django-tasks``). Starts its own nats-server; run it with ``python examples/django_tasks.py``.
In a project, the settings below go in settings.py, the tasks in an app's tasks.py, and the
worker runs as ``python manage.py jssync_tasks_worker`` (see docs/django.md).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import django
from django.conf import settings
from django.core.management import call_command

from jssync.contrib.django import close
from jssync.server import NatsServer

try:
    from django.tasks import task  # Django 6
    BACKPORT = []
except ImportError:
    from django_tasks import task  # Django 4.2/5.2: the django-tasks backport (and its app)
    BACKPORT = ["django_tasks"]

settings.configure(
    INSTALLED_APPS=["jssync.contrib.django", *BACKPORT],
    USE_TZ=True,
    # no "servers": the connection uses $NATS_URL, set below to the server this script starts
    JSSYNC={"options": {"timeout": 5.0}},
    TASKS={"default": {"BACKEND": "jssync.contrib.django.tasks.JetStreamBackend",
                       "QUEUES": ["default", "emails"],
                       "OPTIONS": {"ack_wait": 30.0, "storage": "memory"}}},
)
django.setup()


@task(queue_name="emails")
def send_welcome(address: str) -> str:
    print(f"  running send_welcome({address!r})")
    return f"sent to {address}"


@task
def nightly_report(day: str) -> dict[str, int]:
    print(f"  running nightly_report({day!r})")
    return {"orders": 42}


@task
def divide(a: int, b: int) -> float:
    print(f"  running divide({a}, {b})")
    return a / b


def main() -> None:
    with NatsServer(jetstream=True) as server:
        os.environ["NATS_URL"] = server.url
        results = [
            nightly_report.using(priority=-10).enqueue("2026-12-01"),   # low band: runs last of the ready ones
            send_welcome.enqueue("ada@example.com"),
            divide.using(priority=50).enqueue(1, 0),                     # high band: runs first, and fails
            send_welcome.using(run_after=datetime.now(UTC) + timedelta(seconds=1)).enqueue("bob@example.com"),
        ]
        print("enqueued:", ", ".join(f"{r.task.name} {r.status}" for r in results))
        # the worker (manage.py jssync_tasks_worker), here until it has run the 4 tasks
        call_command("jssync_tasks_worker", "--max-tasks", "4")
        for r in results:
            r.refresh()
            outcome = r.return_value if r.status == "SUCCESSFUL" else r.errors[0].exception_class_path
            print(f"{r.task.name}: {r.status} {outcome!r} (attempts {r.attempts})")
        close()


if __name__ == "__main__":
    main()
