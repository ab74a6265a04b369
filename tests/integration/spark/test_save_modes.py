"""The ``jetstream`` sink's save modes: it appends (``.mode("append")``), refuses every other
mode with a message that names ``.mode("append")``, and changes nothing in PySpark itself."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

from jssync import spark as jspark  # noqa: E402  (pyspark is a test dependency: never skipped)


@pytest.fixture
def stream(js, unique):
    """A memory stream ``W<unique>`` on ``W<unique>``, deleted afterwards."""
    name = f"W{unique}"
    st = js.create_stream(name=name, subjects=[name], storage="memory")
    try:
        yield st
    finally:
        js.delete_stream(name)


def test_register_leaves_pyspark_dataframe_writer_untouched(spark):
    from pyspark.sql.readwriter import DataFrameWriter

    jspark.register(spark)  # again: harmless
    fmt = DataFrameWriter.__dict__["format"]
    assert fmt.__module__ == "pyspark.sql.readwriter" and fmt.__qualname__ == "DataFrameWriter.format"
    assert not hasattr(fmt, "__wrapped__")


def test_append_mode_writes_and_other_modes_are_refused_naming_append(spark, nats_server, stream):
    from pyspark.errors import PySparkException

    url = nats_server.url
    df = spark.range(0, 3).selectExpr("cast(id as string) as data")

    def writer():
        return df.write.format("jetstream").option("servers", url).option("subject", stream.name)

    writer().mode("append").save()
    assert stream.info().state.messages == 3
    for mode in (None, "overwrite", "error", "ignore"):
        w = writer() if mode is None else writer().mode(mode)
        with pytest.raises(PySparkException) as ei:
            w.save()
        msg = str(ei.value)
        if mode == "overwrite":  # the sink's own refusal
            assert 'only appends: use .mode("append")' in msg, msg
        else:  # Spark's, before the sink is asked (for every Python data source)
            assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in msg and '"Append"' in msg, msg
    assert stream.info().state.messages == 3
