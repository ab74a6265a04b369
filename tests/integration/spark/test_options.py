"""The Kafka-source-like options of the ``jetstream`` source: failOnDataLoss,
min/maxMessagesPerTrigger with maxTriggerDelay, and the progress a streaming query reports.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.conftest import FACTOR, wait_for

from .streaming_query import run_available_now

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture
def spark(spark):
    """The shared session with a progress event for every trigger, also one
    without data (a runtime conf: restored after each test)."""
    key = "spark.sql.streaming.noDataProgressEventInterval"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "0")
    try:
        yield spark
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


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
        return run_available_now(spark, url, name, ckpt, collect, maxMessagesPerTrigger="100", **options)

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


def _recreate(js, name: str, n: int, purge_below: int = 0) -> None:
    """Delete the stream ``name``, create it again (same subjects) and publish ``n`` messages."""
    js.delete_stream(name)
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    for i in range(n):
        js.publish_async(f"{name}.a", f"n{i}".encode())
    js.publish_async_completed(timeout=60)
    if purge_below:
        js.stream(name).purge(seq=purge_below)


def test_streaming_read_of_a_recreated_stream_fails_or_starts_over(spark, nats_server, js, stream, tmp_path):
    """A query restarted from its checkpoint after its stream was deleted and created again
    fails naming the checkpointed offset and the stream's new creation time and sequences;
    with failOnDataLoss=false it starts over at the new stream's first sequence and counts
    the new stream's sequences that were gone before it read them. Batch reads with
    explicit sequences are unaffected."""
    name = stream.name
    url = nats_server.url
    ckpt = tmp_path / "ckpt"
    _publish(js, f"{name}.a", 0, 1000)
    seen: list[tuple[int, bytes]] = []

    def collect(df, _batch_id):
        seen.extend((r.seq, bytes(r.data)) for r in df.select("seq", "data").collect())

    q = run_available_now(spark, url, name, ckpt, collect)
    assert q.exception() is None and [s for s, _ in sorted(seen)] == list(range(1, 1001))
    old_created = js.stream(name).cached_info.created
    _recreate(js, name, 1200, purge_below=101)  # the new stream holds 101..1200
    new_created = js.stream(name).cached_info.created
    assert new_created != old_created
    seen.clear()
    q = run_available_now(spark, url, name, ckpt, collect)
    assert q.exception() is not None, f"no error; the sink got {len(seen)} rows"
    text = str(q.exception())
    assert "DataLossError" in text and "sequence 1001" in text, text
    assert old_created.isoformat() in text and new_created.isoformat() in text, text
    assert "101..1200" in text and "failOnDataLoss=false" in text, text
    assert seen == []

    q = run_available_now(spark, url, name, ckpt, collect, failOnDataLoss="false")
    assert q.exception() is None
    assert sorted(seen) == [(i, f"n{i - 1}".encode()) for i in range(101, 1201)]
    latest = [json.loads(p["sources"][0]["latestOffset"]) for p in q.recentProgress
              if p["sources"][0]["latestOffset"]]
    assert latest and latest[-1]["lostSequences"] == 100, latest

    df = (spark.read.format("jetstream").option("servers", url).option("stream", name)
          .option("startingSequence", "1001").option("endingSequence", "1100").load())
    assert sorted(r.seq for r in df.select("seq").collect()) == list(range(1001, 1101))


def _drop_created(ckpt) -> None:
    """Rewrite the checkpoint's offsets as jssync wrote them before they carried ``created``."""
    for p in (ckpt / "offsets").glob("[0-9]*"):
        lines = p.read_text().split("\n")
        off = json.loads(lines[2])
        off.pop("created", None)
        lines[2] = json.dumps(off)
        p.write_text("\n".join(lines))
        (p.parent / f".{p.name}.crc").unlink(missing_ok=True)


