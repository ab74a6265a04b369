"""The Spark test modules' sessions: one per master for the whole test run (see spark_session.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .spark_session import MASTER, SharedSessions


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[SharedSessions]:
    shared = SharedSessions()
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture(scope="module")
def spark(spark_sessions: SharedSessions) -> Any:
    """The shared ``local[2,3]`` session (``MASTER``; a module may override this fixture for another master)."""
    return spark_sessions.get(MASTER)
