"""JetStream as a PySpark data source and sink (the PySpark 4 Python Data Source API).

Register the ``jetstream`` format once per SparkSession, then read and write streams
with the usual DataFrame API::

    from jssync.spark import register

    register(spark)
    df = (spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS")
          .option("subjects", "ORDERS.*").load())     # stream, subject, seq, time, data, headers
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS")
         .load().writeStream...)                       # offsets are stream sequences
    df.write.format("jetstream").mode("append").option("servers", url).option("subject", "OUT").save()

A read takes one stream (``stream``) or several (``streams``, like Kafka's ``subscribe``:
streaming offsets then hold one position per stream, and every check below applies to
each stream). Reads split each stream's sequence range into ``numPartitions`` ranges; each Spark task opens its
own jssync connection and reads its range with an ordered consumer and no-wait pull
requests (``readMethod=consumer``, the default and the faster) or with batched Direct
Gets (``readMethod=direct``, for streams with ``allow_direct``). A task whose planned
range lost messages to the stream's limits, a purge or expiry before it read them fails
with :class:`DataLossError` (``failOnDataLoss=false``: skips them). Streaming reads take
``maxMessagesPerTrigger``, ``minMessagesPerTrigger`` and ``maxTriggerDelay`` like Spark's
Kafka source; their offsets carry the stream's creation time, so a query restarted on a
stream that was deleted and created again fails with :class:`DataLossError`
(``failOnDataLoss=false``: starts over at the new stream's first sequence). A wrong read
option (name or value) raises at ``load()``, a batch write's at ``save()``, a streaming
write's when its query plans the first micro-batch; a ``subjects`` filter outside the
stream's subjects fails the query when it is planned.
Batch reads may end at ``endingTime`` (Kafka's ``endingTimestamp``); ``headersFormat=array``
gives Kafka's array of key/value structs for ``headers`` (repeated names kept), and the
sink takes that column too, and a ``key`` column as the last subject token; ``includeKey=true``
gives reads that ``key`` column (the subject's last token).
Writes publish every row with ``publish_async``'s checks and a reply subject of their own
(``<inbox>.<row>``, PubAcks counted as they come, see :mod:`jssync.spark.rowpub`) and wait for
all PubAcks before the task ends, so a failed publish fails the task; each message carries a ``Nats-Msg-Id``
(from a column, or derived from the query, batch, partition and the row's content and
its occurrence count, never its position) so retried tasks and replayed micro-batches
are de-duplicated by the stream's duplicate window whatever order their rows come in.
When a write fails, the task failing on its last attempt and then the driver's abort stop
the tasks still publishing (a request on ``_JSSYNC.SPARK.STOP.<write token>.<batch>``, see
:mod:`jssync.spark.aborting`) and wait until none of them publishes, so nothing lands after
``save()`` raised, and the error counts the rows of the whole write in the stream.

The modules, by job: :mod:`~jssync.spark.options` (option names and parsing),
:mod:`~jssync.spark.ranges` (a task reading its sequence range), :mod:`~jssync.spark.reading`
(planning reads, offsets, the readers), :mod:`~jssync.spark.writing` (a task publishing its
rows, the writers), :mod:`~jssync.spark.rowpub` (PubAcks counted as they come),
:mod:`~jssync.spark.aborting` (stopping a failed write's tasks, counting what it left) and
:mod:`~jssync.spark.source` (the data source, :func:`register`); every name is importable
from :mod:`jssync.spark` too.

Everything the executors get (readers, partitions, writers) holds plain option values
only, never a connection. Needs PySpark 4.2 or newer (``pip install 'pyspark[sql]>=4.2'``, or the
extra ``.[spark]`` in a jssync checkout) and Java 17. See ``docs/spark.md``.
"""

from __future__ import annotations

import logging

try:
    import pyspark
    from pyspark.sql.datasource import DataSource  # noqa: F401 - the Python Data Source API is there
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "jssync.spark needs PySpark 4.2 or newer with its SQL extras (pyarrow, pandas): "
        "pip install 'pyspark[sql]>=4.2' (the extra '.[spark]' in a jssync checkout; Spark also needs Java 17, "
        "see docs/spark.md)"
    ) from _exc

_MIN_PYSPARK = (4, 2)


def _version_tuple(v: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in v.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


if _version_tuple(pyspark.__version__) < _MIN_PYSPARK:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"jssync.spark needs PySpark {_MIN_PYSPARK[0]}.{_MIN_PYSPARK[1]} or newer (found {pyspark.__version__}, "
        "which has no pyspark.sql.streaming.datasource for the streaming reader's admission control): "
        "pip install -U 'pyspark[sql]>=4.2'"
    )


# the modules, by job (everything they held before the split stays importable from here)
from .aborting import STOP_SUBJECT_PREFIX, stop_subject, stop_tasks  # noqa: E402, F401
from .errors import DataLossError, SparkWriteError  # noqa: E402, F401
from .options import (  # noqa: E402, F401
    FORMAT,
    KEY_COLUMN,
    SCHEMA,
    SCHEMA_ARRAY_HEADERS,
    ConnectOptions,
    ReadOptions,
    WriteOptions,
    check_option_names,
)
from .ranges import (  # noqa: E402, F401
    SequenceRange,
    _created_text,
    header_lines,
    read_range,
    schema_type,
    split_range,
    subject_keys,
)
from .reading import JetStreamBatchReader, JetStreamStreamReader, _seq_at_time, share_limit  # noqa: E402, F401
from .source import JetStreamDataSource, activate, register  # noqa: E402, F401
from .writing import (  # noqa: E402, F401
    JetStreamBatchWriter,
    JetStreamCommitMessage,
    JetStreamStreamWriter,
    check_duplicate_window,
    check_write_schema,
    derive_msg_id,
    write_batches,
)

__all__ = [
    "FORMAT",
    "SCHEMA",
    "SCHEMA_ARRAY_HEADERS",
    "DataLossError",
    "JetStreamDataSource",
    "SparkWriteError",
    "activate",
    "register",
]

log = logging.getLogger("jssync.spark")
