"""What the ``jetstream`` sink does with rows its headers push over the server's max_payload
(it refuses their batch before publishing any row of it, naming the size and the limit),
and with a header whose value is null (it writes no header)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture
def two_streams(js, unique):
    """Memory streams ``A<unique>`` and ``B<unique>`` on their own names, deleted afterwards."""
    names = (f"A{unique}", f"B{unique}")
    for n in names:
        js.create_stream(name=n, subjects=[n, f"{n}.>"], storage="memory")
    try:
        yield names
    finally:
        for n in names:
            js.delete_stream(n)


def test_copying_rows_near_max_payload_with_derived_ids_is_refused_before_any_row_is_published(
        spark, nats_server, nc, js, two_streams):
    from pyspark.errors import PySparkException

    src, dst = two_streams
    url = nats_server.url
    limit = nc.max_payload
    for i in range(10):
        js.publish(src, f"m{i}".encode())
    js.publish(src, b"x" * (limit - 50))  # fits as it is; with a derived id's header it does not
    df = (spark.read.format("jetstream").option("servers", url).option("stream", src)
          .option("numPartitions", "1").load().select("data").coalesce(1))
    with pytest.raises(PySparkException) as ei:
        df.write.format("jetstream").mode("append").option("servers", url).option("subject", dst).save()
    msg = str(ei.value)
    assert f"row 10 of partition 0 is {limit - 50} bytes of data plus 74 bytes of its Nats-Msg-Id header" in msg, msg
    assert f"max_payload of {limit} bytes" in msg and "nothing of this batch was published" in msg, msg
    assert js.stream(dst).info().state.messages == 0
    # without derived ids the same rows fit
    df.write.format("jetstream").mode("append").option("servers", url).option("subject", dst) \
        .option("deriveMsgId", "false").save()
    assert js.stream(dst).info().state.messages == 11


def test_a_header_with_a_null_value_is_not_written(spark, nats_server, js, two_streams):
    name = two_streams[0]
    url = nats_server.url
    maps = spark.createDataFrame([("m", {"a": None, "b": "x"})], "data string, headers map<string,string>")
    maps.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.m").save()
    arrays = spark.createDataFrame([("r", [("a", None), ("b", bytearray(b"y"))])],
                                   "data string, headers array<struct<key:string,value:binary>>")
    arrays.write.format("jetstream").mode("append").option("servers", url).option("subject", f"{name}.r").save()
    st = js.stream(name)
    for subject, b in ((f"{name}.m", "x"), (f"{name}.r", "y")):
        headers = dict(st.get_msg(last_by_subject=subject).headers or {})
        headers.pop("Nats-Msg-Id", None)
        assert headers == {"b": b}, (subject, headers)
