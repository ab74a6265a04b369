#!/usr/bin/env python
"""Django's command-line utility for the orders example.

    NATS_URL=nats://127.0.0.1:4222 python manage.py runserver
    NATS_URL=nats://127.0.0.1:4222 python manage.py consume_orders --count 10
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orders_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
