"""Reading several streams in one ``jetstream`` source (option ``streams``, like Kafka's
``subscribe`` with several topics): one position per stream in the offsets, and every
guarantee of a one-stream read held per stream (exactly-once restart after the driver is
killed, failOnDataLoss, a recreated stream, maxMessagesPerTrigger across the streams).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import FACTOR, wait_for

from .spark_session import JVM_OPTIONS, jssync_root
from .streaming_query import run_available_now

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture
def streams(js, unique):
    """Two memory streams ``A<unique>`` and ``B<unique>`` (subjects ``<name>.*``), deleted afterwards."""
    import jssync

    names = [f"A{unique}", f"B{unique}"]
    for n in names:
        js.create_stream(name=n, subjects=[f"{n}.*"], storage="memory")
    try:
        yield names
    finally:
        for n in names:
            try:
                js.delete_stream(n)
            except jssync.StreamNotFoundError:
                pass


def _publish(js, subject: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        js.publish_async(subject, f"{subject}:{i}".encode())
    js.publish_async_completed(timeout=60)


def test_share_limit_splits_a_cap_in_proportion_and_never_more():
    assert jspark.share_limit({"A": 10, "B": 10}, 100) == {"A": 10, "B": 10}
    assert jspark.share_limit({"A": 300, "B": 100}, 100) == {"A": 75, "B": 25}
    assert jspark.share_limit({"A": 1, "B": 1, "C": 1}, 2) == {"A": 1, "B": 1, "C": 0}
    assert jspark.share_limit({"A": 0, "B": 50}, 10) == {"A": 0, "B": 10}
    for avail, cap in (({"A": 7, "B": 13, "C": 1}, 5), ({"A": 999, "B": 1}, 3), ({"A": 2, "B": 2}, 1)):
        got = jspark.share_limit(avail, cap)
        assert sum(got.values()) == min(cap, sum(avail.values()))
        assert all(0 <= got[k] <= avail[k] for k in avail)


def test_streams_option_parsing():
    o = jspark.ReadOptions.parse({"streams": "A, B,C"})
    assert o.names() == ("A", "B", "C") and o.stream == "A"
    assert jspark.ReadOptions.parse({"stream": "A"}).names() == ("A",)
    for bad, msg in (({"stream": "A", "streams": "B"}, "'stream' .* or 'streams' .*, not both"),
                     ({"streams": "A,A"}, "names 'A' more than once"),
                     ({"streams": "A,"}, "option 'streams'"),
                     ({"streams": "A,B.c"}, "invalid a stream name in option 'streams' 'B.c'")):
        with pytest.raises(ValueError, match=msg):
            jspark.ReadOptions.parse(bad)
    o = jspark.ReadOptions.parse({"streams": "A,B", "startingsequence": '{"A": 5, "B": "latest"}',
                                  "endingsequence": '{"A": 9}'})
    assert o.starting_by_stream == (("A", 5), ("B", "latest")) and o.ending_by_stream == (("A", 9),)
    assert (o.ending_for("A"), o.ending_for("B")) == (9, None)
    for bad, msg in (({"startingsequence": '{"C": 1}'}, "names stream 'C', which the read does not read"),
                     ({"startingsequence": '{"A": 0}'}, "value for stream 'A' must be a sequence >= 1"),
                     ({"endingsequence": '{"A": "earliest"}'}, "must be a sequence >= 0 or 'latest'"),
                     ({"startingsequence": '{"A": '}, "'startingSequence' is not valid JSON")):
        with pytest.raises(ValueError, match=msg):
            jspark.ReadOptions.parse({"streams": "A,B", **bad})


def test_batch_read_of_several_streams(spark, nats_server, js, streams):
    """Every message of each stream once, named by its stream; numPartitions splits each
    stream's range; subject filters apply to the streams whose subjects they can match."""
    a, b = streams
    url = nats_server.url
    _publish(js, f"{a}.x", 30)
    _publish(js, f"{b}.x", 20)
    _publish(js, f"{b}.y", 5)
    df = spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}").load()
    rows = df.select("stream", "seq", "subject", "data").collect()
    assert sorted((r.stream, r.seq) for r in rows) == sorted([(a, s) for s in range(1, 31)]
                                                             + [(b, s) for s in range(1, 26)])
    assert all(bytes(r.data).decode().startswith(f"{r.subject}:") for r in rows)

    df = (spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
          .option("numPartitions", "3").load())
    assert df.rdd.getNumPartitions() == 6
    assert df.count() == 55

    df = (spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
          .option("subjects", f"{a}.x,{b}.y").load())
    got = sorted((r.stream, r.subject) for r in df.select("stream", "subject").collect())
    assert got == sorted([(a, f"{a}.x")] * 30 + [(b, f"{b}.y")] * 5)

    # per-stream positions as JSON, like Kafka's startingOffsets / endingOffsets
    df = (spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
          .option("startingSequence", json.dumps({a: 11, b: "latest"}))
          .option("endingSequence", json.dumps({a: 20})).load())
    assert sorted((r.stream, r.seq) for r in df.select("stream", "seq").collect()) == [(a, s) for s in range(11, 21)]
    df = (spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
          .option("startingSequence", json.dumps({b: 24})).load())  # A not named: earliest
    assert df.count() == 30 + 2
    reader = jspark.JetStreamStreamReader(jspark.ReadOptions.parse(
        {"servers": url, "streams": f"{a},{b}", "startingsequence": json.dumps({a: 11, b: "latest"})}))
    try:  # a new streaming query starts each stream where the JSON says
        assert {n: p["seq"] for n, p in reader.initialOffset()["streams"].items()} == {a: 11, b: 26}
    finally:
        reader.stop()

    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match=rf"none of the subjects filters .* stream '{b}'"):
        (spark.read.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
         .option("subjects", f"{a}.x").load().count())


