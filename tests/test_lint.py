"""Style and types are part of the suite: ruff clean, mypy --strict clean on jssync/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "jssync", "tests", "bench", "examples"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_mypy_strict_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_test_files_are_named_by_what_they_test():
    """A newcomer finds a module's tests by name: no test file is named after a review round,
    a session, an issue or a kind of user."""
    import re

    history = re.compile(r"review|session|new_user|issue_?\d")
    bad = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if history.search(p.name)]
    assert not bad, bad
