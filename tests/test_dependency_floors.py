"""The floor jobs .ci/run runs (tools/floors.py): each floor as setup.cfg declares it, tests that exist."""

from __future__ import annotations

import configparser
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _floors_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("floors", ROOT / "tools" / "floors.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _declared(requirements: list[str], name: str) -> str:
    (spec,) = [r for r in requirements if r.startswith(name + ">=")]
    return spec.split(">=")[1].split(",")[0]


def test_each_floor_job_installs_the_floor_setup_cfg_declares_and_runs_tests_that_exist() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")

    def lines(value: str) -> list[str]:
        return [ln.strip() for ln in value.splitlines() if ln.strip() and not ln.strip().startswith("#")]

    cfg = {"install_requires": lines(parser["options"]["install_requires"])}
    extras = {k: lines(v) for k, v in parser["options.extras_require"].items()}
    jobs = {line.split("|")[0]: line.split("|")[1:] for line in _floors_module().jobs()}
    assert set(jobs) == {"natspy", "django", "otel"}
    natspy = _declared(cfg["install_requires"], "nats-py")
    assert jobs["natspy"][0] == f"nats-py=={natspy}"
    assert jobs["django"][0] == "django>=4.2,<4.3" and _declared(extras["django"], "django") == "4.2"
    otel = _declared(extras["otel"], "opentelemetry-api")
    assert jobs["otel"][0].split() == [f"opentelemetry-api=={otel}", f"opentelemetry-sdk=={otel}",
                                       "opentelemetry-instrumentation==0.45b0"]
    for _, tests in jobs.values():
        paths = [a.split("::")[0] for a in tests.split() if a.startswith("tests/")]
        assert paths and all((ROOT / p).exists() for p in paths), tests
    # each floor is inside the `test` extra's range too (tox and CI install both)
    for name, floor in (("nats-py", natspy), ("opentelemetry-api", otel)):
        assert _declared(extras["test"], name) == floor


def test_the_check_refuses_a_version_outside_the_floor() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "floors.py"), "--check", "pytest<1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "pytest" in r.stdout and "does not match <1" in r.stdout, r.stdout + r.stderr