_KILLED_DRIVER = """
import os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from jssync.spark import register

url, names, out, ckpt, jvm_options = sys.argv[1:6]
spark = (SparkSession.builder.master("local[2]").appName("killed-driver").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.extraJavaOptions", jvm_options).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)
q = (spark.readStream.format("jetstream").option("servers", url).option("streams", names)
     .option("maxMessagesPerTrigger", "300").load()
     .selectExpr("stream", "seq", "data")
     .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
     .trigger(processingTime="0 seconds").start())
q.awaitTermination()
"""


def test_streaming_read_of_several_streams_after_a_killed_driver_is_exactly_once(spark, nats_server, js, streams,
                                                                                   tmp_path):
    """A driver killed (SIGKILL) between micro-batches, restarted from its checkpoint: every
    message of each stream is in the parquet sink exactly once; the checkpointed offsets
    hold one position per stream, and every micro-batch kept to maxMessagesPerTrigger in
    total across the streams."""
    a, b = streams
    url = nats_server.url
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    _publish(js, f"{a}.x", 900)  # 4 micro-batches of 300: the driver is killed after 2
    _publish(js, f"{b}.x", 300)
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(_KILLED_DRIVER))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([jssync_root(), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, str(script), url, f"{a},{b}", out, ckpt, JVM_OPTIONS], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    commits = tmp_path / "ckpt" / "commits"
    try:
        wait_for(lambda: proc.poll() is not None or len(list(commits.glob("[0-9]*"))) >= 2,
                 timeout=180 * FACTOR, interval=0.05, what="two committed micro-batches")
        assert proc.poll() is None, "the driver ended by itself"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    offsets = sorted((tmp_path / "ckpt" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    first = json.loads(offsets[0].read_text().split("\n")[2])
    assert set(first["streams"]) == {a, b} and all("seq" in v and "created" in v for v in first["streams"].values())
    assert sum(v["seq"] - 1 for v in first["streams"].values()) == 300  # one cap across both streams
    done = spark.read.parquet(out).count()
    assert 0 < done < 1200

    _publish(js, f"{b}.x", 100, start=300)
    q = (spark.readStream.format("jetstream").option("servers", url).option("streams", f"{a},{b}")
         .option("maxMessagesPerTrigger", "300").load()
         .selectExpr("stream", "seq", "data")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180 * FACTOR)
    assert q.exception() is None
    rows = spark.read.parquet(out).collect()
    keys = sorted((r.stream, r.seq) for r in rows)
    assert keys == sorted([(a, s) for s in range(1, 901)] + [(b, s) for s in range(1, 401)]), \
        f"{len(keys)} rows, {len(set(keys))} distinct"
    assert all(bytes(r.data) == f"{r.stream}.x:{r.seq - 1}".encode() for r in rows)
    assert all(p["numInputRows"] <= 300 for p in q.recentProgress)
    latest = json.loads(q.lastProgress["sources"][0]["latestOffset"])
    assert latest["streams"][a] == {"seq": 901, "messagesBehind": 0}
    assert latest["streams"][b] == {"seq": 401, "messagesBehind": 0}
    assert latest["messagesBehind"] == 0 and latest["lostSequences"] == 0


def test_data_loss_and_a_recreated_stream_are_detected_per_stream(spark, nats_server, js, streams, tmp_path):
    """A replayed micro-batch whose messages were purged from one stream fails naming that
    stream; a stream deleted and created again fails naming it; with failOnDataLoss=false the
    other stream goes on where it was and the recreated one starts over."""
    a, b = streams
    url = nats_server.url
    ckpt = tmp_path / "ckpt"
    _publish(js, f"{a}.x", 100)
    _publish(js, f"{b}.x", 100)
    seen: list[tuple[str, int]] = []

    def collect(df, _batch_id):
        seen.extend((r.stream, r.seq) for r in df.select("stream", "seq").collect())

    q = run_available_now(spark, url, (a, b), ckpt, collect)
    assert q.exception() is None
    assert sorted(seen) == sorted([(a, s) for s in range(1, 101)] + [(b, s) for s in range(1, 101)])

    # the next micro-batch is planned, then forgotten as committed, and B's part purged
    _publish(js, f"{a}.x", 50, start=100)
    _publish(js, f"{b}.x", 50, start=100)
    q = run_available_now(spark, url, (a, b), ckpt, collect)
    assert q.exception() is None
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    js.stream(b).purge(seq=131)
    seen.clear()
    q = run_available_now(spark, url, (a, b), ckpt, collect)
    text = str(q.exception())
    assert q.exception() is not None and "DataLossError" in text, text
    assert f"stream '{b}': sequences 101..130 of the planned range 101..150" in text, text
    assert seen == []
    q = run_available_now(spark, url, (a, b), ckpt, collect, failOnDataLoss="false")
    assert q.exception() is None
    assert sorted(seen) == sorted([(a, s) for s in range(101, 151)] + [(b, s) for s in range(131, 151)])

    # B deleted and created again: the restart fails naming B; A is untouched
    js.delete_stream(b)
    js.create_stream(name=b, subjects=[f"{b}.*"], storage="memory")
    _publish(js, f"{b}.x", 10)
    _publish(js, f"{a}.x", 5, start=150)
    seen.clear()
    q = run_available_now(spark, url, (a, b), ckpt, collect)
    text = str(q.exception())
    assert q.exception() is not None and f"stream '{b}' was deleted and created again" in text, text
    assert "sequence 151" in text and seen == []
    q = run_available_now(spark, url, (a, b), ckpt, collect, failOnDataLoss="false")
    assert q.exception() is None
    assert sorted(seen) == sorted([(a, s) for s in range(151, 156)] + [(b, s) for s in range(1, 11)])


def test_a_one_stream_query_can_go_on_with_several_streams(spark, nats_server, js, streams, tmp_path):
    """A checkpoint of option ``stream`` goes on under ``streams``: its position is the first
    stream's, and a stream added joins at its starting position (here: earliest)."""
    a, b = streams
    url = nats_server.url
    ckpt = tmp_path / "ckpt"
    _publish(js, f"{a}.x", 20)
    _publish(js, f"{b}.x", 7)
    seen: list[tuple[str, int]] = []

    def collect(df, _batch_id):
        seen.extend((r.stream, r.seq) for r in df.select("stream", "seq").collect())

    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", a).load()
         .writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120 * FACTOR) and q.exception() is None
    assert sorted(seen) == [(a, s) for s in range(1, 21)]
    _publish(js, f"{a}.x", 3, start=20)
    seen.clear()
    for _ in range(2):  # the first run adds B's starting position, the second reads it
        q = run_available_now(spark, url, (a, b), ckpt, collect)
        assert q.exception() is None
    assert sorted(seen) == sorted([(a, s) for s in range(21, 24)] + [(b, s) for s in range(1, 8)])
