"""jssync for Django (extra ``jssync[django]``): settings, a process-wide connection, checks, a consumer command.

Add ``"jssync.contrib.django"`` to ``INSTALLED_APPS`` and set ``JSSYNC`` (see
:mod:`jssync.contrib.django.conf`)::

    from jssync.contrib.django import connection, jetstream, health

    jetstream().publish("orders.new", b"...")     # the process's fork-safe connection

``python manage.py jssync_consume STREAM CONSUMER --handler app.handlers.handle`` consumes with
acks; ``jssync.contrib.django.views.health`` answers readiness probes; ``manage.py check``
reports what is wrong with the settings (ids ``jssync.E001``...).
"""

from .client import close, connection, health, jetstream

__all__ = ["close", "connection", "health", "jetstream"]
