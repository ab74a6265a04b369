"""The ``jetstream`` data source itself, and registering it on a SparkSession."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ..base.errors import ValidationError
from .aborting import note_max_failures
from .options import FORMAT, ReadOptions, WriteOptions
from .ranges import schema_type
from .reading import JetStreamBatchReader, JetStreamStreamReader, _check_schema
from .writing import JetStreamBatchWriter, JetStreamStreamWriter, check_duplicate_window, check_write_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# -- the data source -----------------------------------------------------------------------------


def _plain(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


class JetStreamDataSource(DataSource):
    """The ``jetstream`` format: batch and streaming reads of a stream, batch and streaming writes.

    Register it with :func:`register` (or ``spark.dataSource.register(JetStreamDataSource)``).
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """The read schema; checks every read option first (Spark calls this at ``load()``).

        ``spark.read...load()`` and ``spark.readStream...load()`` call it (a read given its
        own ``.schema(...)`` does not), so a wrong option name or value raises there, naming
        the option, not at the first action. Writes never call it. Pure: nothing is sent.
        Raises :class:`jssync.ValidationError`.
        """
        opts = ReadOptions.parse(_plain(self.options))
        return schema_type(opts.headers_format, opts.include_key)

    def reader(self, schema: StructType) -> JetStreamBatchReader:
        opts = ReadOptions.parse(_plain(self.options))
        _check_schema(schema, opts.headers_format, opts.include_key)
        return JetStreamBatchReader(opts)

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:
        opts = ReadOptions.parse(_plain(self.options))
        _check_schema(schema, opts.headers_format, opts.include_key)
        if opts.ending_time is not None:
            raise ValidationError(
                "option 'endingTime' is for batch reads only (as Kafka's endingTimestamp); bound a streaming "
                "read with option 'endingSequence'")
        return JetStreamStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> JetStreamBatchWriter:
        if overwrite:
            raise ValidationError(
                "the jetstream sink only appends: use .mode(\"append\") (a stream cannot be overwritten)")
        opts = WriteOptions.parse(_plain(self.options))
        check_write_schema(schema, opts)
        check_duplicate_window(opts)
        return JetStreamBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> JetStreamStreamWriter:
        opts = WriteOptions.parse(_plain(self.options))
        check_write_schema(schema, opts)
        check_duplicate_window(opts)
        return JetStreamStreamWriter(opts)


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread, in Python and in the JVM.

    PySpark 4.3 runs the calls of each Python thread on a JVM thread of its own, and a
    new thread has no active session there: a ``df.write.format("jetstream")`` (any Python
    data source) from any thread but the one that created the session fails with
    ``DATA_SOURCE_NOT_FOUND`` (reads are not affected). Call this first in such a thread.
    PySpark has no public ``SparkSession.setActiveSession``; this uses ``createDataFrame``
    (of no rows, no job runs), which makes its session the active one of the calling
    thread. Blocks for one call into the JVM.
    """
    spark.createDataFrame([], "x int")
    note_max_failures(spark)


def register(spark: SparkSession) -> None:
    """Register the ``jetstream`` format on ``spark`` (once per session; again is harmless).

    A batch write needs ``.mode("append")``: Spark refuses its default save mode
    (ErrorIfExists) for every Python data source before the sink is asked, and the sink
    refuses ``overwrite``. Nothing of PySpark is changed. Executors import
    :mod:`jssync.spark` by name, so jssync must be installed where the Python workers run.
    Blocks for a few calls into the JVM.
    """
    spark.dataSource.register(JetStreamDataSource)
    note_max_failures(spark)
