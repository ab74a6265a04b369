#!/usr/bin/env python
"""The jssync.contrib.django test project: ``python manage.py test`` starts its own nats-server.

    python manage.py test                      # the app's tests (jssync_django_tests/)
    NATS_URL=nats://127.0.0.1:4222 python manage.py jssync_consume S C --handler consumerapp.handlers.record
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
