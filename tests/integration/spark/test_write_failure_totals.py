"""What the error of a failed ``jetstream`` write says it left in the stream, on local Spark
(the shared ``local[2,3]`` session: two threads, three attempts per task, so the job fails with
a task's third failed attempt) against a real nats-server.

The error ``save()`` raises counts the rows of the whole write: the failed task's, those of
the tasks it stopped, and those of the tasks that had finished; the count equals what the
stream holds, which does not grow after ``save()`` raised.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.conftest import FACTOR

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_the_error_of_a_failed_write_counts_every_row_of_the_write_in_the_stream(spark, nats_server, js, unique):
    """Partition 0 has no rows and ends at once; partition 2 (50,000 rows) starts on its core
    and finishes; partition 3 starts there next and fails on a bad row after 600 rows, three
    times (Spark's retries publish the same 600 rows again: with derived message ids they are
    duplicates, counted once), while partition 1 (600,000 rows in one Arrow batch, at most 200
    PubAcks missing) is still publishing: it outlasts the 50,000 rows of partition 2 and the
    three attempts of 600 rows on the other core by far (and the test checks it was stopped). The error says how many
    rows of the whole write are in the stream: exactly what the stream holds, with partition 2
    counted as finished and partition 1 as stopped."""
    from pyspark.errors import PySparkException

    name = f"WT{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url
    try:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(_BIG))
        with pytest.raises(PySparkException) as ei:
            _rows(spark, name).write.format("jetstream").mode("append") \
                .option("servers", url).option("maxPending", "200").save()
        _check_whole_write_count(js, name, str(ei.value))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        js.delete_stream(name)


_BIG, _DONE_ROWS, _BAD_AT = 600_000, 50_000, 600


def _rows(spark, name: str):
    """Partition 0: no rows; 1: ids BIG..2*BIG-1; 2: ids 2*BIG..2*BIG+DONE_ROWS-1; 3: ids
    3*BIG..3*BIG+999, id 3*BIG+BAD_AT on a wildcard subject (the task fails on it)."""
    b = _BIG
    return spark.range(0, 4 * b, numPartitions=4).where(
        f"(id >= {b} and id < {2 * b + _DONE_ROWS}) or (id >= {3 * b} and id < {3 * b + 1000})").selectExpr(
        f"case when id = {3 * b + _BAD_AT} then '{name}.*' else concat('{name}.', id % 3) end as subject",
        "cast(id as string) as data")


def _check_whole_write_count(js, name: str, text: str) -> None:
    at_raise = js.stream(name).info().state.messages
    m = re.search(r"(\d+) row\(s\) of this write are in the stream in all \((\d+) of partition (\d), "
                  r"(\d+) of \d+ finished task\(s\) \[([\d, ]*)\], (\d+) of \d+ task\(s\) stopped by this "
                  r"failure \[([\d, ]*)\]", text)
    assert m, text
    total, own, failed, finished, finished_parts, stopped, stopped_parts = m.groups()
    time.sleep(2 * FACTOR)  # nothing happens: the stream does not grow after save() raised
    in_stream = js.stream(name).info().state.messages
    assert in_stream == at_raise
    assert int(total) == in_stream, text
    assert (failed, int(own)) == ("3", _BAD_AT)
    assert finished_parts in ("2", "0, 2") and int(finished) == _DONE_ROWS, text
    # partition 1 is stopped mid-write; on two executors its Python worker may still be starting
    # when partition 3 fails its last attempt, so it may have stored nothing yet
    assert stopped_parts == "1" and 0 <= int(stopped) < _BIG
    assert int(total) == int(own) + int(finished) + int(stopped)
    assert "msgIdPrefix='" in text


def test_an_input_that_fails_mid_task_fails_the_write_and_every_row_before_it_is_in_the_stream(
        spark, nats_server, js, unique):
    """The query upstream of the sink (a pandas function) raises after yielding 3,000 of its
    rows: the job fails with that error, the stream holds at most those rows and does not
    grow after ``save()`` raised, and a count the sink's error gives is the stream's.
    (Measured on local[2], pyspark 4.3: Spark ends the sink's input before handing it the
    rows yielded before the failure, so none is stored; ``write_batches`` itself, given an
    input that raises, publishes everything before it: test_write_task_failures.py.)"""
    from pyspark.errors import PySparkException

    name = f"WI{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    url = nats_server.url

    def breaks_after_3000(batches):
        import pandas as pd

        pdf = pd.concat(list(batches), ignore_index=True)
        for lo in range(0, 3000, 1000):
            yield pdf.iloc[lo:lo + 1000]
        raise ValueError("the upstream query broke")

    df = spark.range(0, 5000, numPartitions=1).selectExpr(f"concat('{name}.', id % 3) as subject",
                                                         "cast(id as string) as data")
    try:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        with pytest.raises(PySparkException) as ei:
            df.mapInPandas(breaks_after_3000, df.schema).write.format("jetstream").mode("append") \
                .option("servers", url).save()
        text = str(ei.value)
        assert "the upstream query broke" in text, text
        at_raise = js.stream(name).info().state.messages
        time.sleep(2 * FACTOR)  # nothing happens: no row lands after save() raised
        assert js.stream(name).info().state.messages == at_raise
        in_stream = js.stream(name).info().state.messages
        assert in_stream <= 3000
        m = re.search(r"(\d+) row\(s\) of partition 0 are in the stream", text)
        if m is not None:  # the sink's own error (when Spark reports it): its count is the stream's
            assert int(m.group(1)) == in_stream, text
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        js.delete_stream(name)
