"""Every example script runs to completion against the local server it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(320)

ROOT = Path(__file__).resolve().parents[2]
#: Examples that need optional frameworks are run by their own tests; js_features.py is run (exit code and
#: output) by test_js_features_example_shows_each_feature below; django_task_queue.py (Django's Tasks
#: framework) by tests/integration/contrib/test_django.py.
SKIP = {"__init__.py", "js_features.py", "django_task_queue.py"}
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name not in SKIP)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if path.name.startswith("spark"):  # the JVM flags of the Spark tests' JVMs (pyspark reads this at launch)
        from tests.integration.spark.spark_session import JVM_OPTIONS

        env["PYSPARK_SUBMIT_ARGS"] = f"--driver-java-options '{JVM_OPTIONS}' pyspark-shell"
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_demo_command_runs():
    proc = subprocess.run([sys.executable, "-m", "jssync", "demo", "--count", "2000"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "demo finished" in proc.stdout


def test_js_features_example_shows_each_feature():
    """examples/js_features.py: TTL marker, big counter, committed and refused batch, a fired schedule."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "js_features.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "marker left: {'Nats-Marker-Reason': 'MaxAge'" in out
    assert "hits now: 1000000000000000000000000000003" in out
    assert "batch committed: 2 messages" in out
    assert "batch refused, nothing stored: wrong last sequence" in out
    assert "ACCOUNTS holds 2 messages" in out
    assert "scheduled message: b'build the report'" in out
