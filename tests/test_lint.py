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
