"""The Kafka-source-like options of the ``jetstream`` source: failOnDataLoss,
min/maxMessagesPerTrigger with maxTriggerDelay, and the progress a streaming query reports.
"""

from __future__ import annotations

import json
import time

import pytest

from ..conftest import FACTOR, wait_for
from .spark_session import start_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture(scope="module")
def spark():
    session = start_session("local[2]", "jssync-option-tests",
                            **{"spark.sql.streaming.noDataProgressEventInterval": "0"})
    try:
        yield session
    finally:
        session.stop()


def _publish(js, subject: str, start: int, n: int) -> None:
    for i in range(start, start + n):
        js.publish_async(subject, f"m{i}".encode())
    js.publish_async_completed(timeout=60)


def test_option_parsing():
    o = jspark.ReadOptions.parse({"stream": "S"})
    assert o.fail_on_data_loss is True and o.min_messages_per_trigger is None and o.max_trigger_delay == 900
    o = jspark.ReadOptions.parse({"stream": "S", "failondataloss": "false", "minmessagespertrigger": "5",
                                  "maxmessagespertrigger": "9", "maxtriggerdelay": "500ms"})
    assert (o.fail_on_data_loss, o.min_messages_per_trigger, o.max_messages_per_trigger) == (False, 5, 9)
    assert o.max_trigger_delay == 0.5
    for raw, secs in (("30", 30), ("30s", 30), ("2m", 120), ("1h", 3600), ("0", 0)):
        assert jspark.ReadOptions.parse({"stream": "S", "maxtriggerdelay": raw}).max_trigger_delay == secs
    for bad, msg in (({"failondataloss": "maybe"}, "'failOnDataLoss' must be true or false"),
                     ({"maxtriggerdelay": "soon"}, "'maxTriggerDelay' must be a duration"),
                     ({"maxtriggerdelay": "-1s"}, "'maxTriggerDelay' must be >= 0"),
                     ({"minmessagespertrigger": "0"}, "'minMessagesPerTrigger' must be >= 1"),
                     ({"minmessagespertrigger": "10", "maxmessagespertrigger": "5"}, "must not be greater")):
        with pytest.raises(ValueError, match=msg):
            jspark.ReadOptions.parse({"stream": "S", **bad})


def test_fail_on_data_loss_batch_read_purged_after_planning(spark, nats_server, js, stream):
    """The range is fixed when the query is planned (``df.rdd`` plans it); a purge before the
    tasks run removes planned messages: the read fails naming them, or skips them."""
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    _publish(js, f"{name}.a", 0, 100)
    stream.purge(seq=6)  # gone before planning: not data loss
    rdd = (spark.read.format("jetstream").option("servers", url).option("stream", name)
           .option("numPartitions", "2").load().select("seq").rdd)
    assert rdd.getNumPartitions() == 2  # planned: ranges 6..53 and 54..100
    stream.purge(seq=41)  # 6..40 removed between planning and reading
    with pytest.raises(PySparkException, match=r"DataLossError.*sequences 6\.\.40 of the planned range 6\.\.53") as ei:
        rdd.collect()
    assert "failOnDataLoss=false" in str(ei.value)

    rdd = (spark.read.format("jetstream").option("servers", url).option("stream", name)
           .option("numPartitions", "2").option("failOnDataLoss", "false").load().select("seq").rdd)
    assert rdd.getNumPartitions() == 2  # planned: 41..70, 71..100
    stream.purge(seq=81)  # all of the first range and 71..80 of the second
    assert sorted(r.seq for r in rdd.collect()) == list(range(81, 101))
    # nothing removed after planning: no error, same rows
    assert spark.read.format("jetstream").option("servers", url).option("stream", name).load().count() == 20


