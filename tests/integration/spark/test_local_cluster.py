"""The ``jetstream`` source and sink on a real multi-process Spark: ``local-cluster[2,1,1024]``.

``local-cluster`` starts a standalone master and two workers inside the driver JVM; each
worker launches its own executor JVM (``bin/spark-class`` of the pyspark package, which
pip installs with ``jars/`` and ``bin/``), and each executor its own Python workers. So
every reader, partition and writer is pickled on the driver side and unpickled in another
process, and every task connects to NATS on its own. The executors import ``jssync`` from
``spark.executorEnv.PYTHONPATH`` when this process has it from ``PYTHONPATH`` (a worktree),
else from the installed package (the editable install in CI); the fixture checks they
import the same jssync as the driver.

Four tests only (two executor JVMs of 1 GB each), sharing one session.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

from .spark_session import jssync_root, start_session

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

EXECUTORS = 2


@pytest.fixture(scope="module")
def cluster():
    conf = {"spark.executor.memory": "1g", "spark.task.maxFailures": "2"}
    if jssync_root() in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        # a worktree on PYTHONPATH: hand it to the executors explicitly; without it (CI's
        # editable install) the executors must find jssync the way an installed job does
        conf["spark.executorEnv.PYTHONPATH"] = jssync_root()
    session = start_session(f"local-cluster[{EXECUTORS},1,1024]", "jssync-cluster-tests", **conf)
    try:
        sc = session.sparkContext
        # the driver counts itself among the block managers
        wait_for(lambda: sc._jsc.sc().getExecutorMemoryStatus().size() == EXECUTORS + 1, timeout=120 * FACTOR,
                 interval=0.2, what=f"{EXECUTORS} executors to register")

        def where(_):
            import os as _os

            import jssync as _jssync

            yield (_os.environ.get("SPARK_EXECUTOR_DIRS", "driver"), _os.getpid(), _jssync.__file__)

        seen = sc.parallelize(range(8), 8).mapPartitions(where).collect()
        assert {f for _, _, f in seen} == {jssync.__file__}, "the executors import another jssync"
        assert os.getpid() not in {p for _, p, _ in seen}
        assert "driver" not in {d for d, _, _ in seen}
        yield session
    finally:
        session.stop()


def _closed_conns(server, name: str) -> list[dict]:
    url = f"http://127.0.0.1:{server.http_port}/connz?state=closed&limit=100000"
    with urllib.request.urlopen(url, timeout=10) as r:
        conns = json.load(r).get("connections") or []
    return [c for c in conns if c.get("name", "").startswith(name)]


def test_batch_read_on_two_executors(cluster, nats_server, js, unique):
    name = f"CR{unique}"
    js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    try:
        n = 4_000  # the 4 tasks on 2 executors are the point here, not the count (the 100k read's)
        for i in range(n):
            js.publish_async(f"{name}.{'ab'[i % 2]}", f"m{i}".encode(), headers={"i": str(i)} if i % 100 == 0 else None)
        js.publish_async_completed(timeout=60)
        t0 = time.monotonic()
        df = (cluster.read.format("jetstream").option("servers", nats_server.url).option("stream", name)
              .option("numPartitions", "4").option("connectionName", f"cr-{unique}").load())

        def tag(rows):
            import os as _os

            ex = _os.environ.get("SPARK_EXECUTOR_DIRS", "driver")
            for r in rows:
                yield (ex, r.seq, r.subject, r.data, r.headers)

        got = df.rdd.mapPartitions(tag).collect()
        assert time.monotonic() - t0 < 90 * FACTOR
        assert sorted(r[1] for r in got) == list(range(1, n + 1))
        for _ex, seq, subject, data, headers in got:
            i = seq - 1
            assert data == f"m{i}".encode() and subject == f"{name}.{'ab'[i % 2]}"
            assert headers == ({"i": str(i)} if i % 100 == 0 else None)
        assert len({r[0] for r in got}) == EXECUTORS, "the read did not run on both executors"
        assert "driver" not in {r[0] for r in got}
        # each of the 4 tasks opened its own connection (and closed it)
        readers = _closed_conns(nats_server, f"cr-{unique}-reader")
        assert len(readers) == 4, readers
    finally:
        js.delete_stream(name)


def test_batch_write_on_two_executors(cluster, nats_server, js, unique):
    from pyspark.sql import functions as F

    name = f"CW{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url
    try:
        def stamp(batches):
            import os as _os

            ex = _os.environ.get("SPARK_EXECUTOR_DIRS", "driver")
            for pdf in batches:
                pdf["ex"] = ex
                yield pdf

        base = cluster.range(0, 4000, numPartitions=4).selectExpr(
            f"concat('{name}.', id % 3) as subject", "cast(id as string) as data", "'' as ex")
        df = base.mapInPandas(stamp, base.schema).select(
            "subject", "data", F.create_map(F.lit("ex"), F.col("ex")).alias("headers"))
        t0 = time.monotonic()
        df.write.format("jetstream").mode("append") \
            .option("servers", url).option("connectionName", f"cw-{unique}").save()
        assert time.monotonic() - t0 < 90 * FACTOR
        assert js.stream(name).info().state.messages == 4000
        back = (cluster.read.format("jetstream").option("servers", url).option("stream", name).load()
                .select("data", "headers").collect())
        assert sorted(int(r.data) for r in back) == list(range(4000))
        executors = {r.headers["ex"] for r in back}
        assert len(executors) == EXECUTORS and "driver" not in executors, executors
        assert len({r.headers["Nats-Msg-Id"] for r in back}) == 4000
        # one connection per write task, named by its partition
        writers = {c["name"] for c in _closed_conns(nats_server, f"cw-{unique}-writer-")}
        assert writers == {f"cw-{unique}-writer-{p}" for p in range(4)}
    finally:
        js.delete_stream(name)


def test_a_failed_write_on_two_executors_counts_every_row_of_the_write_in_its_error(cluster, nats_server, js, unique):
    """The rows of test_write_failure_totals.py on two executors: partition 3 fails on a bad
    row on both its attempts (``spark.task.maxFailures=2``) while partition 1 is still
    publishing in the other executor; the last attempt stops partition 1, and the error
    ``save()`` raises counts the rows of the whole write, exactly what the stream holds."""
    from pyspark.errors import PySparkException

    from .test_write_failure_totals import _BIG, _check_whole_write_count, _rows

    name = f"CF{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url
    try:
        cluster.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(_BIG))
        with pytest.raises(PySparkException) as ei:
            _rows(cluster, name).write.format("jetstream").mode("append") \
                .option("servers", url).option("maxPending", "200").save()
        _check_whole_write_count(js, name, str(ei.value))
    finally:
        cluster.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        js.delete_stream(name)


def test_streaming_stop_and_restart_exactly_once(cluster, nats_server, js, unique, tmp_path):
    name = f"CS{unique}"
    js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    url = nats_server.url
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    try:
        for i in range(2000):  # 4 micro-batches of 500: the first run is stopped after 2
            js.publish_async(f"{name}.{'ab'[i % 2]}", f"m{i}".encode())
        js.publish_async_completed(timeout=60)
        t0 = time.monotonic()

        def start(trigger: dict):
            return (
                cluster.readStream.format("jetstream").option("servers", url).option("stream", name)
                .option("maxMessagesPerTrigger", "500").option("numPartitions", "2").load()
                .select("seq", "data")
                .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
                .trigger(**trigger).start()
            )

        q = start({"processingTime": "0 seconds"})
        try:
            wait_for(lambda: len(q.recentProgress) >= 2, timeout=60 * FACTOR, interval=0.1,
                     what="two micro-batches")
        finally:
            q.stop()
        assert q.exception() is None
        first_run = cluster.read.parquet(out).count()
        assert 0 < first_run < 2000
        for i in range(2000, 2500):
            js.publish_async(f"{name}.a", f"m{i}".encode())
        js.publish_async_completed(timeout=60)
        q = start({"availableNow": True})
        assert q.awaitTermination(80 * FACTOR)
        assert q.exception() is None
        rows = cluster.read.parquet(out).collect()
        seqs = sorted(r.seq for r in rows)
        assert seqs == list(range(1, 2501)), f"{len(seqs)} rows, {len(set(seqs))} distinct"
        assert all(r.data == f"m{r.seq - 1}".encode() for r in rows)
        assert all(p["numInputRows"] <= 500 for p in q.recentProgress)
        assert time.monotonic() - t0 < 90 * FACTOR
    finally:
        js.delete_stream(name)

