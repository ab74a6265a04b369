"""The Django app: ``INSTALLED_APPS = [..., "jssync.contrib.django"]``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed


def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``JSSYNC`` changed (``override_settings`` in a test): the next use connects with the new one."""
    if setting == "JSSYNC":
        from .client import close

        close()


class JssyncConfig(AppConfig):
    """Registers the system checks of the ``JSSYNC`` setting (tag ``jssync``) and the
    ``jssync_consume`` command; closes the connection when ``JSSYNC`` is overridden."""

    name = "jssync.contrib.django"
    label = "jssync"
    verbose_name = "jssync (NATS JetStream)"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the checks

        setting_changed.connect(_setting_changed, dispatch_uid="jssync.contrib.django.setting_changed")
