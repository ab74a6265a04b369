"""Settings of the test project: no database, the jssync app, the server from $NATS_URL.

``TEST_JSSYNC`` (JSON), when set, replaces the ``JSSYNC`` setting: the tests run
``manage.py check`` and ``jssync_consume`` with bad settings through it.
"""

import json
import os

SECRET_KEY = "test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
INSTALLED_APPS = ["jssync.contrib.django", "consumerapp"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "project.urls"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
TEST_RUNNER = "project.runner.NatsServerRunner"

# no "servers": the connection uses $NATS_URL, which the test runner sets to its nats-server
JSSYNC = json.loads(os.environ["TEST_JSSYNC"]) if os.environ.get("TEST_JSSYNC") else {"options": {"timeout": 5.0}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"jssync": {"handlers": ["console"], "level": os.environ.get("JSSYNC_LOG_LEVEL", "INFO"),
                           "propagate": False}},
}