def test_streaming_read_of_old_offsets_without_creation_time(spark, nats_server, js, stream, tmp_path):
    """Offsets checkpointed without the stream's creation time are still read; a stream that
    now ends before such an offset (it went backwards) fails the query, or with
    failOnDataLoss=false the query starts over at the stream's first sequence."""
    name = stream.name
    url = nats_server.url
    ckpt = tmp_path / "ckpt"
    _publish(js, f"{name}.a", 0, 300)
    seen: list[int] = []

    def collect(df, _batch_id):
        seen.extend(r.seq for r in df.select("seq").collect())

    q = run_available_now(spark, url, name, ckpt, collect, maxMessagesPerTrigger="100")
    assert q.exception() is None and sorted(seen) == list(range(1, 301))
    _drop_created(ckpt)
    _publish(js, f"{name}.a", 300, 50)
    seen.clear()
    q = run_available_now(spark, url, name, ckpt, collect)
    assert q.exception() is None and sorted(seen) == list(range(301, 351))
    _drop_created(ckpt)
    _recreate(js, name, 100)
    seen.clear()
    q = run_available_now(spark, url, name, ckpt, collect)
    assert q.exception() is not None, f"no error; the sink got {len(seen)} rows"
    text = str(q.exception())
    assert "DataLossError" in text and "sequence 351" in text and "1..100" in text, text
    assert seen == []
    q = run_available_now(spark, url, name, ckpt, collect, failOnDataLoss="false")
    assert q.exception() is None and sorted(seen) == list(range(1, 101))


def test_unknown_options_are_refused_at_planning(spark, nats_server, js, stream, tmp_path):
    """Reads and writes, batch and streaming, refuse an option they do not know, naming it and
    the jssync option for Kafka's names and close typos; names are case-insensitive, and the
    options Spark itself passes (path, checkpointLocation, queryName) are accepted."""
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    _publish(js, f"{name}.a", 0, 20)

    def read(**options):
        r = spark.read.format("jetstream").option("servers", url).option("stream", name)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(PySparkException,
                       match=r"(?i)unknown option 'startingOffsets'; did you mean startingSequence\?"):
        read(startingOffsets="latest").collect()
    with pytest.raises(PySparkException, match=r"(?i)unknown option 'numPartition'; did you mean numPartitions\?"):
        read(numPartition="3").collect()
    with pytest.raises(PySparkException, match=r"(?i)unknown option 'kafka.bootstrap.servers'.*servers"):
        read(**{"kafka.bootstrap.servers": "localhost:9092"}).collect()
    assert read(NUMPARTITIONS="3").rdd.getNumPartitions() == 3
    assert read().select("seq").count() == 20

    df = spark.createDataFrame([(b"x",)], "data binary")
    with pytest.raises(PySparkException, match=r"(?i)unknown option 'topic'; did you mean subject\?"):
        df.write.format("jetstream").mode("append").option("servers", url).option("topic", f"{name}.w").save()
    with pytest.raises(PySparkException, match=r"(?i)unknown option 'stream'.*(read|write)"):
        df.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.w").option(
            "stream", name).save()
    assert js.stream(name).info().state.messages == 20  # nothing was sent

    with pytest.raises(PySparkException, match=r"(?i)unknown option 'maxOffsetsPerTrigger'; did you mean "
                                               r"maxMessagesPerTrigger\?"):
        spark.readStream.format("jetstream").option("servers", url).option("stream", name).option(
            "maxOffsetsPerTrigger", "5").load()
    src = spark.readStream.format("jetstream").option("servers", url).option("stream", name).load()
    q = (src.selectExpr(f"'{name}.copy' as subject", "data").writeStream.format("jetstream")
         .option("servers", url).option("msgIdColum", "id")
         .option("checkpointLocation", str(tmp_path / "w")).trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match=r"(?i)unknown option 'msgIdColum'; did you mean msgIdColumn\?"):
            q.awaitTermination(60 * FACTOR)
    finally:
        q.stop()
    # the options Spark passes a streaming write itself (checkpointLocation, queryName, path)
    q = (src.selectExpr(f"'{name}.copy' as subject", "data").writeStream.format("jetstream")
         .option("servers", url).queryName(f"ok{name}").option("checkpointLocation", str(tmp_path / "ok"))
         .trigger(availableNow=True).start("ignored-path"))
    try:
        assert q.awaitTermination(60 * FACTOR) and q.exception() is None
    finally:
        q.stop()
    assert js.stream(name).info().state.messages == 40


