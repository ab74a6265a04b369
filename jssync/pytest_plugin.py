"""The jssync pytest plugin (entry point ``pytest11``; the code is in jssync/testing/pytest_plugin.py)."""

from .testing.pytest_plugin import js, nats_cluster, nats_server, nc, pytest_runtest_makereport

__all__ = ["nats_server", "nats_cluster", "nc", "js", "pytest_runtest_makereport"]
