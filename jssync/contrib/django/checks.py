"""System checks of the ``JSSYNC`` setting: ``manage.py check`` says what is wrong, before anything connects.

Ids: ``jssync.E001`` JSSYNC is not a dict, ``E002`` unknown key (with a suggestion), ``E003``
bad server URL (scheme), ``E004`` creds file missing or unreadable, ``E005`` unknown connect
option in ``options``, ``E006`` a value of the wrong type, ``E007`` nkey seed file missing,
``E008`` TLS files of ``NATS_CA``/``NATS_CERT``/``NATS_KEY``, ``E009`` an option given twice,
``E010`` unknown ``jetstream`` option; for a ``jssync.contrib.django.tasks.JetStreamBackend`` in
``TASKS``: ``E011`` unknown option in its ``OPTIONS``, ``E012`` an option of the wrong type or
value, ``E013`` a bad ``QUEUES`` entry.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from .conf import problems
from .taskconf import backend_problems


@checks.register("jssync")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """One ``checks.Error`` per problem of the ``JSSYNC`` setting and its environment defaults, and of
    the ``OPTIONS`` of each JetStream task backend in ``TASKS`` (no I/O)."""
    return [checks.Error(p.msg, hint=p.hint, id=p.id) for p in [*problems(), *backend_problems()]]
