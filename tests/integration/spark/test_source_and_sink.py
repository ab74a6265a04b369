"""The ``jetstream`` PySpark data source and sink, on local Spark against a real nats-server.

One local SparkSession (``local[2,3]``: two threads, and up to three attempts per task so
a task retry can be forced) serves the whole module (tests/integration/spark/spark_session.py).
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import sys
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture(scope="module")
def spark(spark_sessions):
    """The shared ``local[2,3]`` session: tasks may fail and be retried (up to 3 attempts)."""
    return spark_sessions.get("local[2,3]")


def _read(spark, url: str, stream: str, **options):
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def _publish(js, subjects: list[str], n: int, start: int = 0, headers_every: int = 0, sync: bool = False) -> None:
    """Publish ``m<i>`` for i in start..start+n-1, round-robin over ``subjects``."""
    for i in range(start, start + n):
        h = {"i": str(i)} if headers_every and i % headers_every == 0 else None
        if sync:
            js.publish(subjects[i % len(subjects)], f"m{i}".encode(), headers=h)
        else:
            js.publish_async(subjects[i % len(subjects)], f"m{i}".encode(), headers=h)
    js.publish_async_completed(timeout=60)


@pytest.fixture
def stream(js, unique):
    """A fresh memory stream ``S<unique>`` on subjects ``S<unique>.*``, deleted afterwards."""
    name = f"S{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", allow_direct=True)
    try:
        yield st
    finally:
        js.delete_stream(name)


# -- no Spark needed -----------------------------------------------------------------------------


def test_import_jssync_does_not_import_pyspark():
    code = "import sys, jssync; assert 'pyspark' not in sys.modules, 'pyspark was imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_missing_pyspark_gives_an_install_hint():
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None\n"
        "try:\n"
        "    import jssync.spark\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'pyspark[sql]>=4.2'" in proc.stdout
    assert "Java 17" in proc.stdout


def test_split_range_covers_every_sequence_once():
    assert jspark.split_range(1, 10, 3) == [(1, 4), (5, 7), (8, 10)]
    assert jspark.split_range(5, 5, 4) == [(5, 5)]
    assert jspark.split_range(6, 5, 4) == []
    for first, last, parts in [(1, 100_000, 4), (7, 19, 5), (1, 3, 8)]:
        ranges = jspark.split_range(first, last, parts)
        seqs = [s for lo, hi in ranges for s in range(lo, hi + 1)]
        assert seqs == list(range(first, last + 1))
        sizes = [hi - lo + 1 for lo, hi in ranges]
        assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="parts"):
        jspark.split_range(1, 2, 0)


def test_derived_msg_ids_depend_on_content_and_occurrence_not_on_row_order():
    a = jspark.derive_msg_id("q", 3, 1, "OUT.x", b"data")
    assert a == jspark.derive_msg_id("q", 3, 1, "OUT.x", b"data", 0)
    others = {
        jspark.derive_msg_id("q2", 3, 1, "OUT.x", b"data"),
        jspark.derive_msg_id("q", 4, 1, "OUT.x", b"data"),
        jspark.derive_msg_id("q", 3, 2, "OUT.x", b"data"),
        jspark.derive_msg_id("q", 3, 1, "OUT.x", b"data", 1),  # the same row again in the partition
        jspark.derive_msg_id("q", 3, 1, "OUT.y", b"data"),
        jspark.derive_msg_id("q", 3, 1, "OUT.x", b"datb"),
        jspark.derive_msg_id("q", 3, 1, "OUT.x", b"data", headers={"k": "v"}),
        jspark.derive_msg_id("q", 3, 1, "OUT.x", b"data", headers={"k": "w"}),
    }
    assert a not in others and len(others) == 8
    assert jspark.derive_msg_id("q", 3, 1, "OUT.x", b"d", headers={"a": "1", "b": "2"}) == \
        jspark.derive_msg_id("q", 3, 1, "OUT.x", b"d", headers={"b": "2", "a": "1"})


def test_write_batches_rows_carry_the_derived_ids_and_bad_rows_fail(nats_server, js, stream):
    # write_batches outside Spark: plain rows take the checked fast path (one subject
    # check per subject, the id built incrementally), rows with headers the general one
    import pyarrow as pa

    name = stream.name
    subjects = [f"{name}.a", f"{name}.b", f"{name}.a", f"{name}.c"]
    datas = [b"one", b"two", b"", b"four"]
    headers = [None, None, None, [("X-K", "v")]]
    hdr_type = pa.map_(pa.string(), pa.string())
    rb = pa.RecordBatch.from_arrays(
        [pa.array(subjects), pa.array(datas, type=pa.binary()), pa.array(headers, type=hdr_type)],
        names=["subject", "data", "headers"])
    opts = jspark.WriteOptions.parse({"servers": nats_server.url})
    res = jspark.write_batches(opts, iter([rb]), "pfx", 5, 2)
    assert (res.rows, res.duplicates, res.first_seq, res.last_seq) == (4, 0, 1, 4)
    for seq, (subj, data) in enumerate(zip(subjects, datas, strict=True), start=1):
        m = stream.get_msg(seq)
        assert (m.subject, m.data) == (subj, data)
        hdrs = {"X-K": "v"} if seq == 4 else None
        assert m.headers["Nats-Msg-Id"] == jspark.derive_msg_id("pfx", 5, 2, subj, data, headers=hdrs)
    assert stream.get_msg(4).headers["X-K"] == "v"
    # the same rows again: all dropped by the duplicate window
    again = jspark.write_batches(opts, iter([rb]), "pfx", 5, 2)
    assert (again.rows, again.duplicates) == (4, 4)

    big = b"x" * (js.conn.max_payload - 20)  # fits alone, not with its Nats-Msg-Id header
    # the big row is refused before anything of its batch is published
    cases = ((f"{name}.d", big, "over the server.s max_payload"), (f"{name}.*", b"x", "BadSubjectError"))
    for subj, data, what in cases:
        bad = pa.RecordBatch.from_arrays([pa.array([f"{name}.ok", subj]), pa.array([b"ok", data])],
                                         names=["subject", "data"])
        with pytest.raises(jspark.SparkWriteError, match=f"row 1 of partition 2 .*{what}"):
            jspark.write_batches(opts, iter([bad]), "pfy", 0, 2)
    no_ids = jspark.WriteOptions.parse({"servers": nats_server.url, "derivemsgid": "false"})
    ok = pa.RecordBatch.from_arrays([pa.array([f"{name}.e"]), pa.array([big])], names=["subject", "data"])
    assert jspark.write_batches(no_ids, iter([ok]), "pfz", 0, 0).rows == 1
    assert stream.get_msg(stream.info().state.last_seq).headers is None


def test_a_stop_request_stops_a_writing_task_which_answers_with_what_it_stored(nats_server, js, stream):
    """write_batches outside Spark, fed batch after batch: the abort's stop_tasks stops it before
    its next row; the task answers with what it stored (the stream's count), fails saying so,
    and closes its connection, so stop_tasks returns saying no task is connected any more;
    nothing lands afterwards. With no task running, stop_tasks returns at once."""
    import threading

    import pyarrow as pa

    name = stream.name
    opts = jspark.WriteOptions.parse({"servers": nats_server.url, "subject": f"{name}.w"})
    token = "t" + name
    published = threading.Event()
    stopped = threading.Event()

    def batches():
        for i in range(10_000):
            yield pa.RecordBatch.from_arrays([pa.array([f"{i}.{j}".encode() for j in range(256)])], names=["data"])
            published.set()
            if stopped.is_set():
                time.sleep(0.01)  # behaviour: rows keep coming; the task must stop by itself

    errors: list[BaseException] = []

    def task() -> None:
        try:
            jspark.write_batches(opts, batches(), "pfx", 0, 3, token, 1)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    t = threading.Thread(target=task)
    t.start()
    try:
        assert published.wait(10 * FACTOR)
        wait_for(lambda: stream.info().state.messages >= 1000, 10, what="rows in the stream")
        reports, gone = jspark.stop_tasks(opts, token, 0)
        stopped.set()
        t.join(10 * FACTOR)
        assert not t.is_alive()
        assert gone
        assert len(reports) == 1
        rep = reports[0]
        assert (rep["partition"], rep["attempt"], rep["duplicates"], rep["unsettled"]) == (3, 1, 0, 0)
        count = stream.info().state.messages
        assert rep["stored"] == rep["rows"] == count
        assert count < 10_000 * 256
        assert len(errors) == 1 and isinstance(errors[0], jspark.SparkWriteError)
        assert (f"partition 3 stopped publishing: the write was aborted (another task failed). {count} row(s) of "
                "partition 3 are in the stream") in str(errors[0])
        assert "msgIdPrefix='pfx'" in str(errors[0])
        time.sleep(0.5 * FACTOR)  # nothing happens: the stopped task publishes no more
        assert stream.info().state.messages == count
        # nobody listens any more: the server's no-responders answer ends it at once
        t0 = time.monotonic()
        assert jspark.stop_tasks(opts, token, 0) == ([], True)
        assert time.monotonic() - t0 < 2 * FACTOR
    finally:
        stopped.set()
        t.join(30)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_the_writers_abort_stops_their_tasks_of_that_batch_only(nats_server, stream, streaming, caplog):
    """The driver-side abort of a batch writer (micro-batch 0) and of a streaming writer
    (the micro-batch it is given) stops that batch's running task and logs what it stored;
    a task of another micro-batch is not stopped."""
    import threading

    import pyarrow as pa

    name = stream.name
    opts = jspark.WriteOptions.parse({"servers": nats_server.url, "subject": f"{name}.w"})
    writer = jspark.JetStreamStreamWriter(opts) if streaming else jspark.JetStreamBatchWriter(opts)
    batch = 7 if streaming else 0
    done = threading.Event()

    def batches(tag: str):
        for i in range(100_000):
            if done.is_set():
                return
            yield pa.RecordBatch.from_arrays([pa.array([f"{tag}{i}.{j}".encode() for j in range(64)])],
                                             names=["data"])
            time.sleep(0.001)  # behaviour: a task that keeps writing slowly

    results: dict[str, object] = {}

    def task(tag: str, batch_id: int) -> None:
        try:
            results[tag] = jspark.write_batches(opts, batches(tag), "pfx", batch_id, 0, writer.token)
        except BaseException as exc:  # noqa: BLE001 - checked below
            results[tag] = exc

    this = threading.Thread(target=task, args=("a", batch))
    other = threading.Thread(target=task, args=("b", batch + 1))
    this.start()
    other.start()
    try:
        wait_for(lambda: stream.info().state.messages >= 2000, 20, what="rows in the stream")
        with caplog.at_level("WARNING", logger="jssync.spark"):
            if streaming:
                writer.abort([None], batch)
            else:
                writer.abort([None])
        this.join(10 * FACTOR)
        assert not this.is_alive()
        assert isinstance(results["a"], jspark.SparkWriteError)
        assert "stopped publishing: the write was aborted" in str(results["a"])
        assert "1 task(s) stopped by the abort, partitions [0]" in caplog.text
        assert other.is_alive()  # another micro-batch's task goes on
    finally:
        done.set()
        this.join(30)
        other.join(30)
    assert not isinstance(results["b"], BaseException), results["b"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'stream' is required"),
        ({"stream": "A.B"}, "invalid option 'stream'"),
        ({"stream": "S", "numPartitions": "0"}, "'numPartitions' must be >= 1"),
        ({"stream": "S", "numPartitions": "many"}, "'numPartitions' must be an integer"),
        ({"stream": "S", "startingSequence": "5", "startingTime": "2024-01-01T00:00:00Z"}, "not both"),
        ({"stream": "S", "startingTime": "yesterday"}, "ISO 8601"),
        ({"stream": "S", "includeHeaders": "maybe"}, "true or false"),
        ({"stream": "S", "readMethod": "telepathy"}, "'consumer' or 'direct'"),
        ({"stream": "S", "readMethod": "direct", "subjects": "S.a,S.b"}, "one subject filter"),
        ({"stream": "S", "subjects": "S..a"}, "option 'subjects'"),
        ({"stream": "S", "tlsCertFile": "/x.pem"}, "go together"),
        ({"stream": "S", "timeout": "-1"}, "'timeout' must be > 0"),
    ],
)
def test_bad_read_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        jspark.ReadOptions.parse({k.lower(): v for k, v in options.items()})


def test_read_options_parse():
    o = jspark.ReadOptions.parse({"stream": "S", "subjects": "S.a, S.b", "startingsequence": "latest",
                                  "numpartitions": "4", "includeheaders": "false", "password": "pw"})
    assert o.subjects == ("S.a", "S.b") and o.starting_latest and o.num_partitions == 4
    assert not o.include_headers and "pw" not in repr(o)
    t = jspark.ReadOptions.parse({"stream": "S", "startingtime": "2024-05-01T12:00:00"}).starting_time
    assert t == _dt.datetime(2024, 5, 1, 12, tzinfo=_dt.UTC)


# -- batch reads ---------------------------------------------------------------------------------


def test_batch_read_100k_in_4_partitions_is_the_stream_exactly(spark, nats_server, js, unique):
    name = f"BIG{unique}"
    js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    try:
        n = 100_000
        _publish(js, [f"{name}.a", f"{name}.b"], n, headers_every=1000)
        df = _read(spark, nats_server.url, name, numPartitions=4)
        assert df.rdd.getNumPartitions() == 4
        t0 = time.perf_counter()
        # as Arrow (the columns the tasks made), not as Row objects: the same values, without
        # pickling 100k rows one by one on their way to this process
        table = df.select("seq", "subject", "data", "headers", "stream").toArrow()
        elapsed = time.perf_counter() - t0
        print(f"batch read of {n} messages in 4 partitions: {n / elapsed:,.0f} rows/s")
        assert table.num_rows == n
        cols = {c: table.column(c).to_pylist() for c in table.column_names}
        assert sorted(cols["seq"]) == list(range(1, n + 1))
        for seq, subject, data, headers, stream in zip(*cols.values(), strict=True):
            i = seq - 1
            assert data == f"m{i}".encode()
            assert subject == f"{name}.{'ab'[i % 2]}"
            assert stream == name
            assert headers == ([("i", str(i))] if i % 1000 == 0 else None)  # a map column: (key, value) pairs
    finally:
        js.delete_stream(name)


def test_batch_read_options_filters_ranges_and_times(spark, nats_server, js, stream):
    name = stream.name
    _publish(js, [f"{name}.a", f"{name}.b", f"{name}.c"], 30, headers_every=2, sync=True)
    url = nats_server.url
    # subjects filter, several subjects
    seqs = sorted(r.seq for r in _read(spark, url, name, subjects=f"{name}.a,{name}.c", numPartitions=3).collect())
    assert seqs == [s for s in range(1, 31) if (s - 1) % 3 != 1]
    # one subject, sequence range
    df = _read(spark, url, name, subjects=f"{name}.b", startingSequence=5, endingSequence=20, numPartitions=2)
    assert sorted(r.seq for r in df.collect()) == [s for s in range(5, 21) if (s - 1) % 3 == 1]
    # headers off
    rows = _read(spark, url, name, includeHeaders="false", endingSequence=3).collect()
    assert [r.headers for r in rows] == [None, None, None]
    # latest: nothing; endingSequence beyond the stream: up to the last message
    assert _read(spark, url, name, startingSequence="latest").count() == 0
    assert _read(spark, url, name, startingSequence=25, endingSequence=10_000).count() == 6
    # startingTime: from the first message stored at or after that time
    t_mid = stream.get_msg(16).time
    rows = _read(spark, url, name, startingTime=t_mid.isoformat()).collect()
    assert min(r.seq for r in rows) == 16 and len(rows) == 15
    first = _read(spark, url, name, endingSequence=1).collect()[0]
    assert first.time == stream.get_msg(1).time.astimezone().replace(tzinfo=None)  # PySpark gives local time
    future = (_dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)).isoformat()
    assert _read(spark, url, name, startingTime=future).count() == 0


def test_deleted_and_purged_sequences_are_skipped_without_hanging(spark, nats_server, js, stream):
    name = stream.name
    _publish(js, [f"{name}.a"], 40)
    stream.purge(seq=6)  # 1..5 gone
    for s in (10, 11, 12, 20, 38, 39, 40):  # the last sequences too
        stream.delete_msg(s)
    expected = [s for s in range(6, 38) if s not in (10, 11, 12, 20)]
    for method in ("consumer", "direct"):
        t0 = time.monotonic()
        # 40 sequences in 8 ranges: some ranges end on, or consist only of, deleted sequences
        df = _read(spark, nats_server.url, name, numPartitions=8, readMethod=method, startingSequence=1)
        assert sorted(r.seq for r in df.collect()) == expected, method
        assert time.monotonic() - t0 < 30 * FACTOR, f"{method} read was slow: a gap made a task wait"
    # a range that matches nothing at all
    assert _read(spark, nats_server.url, name, subjects=f"{name}.zzz", numPartitions=2).count() == 0


def test_direct_read_method_matches_consumer_and_needs_allow_direct(spark, nats_server, js, stream, unique):
    name = stream.name
    _publish(js, [f"{name}.a", f"{name}.b"], 500, headers_every=7)
    url = nats_server.url
    cols = ["seq", "subject", "time", "data", "headers"]
    a = _read(spark, url, name, numPartitions=3, batchSize=64).select(*cols).orderBy("seq").collect()
    b = _read(spark, url, name, numPartitions=3, batchSize=64, readMethod="direct")
    b = b.select(*cols).orderBy("seq").collect()
    assert a == b and len(a) == 500
    c = _read(spark, url, name, subjects=f"{name}.b", readMethod="direct").collect()
    assert sorted(r.seq for r in c) == list(range(2, 501, 2))
    other = f"ND{unique}"
    js.create_stream(name=other, subjects=[f"{other}.*"], storage="memory")
    try:
        js.publish(f"{other}.a", b"x")
        with pytest.raises(Exception, match="allow_direct"):
            _read(spark, url, other, readMethod="direct").collect()
    finally:
        js.delete_stream(other)


def test_tls_and_password_options(spark, tmp_path, unique):
    """Executors connect with the TLS file options and user/password; a wrong password fails
    the query without showing the password."""
    pytest.importorskip("cryptography", reason="the test extra installs cryptography")
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID
    from pyspark.errors import PySparkException

    from jssync.server import NatsServer
    from tests.integration.core.test_security import _make_ca, _make_leaf, _tls_config, _write_key

    ca, ca_key = _make_ca("jssync spark test CA")
    loopback = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert, key = _make_leaf(ca, ca_key, "localhost", loopback, ExtendedKeyUsageOID.SERVER_AUTH)
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_file, key)
    config = _tls_config(cert_file, key_file, ca_file) + "authorization { user: bob, password: s3cretpw }\n"
    with NatsServer(jetstream=True, config=config) as srv:
        opts = {"servers": srv.url, "tlsCaFile": str(ca_file), "user": "bob", "password": "s3cretpw"}
        name = f"TLS{unique}"
        with jssync.connect(srv.url, tls=jspark.ConnectOptions.parse({"tlscafile": str(ca_file)}).tls_context(),
                            user="bob", password="s3cretpw") as nc:
            nc.jetstream().create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
            spark.range(0, 50).selectExpr("cast(id as string) as data").write.format("jetstream").mode("append") \
                .options(**opts).option("subject", f"{name}.x").save()
            df = spark.read.format("jetstream").options(**opts).option("stream", name).load()
            assert sorted(int(r.data) for r in df.collect()) == list(range(50))
        with pytest.raises(PySparkException, match="AuthorizationError") as ei:
            spark.read.format("jetstream").options(**dict(opts, password="wr0ngpw")).option("stream", name) \
                .load().collect()
        assert "wr0ngpw" not in str(ei.value) and "s3cretpw" not in str(ei.value)


def test_read_errors_are_clear(spark, nats_server, unique):
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="option 'stream' is required"):
        spark.read.format("jetstream").option("servers", nats_server.url).load().collect()
    with pytest.raises(PySparkException, match="StreamNotFoundError"):
        _read(spark, nats_server.url, f"NOPE{unique}").collect()


_NOPULL = """
authorization {
  users: [
    {user: admin, password: adminpw}
    {user: nopull, password: nopullpw, permissions: {publish: {deny: ["$JS.API.CONSUMER.MSG.NEXT.>"]}}}
  ]
}
"""


def test_starting_time_lookup_never_skips_data_on_a_failed_pull(monkeypatch, unique):
    """_seq_at_time gives last_seq + 1 only when nothing is stored at or after the time: a pull
    that got no answer (here: the user may create consumers but not pull) raises instead of
    starting the read after the end of the stream."""
    from jssync.jetstream.consumers import Consumer
    from jssync.server import NatsServer

    name = f"T{unique}"
    with NatsServer(jetstream=True, config=_NOPULL) as srv, \
            jssync.connect(srv.url, user="admin", password="adminpw") as admin:
        ajs = admin.jetstream()
        st = ajs.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
        try:
            for i in range(10):
                ajs.publish(f"{name}.a", f"m{i}".encode())
            t6 = st.get_msg(6).time
            opts = jspark.ReadOptions.parse({"servers": srv.url, "stream": name, "timeout": "2"})
            assert jspark._seq_at_time(ajs, opts, t6, 10) == 6
            future = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
            assert jspark._seq_at_time(ajs, opts, future, 10) == 11

            errors: list[BaseException] = []
            with jssync.connect(srv.url, user="nopull", password="nopullpw", error_cb=errors.append) as nc:
                t0 = time.monotonic()
                with pytest.raises(jssync.TimeoutError, match=rf"stream '{name}'.*{t6.year}") as ei:
                    jspark._seq_at_time(nc.jetstream(timeout=1), opts, t6, 10)
                assert time.monotonic() - t0 < 10 * FACTOR
                assert isinstance(ei.value.__cause__, jssync.TimeoutError)
            assert any(isinstance(e, jssync.PermissionDeniedError) for e in errors)
            assert st.info().state.consumer_count == 0  # the lookup consumer was deleted

            # messages removed between the consumer's creation (num_pending > 0) and the pull:
            # the pull ends normally with 404 No Messages, so nothing is there and no error
            real = Consumer.fetch_no_wait

            def purge_first(self, *a, **kw):
                assert (self.cached_info.num_pending or 0) > 0
                st.purge()
                return real(self, *a, **kw)

            monkeypatch.setattr(Consumer, "fetch_no_wait", purge_first)
            assert jspark._seq_at_time(ajs, opts, t6, 10) == 11
        finally:
            ajs.delete_stream(name)


# -- streaming reads -----------------------------------------------------------------------------


def test_streaming_read_restarts_from_its_checkpoint_exactly_once(spark, nats_server, js, stream, tmp_path):
    name = stream.name
    url = nats_server.url
    out = str(tmp_path / "out")
    ckpt = str(tmp_path / "ckpt")
    _publish(js, [f"{name}.a", f"{name}.b"], 2000)

    def start(trigger: dict):
        return (
            spark.readStream.format("jetstream").option("servers", url).option("stream", name)
            .option("maxMessagesPerTrigger", "500").option("numPartitions", "2").load()
            .select("seq", "subject", "data")
            .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
            .trigger(**trigger).start()
        )

    # first run: stopped mid-way, after a few micro-batches
    q = start({"processingTime": "0 seconds"})
    try:
        wait_for(lambda: len(q.recentProgress) >= 2, timeout=120, what="two micro-batches")
    finally:
        q.stop()
    done_first = spark.read.parquet(out).count()
    assert 0 < done_first < 2000
    # more messages, then a restart from the checkpoint that reads what is there now
    _publish(js, [f"{name}.a", f"{name}.b"], 500, start=2000)
    q = start({"availableNow": True})
    assert q.awaitTermination(180 * FACTOR)
    assert q.exception() is None
    rows = spark.read.parquet(out).collect()
    seqs = sorted(r.seq for r in rows)
    assert seqs == list(range(1, 2501)), f"{len(seqs)} rows, {len(set(seqs))} distinct"
    assert all(r.data == f"m{r.seq - 1}".encode() for r in rows)
    # maxMessagesPerTrigger capped every micro-batch
    assert all(p["numInputRows"] <= 500 for p in q.recentProgress)


def test_streaming_read_starting_latest_and_offsets(spark, nats_server, js, stream, tmp_path):
    name = stream.name
    _publish(js, [f"{name}.a"], 10)
    reader = jspark.JetStreamStreamReader(
        jspark.ReadOptions.parse({"servers": nats_server.url, "stream": name, "startingsequence": "latest",
                                  "maxmessagespertrigger": "4"}))
    try:
        created = stream.info().created.isoformat()  # offsets name the stream they are in

        def off(seq: int) -> dict:
            return {"seq": seq, "created": created}

        assert reader.initialOffset() == off(11)
        _publish(js, [f"{name}.a"], 10, start=10)
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        assert reader.getDefaultReadLimit() == ReadMaxRows(4)
        assert reader.latestOffset(off(11), ReadMaxRows(4)) == off(15)
        assert reader.latestOffset(off(11), ReadAllAvailable()) == off(21)
        assert reader.latestOffset(off(21), ReadAllAvailable()) == off(21)
        assert reader.latestOffset({"seq": 11}, ReadAllAvailable()) == off(21)  # an offset without created
        reader.prepareForTriggerAvailableNow()
        _publish(js, [f"{name}.a"], 5, start=20)
        assert reader.latestOffset(off(11), ReadAllAvailable()) == off(21)  # the availableNow target
        parts = reader.partitions(off(11), off(21))
        assert [(p.first, p.last) for p in parts] == [(11, 20)]
        assert reader.partitions(off(21), off(21)) == []
        import pickle

        assert pickle.loads(pickle.dumps(reader)).opts == reader.opts  # no connection travels
        batches = list(reader.read(parts[0]))
        assert [s for b in batches for s in b.column("seq").to_pylist()] == list(range(11, 21))
    finally:
        reader.stop()


# -- writes --------------------------------------------------------------------------------------


def test_write_then_read_back(spark, nats_server, js, unique):
    from pyspark.sql import functions as F

    name = f"OUT{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url
    try:
        df = spark.range(0, 1000, numPartitions=3).select(
            F.when(F.col("id") % 10 == 0, F.lit(f"{name}.tens")).otherwise(F.lit(f"{name}.rest")).alias("subject"),
            F.concat(F.lit("row "), F.col("id").cast("string")).alias("data"),  # string data
            F.create_map(F.lit("id"), F.col("id").cast("string")).alias("headers"),
        )
        df.write.format("jetstream").mode("append").option("servers", url).save()
        back = _read(spark, url, name).collect()
        assert len(back) == 1000
        got = {int(r.headers["id"]): r for r in back}
        assert sorted(got) == list(range(1000))
        for i, r in got.items():
            assert r.data == f"row {i}".encode()
            assert r.subject == (f"{name}.tens" if i % 10 == 0 else f"{name}.rest")
            assert r.headers["Nats-Msg-Id"]
        # the same rows written again with an id column: the stream drops every copy
        ids = df.withColumn("id", F.col("headers")["id"])
        ids.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.rest") \
            .option("msgIdColumn", "id").save()
        n_after_first = js.stream(name).info().state.messages
        ids.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.rest") \
            .option("msgIdColumn", "id").save()
        assert n_after_first == 2000
        assert js.stream(name).info().state.messages == 2000
    finally:
        js.delete_stream(name)


def test_the_subject_option_wins_over_the_subject_column(spark, nats_server, js, stream, unique):
    """Kafka's ``topic`` option wins over its ``topic`` column; so does ``subject``: a DataFrame
    read from a stream goes to the option's subject, not back into the stream it came from."""
    name = stream.name
    out = f"OUT{unique}"
    js.create_stream(name=out, subjects=[out], storage="memory")
    try:
        _publish(js, [f"{name}.a", f"{name}.b"], 20)
        df = _read(spark, nats_server.url, name)
        df.write.format("jetstream").mode("append").option("servers", nats_server.url).option("subject", out).save()
        assert js.stream(out).info().state.messages == 20
        assert js.stream(name).info().state.messages == 20
        # with a key the option's subject is the one the key is appended to
        keyed = f"KEYED{unique}"
        js.create_stream(name=keyed, subjects=[f"{keyed}.*"], storage="memory")
        try:
            df.selectExpr("subject", "data", "'k1' as key").write.format("jetstream").mode("append") \
                .option("servers", nats_server.url).option("subject", keyed).save()
            assert js.stream(keyed).info().state.messages == 20
            assert js.stream(keyed).get_msg(1).subject == f"{keyed}.k1"
            assert js.stream(name).info().state.messages == 20
        finally:
            js.delete_stream(keyed)
    finally:
        js.delete_stream(out)


def test_the_readme_spark_block_as_written_copies_orders_to_out(spark, nats_server, js):
    """README.md's Spark block, run as written (the stream ORDERS of 20 messages, and OUT)."""
    js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory")
    js.create_stream(name="OUT", subjects=["OUT"], storage="memory")
    try:
        _publish(js, ["ORDERS.new", "ORDERS.paid"], 20)
        url = nats_server.url
        from jssync.spark import register
        register(spark)                                   # format "jetstream" (PySpark 4 Python Data Source API)
        df = (spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS")
              .option("subjects", "ORDERS.*").option("numPartitions", 4).load())
        q = spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
        df.write.format("jetstream").mode("append").option("servers", url).option("subject", "OUT").save()
        assert q.isStreaming
        assert js.stream("OUT").info().state.messages == 20
        assert js.stream("ORDERS").info().state.messages == 20
    finally:
        js.delete_stream("OUT")
        js.delete_stream("ORDERS")


def test_forced_task_retry_creates_no_duplicates(spark, nats_server, js, unique):
    """The first attempt of partition 0 fails after some of its rows were stored; the retry
    publishes them again with the same derived message ids, so the stream keeps one copy."""
    name = f"RT{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url

    def fail_first_attempt(batches):
        import time as _time

        from pyspark import TaskContext

        import jssync as _jssync

        tc = TaskContext.get()
        n = 0
        for pdf in batches:
            yield pdf
            n += len(pdf)
            if tc.attemptNumber() == 0 and tc.partitionId() == 0 and n >= 1000:
                with _jssync.connect(url) as c:
                    st = c.jetstream().stream(name)
                    end = _time.monotonic() + 60
                    while _time.monotonic() < end and st.info().state.messages < 300:
                        _time.sleep(0.05)  # poll: for 300 stored, inside the deadline
                raise RuntimeError("injected failure of the first attempt")

    try:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "250")
        df = spark.range(0, 4000, numPartitions=2).selectExpr(
            f"concat('{name}.', id % 4) as subject", "concat(cast(id as string), repeat('x', 1000)) as data")
        df.mapInPandas(fail_first_attempt, df.schema).write.format("jetstream").mode("append") \
            .option("servers", url).save()
        info = js.stream(name).info()
        assert info.state.messages == 4000
        ids = {r.data.split(b"x", 1)[0] for r in _read(spark, url, name).select("data").collect()}
        assert len(ids) == 4000
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        js.delete_stream(name)