def test_fail_on_data_loss_streaming(spark, nats_server, js, stream, tmp_path):
    """A micro-batch replayed after a restart (its offsets were planned before the stop) whose
    messages were purged meanwhile fails the query; with failOnDataLoss=false it skips them, and
    sequences removed before a micro-batch is planned show in the progress."""
    name = stream.name
    url = nats_server.url
    ckpt = tmp_path / "ckpt"
    _publish(js, f"{name}.a", 0, 200)
    seen: list[int] = []

    def collect(df, _batch_id):
        seen.extend(r.seq for r in df.select("seq").collect())

    def run(**options):
        r = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
             .option("maxMessagesPerTrigger", "100"))
        for k, v in options.items():
            r = r.option(k, v)
        q = (r.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(120 * FACTOR)
        except Exception:  # noqa: BLE001 - the failure is looked at through q.exception()
            pass
        return q

    q = run()
    assert q.exception() is None and sorted(seen) == list(range(1, 201))
    # forget that micro-batch 1 (101..200) was committed, then purge part of it
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert [p.name for p in commits] == ["0", "1"]
    commits[-1].unlink()
    (commits[-1].parent / ".1.crc").unlink(missing_ok=True)
    stream.purge(seq=151)
    seen.clear()
    q = run()
    assert q.exception() is not None
    assert "sequences 101..150 of the planned range 101..200" in str(q.exception())
    assert seen == []
    # failOnDataLoss=false: the replay skips 101..150; then 201..300 are published and 201..250
    # purged before the next micro-batch is planned: skipped and counted in the progress
    _publish(js, f"{name}.a", 200, 100)
    stream.purge(seq=251)
    q = run(failOnDataLoss="false")
    assert q.exception() is None
    assert sorted(seen) == list(range(251, 301))
    latest = [json.loads(p["sources"][0]["latestOffset"]) for p in q.recentProgress
              if p["sources"][0]["latestOffset"]]
    assert latest and latest[-1]["lostSequences"] == 50, latest


def test_min_max_messages_per_trigger_with_max_trigger_delay(spark, nats_server, js, stream):
    """minMessagesPerTrigger holds micro-batches back until enough messages are there (or
    maxTriggerDelay passed); maxMessagesPerTrigger caps them; the progress shows how far
    behind the stream's last sequence each micro-batch ended."""
    name = stream.name
    url = nats_server.url
    _publish(js, f"{name}.a", 0, 50)

    def start(query: str, **options):
        r = spark.readStream.format("jetstream").option("servers", url).option("stream", stream.name)
        for k, v in options.items():
            r = r.option(k, v)
        return (r.load().writeStream.format("memory").queryName(query)
                .trigger(processingTime="100 milliseconds").start())

    def batches(q):
        return [p for p in q.recentProgress if p["numInputRows"]]

    q = start(f"minmax{stream.name}", minMessagesPerTrigger="100", maxMessagesPerTrigger="150",
              maxTriggerDelay="1h")
    try:
        # several triggers pass (progress events with no data) while only 50 messages are there
        wait_for(lambda: len(q.recentProgress) >= 5, timeout=60 * FACTOR, interval=0.05, what="5 triggers")
        assert batches(q) == []
        _publish(js, f"{name}.a", 50, 260)  # 310 in all: 150 + 150, then 10 wait for more
        wait_for(lambda: len(batches(q)) >= 2, timeout=60 * FACTOR, interval=0.05, what="two micro-batches")
        n = len(q.recentProgress)
        wait_for(lambda: len(q.recentProgress) >= n + 5, timeout=60 * FACTOR, interval=0.05, what="5 triggers")
        got = batches(q)
        assert [p["numInputRows"] for p in got] == [150, 150]
        behind = [json.loads(p["sources"][0]["latestOffset"])["messagesBehind"] for p in got]
        assert behind == [160, 10]
        assert [json.loads(p["sources"][0]["latestOffset"])["seq"] for p in got] == [311, 311]
    finally:
        q.stop()

    # the minimum is not reached, but maxTriggerDelay passes: the 10 waiting messages are read
    t0 = time.monotonic()
    q = start(f"delay{stream.name}", startingSequence="301", minMessagesPerTrigger="1000", maxTriggerDelay="2s")
    try:
        wait_for(lambda: batches(q), timeout=60 * FACTOR, interval=0.05, what="the delayed micro-batch")
        assert time.monotonic() - t0 >= 2.0
        assert [p["numInputRows"] for p in batches(q)] == [10]
        assert len(q.recentProgress) > 1  # triggers before it found too few messages
    finally:
        q.stop()
