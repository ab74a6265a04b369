"""Kafka-like record fields of the ``jetstream`` source and sink: ``endingTime`` (Kafka's
``endingTimestamp``), the sink's ``key`` column (the last subject token), headers as Kafka's
array of key/value structs with repeated names kept (``headersFormat=array`` on read, an
array column on write), the Kafka option names the source now takes, and writes from
another thread (``jssync.spark.activate``).
"""

from __future__ import annotations

import datetime as _dt
import threading

import pytest

from tests.conftest import FACTOR

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture
def stream(js, unique):
    """A memory stream ``R<unique>`` on ``R<unique>`` and ``R<unique>.>``, deleted afterwards."""
    name = f"R{unique}"
    st = js.create_stream(name=name, subjects=[name, f"{name}.>"], storage="memory")
    try:
        yield st
    finally:
        js.delete_stream(name)


def _read(spark, url: str, stream: str, **options):
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_header_lines_keep_every_line_in_order():
    block = b"NATS/1.0\r\na: 1\r\nB: x\r\na: 2\r\n\r\n"
    assert jspark.header_lines(block) == [("a", "1"), ("B", "x"), ("a", "2")]
    assert jspark.header_lines(b"NATS/1.0 503\r\n\r\n") == []


def test_ending_time_stops_at_the_last_message_at_or_before_it(spark, nats_server, js, stream, unique):
    """Batch reads end at the last message stored at or before endingTime (that message
    included), per stream with option streams; a streaming read refuses the option."""
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    for i in range(10):
        js.publish(f"{name}.a", f"m{i}".encode())
    t5 = stream.get_msg(5).time
    other = f"O{unique}"
    js.create_stream(name=other, subjects=[f"{other}.*"], storage="memory")
    try:
        js.publish(f"{other}.a", b"o1")
        js.publish(f"{other}.a", b"o2")  # after t5 -> not read
        seqs = sorted(r.seq for r in _read(spark, url, name, endingTime=t5.isoformat()).select("seq").collect())
        assert seqs == [1, 2, 3, 4, 5]
        before = (stream.get_msg(1).time - _dt.timedelta(seconds=1)).isoformat()
        assert _read(spark, url, name, endingTime=before).count() == 0
        # past the server's int64-nanosecond clock (2262): all of it, and nothing after it
        assert _read(spark, url, name, endingTime="2999-01-01T00:00:00Z").count() == 10
        assert _read(spark, url, name, startingTime="2999-01-01T00:00:00Z").count() == 0
        t2 = stream.get_msg(2).time
        got = sorted(r.seq for r in _read(spark, url, name, startingTime=t2.isoformat(),
                                          endingTime=t5.isoformat()).select("seq").collect())
        assert got == [2, 3, 4, 5]
        # several streams: each stops at its own last message at or before the time
        o1 = js.stream(other).get_msg(1).time
        df = (spark.read.format("jetstream").option("servers", url).option("streams", f"{name},{other}")
              .option("endingTime", o1.isoformat()).load())
        got = sorted((r.stream, r.seq) for r in df.select("stream", "seq").collect())
        assert got == sorted([(name, s) for s in range(1, 11)] + [(other, 1)])
    finally:
        js.delete_stream(other)
    with pytest.raises(ValueError, match="'endingSequence' or 'endingTime', not both"):
        jspark.ReadOptions.parse({"stream": name, "endingsequence": "3", "endingtime": t5.isoformat()})
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
         .option("endingTime", t5.isoformat()).load().writeStream.format("noop").start())
    try:
        q.awaitTermination(60 * FACTOR)
    except PySparkException:
        pass
    finally:
        q.stop()
    assert "'endingTime' is for batch reads only" in str(q.exception())


def test_key_column_is_the_last_subject_token(spark, nats_server, js, stream):
    """A ``key`` column (string or binary) is appended to the row's subject as its last
    token; a null key leaves the subject as it is; a key that makes a bad subject fails the
    task naming the row."""
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    df = spark.createDataFrame([("k1", "a"), ("k2", "b"), (None, "c"), ("k1", "d")], "key string, data string")
    df.write.format("jetstream").mode("append").option("servers", url).option("subject", name).save()
    rows = _read(spark, url, name).select("subject", "data").collect()
    assert sorted((r.subject, bytes(r.data)) for r in rows) == [
        (name, b"c"), (f"{name}.k1", b"a"), (f"{name}.k1", b"d"), (f"{name}.k2", b"b")]
    # binary keys, a subject column and the key together; a per-key read is a subject filter
    df = spark.createDataFrame([(f"{name}.x", bytearray(b"k3"), "e")], "subject string, key binary, data string")
    df.write.format("jetstream").mode("append").option("servers", url).save()
    assert [bytes(r.data) for r in _read(spark, url, name, subjects=f"{name}.x.k3").collect()] == [b"e"]
    bad = spark.createDataFrame([("k1", "a"), ("a b", "z")], "key string, data string").coalesce(1)
    with pytest.raises(PySparkException, match=r"SparkWriteError.*row 1 of partition 0"):
        bad.write.format("jetstream").mode("append").option("servers", url).option("subject", name).save()
    with pytest.raises(PySparkException, match="column 'key' must be a string or binary"):
        (spark.createDataFrame([(1, "a")], "key int, data string").write.format("jetstream").mode("append")
         .option("servers", url).option("subject", name).save())