def test_task_retry_with_rows_in_another_order_stores_each_row_once(spark, nats_server, js, unique):
    """The first attempt of partition 0 publishes all its rows, then fails on a bad row; the
    retry produces the same rows in reverse order (and no bad row). Derived ids do not depend
    on the order, so the stream keeps exactly one copy of each row, and identical rows of one
    partition (same subject and data) are each stored once, not collapsed into one."""
    import collections

    name = f"RO{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url

    def fail_first_attempt_then_reverse(batches):
        import pandas as pd
        from pyspark import TaskContext

        tc = TaskContext.get()
        pdf = pd.concat(list(batches), ignore_index=True)
        if tc.partitionId() == 0 and tc.attemptNumber() == 0:
            # a wildcard subject: the writer fails the task on this row, after the others
            pdf = pd.concat([pdf, pd.DataFrame({"subject": [f"{name}.*"], "data": ["bad"]})], ignore_index=True)
        elif tc.attemptNumber() > 0:
            pdf = pdf.iloc[::-1].reset_index(drop=True)
        for lo in range(0, len(pdf), 250):
            yield pdf.iloc[lo:lo + 250]

    try:
        # ids 0, 700 and 1400 of partition 0 are the same row (same subject, same data)
        df = spark.range(0, 4000, numPartitions=2).selectExpr(
            f"concat('{name}.p', cast(id div 2000 as string), '.', id % 4) as subject",
            "cast(id % 700 as string) as data")
        expected = collections.Counter((r.subject, r.data.encode()) for r in df.collect())
        df.mapInPandas(fail_first_attempt_then_reverse, df.schema).write.format("jetstream").mode("append") \
            .option("servers", url).save()
        got = collections.Counter((r.subject, r.data) for r in _read(spark, url, name).select(
            "subject", "data").collect())
        assert js.stream(name).info().state.messages == 4000
        assert got == expected
    finally:
        js.delete_stream(name)


