"""Settings of the test project: no database, the jssync app, the server from $NATS_URL.

``TEST_JSSYNC`` (JSON), when set, replaces the ``JSSYNC`` setting: the tests run
``manage.py check`` and ``jssync_consume`` with bad settings through it. ``TEST_TASKS`` (JSON),
when set, replaces ``TASKS`` likewise (the task worker tests give each test its own stream).
The task app (``taskapp``) is installed where Django's Tasks framework is: ``django.tasks``
(Django 6) or the ``django-tasks`` backport (app ``django_tasks``).
"""

import importlib.util
import json
import os

SECRET_KEY = "test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
INSTALLED_APPS = ["jssync.contrib.django", "consumerapp"]
try:
    HAVE_DJANGO_TASKS = importlib.util.find_spec("django.tasks") is not None
except ModuleNotFoundError:
    HAVE_DJANGO_TASKS = False
if not HAVE_DJANGO_TASKS and importlib.util.find_spec("django_tasks") is not None:
    HAVE_DJANGO_TASKS = True
    INSTALLED_APPS.append("django_tasks")  # the backport's checks and signals
if HAVE_DJANGO_TASKS:
    INSTALLED_APPS.append("taskapp")
if os.environ.get("TEST_WITHOUT_JSSYNC_APP"):  # the task backend used without the app
    INSTALLED_APPS.remove("jssync.contrib.django")
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "project.urls"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
TEST_RUNNER = "project.runner.NatsServerRunner"

# no "servers": the connection uses $NATS_URL, which the test runner sets to its nats-server
JSSYNC = json.loads(os.environ["TEST_JSSYNC"]) if os.environ.get("TEST_JSSYNC") else {"options": {"timeout": 5.0}}
# all-default options: stream DJANGO_TASKS_DEFAULT, bucket django_tasks_default
TASKS = (json.loads(os.environ["TEST_TASKS"]) if os.environ.get("TEST_TASKS")
         else {"default": {"BACKEND": "jssync.contrib.django.tasks.JetStreamBackend"}})

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"jssync": {"handlers": ["console"], "level": os.environ.get("JSSYNC_LOG_LEVEL", "INFO"),
                           "propagate": False}},
}
