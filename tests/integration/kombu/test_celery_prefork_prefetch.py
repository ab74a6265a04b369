"""A prefork worker whose processes are all busy still holds its whole prefetch (concurrency x
multiplier) from the broker: the messages are reserved in the worker, not left on the server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.integration.kombu.conftest import kill_celery_worker, start_celery_worker

pytestmark = pytest.mark.timeout(int(120 * FACTOR))

_APP = '''
import time
from celery import Celery

app = Celery("pf_app", broker={url!r})
app.conf.update(
    broker_transport="jssync.kombu:Transport",
    broker_transport_options={{"subject_prefix": {prefix!r}}},
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=4,
    task_acks_late=True,
)


@app.task(name="pf_app.sleep")
def sleep(seconds):
    time.sleep(seconds)  # behaviour: every pool process stays busy
'''


def _ack_pending(url: str, prefix: str) -> int:
    with jssync.connect(url) as nc:
        return nc.jetstream().consumer(f"{prefix}_celery", prefix).info().num_ack_pending or 0


def test_a_busy_prefork_worker_of_4_holds_its_prefetch_of_16(nats_server: NatsServer, prefix: str,
                                                             tmp_path: Path) -> None:
    from celery import Celery

    (tmp_path / "pf_app.py").write_text(_APP.format(url=nats_server.url, prefix=prefix))
    name = f"pf{time.monotonic_ns()}@localhost"
    proc, log = start_celery_worker(tmp_path, "pf_app", name, "-P", "prefork", "-c", "4")
    app = Celery("pf_app", broker=nats_server.url)
    app.conf.broker_transport = "jssync.kombu:Transport"
    app.conf.broker_transport_options = {"subject_prefix": prefix}
    try:
        wait_for(lambda: bool(app.control.inspect(timeout=1.0).ping()) or proc.poll() is not None, 60)
        assert proc.poll() is None, log.read_text()[-3000:]
        for _ in range(30):
            app.send_task("pf_app.sleep", args=[30 * FACTOR])
        inspect = app.control.inspect(destination=[name], timeout=2.0 * FACTOR)
        wait_for(lambda: len((inspect.active() or {}).get(name, [])) == 4, 20)
        wait_for(lambda: _ack_pending(nats_server.url, prefix) >= 16, 20)  # 4 running, 12 reserved
        assert len((inspect.reserved() or {}).get(name, [])) >= 12
    finally:
        kill_celery_worker(proc)
        app.pool.force_close_all()
        app.close()