def test_include_key_reads_the_subject_last_token_as_the_key_column(spark, nats_server, js, unique, tmp_path):
    """Option ``includeKey=true`` adds a last ``key`` string column to a read (batch, both read
    methods, and streaming; either headers format): the subject's last token, which is
    what the sink's ``key`` column became, so a keyed write reads back with its keys and a
    copy written with option ``subject`` keeps them (Kafka's key survives the copy). The
    default read has no ``key`` column."""
    from .streaming_query import run_available_now

    name = f"D{unique}"  # a stream Direct Gets may read
    js.create_stream(name=name, subjects=[name, f"{name}.>"], storage="memory", allow_direct=True)
    try:
        _check_include_key(spark, nats_server.url, js, name, unique, tmp_path, run_available_now)
    finally:
        js.delete_stream(name)


def _check_include_key(spark, url, js, name, unique, tmp_path, run_available_now) -> None:
    df = spark.createDataFrame([("eu-42", "a"), ("us-7", "b"), (None, "c")], "key string, data string")
    df.write.format("jetstream").mode("append").option("servers", url).option("subject", name).save()
    js.publish(f"{name}.x.y.z", b"d")
    want = [("eu-42", f"{name}.eu-42", b"a"), ("us-7", f"{name}.us-7", b"b"), (name, name, b"c"),
            ("z", f"{name}.x.y.z", b"d")]

    def got(frame):
        return [(r.key, r.subject, bytes(r.data)) for r in frame.select("key", "subject", "data").collect()]

    assert "key" not in _read(spark, url, name).columns  # all defaults: no key column
    for extra in ({}, {"readMethod": "direct"}, {"headersFormat": "array"}, {"numPartitions": 3}):
        frame = _read(spark, url, name, includeKey="true", **extra)
        assert frame.columns[-1] == "key" and frame.schema["key"].dataType.simpleString() == "string"
        assert sorted(got(frame)) == sorted(want), extra
    seen: list[tuple[str, str, bytes]] = []
    q = run_available_now(spark, url, name, tmp_path / "ckpt", lambda b, _i: seen.extend(got(b)),
                          includeKey="true")
    assert q.exception() is None and sorted(seen) == sorted(want)

    # the keys survive a copy to another subject, as Kafka keys survive a copy to another topic
    out = f"K{unique}"
    js.create_stream(name=out, subjects=[f"{out}.>"], storage="memory")
    try:
        (_read(spark, url, name, includeKey="true").where("key in ('eu-42', 'us-7')")
         .select("key", "data")
         .write.format("jetstream").mode("append").option("servers", url).option("subject", out).save())
        assert sorted(got(_read(spark, url, out, includeKey="true"))) == [
            ("eu-42", f"{out}.eu-42", b"a"), ("us-7", f"{out}.us-7", b"b")]
    finally:
        js.delete_stream(out)


def test_array_headers_keep_repeated_names_on_write_and_read(spark, nats_server, js, stream):
    """Headers as Kafka's array<struct<key:string,value:binary>>: written with a name given
    twice, both lines are stored and read back in order with headersFormat=array; the default
    map column shows one value per name; messages published by jssync read as arrays too."""
    name = stream.name
    url = nats_server.url
    df = spark.createDataFrame(
        [("r1", [("a", bytearray(b"1")), ("b", bytearray(b"x")), ("a", bytearray(b"2"))]),
         ("r2", [("only", bytearray(b"v"))]),
         ("r3", None)],
        "data string, headers array<struct<key:string,value:binary>>")
    df.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.h").save()
    js.publish(f"{name}.p", b"r4", headers={"x": "y", "z": "w"})

    arr = _read(spark, url, name, headersFormat="array")
    assert arr.schema == jspark.schema_type("array")
    got = {bytes(r.data): [(h.key, bytes(h.value)) for h in r.headers or [] if h.key != "Nats-Msg-Id"]
           for r in arr.collect()}
    assert got == {b"r1": [("a", b"1"), ("b", b"x"), ("a", b"2")], b"r2": [("only", b"v")], b"r3": [],
                   b"r4": [("x", b"y"), ("z", b"w")]}
    assert all(any(h.key == "Nats-Msg-Id" for h in r.headers) for r in arr.collect() if bytes(r.data) != b"r4")

    streamed: list = []
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", name)
         .option("headersFormat", "array").load().writeStream
         .foreachBatch(lambda d, _b: streamed.extend(d.collect())).trigger(availableNow=True).start())
    assert q.awaitTermination(120 * FACTOR) and q.exception() is None
    assert {bytes(r.data): [(h.key, bytes(h.value)) for h in r.headers or [] if h.key != "Nats-Msg-Id"]
            for r in streamed} == got

    m = {bytes(r.data): r.headers for r in _read(spark, url, name).collect()}  # the default: a map
    assert m[b"r1"]["b"] == "x" and m[b"r1"]["a"] in ("1", "2")
    # the sink takes the array column back as it is (repeated names and all); the copy leaves
    # out the original's Nats-Msg-Id, or the stream would drop it as a duplicate
    arr.where("cast(data as string) = 'r1'").selectExpr(
        f"'{name}.copy' as subject", "data", "filter(headers, h -> h.key != 'Nats-Msg-Id') as headers",
    ).write.format("jetstream").mode("append").option("servers", url).save()
    copy = _read(spark, url, name, headersFormat="array", subjects=f"{name}.copy").collect()
    assert [[(h.key, bytes(h.value)) for h in r.headers if h.key != "Nats-Msg-Id"] for r in copy] == [
        [("a", b"1"), ("b", b"x"), ("a", b"2")]]
    with pytest.raises(ValueError, match="headersFormat 'array' needs readMethod 'consumer'"):
        jspark.ReadOptions.parse({"stream": name, "headersformat": "array", "readmethod": "direct"})
    with pytest.raises(ValueError, match="'headersFormat' must be 'map' or 'array'"):
        jspark.ReadOptions.parse({"stream": name, "headersformat": "list"})


