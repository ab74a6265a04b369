"""A ``jetstream`` read task's buffers are bounded by bytes, not only by rows: with 1 MB
messages each Arrow batch it yields holds about ``arrowBatchBytes`` of data (16 MiB by
default) however many rows ``arrowBatchSize`` allows, with either read method."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)

MB = 1_000_000
N = 40


@pytest.fixture(scope="module")
def big_stream(nats_server):
    """A memory stream ``BIG`` of 40 messages of 1 MB each (module-wide: publishing them takes a while)."""
    import jssync

    with jssync.connect(nats_server.url) as nc:
        js = nc.jetstream()
        js.create_stream(name="BIGREAD", subjects=["BIGREAD.*"], storage="memory", allow_direct=True)
        try:
            for i in range(N):
                js.publish_async(f"BIGREAD.{i % 2}", bytes([i]) * MB)
            js.publish_async_completed(timeout=60)
            yield "BIGREAD"
        finally:
            js.delete_stream("BIGREAD")


def _batch_sizes(url: str, stream: str, **options: str) -> list[tuple[int, int]]:
    opts = jspark.ReadOptions.parse({"servers": url, "stream": stream,
                                     **{k.lower(): v for k, v in options.items()}})
    out = []
    for rb in jspark.read_range(opts, 1, N):
        out.append((rb.num_rows, rb.column("data").nbytes))
    return out


@pytest.mark.parametrize("method", ["consumer", "direct"])
def test_each_arrow_batch_holds_about_arrow_batch_bytes_of_1mb_messages(nats_server, big_stream, method):
    default = _batch_sizes(nats_server.url, big_stream, readMethod=method)
    assert sum(n for n, _ in default) == N
    # 16 MiB of data, plus the message that crossed it (and the column's offsets)
    limit = 16 * 1024 * 1024
    assert all(b <= limit + MB + 4096 for _, b in default), default
    assert len(default) == 3, default  # 17 + 17 + 6 messages
    small = _batch_sizes(nats_server.url, big_stream, readMethod=method, arrowBatchBytes=str(3 * MB))
    assert [n for n, _ in small] == [3] * 13 + [1], small
    # the row count still applies
    rows = _batch_sizes(nats_server.url, big_stream, readMethod=method, arrowBatchSize="2")
    assert [n for n, _ in rows] == [2] * 20, rows


def test_a_spark_read_of_1mb_messages_with_small_request_and_batch_bytes_reads_every_message(
        spark, nats_server, big_stream):
    df = (spark.read.format("jetstream").option("servers", nats_server.url).option("stream", big_stream)
          .option("batchBytes", "1").option("arrowBatchBytes", str(2 * MB)).load())
    got = sorted((r.seq, r.n, r.first) for r in df.selectExpr("seq", "length(data) as n",
                                                             "cast(substring(data, 1, 1) as binary) as first")
                 .collect())
    assert [(s, n) for s, n, _ in got] == [(i + 1, MB) for i in range(N)]
    assert [bytes(f) for _, _, f in got] == [bytes([i]) for i in range(N)]
