"""A streaming ``jetstream`` query whose stream is deleted while it runs: with
``failOnDataLoss=false`` a trigger that finds no stream waits (no micro-batch) and the
query starts over on the stream created again; with the default it fails with a
DataLossError that names the stream and the option."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _api_total(nats_server) -> int:
    return int(nats_server.varz("jsz")["api"]["total"])


def _start(spark, url: str, name: str, ckpt, collect, **options: str):
    r = spark.readStream.format("jetstream").option("servers", url).option("stream", name)
    for k, v in options.items():
        r = r.option(k, v)
    return (r.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
            .trigger(processingTime="100 milliseconds").start())


@pytest.mark.parametrize("fail_on_data_loss", ["false", "true"])
def test_triggers_while_the_stream_is_deleted(spark, nats_server, js, unique, tmp_path, fail_on_data_loss):
    name = f"D{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    seen: list[bytes] = []
    lock = threading.Lock()

    def collect(df, _batch_id):
        rows = [bytes(r.data) for r in df.select("data").collect()]
        with lock:
            seen.extend(rows)

    def count() -> int:
        with lock:
            return len(seen)

    q = _start(spark, url, name, tmp_path / "ckpt", collect, failOnDataLoss=fail_on_data_loss)
    try:
        for i in range(5):
            js.publish(f"{name}.a", f"old{i}".encode())
        wait_for(lambda: count() >= 5 or q.exception() is not None, 120, what="the first 5 messages")
        assert q.exception() is None
        js.delete_stream(name)
        # every trigger looks the stream up (one API request): wait for several triggers
        before = _api_total(nats_server)
        wait_for(lambda: q.exception() is not None or _api_total(nats_server) >= before + 5, 120,
                 what="triggers while the stream is deleted")
        if fail_on_data_loss == "true":
            wait_for(lambda: q.exception() is not None, 60 * FACTOR, what="the query to fail")
            text = str(q.exception())
            assert "DataLossError" in text and f"stream {name!r} no longer exists" in text, text
            assert "failOnDataLoss=false" in text, text
            return
        assert q.exception() is None and q.isActive
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
        for i in range(3):
            js.publish(f"{name}.a", f"new{i}".encode())
        wait_for(lambda: count() >= 8 or q.exception() is not None, 120, what="the new stream's messages")
        assert q.exception() is None
        with lock:
            assert sorted(seen) == sorted([f"old{i}".encode() for i in range(5)]
                                          + [f"new{i}".encode() for i in range(3)])
    finally:
        q.stop()
        try:
            js.delete_stream(name)
        except Exception:  # noqa: BLE001 - deleted by the test already
            pass


def test_a_range_of_a_stream_deleted_after_planning_fails_or_is_skipped(nats_server, js, unique):
    from jssync import spark as jspark

    name = f"G{unique}"
    js.create_stream(name=name, subjects=[name], storage="memory")
    for i in range(3):
        js.publish(name, f"m{i}".encode())
    planned = jspark._created_text(js.stream(name).cached_info.created)
    js.delete_stream(name)
    opts = jspark.ReadOptions.parse({"servers": nats_server.url, "stream": name})
    gone = rf"stream '{name}' no longer exists .*1\.\.3 .*failOnDataLoss=false"
    with pytest.raises(jspark.DataLossError, match=gone):
        list(jspark.read_range(opts, 1, 3, 1, planned))
    opts = jspark.ReadOptions.parse({"servers": nats_server.url, "stream": name, "failondataloss": "false"})
    assert list(jspark.read_range(opts, 1, 3, 1, planned)) == []