def test_a_failed_write_stops_the_other_tasks_says_what_it_stored_and_a_rerun_with_its_prefix_stores_nothing_twice(
        spark, nats_server, js, unique):
    """Partition 0 fails on a bad row (every attempt) while partition 1 is still publishing
    when the job fails. Before ``save()`` raises, partition 1 is stopped (by Spark's kill, or
    by the abort's request on the write's stop subject, answered once stopped) and the abort
    waits until no task of the write is connected: nothing lands afterwards. The error says
    exactly how many rows of the failed partition are in the stream (all its PubAcks counted)
    and the id prefix of the write. A re-run of the corrected rows with that ``msgIdPrefix``
    stores each row exactly once."""
    import re

    from pyspark.errors import PySparkException

    name = f"AB{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url
    small, big = 1000, 300_000
    n = small + big

    def rows(bad: bool):
        # partition 0: ids 0..999, id 600 on a wildcard subject when bad (it fails the task at once);
        # partition 1: ids 300000..599999, still publishing when the job fails
        subject = (f"case when id = 600 then '{name}.*' else concat('{name}.', id % 3) end" if bad
                   else f"concat('{name}.', id % 3)")
        return spark.range(0, 2 * big, numPartitions=2).where(f"id < {small} or id >= {big}") \
            .selectExpr(f"{subject} as subject", "cast(id as string) as data")

    try:
        # Arrow batches as big as partition 1: its task has its rows in hand when the job fails
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(big))
        with pytest.raises(PySparkException) as ei:
            rows(True).write.format("jetstream").mode("append") \
                .option("servers", url).option("maxPending", "200").save()
        at_raise = js.stream(name).info().state.messages
        text = str(ei.value)
        m = re.search(r"(\d+) row\(s\) of partition 0 are in the stream.*msgIdPrefix='([^']+)'", text, re.S)
        assert m, text
        failed_part = int(m.group(1))
        assert failed_part == 600  # the rows before the bad one
        prefix = m.group(2)
        # partition 1 was stopped before save() raised, and the abort waited until no task of
        # the write was connected: the stream does not grow any more
        time.sleep(3 * FACTOR)  # nothing happens: the stream does not grow after save() raised
        stored = js.stream(name).info().state.messages
        assert stored == at_raise
        assert failed_part < stored < n
        # the corrected rows again, under the same prefix: only the missing ones are stored
        rows(False).write.format("jetstream").mode("append").option("servers", url).option("msgIdPrefix", prefix).save()
        assert js.stream(name).info().state.messages == n
        got = _read(spark, url, name, numPartitions=4).selectExpr("count(distinct data) as d") \
            .collect()[0]
        assert got.d == n
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        js.delete_stream(name)