#: A server address nothing listens on: an option check that raises naming the option proves
#: it ran before any connection was tried.
_NOWHERE = "nats://127.0.0.1:1"


def test_wrong_read_options_raise_at_load_naming_the_option(spark):
    """``spark.read...load()`` and ``spark.readStream...load()`` (no action, no connection:
    the server address leads nowhere) raise for a wrong option name or value, naming the
    option, as Spark's Kafka source does at load(); a right one loads with the default
    schema, and ``headersFormat=array`` gives its own."""
    from pyspark.errors import PySparkException

    def load(streaming: bool, **options: str):
        r = (spark.readStream if streaming else spark.read).format("jetstream").option("servers", _NOWHERE)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    for streaming in (False, True):
        with pytest.raises(PySparkException, match=r"(?i)unknown option 'startingOffsets'; did you mean "
                                                   r"startingSequence\?"):
            load(streaming, stream="S", startingOffsets="latest")
        with pytest.raises(PySparkException, match=r"option 'numPartitions' must be an integer, got 'two'"):
            load(streaming, stream="S", numPartitions="two")
        with pytest.raises(PySparkException, match=r"option 'failOnDataLoss' must be true or false, got 'maybe'"):
            load(streaming, stream="S", failOnDataLoss="maybe")
        with pytest.raises(PySparkException, match=r"option 'headersFormat' must be 'map' or 'array'"):
            load(streaming, stream="S", headersFormat="list")
        with pytest.raises(PySparkException, match=r"option 'stream' is required"):
            load(streaming)
        with pytest.raises(PySparkException, match=r"option 'startingTime' must be an ISO 8601 time"):
            load(streaming, stream="S", startingTime="yesterday")
        assert load(streaming, stream="S").schema == jspark.schema_type()
        assert load(streaming, stream="S", headersFormat="array").schema == jspark.schema_type("array")


def test_wrong_write_options_raise_at_save_naming_the_option(spark, nats_server, js, stream):
    """A batch write checks its options at ``save()`` before anything is published: a wrong
    value raises naming the option. (A streaming write's ``start()`` asks the data source
    nothing: its options fail the query when it plans its first micro-batch, before it
    reads; see test_unknown_options_are_refused_at_planning.)"""
    from pyspark.errors import PySparkException

    df = spark.createDataFrame([(b"x",)], "data binary")

    def save(**options: str) -> None:
        w = df.write.format("jetstream").mode("append").option("servers", nats_server.url)
        for k, v in options.items():
            w = w.option(k, v)
        w.save()

    with pytest.raises(PySparkException, match=r"option 'maxPending' must be >= 1, got '0'"):
        save(subject=f"{stream.name}.w", maxPending="0")
    with pytest.raises(PySparkException, match=r"option 'publishTimeout' must be a number of seconds"):
        save(subject=f"{stream.name}.w", publishTimeout="soon")
    with pytest.raises(PySparkException, match=r"option 'subject'"):
        save(subject=f"{stream.name}.*")
    assert js.stream(stream.name).info().state.messages == 0
    save(subject=f"{stream.name}.w")
    assert js.stream(stream.name).info().state.messages == 1


