"""Settings for the orders example: no database, one app, the NATS settings.

``NATS_URL`` and ``ORDERS_STREAM`` come from the environment.
"""

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

INSTALLED_APPS = ["orders"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "orders_site.urls"
WSGI_APPLICATION = "orders_site.wsgi.application"
DATABASES: dict = {}
USE_TZ = True

# jssync: where to connect and which stream to use (read at first use, not at import).
NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
ORDERS_STREAM = os.environ.get("ORDERS_STREAM", "ORDERS")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"jssync": {"handlers": ["console"], "level": "WARNING"}},
}