def test_write_errors_are_clear(spark, nats_server, js, unique):
    from pyspark.errors import PySparkException

    url = nats_server.url
    df = spark.range(0, 5).selectExpr("cast(id as string) as data")
    with pytest.raises(PySparkException, match="set option 'subject' or give the DataFrame a 'subject' column"):
        df.write.format("jetstream").mode("append").option("servers", url).save()
    with pytest.raises(PySparkException, match="needs a 'data' column"):
        spark.range(0, 5).write.format("jetstream").mode("append").option("servers", url).option("subject", "X").save()
    with pytest.raises(PySparkException, match="only appends"):
        df.write.format("jetstream").option("servers", url).option("subject", "X").mode("overwrite").save()
    with pytest.raises(PySparkException, match="'msgIdColumn' names 'nope'"):
        df.write.format("jetstream").mode("append").option("servers", url).option("subject", "X") \
            .option("msgIdColumn", "nope").save()
    # no stream captures the subject: the publish fails the task, naming row and subject
    with pytest.raises(Exception, match=r"publishing row 0 of partition \d to 'NOSTREAM\.") as ei:
        df.write.format("jetstream").mode("append").option("servers", url).option("subject", f"NOSTREAM.{unique}") \
            .option("publishTimeout", "2").save()
    assert "NoRespondersError" in str(ei.value)