def test_subject_filter_outside_the_streams_subjects_is_refused(spark, nats_server, js, stream):
    """A subjects filter that can match none of the stream's subjects fails the read when it
    is planned, naming the filter and the stream's subjects; overlapping filters read."""
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    _publish(js, f"{name}.a", 0, 10)

    def read(subjects: str):
        return (spark.read.format("jetstream").option("servers", url).option("stream", name)
                .option("subjects", subjects).load())

    with pytest.raises(PySparkException, match=rf"subjects filter 'OTHER\.a' matches none of the subjects "
                                               rf"of stream '{name}' \({name}\.>\)"):
        read("OTHER.a").collect()
    with pytest.raises(PySparkException, match=rf"subjects filter '{name}' matches none"):
        read(f"{name}.a,{name}").collect()
    assert read(f"{name}.*").count() == 10
    assert read(">").count() == 10
    assert read(f"*.a,{name}.b.>").count() == 10
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
         .option("subjects", "OTHER.>").load().writeStream.format("memory").queryName(f"flt{name}")
         .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception, match=r"subjects filter 'OTHER\.>' matches none"):
            q.awaitTermination(60 * FACTOR)
    finally:
        q.stop()


def test_range_planned_before_the_stream_was_recreated_fails_or_is_skipped(nats_server, js, stream):
    """A task whose range was planned on a stream that was deleted and created again before the
    task ran fails naming both creation times, or with failOnDataLoss=false reads nothing."""
    name = stream.name
    _publish(js, f"{name}.a", 0, 10)
    planned = jspark._created_text(js.stream(name).cached_info.created)
    _recreate(js, name, 10)
    now = jspark._created_text(js.stream(name).cached_info.created)
    opts = jspark.ReadOptions.parse({"servers": nats_server.url, "stream": name})
    with pytest.raises(jspark.DataLossError, match=rf"created again \(at {re.escape(now)}\).*1\.\.10 of the "
                                                   rf"stream created at {re.escape(planned)}"):
        list(jspark.read_range(opts, 1, 10, 1, planned))
    opts = jspark.ReadOptions.parse({"servers": nats_server.url, "stream": name, "failondataloss": "false"})
    assert list(jspark.read_range(opts, 1, 10, 1, planned)) == []
    assert sum(b.num_rows for b in jspark.read_range(opts, 1, 10, 1, now)) == 10


def test_write_planning_warns_when_the_duplicate_window_is_shorter_than_the_expected_restart_time(
        nats_server, js, unique, caplog):
    """Planning a write (``writer()`` / ``streamWriter()``, which Spark calls before any task)
    looks up the stream that captures option ``subject`` and warns on the ``jssync`` logger,
    once, when its duplicate window is shorter than ``expectedRestartTime`` (default 10
    minutes): a replay after a restart that slow would store copies."""
    import logging

    from pyspark.sql.types import StringType, StructField, StructType

    name = f"DW{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", duplicate_window=120)
    schema = StructType([StructField("data", StringType())])
    opts = {"servers": nats_server.url, "subject": f"{name}.out"}
    try:
        def planned(**extra: str) -> list[logging.LogRecord]:
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="jssync"):
                ds = jspark.JetStreamDataSource({**opts, **extra})
                ds.writer(schema, False)
                ds.streamWriter(schema, False)
            return [r for r in caplog.records if "duplicate window" in r.getMessage()]

        # the default expected restart time (10 minutes) is longer than the 2-minute window
        warned = planned()
        assert len(warned) == 2, [r.getMessage() for r in warned]  # once per planned write
        text = warned[0].getMessage()
        assert warned[0].levelno == logging.WARNING and warned[0].name.startswith("jssync")
        assert f"stream {name!r}" in text and "2m0s" in text and "10m0s" in text and "expectedRestartTime" in text
        assert planned(expectedRestartTime="90s") == []
        assert planned(expectedRestartTime="2m") == []
        assert len(planned(expectedRestartTime="1h")) == 2
        with pytest.raises(ValueError, match="expectedRestartTime"):
            planned(expectedRestartTime="soon")
    finally:
        js.delete_stream(name)