def test_kafka_option_names_point_to_the_new_options(spark, nats_server, stream):
    from pyspark.errors import PySparkException

    name = stream.name
    url = nats_server.url
    for kafka, ours in (("subscribe", "streams"), ("endingTimestamp", "endingTime"),
                        ("endingOffsetsByTimestamp", "endingTime")):
        with pytest.raises(PySparkException, match=rf"unknown option '{kafka}'; did you mean {ours}"):
            _read(spark, url, name, **{kafka: "x"}).count()
    with pytest.raises(PySparkException, match="Kafka's groupIdPrefix has no jssync equivalent, because reads "
                       "use no consumer group"):
        _read(spark, url, name, groupIdPrefix="x").count()
    for kafka in ("startingOffsetsByTimestampStrategy", "fetchOffset.numRetries", "kafka.group.id"):
        with pytest.raises(ValueError, match=rf"'{kafka}': Kafka's {kafka} has no jssync equivalent, because"):
            jspark.check_option_names({kafka.lower(): "1"}, "read")
    with pytest.raises(ValueError, match="a write sends the 'headers' column whenever"):
        jspark.check_option_names({"includeheaders": "true"}, "write")
    df = spark.createDataFrame([("a",)], "data string")
    with pytest.raises(PySparkException, match="'headersformat' for a write: it is an option of reads"):
        (df.write.format("jetstream").mode("append").option("servers", url).option("subject", name)
         .option("headersFormat", "array").save())
    with pytest.raises(PySparkException, match="Kafka's 'value' column: select it as data"):
        (spark.createDataFrame([("a",)], "value string").write.format("jetstream").mode("append").option("servers", url)
         .option("subject", name).save())


def test_a_write_from_another_thread_needs_the_session_activated_there(spark, nats_server, stream):
    """PySpark 4.3: a Python data source write from a thread other than the session's fails
    with DATA_SOURCE_NOT_FOUND (checked with a trivial data source too); after
    jssync.spark.activate(spark) in that thread it works."""
    from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage

    class _Nop(DataSourceWriter):
        def write(self, iterator):
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NopSource(DataSource):
        @classmethod
        def name(cls):
            return "jssync_test_nop"

        def writer(self, schema, overwrite):
            return _Nop()

    spark.dataSource.register(NopSource)
    name = stream.name
    url = nats_server.url
    results: dict[str, str] = {}

    def write(label: str, fmt: str, activate: bool) -> None:
        try:
            if activate:
                jspark.activate(spark)
            w = spark.range(1).selectExpr("'t' as data").write.format(fmt).mode("append")
            if fmt == "jetstream":
                w = w.option("servers", url).option("subject", name)
            w.save()
            results[label] = "ok"
        except Exception as exc:  # noqa: BLE001 - compared below
            results[label] = str(exc)

    for label, fmt, act in (("nop", "jssync_test_nop", False), ("jetstream", "jetstream", False),
                            ("nop activated", "jssync_test_nop", True), ("jetstream activated", "jetstream", True)):
        t = threading.Thread(target=write, args=(label, fmt, act))
        t.start()
        t.join(120)
    assert "DATA_SOURCE_NOT_FOUND" in results["nop"], results
    assert "DATA_SOURCE_NOT_FOUND" in results["jetstream"], results
    assert results["nop activated"] == "ok" and results["jetstream activated"] == "ok", results
    assert stream.info().state.messages == 1