def test_streaming_write_from_a_stream_to_a_stream(spark, nats_server, js, stream, unique, tmp_path):
    src = stream.name
    dst = f"DST{unique}"
    js.create_stream(name=dst, subjects=[f"{dst}.>"], storage="memory")
    url = nats_server.url
    try:
        _publish(js, [f"{src}.a", f"{src}.b"], 600)

        def run():
            q = (
                spark.readStream.format("jetstream").option("servers", url).option("stream", src)
                .option("maxMessagesPerTrigger", "250").load()
                .selectExpr(f"concat('{dst}.', subject) as subject", "upper(cast(data as string)) as data")
                .writeStream.format("jetstream").option("servers", url)
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(availableNow=True).start()
            )
            assert q.awaitTermination(120 * FACTOR)
            assert q.exception() is None
            return [(p["batchId"], p["numInputRows"]) for p in q.recentProgress]

        assert run() == [(0, 250), (1, 250), (2, 100)]
        assert js.stream(dst).info().state.messages == 600
        m = js.stream(dst).get_msg(1)
        assert m.subject == f"{dst}.{src}.a" and m.data == b"M0"
        msg_id = m.headers["Nats-Msg-Id"]
        assert msg_id.count(".") == 4  # query id, micro-batch, partition, row, digest
        # forget that the last micro-batch was committed: the restart replays it (same offsets,
        # same ids, all dropped by the stream), then reads the new messages
        commits = sorted((tmp_path / "ckpt" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
        assert len(commits) == 3  # 250 + 250 + 100
        last = commits[-1]
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        _publish(js, [f"{src}.a"], 100, start=600)
        assert run() == [(2, 100), (3, 100)]
        assert js.stream(dst).info().state.messages == 700
    finally:
        js.delete_stream(dst)

