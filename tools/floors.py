"""The floor jobs .ci/run runs after the whole suite: the oldest release setup.cfg allows of a
dependency, installed in a throwaway venv, with the tests of its integration.

    python3 tools/floors.py                 # one job a line: name|pip requirements|pytest arguments
    python3 tools/floors.py --check SPEC..  # exit 1 unless the installed versions match SPEC..

Each floor is read from setup.cfg (``nats-py>=X`` in install_requires, ``django>=X`` in the
``django`` extra, ``opentelemetry-api>=X`` in the ``otel`` extra), so raising a floor there moves
the job too. A Django floor is the newest patch of that minor release (``django>=4.2,<4.3``);
the OpenTelemetry one installs the API, the SDK of the same release and the instrumentation
package released with it (API 1.N goes with instrumentation 0.(N+21)b0). The other floors
(Celery, PySpark) take longer and run under tox (tox.ini).
"""

from __future__ import annotations

import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the files that failed on nats-py releases below the floor, and the fast-path checks
NATSPY_TESTS = ("tests/unit tests/integration/core/test_connection.py tests/integration/jetstream/test_context.py "
                "tests/integration/jetstream/test_pull.py tests/integration/kv/test_keyvalue.py "
                "tests/integration/jetstream/test_ordered.py tests/integration/core/test_natspy_fast_paths.py")
DJANGO_TESTS = "tests/integration/contrib tests/integration/test_framework_examples.py -k django"
OTEL_TESTS = "tests/integration/otel"


def _floor(requirements: str, name: str) -> str:
    m = re.search(rf"^\s*{re.escape(name)}\s*>=\s*([0-9][0-9.]*)", requirements, re.M)
    if m is None:
        raise SystemExit(f"tools/floors.py: no '{name}>=X' in setup.cfg")
    return m.group(1)


def jobs() -> list[str]:
    """The floor jobs, one ``name|requirements|pytest arguments`` string each."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    natspy = _floor(cfg["options"]["install_requires"], "nats-py")
    django = _floor(extras["django"], "django").split(".")
    otel = _floor(extras["otel"], "opentelemetry-api")
    otel_minor = int(otel.split(".")[1])
    return [
        f"natspy|nats-py=={natspy}|{NATSPY_TESTS}",
        f"django|django>={django[0]}.{django[1]},<{django[0]}.{int(django[1]) + 1}|{DJANGO_TESTS}",
        f"otel|opentelemetry-api=={otel} opentelemetry-sdk=={otel} "
        f"opentelemetry-instrumentation==0.{otel_minor + 21}b0|{OTEL_TESTS}",
    ]


def check(specs: list[str]) -> int:
    """0 when every ``name<specifier>`` in ``specs`` matches the installed version (printed), else 1."""
    from packaging.requirements import Requirement

    bad = 0
    for spec in specs:
        req = Requirement(spec)
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        ok = version != "not installed" and req.specifier.contains(version, prereleases=True)
        print(f"floor job: {req.name} {version} ({'ok' if ok else 'does not match ' + str(req.specifier)})")
        bad |= not ok
    return int(bad)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        sys.exit(check(sys.argv[2:]))
    print("\n".join(jobs()))
