"""The Django app jssync.contrib.django passes its own tests under Django's test runner.

tests/django_project/ is a small Django project (settings, the app, a test runner that starts a
nats-server with jssync.testing.NatsServer). Its tests (jssync_django_tests/) cover the
process-wide connection across threads and forks, the system checks, the ``jssync_consume``
command (acks, naks with a delay, SIGTERM with nothing stranded, a deleted consumer), the
health view, and the JetStream backend of Django's Tasks framework with its ``jssync_tasks_worker``
command (run where ``django.tasks``, Django 6, or the ``django-tasks`` backport is installed: the
``test`` extra installs the backport). They run here in a subprocess with ``manage.py test``, so
the suite includes them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[3]
PROJECT = ROOT / "tests" / "django_project"


def test_the_django_app_passes_its_django_tests() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
               JSSYNC_LOG_LEVEL="WARNING")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("NATS_URL", None)
    proc = subprocess.run([sys.executable, "manage.py", "test", "--noinput", "-v", "2"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=280 * FACTOR, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-20000:]
    assert "\nOK" in out and "Ran " in out, out[-5000:]
    # every test module ran (a module that fails to import is an error, but check anyway)
    for module in ("test_connection", "test_checks", "test_consume_command", "test_health", "test_tasks"):
        assert f"jssync_django_tests.{module}." in out, f"{module} did not run:\n{out[-5000:]}"
    if _have_django_tasks():  # then the task backend's tests ran, none skipped
        ran = [ln for ln in out.splitlines() if "jssync_django_tests.test_tasks.TaskBackendTests." in ln]
        assert ran and not [ln for ln in ran if "skipped" in ln], "\n".join(ran)


def test_the_task_queue_example_runs() -> None:
    """examples/django_task_queue.py: priorities, run_after, a failed task, results read back."""
    if not _have_django_tasks():
        pytest.skip("needs django.tasks (Django 6) or the django-tasks backport (the test extra installs it)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "django_task_queue.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120 * FACTOR, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("  running")]
    assert ran == ["running divide(1, 0)", "running send_welcome('ada@example.com')",
                   "running nightly_report('2026-12-01')", "running send_welcome('bob@example.com')"], proc.stdout
    assert "divide: FAILED 'builtins.ZeroDivisionError' (attempts 1)" in proc.stdout
    assert "send_welcome: SUCCESSFUL 'sent to bob@example.com' (attempts 1)" in proc.stdout


def _have_django_tasks() -> bool:
    try:
        if importlib.util.find_spec("django.tasks") is not None:
            return True
    except ModuleNotFoundError:
        return False
    return importlib.util.find_spec("django_tasks") is not None
