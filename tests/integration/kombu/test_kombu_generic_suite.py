"""kombu's own generic transport tests (``t/integration/common.py`` of kombu's sdist) against
the jssync transport: the classes the transport claims (BasicFunctionality, BaseExchangeTypes,
BaseTimeToLive, BaseMessage, BaseEventLoop; not BasePriority: priorities are not honoured).

kombu's wheel has no ``t/``: ``JSSYNC_KOMBU_SDIST`` names an unpacked kombu sdist; without it the
sdist of the installed kombu is fetched once from the package index (``pip download --no-deps
--no-binary :all: kombu==<installed>``) and unpacked into the temp directory, where later runs find
it. Only where neither works (no package index reachable) is the suite skipped, saying so. The
behaviours they caught are our own tests too (test_kombu_requeue_and_event_loop.py, test_transport.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from typing import Any

import kombu
import pytest

from jssync.server import NatsServer
from tests.integration.kombu.conftest import TRANSPORT


def _installed_kombu_sdist() -> str:
    """The unpacked sdist of the installed kombu in the temp directory, fetched when missing ("" when it cannot be)."""
    version = kombu.__version__
    root = os.path.join(tempfile.gettempdir(), f"jssync-kombu-sdist-{version}")
    unpacked = os.path.join(root, f"kombu-{version}")
    if os.path.isfile(os.path.join(unpacked, "t", "integration", "common.py")):
        return unpacked
    os.makedirs(root, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"kombu=={version}", "-d", root], check=True, timeout=120, capture_output=True)
        archive = os.path.join(root, f"kombu-{version}.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
    except (OSError, subprocess.SubprocessError, tarfile.TarError):
        return ""
    return unpacked


_SDIST = os.environ.get("JSSYNC_KOMBU_SDIST", "") or _installed_kombu_sdist()
common: Any = None
if _SDIST and os.path.isfile(os.path.join(_SDIST, "t", "integration", "common.py")):
    sys.path.insert(0, _SDIST)
    try:
        from t.integration import common
    finally:
        sys.path.remove(_SDIST)

pytestmark = pytest.mark.timeout(120)
if common is None:
    _Basic = _Exchange = _TTL = _Message = _EventLoop = object
else:
    _Basic, _Exchange, _TTL = common.BasicFunctionality, common.BaseExchangeTypes, common.BaseTimeToLive
    _Message, _EventLoop = common.BaseMessage, common.BaseEventLoop


def test_kombu_generic_suite_is_found() -> None:
    if common is None:
        pytest.skip("kombu's t/integration/common.py not found and its sdist could not be fetched: set "
                    "JSSYNC_KOMBU_SDIST to an unpacked kombu sdist to run kombu's generic transport tests")


@pytest.fixture
def connection(nats_server: NatsServer, prefix: str) -> Iterator[kombu.Connection]:
    conn = kombu.Connection(nats_server.url, transport=TRANSPORT, transport_options={"subject_prefix": prefix})
    try:
        yield conn
    finally:
        conn.release()


@pytest.fixture
def invalid_connection() -> kombu.Connection:
    return kombu.Connection("nats://127.0.0.1:1", transport=TRANSPORT, connect_timeout=1)


class TestKombuBasicFunctionality(_Basic):  # type: ignore[misc,valid-type]
    pass


class TestKombuExchangeTypes(_Exchange):  # type: ignore[misc,valid-type]
    pass


class TestKombuTimeToLive(_TTL):  # type: ignore[misc,valid-type]
    pass


class TestKombuMessage(_Message):  # type: ignore[misc,valid-type]
    pass


class TestKombuEventLoop(_EventLoop):  # type: ignore[misc,valid-type]
    pass
