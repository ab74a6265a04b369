"""JetStream as a PySpark data source and sink (the PySpark 4 Python Data Source API).

Register the ``jetstream`` format once per SparkSession, then read and write streams
with the usual DataFrame API::

    from jssync.spark import register

    register(spark)
    df = (spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS")
          .option("subjects", "ORDERS.*").load())     # stream, subject, seq, time, data, headers
    q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS")
         .load().writeStream...)                       # offsets are stream sequences
    df.write.format("jetstream").option("servers", url).option("subject", "OUT").save()

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
(``failOnDataLoss=false``: starts over at the new stream's first sequence). An option a
read or write does not take, or a ``subjects`` filter outside the stream's subjects,
fails the query when it is planned.
Batch reads may end at ``endingTime`` (Kafka's ``endingTimestamp``); ``headersFormat=array``
gives Kafka's array of key/value structs for ``headers`` (repeated names kept), and the
sink takes that column too, and a ``key`` column as the last subject token.
Writes publish every row with ``publish_async``'s checks and a reply subject of their own
(``<inbox>.<row>``, PubAcks counted in bulk, see :mod:`jssync.spark.rowpub`) and wait for
all PubAcks before the task ends, so a failed publish fails the task; each message carries a ``Nats-Msg-Id``
(from a column, or derived from the query, batch, partition and the row's content and
its occurrence count, never its position) so retried tasks and replayed micro-batches
are de-duplicated by the stream's duplicate window whatever order their rows come in.
When a write fails, the driver's abort stops the tasks still publishing (a request on
``_JSSYNC.SPARK.STOP.<write token>.<batch>``, see :func:`stop_tasks`) and waits until
none of them is connected, so nothing lands after ``save()`` raised.

Everything the executors get (readers, partitions, writers) holds plain option values
only, never a connection. Needs PySpark 4.2 or newer (``pip install 'jssync[spark]'``)
and Java 17. See ``docs/spark.md``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import math
import ssl
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..base.errors import (
    ConnectionClosedError,
    JetStreamError,
    MessageNotFoundError,
    TimeoutError,
    ValidationError,
)
from ..base.times import parse_server_time
from ..core import natspy as _natspy
from .errors import DataLossError, SparkWriteError, _RowFailed, _Stopped
from .rowpub import RowPublisher

try:
    import pyspark
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
    from pyspark.sql.types import StructType
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "jssync.spark needs PySpark 4.2 or newer with its SQL extras (pyarrow, pandas): "
        "pip install 'jssync[spark]' (Spark also needs Java 17, see docs/spark.md)"
    ) from _exc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..core.connection import Connection
    from ..core.msg import Msg
    from ..jetstream.context import JetStream
    from ..jetstream.streams import Stream

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

#: The format name registered by :func:`register`.
FORMAT = "jetstream"

#: The schema of a read, as a DDL string.
SCHEMA = "stream string, subject string, seq long, time timestamp, data binary, headers map<string,string>"
#: The schema of a read with ``headersFormat=array`` (the ``headers`` column of Spark's Kafka source).
SCHEMA_ARRAY_HEADERS = ("stream string, subject string, seq long, time timestamp, data binary, "
                        "headers array<struct<key:string,value:binary>>")

_MIN_PYSPARK = (4, 2)


def _version_tuple(v: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in v.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


if _version_tuple(pyspark.__version__) < _MIN_PYSPARK:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"jssync.spark needs PySpark {_MIN_PYSPARK[0]}.{_MIN_PYSPARK[1]} or newer (found {pyspark.__version__}): "
        "pip install -U 'jssync[spark]'"
    )


# -- options (pure) ----------------------------------------------------------------------------

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _opt_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None or raw == "":
        return default
    v = str(raw).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValidationError(f"option {key!r} must be true or false, got {raw!r}")


def _opt_int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(key.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ValidationError(f"option {key!r} must be an integer, got {raw!r}") from None
    if v < minimum:
        raise ValidationError(f"option {key!r} must be >= {minimum}, got {raw!r}")
    return v


def _opt_float(opts: Mapping[str, str], key: str, default: float) -> float:
    raw = opts.get(key.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        v = float(str(raw).strip())
    except ValueError:
        raise ValidationError(f"option {key!r} must be a number of seconds, got {raw!r}") from None
    if not v > 0 or math.isinf(v):
        raise ValidationError(f"option {key!r} must be > 0, got {raw!r}")
    return v


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _opt_duration(opts: Mapping[str, str], key: str, default: float) -> float:
    """Seconds from ``"30"``, ``"30s"``, ``"500ms"``, ``"15m"`` or ``"1h"``."""
    raw = opts.get(key.lower())
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip().lower()
    num, unit = text, "s"
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            num, unit = text[: -len(suffix)].strip(), suffix
            break
    try:
        v = float(num) * _UNITS[unit]
    except ValueError:
        raise ValidationError(f"option {key!r} must be a duration such as 30s, 500ms, 15m or 1h, got {raw!r}") from None
    if v < 0 or math.isinf(v) or math.isnan(v):
        raise ValidationError(f"option {key!r} must be >= 0, got {raw!r}")
    return v


def _opt_str(opts: Mapping[str, str], key: str) -> str | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    v = str(raw).strip()
    return v or None


def _parse_time(raw: str, key: str) -> _dt.datetime:
    """An ISO 8601 time (``2024-05-01T12:00:00Z``; a naive time is taken as UTC)."""
    try:
        return parse_server_time(raw)
    except ValueError:
        raise ValidationError(
            f"option {key!r} must be an ISO 8601 time such as 2024-05-01T12:00:00Z, got {raw!r}") from None


#: The options each kind of query takes, as documented (compared case-insensitively: Spark
#: hands the data source its options with lower-cased keys).
_CONNECT_OPTIONS = ("servers", "user", "password", "token", "creds", "nkeysSeed", "tlsCaFile", "tlsCertFile",
                    "tlsKeyFile", "tlsHostname", "connectTimeout", "timeout", "connectionName")
_READ_OPTIONS = ("stream", "streams", "subjects", "subject", "startingSequence", "startingTime", "endingSequence",
                 "endingTime", "numPartitions", "includeHeaders", "headersFormat", "readMethod", "batchSize",
                 "arrowBatchSize",
                 "maxMessagesPerTrigger", "minMessagesPerTrigger", "maxTriggerDelay", "failOnDataLoss")
_WRITE_OPTIONS = ("subject", "msgIdColumn", "deriveMsgId", "msgIdPrefix", "maxPending", "publishTimeout",
                  "expectedRestartTime")
#: Options Spark itself adds (``load(path)``, ``start(path)``, a streaming write's checkpoint and
#: query name): accepted and ignored.
_SPARK_OPTIONS = ("path", "paths", "checkpointLocation", "queryName")

#: Spark's Kafka source and sink options, and what jssync takes instead.
_KAFKA_OPTIONS = {
    "startingOffsets": "startingSequence",
    "endingOffsets": "endingSequence",
    "startingTimestamp": "startingTime",
    "startingOffsetsByTimestamp": "startingTime",
    "endingTimestamp": "endingTime",
    "endingOffsetsByTimestamp": "endingTime",
    "endingOffsetsByTimestampStrategy": "endingTime",
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "minOffsetsPerTrigger": "minMessagesPerTrigger",
    "minPartitions": "numPartitions",
    "maxRecordsPerPartition": "numPartitions",
    "subscribe": "streams (several) or stream (one)",
    "assign": "streams (several) or stream (one)",
    "subscribePattern": "subjects",
    "topic": "subject",
    "kafka.bootstrap.servers": "servers",
    "kafkaConsumer.pollTimeoutMs": "timeout",
}

#: Spark's Kafka source and sink options jssync has no equivalent for, and why.
_KAFKA_UNSUPPORTED = {
    "startingOffsetsByTimestampStrategy": "a startingTime after the last message always starts at the stream's "
                                          "end (Kafka's 'latest' strategy); there is nothing to fail on",
    "fetchOffset.numRetries": "planning asks the server once per stream, within option 'timeout', and a failed "
                              "lookup fails the query (Spark retries the trigger)",
    "fetchOffset.retryIntervalMs": "planning asks the server once per stream, within option 'timeout', and a failed "
                                   "lookup fails the query (Spark retries the trigger)",
    "groupIdPrefix": "reads use no consumer group: each task reads its range with an ephemeral ordered consumer, "
                     "and the position lives in Spark's checkpoint",
    "kafka.group.id": "reads use no consumer group: each task reads its range with an ephemeral ordered consumer, "
                      "and the position lives in Spark's checkpoint",
}


def check_option_names(opts: Mapping[str, Any], kind: str) -> None:
    """Raise :class:`jssync.ValidationError` naming every option a ``kind`` query does not take.

    ``kind`` is ``"read"`` or ``"write"``. Names compare case-insensitively. The error
    names the jssync option for Spark Kafka source names (``startingOffsets``: did you mean
    startingSequence?) and for close typos (``numPartition``: numPartitions), and says when
    the option belongs to the other kind of query. Pure: nothing is sent.
    """
    import difflib

    own = _CONNECT_OPTIONS + (_READ_OPTIONS if kind == "read" else _WRITE_OPTIONS)
    other = _WRITE_OPTIONS if kind == "read" else _READ_OPTIONS
    known = {n.lower(): n for n in own + _SPARK_OPTIONS}
    kafka = {k.lower(): (k, v) for k, v in _KAFKA_OPTIONS.items()}
    unsupported = {k.lower(): (k, v) for k, v in _KAFKA_UNSUPPORTED.items()}
    problems: list[str] = []
    for raw in opts:
        key = str(raw).lower()
        if key in known:
            continue
        if kind == "write" and key == "includeheaders":
            problems.append("unknown option 'includeHeaders' for a write: a write sends the 'headers' column "
                            "whenever the DataFrame has one (Kafka's includeHeaders=true)")
            continue
        if key in unsupported:
            name, why = unsupported[key]
            problems.append(f"unknown option {name!r}: Kafka's {name} has no jssync equivalent, because {why}")
            continue
        if key in kafka:
            name, instead = kafka[key]
            problems.append(f"unknown option {name!r}; did you mean {instead}? (jssync's name for Kafka's "
                            f"{name})")
            continue
        name = str(raw)
        other_names = {n.lower() for n in other}
        if key in other_names:
            problems.append(f"unknown option {name!r} for a {kind}: it is an option of "
                            f"{'writes' if kind == 'read' else 'reads'}")
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
        if close:
            problems.append(f"unknown option {name!r}; did you mean {known[close[0]]}?")
        elif key.startswith("kafka."):
            problems.append(f"unknown option {name!r}: Kafka client settings have no jssync equivalent "
                            "(see the connection options: servers, creds, tlsCaFile, ...)")
        else:
            problems.append(f"unknown option {name!r}")
    if problems:
        raise ValidationError(f"{'; '.join(problems)} (the options of a jetstream {kind} are listed in "
                              "docs/spark.md)")


@dataclass(frozen=True)
class ConnectOptions:
    """How a task connects: plain values only, so it pickles to the executors."""

    servers: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None
    nkeys_seed: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_hostname: str | None = None
    connect_timeout: float = 5.0
    timeout: float = 10.0
    name: str = "jssync-spark"

    def __repr__(self) -> str:  # never show credentials
        return f"ConnectOptions(servers={self.servers!r}, user={self.user!r}, name={self.name!r})"

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> ConnectOptions:
        tls_ca = _opt_str(opts, "tlsCaFile")
        cert = _opt_str(opts, "tlsCertFile")
        key = _opt_str(opts, "tlsKeyFile")
        if (cert is None) != (key is None):
            raise ValidationError("options 'tlsCertFile' and 'tlsKeyFile' go together: set both or neither")
        return cls(
            servers=_opt_str(opts, "servers"),
            user=_opt_str(opts, "user"),
            password=_opt_str(opts, "password"),
            token=_opt_str(opts, "token"),
            creds=_opt_str(opts, "creds"),
            nkeys_seed=_opt_str(opts, "nkeysSeed"),
            tls_ca_file=tls_ca,
            tls_cert_file=cert,
            tls_key_file=key,
            tls_hostname=_opt_str(opts, "tlsHostname"),
            connect_timeout=_opt_float(opts, "connectTimeout", 5.0),
            timeout=_opt_float(opts, "timeout", 10.0),
            name=_opt_str(opts, "connectionName") or "jssync-spark",
        )

    def tls_context(self) -> ssl.SSLContext | None:
        """An SSLContext from the TLS file options, or None when none is set."""
        if not (self.tls_ca_file or self.tls_cert_file):
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca_file)
        if self.tls_cert_file and self.tls_key_file:
            ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return ctx

    def connect(self, role: str) -> Connection:
        """Open a jssync connection (blocks up to ``connect_timeout``)."""
        from ..core.connection import connect

        kw: dict[str, Any] = {"name": f"{self.name}-{role}", "timeout": self.connect_timeout,
                              "callback_workers": 1}
        for k in ("user", "password", "token", "creds", "nkeys_seed", "tls_hostname"):
            v = getattr(self, k)
            if v is not None:
                kw[k] = v
        tls = self.tls_context()
        if tls is not None:
            kw["tls"] = tls
        return connect(self.servers, **kw)


@dataclass(frozen=True)
class ReadOptions:
    """The options of a read (batch or streaming), parsed and checked on the driver."""

    conn: ConnectOptions
    #: The stream read (with option ``streams``: the first of them).
    stream: str
    subjects: tuple[str, ...] = ()
    #: Option ``streams``: every stream read, in the order given (offsets then name each stream);
    #: () with option ``stream``.
    streams: tuple[str, ...] = ()
    starting_sequence: int | None = None  # None: earliest
    starting_latest: bool = False
    starting_time: _dt.datetime | None = None
    ending_sequence: int | None = None  # None: the stream's last sequence at planning
    #: A JSON ``startingSequence`` / ``endingSequence``: stream -> a sequence, ``"earliest"`` or
    #: ``"latest"`` (streams not named take the default).
    starting_by_stream: tuple[tuple[str, int | str], ...] = ()
    ending_by_stream: tuple[tuple[str, int | str], ...] = ()
    #: Option ``endingTime`` (batch reads): the last message stored at or before it.
    ending_time: _dt.datetime | None = None
    num_partitions: int = 1
    include_headers: bool = True
    #: ``map`` (map<string,string>) or ``array`` (Kafka's array<struct<key:string,value:binary>>).
    headers_format: str = "map"
    read_method: str = "consumer"
    batch_size: int = 1000
    arrow_batch_size: int = 10_000
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = 900.0
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> ReadOptions:
        from ..base.validate import validate_subject
        from ..jetstream.params import validate_name

        check_option_names(opts, "read")
        stream = _opt_str(opts, "stream")
        streams_raw = _opt_str(opts, "streams")
        streams: tuple[str, ...] = ()
        if stream is not None and streams_raw is not None:
            raise ValidationError("set option 'stream' (one stream) or 'streams' (several), not both")
        if streams_raw is not None:
            streams = tuple(n.strip() for n in streams_raw.split(","))
            for n in streams:
                validate_name(n, "a stream name in option 'streams'")
            dup = sorted({n for n in streams if streams.count(n) > 1})
            if dup:
                raise ValidationError(f"option 'streams' names {', '.join(map(repr, dup))} more than once")
            stream = streams[0]
        if stream is None:
            raise ValidationError("option 'stream' is required: the name of the stream to read (or option "
                                  "'streams': several names, comma-separated)")
        validate_name(stream, "option 'stream'")
        subjects_raw = _opt_str(opts, "subjects") or _opt_str(opts, "subject")
        subjects: tuple[str, ...] = ()
        if subjects_raw:
            subjects = tuple(s.strip() for s in subjects_raw.split(",") if s.strip())
            for s in subjects:
                validate_subject(s, "option 'subjects'")
        start_raw = _opt_str(opts, "startingSequence")
        time_raw = _opt_str(opts, "startingTime")
        starting_sequence: int | None = None
        latest = False
        if start_raw is not None and time_raw is not None:
            raise ValidationError("set option 'startingSequence' or 'startingTime', not both")
        names = streams or (stream,)
        starting_by = _per_stream(start_raw, "startingSequence", names, ("earliest", "latest"), 1)
        end_raw0 = _opt_str(opts, "endingSequence")
        ending_by = _per_stream(end_raw0, "endingSequence", names, ("latest",), 0)
        if starting_by:
            start_raw = None
        if start_raw is not None:
            low = start_raw.lower()
            if low == "earliest":
                pass
            elif low == "latest":
                latest = True
            else:
                starting_sequence = _opt_int(opts, "startingSequence", None, 1)
        starting_time = _parse_time(time_raw, "startingTime") if time_raw is not None else None
        end_raw = _opt_str(opts, "endingSequence")
        ending: int | None = None
        if end_raw is not None and end_raw.lower() != "latest" and not ending_by:
            ending = _opt_int(opts, "endingSequence", None, 0)
        end_time_raw = _opt_str(opts, "endingTime")
        if end_raw is not None and end_time_raw is not None:
            raise ValidationError("set option 'endingSequence' or 'endingTime', not both")
        ending_time = _parse_time(end_time_raw, "endingTime") if end_time_raw is not None else None
        headers_format = (_opt_str(opts, "headersFormat") or "map").lower()
        if headers_format not in ("map", "array"):
            raise ValidationError(f"option 'headersFormat' must be 'map' or 'array', got {headers_format!r}")
        method = (_opt_str(opts, "readMethod") or "consumer").lower()
        if method not in ("consumer", "direct"):
            raise ValidationError(f"option 'readMethod' must be 'consumer' or 'direct', got {method!r}")
        if method == "direct" and len(subjects) > 1:
            raise ValidationError("readMethod 'direct' reads one subject filter; use readMethod 'consumer' "
                             f"for several subjects ({', '.join(subjects)})")
        if method == "direct" and headers_format == "array":
            raise ValidationError("headersFormat 'array' needs readMethod 'consumer': a Direct Get reply does not "
                                  "keep a header name given more than once")
        max_per = _opt_int(opts, "maxMessagesPerTrigger", None)
        min_per = _opt_int(opts, "minMessagesPerTrigger", None)
        if max_per is not None and min_per is not None and min_per > max_per:
            raise ValidationError(f"option 'minMessagesPerTrigger' ({min_per}) must not be greater than "
                             f"'maxMessagesPerTrigger' ({max_per})")
        return cls(
            conn=ConnectOptions.parse(opts),
            stream=stream,
            subjects=subjects,
            streams=streams,
            starting_sequence=starting_sequence,
            starting_latest=latest,
            starting_time=starting_time,
            ending_sequence=ending,
            starting_by_stream=starting_by,
            ending_by_stream=ending_by,
            ending_time=ending_time,
            num_partitions=_opt_int(opts, "numPartitions", 1) or 1,
            include_headers=_opt_bool(opts, "includeHeaders", True),
            headers_format=headers_format,
            read_method=method,
            batch_size=_opt_int(opts, "batchSize", 1000) or 1000,
            arrow_batch_size=_opt_int(opts, "arrowBatchSize", 10_000) or 10_000,
            max_messages_per_trigger=max_per,
            min_messages_per_trigger=min_per,
            max_trigger_delay=_opt_duration(opts, "maxTriggerDelay", 900.0),
            fail_on_data_loss=_opt_bool(opts, "failOnDataLoss", True),
        )

    def names(self) -> tuple[str, ...]:
        """Every stream the read covers, in the order given."""
        return self.streams or (self.stream,)

    def ending_for(self, name: str) -> int | None:
        """The ``endingSequence`` of stream ``name`` (None: the stream's last sequence)."""
        for n, v in self.ending_by_stream:
            if n == name:
                return v if isinstance(v, int) else None
        return self.ending_sequence


def _per_stream(raw: str | None, key: str, names: tuple[str, ...], words: tuple[str, ...],
                minimum: int) -> tuple[tuple[str, int | str], ...]:
    """A JSON object option (``{"ORDERS": 100, "RETURNS": "latest"}``, like Kafka's
    ``startingOffsets`` JSON) as ``(stream, sequence or word)`` pairs; () when ``raw`` is
    not a JSON object. Raises :class:`jssync.ValidationError` naming what is wrong. Pure."""
    import json

    if raw is None or not raw.startswith("{"):
        return ()
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(f"option {key!r} is not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(obj, dict):  # pragma: no cover - starts with '{'
        raise ValidationError(f"option {key!r} must be a JSON object of stream names, got {raw!r}")
    out: list[tuple[str, int | str]] = []
    for name, v in obj.items():
        if name not in names:
            raise ValidationError(f"option {key!r} names stream {name!r}, which the read does not read "
                                  f"({', '.join(names)})")
        if isinstance(v, str) and v.lower() in words:
            out.append((name, v.lower()))
        elif isinstance(v, int) and not isinstance(v, bool) and v >= minimum:
            out.append((name, v))
        else:
            raise ValidationError(f"option {key!r}: the value for stream {name!r} must be a sequence >= {minimum} "
                                  f"or {' or '.join(map(repr, words))}, got {v!r}")
    return tuple(out)


@dataclass(frozen=True)
class WriteOptions:
    """The options of a write (batch or streaming), parsed and checked on the driver."""

    conn: ConnectOptions
    subject: str | None = None
    msg_id_column: str | None = None
    derive_msg_id: bool = True
    msg_id_prefix: str | None = None
    max_pending: int = 4000
    publish_timeout: float = 30.0
    #: Seconds: the longest restart (or re-run) expected; planning warns when the stream's
    #: duplicate window is shorter. 0: no check.
    expected_restart_time: float = 600.0

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> WriteOptions:
        from ..base.validate import validate_subject

        check_option_names(opts, "write")
        subject = _opt_str(opts, "subject")
        if subject is not None:
            validate_subject(subject, "option 'subject'", wildcards=False)
        return cls(
            conn=ConnectOptions.parse(opts),
            subject=subject,
            msg_id_column=_opt_str(opts, "msgIdColumn"),
            derive_msg_id=_opt_bool(opts, "deriveMsgId", True),
            msg_id_prefix=_opt_str(opts, "msgIdPrefix"),
            max_pending=_opt_int(opts, "maxPending", 4000) or 4000,
            publish_timeout=_opt_float(opts, "publishTimeout", 30.0),
            expected_restart_time=_opt_duration(opts, "expectedRestartTime", 600.0),
        )


# -- planning (pure) ---------------------------------------------------------------------------


def split_range(first: int, last: int, parts: int) -> list[tuple[int, int]]:
    """Split the sequences ``first..last`` (inclusive) into at most ``parts`` contiguous ranges.

    The ranges cover every sequence once, in order, and differ in size by at most one.
    An empty range (``last < first``) gives no ranges.
    """
    if parts < 1:
        raise ValidationError(f"parts must be >= 1, got {parts!r}")
    total = last - first + 1
    if total <= 0:
        return []
    parts = min(parts, total)
    size, extra = divmod(total, parts)
    out: list[tuple[int, int]] = []
    lo = first
    for i in range(parts):
        hi = lo + size - 1 + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi + 1
    return out


#: Bytes of the content digest in a derived ``Nats-Msg-Id`` (96 bits: two different rows of
#: one partition share a digest with odds of about n**2 / 2**97 for n rows).
_DIGEST_SIZE = 12


def _row_digest(subject: str, data: bytes, headers: Mapping[str, str] | None = None) -> Any:
    """The blake2b state of a row's content: its subject, payload and headers (sorted)."""
    h = hashlib.blake2b(subject.encode(), digest_size=_DIGEST_SIZE)
    h.update(b"\x00")
    h.update(data)
    if headers:
        h.update(b"\x00" + len(data).to_bytes(8, "big"))
        for k, v in sorted(headers.items()):
            h.update(f"{len(k)}:{k}{len(v)}:{v}".encode())
    return h


def derive_msg_id(prefix: str, batch: int, partition: int, subject: str, data: bytes, occurrence: int = 0,
                  headers: Mapping[str, str] | None = None) -> str:
    """The ``Nats-Msg-Id`` of a row written without an id column.

    ``<prefix>.<batch>.<partition>.<digest>.<occurrence>``: the write's ``prefix`` (the
    streaming query id, or a per-write id), the micro-batch, the Spark partition, a digest
    of the row's content (subject, payload and headers) and how many rows with the same
    content came before it in the partition's input (0 for the first). None of it depends
    on the order of the rows, so a retried task or a replayed micro-batch that produces the
    same rows in any order produces the same ids (the stream drops the copies), and two
    identical rows of one partition get two ids (both are stored). Pure.
    """
    return f"{prefix}.{batch}.{partition}.{_row_digest(subject, data, headers).hexdigest()}.{occurrence}"


# -- reading (executors) -------------------------------------------------------------------------


@dataclass
class SequenceRange(InputPartition):
    """One Spark input partition: the stream sequences ``first..last`` (inclusive).

    ``expected_from``: every message of the range at or after this sequence was stored (or
    not yet read) when the range was planned: the stream's first sequence at planning for
    a batch read, the micro-batch's start offset for a streaming read. Sequences from it
    that are below the stream's first sequence when the task starts were lost
    (``failOnDataLoss``). 0: no check.

    ``created``: the creation time of the stream the range was planned on (ISO 8601, as
    in the streaming offsets); a stream with another creation time when the task starts
    was deleted and created again, and the whole range was lost. None: no check.
    """

    first: int
    last: int
    expected_from: int = 0
    created: str | None = None
    #: The stream (None: the read's option ``stream``) and the subject filters that apply to it
    #: (None: the read's option ``subjects``).
    stream: str | None = None
    subjects: tuple[str, ...] | None = None

    def __init__(self, first: int, last: int, expected_from: int = 0, created: str | None = None,
                 stream: str | None = None, subjects: tuple[str, ...] | None = None) -> None:
        self.first = first
        self.last = last
        self.expected_from = expected_from
        self.created = created
        self.stream = stream
        self.subjects = subjects


def _parse_reply(reply: str) -> tuple[int, int, int, int]:
    """``(stream seq, consumer seq, num pending, timestamp ns)`` from a JetStream ack subject."""
    t = reply.split(".")
    n = len(t)
    if n == 9:
        return int(t[5]), int(t[6]), int(t[8]), int(t[7])
    if n >= 11:
        return int(t[7]), int(t[8]), int(t[10]), int(t[9])
    from ..base.jsack import parse_ack_subject

    md = parse_ack_subject(reply)  # raises a clear error
    return md.sequence.stream, md.sequence.consumer, md.num_pending, 0  # pragma: no cover


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class _Columns:
    """Column lists for one Arrow record batch."""

    __slots__ = ("subjects", "seqs", "times", "datas", "headers")

    def __init__(self) -> None:
        self.subjects: list[str] = []
        self.seqs: list[int] = []
        self.times: list[int] = []
        self.datas: list[bytes] = []
        #: (name, value) pairs; the value is bytes with headersFormat=array
        self.headers: list[list[tuple[str, str]] | list[tuple[str, bytes]] | None] = []

    def __len__(self) -> int:
        return len(self.seqs)


def schema_type(headers_format: str = "map") -> StructType:
    """The schema of a read as a StructType (:data:`SCHEMA`; with ``headers_format="array"``,
    :data:`SCHEMA_ARRAY_HEADERS`)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        TimestampType,
    )

    headers: Any = MapType(StringType(), StringType())
    if headers_format == "array":
        headers = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
    return StructType([
        StructField("stream", StringType()),
        StructField("subject", StringType()),
        StructField("seq", LongType()),
        StructField("time", TimestampType()),
        StructField("data", BinaryType()),
        StructField("headers", headers),
    ])


def _arrow_schema(headers_format: str = "map") -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema_type(headers_format), timezone="UTC")


def header_lines(block: bytes) -> list[tuple[str, str]]:
    """Every ``name: value`` line of a ``NATS/1.0`` header block, in order, repeated names kept.

    The status line (``NATS/1.0 404 ...``) is not a header and is left out; a line without a
    colon is skipped. Names and values are stripped of surrounding blanks. Pure.
    """
    out: list[tuple[str, str]] = []
    lines = block.decode("utf-8", "replace").split("\r\n")
    for line in lines[1:] if lines and lines[0].startswith("NATS/") else lines:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            out.append((name.strip(), value.strip()))
    return out


def _header_pairs(h: Mapping[str, str] | None) -> list[tuple[str, bytes]] | None:
    """The headers of a received message as Kafka-style ``(key, value bytes)`` pairs, every line
    of its header block when it was kept (repeated names too), else one per dict entry."""
    if not h:
        return None
    block = getattr(h, "block", None)
    pairs = header_lines(block) if isinstance(block, bytes) else list(h.items())
    return [(k, v.encode()) for k, v in pairs]


def _to_batch(stream: str, cols: _Columns, schema: Any) -> Any:
    import pyarrow as pa

    n = len(cols)
    arrays = [
        pa.array([stream] * n, type=pa.string()),
        pa.array(cols.subjects, type=pa.string()),
        pa.array(cols.seqs, type=pa.int64()),
        pa.array(cols.times, type=pa.int64()).cast(schema.field("time").type),
        pa.array(cols.datas, type=pa.binary()),
        pa.array(cols.headers, type=schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _RangeReader:
    """Reads one sequence range of a stream on an executor, with its own connection."""

    #: Pull requests in a row that may return nothing while messages are stored in the range.
    MAX_EMPTY_PULLS = 10

    def __init__(self, opts: ReadOptions, first: int, last: int, expected_from: int = 0,
                 created: str | None = None, stream: str | None = None,
                 subjects: tuple[str, ...] | None = None) -> None:
        self.opts = opts
        self.first = first
        self.last = last
        self.expected_from = expected_from
        self.created = created
        self.stream = stream or opts.stream
        self.subjects = opts.subjects if subjects is None else subjects
        #: Sequences skipped because they were lost (``failOnDataLoss=false``).
        self.lost = 0

    def _check_lost(self, stream: Stream) -> None:
        """Fail (or skip and count) the sequences of the range removed since it was planned."""
        now = _created_text(stream.cached_info.created)
        if self.created is not None and now is not None and now != self.created:
            what = (f"stream {self.stream!r} was deleted and created again (at {now}) after the range "
                    f"{self.first}..{self.last} of the stream created at {self.created} was planned: the whole "
                    "range was lost")
            if self.opts.fail_on_data_loss:
                raise DataLossError(f"{what}. Set option failOnDataLoss=false to skip it")
            self.lost += self.last - self.first + 1
            log.warning("jssync.spark: %s: skipped %d sequence(s) (failOnDataLoss=false)", what,
                        self.last - self.first + 1)
            self.first = self.last + 1
            return
        if not self.expected_from:
            return
        head = int(stream.cached_info.state.first_seq or 0)
        lo = max(self.first, self.expected_from)
        hi = min(self.last, head - 1)
        if hi < lo:
            return
        what = (f"stream {self.stream!r}: sequences {lo}..{hi} of the planned range {self.first}..{self.last} "
                f"were removed (the stream's limits, a purge or their age) before they were read; "
                f"the stream now starts at {head}")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}. Set option failOnDataLoss=false to skip them")
        self.lost += hi - lo + 1
        log.warning("jssync.spark: %s: skipped %d sequence(s) (failOnDataLoss=false)", what, hi - lo + 1)
        self.first = hi + 1

    def batches(self) -> Iterator[Any]:
        """Yield Arrow record batches with every stored message of the range, in sequence order."""
        if self.last < self.first:
            return
        schema = _arrow_schema(self.opts.headers_format)
        conn = self.opts.conn.connect("reader")
        try:
            self._pairs = self.opts.headers_format == "array"
            if self._pairs and self.opts.include_headers and not _natspy.keep_header_blocks(conn.internal.nc):
                log.warning("jssync.spark: this nats-py cannot keep header blocks: headersFormat=array gives one "
                            "value per header name")
            js = conn.jetstream(timeout=self.opts.conn.timeout)
            stream = js.stream(self.stream)
            self._check_lost(stream)
            if self.last < self.first:
                return
            limit = self.opts.arrow_batch_size
            self._cols = _Columns()
            source = self._direct(stream) if self.opts.read_method == "direct" else self._consumer(stream)
            for _ in source:
                if len(self._cols) >= limit:
                    yield _to_batch(self.stream, self._cols, schema)
                    self._cols = _Columns()
            if len(self._cols):
                yield _to_batch(self.stream, self._cols, schema)
        finally:
            conn.close()

    #: Each source appends one message to ``self._cols`` per step and yields None; :meth:`batches`
    #: turns the columns into a record batch when they are full.
    _cols: _Columns
    #: headersFormat=array: the headers column holds (key, value bytes) pairs.
    _pairs: bool = False

    def _consumer(self, stream: Stream) -> Iterator[None]:
        """Read the range with an ordered consumer (ADR-17) and no-wait pull requests.

        The ordered consumer recovers by itself (gaps, reconnects, a deleted consumer).
        The read ends at the first message past the range, at a message after which the
        consumer has nothing pending, or when a pull finds nothing and the stream holds no
        matching message in the rest of the range: it never waits for messages that do
        not exist.
        """
        opts = self.opts
        include_headers = opts.include_headers
        next_seq = self.first
        last = self.last
        oc = stream.ordered_consumer(filter_subjects=list(self.subjects) or None, opt_start_seq=next_seq,
                                     inactive_threshold=30.0)
        empty = 0
        try:
            while next_seq <= last:
                want = min(opts.batch_size, last - next_seq + 1)
                got = 0
                with oc.fetch_no_wait(want) as res:
                    for m in res:
                        got += 1
                        sseq, _cseq, pending, ts = _parse_reply(m.reply)
                        if sseq > last:
                            return
                        if sseq >= next_seq:
                            self._add(m, sseq, ts, include_headers)
                            next_seq = sseq + 1
                            yield None
                        if sseq >= last or pending == 0:
                            return
                if got:
                    empty = 0
                    continue
                # nothing came: the rest of the range is empty, or the consumer is being replaced
                if not self._more_in_range(stream, next_seq, last):
                    return
                empty += 1
                if empty > self.MAX_EMPTY_PULLS:
                    raise TimeoutError(
                        f"could not read sequences {next_seq}..{last} of stream {self.stream!r}: "
                        f"{empty} pull requests in a row returned nothing although messages are stored there"
                    )
                time.sleep(min(0.05 * empty, 0.5))
        finally:
            name = oc.name
            if name is not None:
                try:
                    stream.delete_consumer(name, timeout=opts.conn.timeout)
                except Exception:  # noqa: BLE001 - the inactive threshold removes it anyway
                    pass

    def _more_in_range(self, stream: Stream, seq: int, last: int) -> bool:
        """True when the stream holds a message matching the filters at a sequence in ``seq..last``."""
        for subject in self.subjects or (">",):
            try:
                m = stream.get_msg(seq, next_by_subject=subject, timeout=self.opts.conn.timeout)
            except MessageNotFoundError:
                continue
            if m.seq <= last:
                return True
        return False

    def _add(self, m: Msg, seq: int, ts_ns: int, include_headers: bool) -> None:
        c = self._cols
        c.subjects.append(m.subject)
        c.seqs.append(seq)
        c.times.append(ts_ns // 1000)
        c.datas.append(m.data)
        h = m.headers if include_headers else None
        if self._pairs:
            c.headers.append(_header_pairs(h))
        else:
            c.headers.append(list(h.items()) if h else None)

    def _direct(self, stream: Stream) -> Iterator[None]:
        opts = self.opts
        subject = self.subjects[0] if self.subjects else ">"
        include_headers = opts.include_headers
        next_seq = self.first
        last = self.last
        micro = _dt.timedelta(microseconds=1)
        while next_seq <= last:
            want = min(opts.batch_size, last - next_seq + 1)
            with stream.direct_get_batch(subject, want, seq=next_seq, timeout=opts.conn.timeout) as batch:
                received = 0
                for sm in batch:
                    received += 1
                    if sm.seq > last:
                        return
                    c = self._cols
                    c.subjects.append(sm.subject)
                    c.seqs.append(sm.seq)
                    c.times.append((sm.time - _EPOCH) // micro if sm.time is not None else 0)
                    c.datas.append(sm.data)
                    h = sm.headers if include_headers else None
                    c.headers.append(list(h.items()) if h else None)
                    next_seq = sm.seq + 1
                    yield None
                # num_pending is None only from servers before 2.11 (one message per request)
                if received == 0 or batch.num_pending == 0:
                    return


def read_range(opts: ReadOptions, first: int, last: int, expected_from: int = 0,
               created: str | None = None, stream: str | None = None,
               subjects: tuple[str, ...] | None = None) -> Iterator[Any]:
    """Yield Arrow record batches with the messages stored at sequences ``first..last``.

    Opens its own connection (closed when the iteration ends or is closed). Deleted and
    purged sequences are skipped; the read ends at ``last`` (or earlier when the stream
    has nothing more), never waiting for messages that do not exist.

    With ``expected_from`` (see :class:`SequenceRange`), sequences from it that are below
    the stream's first sequence when the read starts raise :class:`DataLossError`
    (``failOnDataLoss``, the default) or are skipped with a warning in the log; so is the
    whole range when the stream's creation time is no longer ``created`` (it was deleted
    and created again since the range was planned).

    ``stream`` and ``subjects`` (see :class:`SequenceRange`) name the stream and its subject
    filters when the read covers several streams.
    """
    return _RangeReader(opts, first, last, expected_from, created, stream, subjects).batches()


# -- planning (driver) ---------------------------------------------------------------------------


def _created_text(created: Any) -> str | None:
    """A stream's creation time as kept in offsets and ranges (ISO 8601, UTC), or None."""
    if created is None:
        return None
    if isinstance(created, _dt.datetime):
        t: _dt.datetime = created if created.tzinfo is not None else created.replace(tzinfo=_dt.UTC)
        return t.astimezone(_dt.UTC).isoformat()
    return str(created)


@dataclass(frozen=True)
class _StreamNow:
    """What the driver learns from one stream info request."""

    name: str
    #: The first stored sequence (at least 1) and the last sequence (0: nothing stored yet).
    first: int
    last: int
    #: The first sequence the stream ever had (its ``first_seq`` setting, else 1).
    base: int
    #: The stream's creation time (:func:`_created_text`); None when the server does not say.
    created: str | None
    #: The subjects its messages are stored under; () when they are not its own subjects
    #: (a mirror, sources, a subject transform) or it has none.
    subjects: tuple[str, ...]

    def holds(self) -> str:
        if self.last >= self.first:
            return f"holds sequences {self.first}..{self.last}"
        return f"is empty (its next sequence is {self.last + 1})"


def _stream_now(js: JetStream, name: str, timeout: float) -> _StreamNow:
    """Look the stream up (one request, at most ``timeout``); raises like ``js.stream``."""
    info = js.stream(name, timeout=timeout).cached_info
    st = info.state
    cfg = info.config
    own = not (cfg.mirror or cfg.sources or cfg.subject_transform)
    return _StreamNow(
        name=name,
        first=max(int(st.first_seq or 0), 1),
        last=int(st.last_seq or 0),
        base=max(int(cfg.first_seq or 0), 1),
        created=_created_text(info.created),
        subjects=tuple(cfg.subjects or ()) if own else (),
    )


def _check_filters(opts: ReadOptions, now: _StreamNow) -> None:
    """Raise :class:`jssync.ValidationError` for a ``subjects`` filter that can match none of the
    stream's subjects (the read would find nothing). Pure; no check when the stream's stored
    subjects are not known from its configuration (mirrors, sources, subject transforms)."""
    _filters_by_stream(opts, [now])


def _filters_by_stream(opts: ReadOptions, nows: Sequence[_StreamNow]) -> dict[str, tuple[str, ...]]:
    """The ``subjects`` filters that apply to each stream of the read. Pure.

    A filter applies to a stream whose subjects it can match (to every stream whose stored
    subjects are not known from its configuration: mirrors, sources, subject transforms).
    Raises :class:`jssync.ValidationError` for a filter that matches no stream's subjects,
    and for a stream none of the filters can match (the read would find nothing there).
    """
    from ..base.validate import subjects_overlap

    if not opts.subjects:
        return {now.name: () for now in nows}
    out: dict[str, tuple[str, ...]] = {}
    used: set[str] = set()
    for now in nows:
        mine = tuple(f for f in opts.subjects if not now.subjects or any(subjects_overlap(f, s) for s in now.subjects))
        used.update(mine)
        out[now.name] = mine
    for f in opts.subjects:
        if f not in used:
            if len(nows) == 1:
                raise ValidationError(
                    f"subjects filter {f!r} matches none of the subjects of stream {nows[0].name!r} "
                    f"({', '.join(nows[0].subjects)}): the read would find nothing")
            raise ValidationError(
                f"subjects filter {f!r} matches none of the subjects of the streams " + "; ".join(
                    f"{n.name!r} ({', '.join(n.subjects)})" for n in nows) + ": it would find nothing")
    for now in nows:
        if not out[now.name]:
            raise ValidationError(
                f"none of the subjects filters ({', '.join(opts.subjects)}) matches a subject of stream "
                f"{now.name!r} ({', '.join(now.subjects)}): the read would find nothing there (leave it out "
                "of option 'streams')")
    return out


def share_limit(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split a micro-batch's ``limit`` of sequences across streams, in proportion to what each
    has available (Spark's Kafka source splits ``maxOffsetsPerTrigger`` the same way).

    Returns stream -> sequences to read: never more than available, in total
    ``min(limit, sum(available))``; what the proportional shares leave over goes to the
    largest fractions first (ties: the order of ``available``). Pure.
    """
    total = sum(max(0, n) for n in available.values())
    if total <= limit:
        return {k: max(0, n) for k, n in available.items()}
    shares = {k: max(0, n) * limit / total for k, n in available.items()}
    out = {k: int(v) for k, v in shares.items()}
    rest = limit - sum(out.values())
    order = sorted(available, key=lambda k: -(shares[k] - out[k]))
    for k in order:
        if rest <= 0:
            break
        if out[k] < available[k]:
            out[k] += 1
            rest -= 1
    return out


def _offset(seq: int, now: _StreamNow) -> dict[str, Any]:
    """A streaming offset: the next sequence, and the creation time of the stream it is in."""
    off: dict[str, Any] = {"seq": seq}
    if now.created is not None:
        off["created"] = now.created
    return off


def _not_in_stream(start: Mapping[str, Any], now: _StreamNow) -> str | None:
    """Why the checkpointed offset ``start`` is no position of the stream as it is now, or None.

    With a creation time in the offset: the stream's creation time differs (it was
    deleted and created again). Without (offsets checkpointed before they carried it):
    the offset is past the stream's end, which a stream never does by itself.
    """
    seq = int(start["seq"])
    was = start.get("created")
    if was is not None and now.created is not None:
        if str(was) == now.created:
            return None
        return (f"stream {now.name!r} was deleted and created again: the checkpointed offset is sequence {seq} "
                f"of the stream created at {was}; the stream now was created at {now.created} and {now.holds()}")
    if seq <= now.last + 1:
        return None
    created = f", was created at {now.created}" if now.created is not None else ""
    return (f"stream {now.name!r} went backwards: the checkpointed offset is sequence {seq}, past its end; the "
            f"stream now{created} and {now.holds()} (it was deleted and created again, or replaced)")


#: The latest time the server can hold (int64 nanoseconds since 1970), rounded down to a day.
_LATEST_SERVER_TIME = _dt.datetime(2262, 4, 11, tzinfo=_dt.UTC)


def _seq_at_time(js: JetStream, opts: ReadOptions, when: _dt.datetime, last_seq: int,
                 stream_name: str | None = None) -> int:
    """The first stream sequence stored at or after ``when`` (``last_seq + 1`` when there is none).

    Creates an ephemeral ``BY_START_TIME`` consumer (deleted again before returning) and
    pulls one message with ``no_wait``. Blocks for the stream lookup and the consumer
    creation (each at most the connection ``timeout``) and for the pull (at most the
    JetStream context's timeout).

    ``last_seq + 1`` means "nothing at or after ``when``": the consumer has nothing
    pending, or the pull ended normally without a message (404 No Messages, e.g. the
    messages were removed after the consumer was created). A pull that ended any other
    way says nothing about the stream, so it raises rather than start the read after the
    end of the stream (which would skip data). It is not retried: the pull already waited
    the whole timeout, and the other endings (a pull the server refuses or never answers,
    a closed connection) do not go away by themselves within it.

    Raises:
        jssync.TimeoutError: the pull got no answer in time (e.g. the user may create
            consumers but not publish to ``$JS.API.CONSUMER.MSG.NEXT``); the cause is chained.
        jssync.ConnectionClosedError: the connection closed during the pull.
        jssync.JetStreamError: the pull ended with another status (e.g. a 409 warning);
            the cause is chained. Errors of the stream lookup, the consumer creation and
            the errors a pull raises (400, 409 Consumer Deleted, 503) pass through.
    """
    from nats.js import api

    name = stream_name or opts.stream
    # the server counts times in int64 nanoseconds: later than 2262 wraps around (and a
    # consumer starting then would start at the stream's first message)
    when = min(when, _LATEST_SERVER_TIME)
    stream = js.stream(name, timeout=opts.conn.timeout)
    c = stream.create_consumer(
        timeout=opts.conn.timeout,
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.BY_START_TIME,
        opt_start_time=when,
        inactive_threshold=30.0,
        mem_storage=True,
        num_replicas=1,
    )
    try:
        if not (c.cached_info.num_pending or 0):
            return last_seq + 1
        res = c.fetch_no_wait(1)
        for m in res:
            return _parse_reply(m.reply)[0]
        err = res.error
        if err is not None:
            msg = (f"could not find the first message of stream {name!r} at or after "
                   f"{when.isoformat()}: the pull request ended with {type(err).__name__}: {err}")
            if isinstance(err, TimeoutError | ConnectionClosedError):
                raise type(err)(msg) from err
            raise JetStreamError(msg) from err
        return last_seq + 1
    finally:
        try:
            c.delete(timeout=opts.conn.timeout)
        except Exception:  # noqa: BLE001
            pass


def _start_seq(js: JetStream, opts: ReadOptions, first_seq: int, last_seq: int, stream: str | None = None) -> int:
    if opts.starting_time is not None:
        return _seq_at_time(js, opts, opts.starting_time, last_seq, stream)
    for n, v in opts.starting_by_stream:
        if n == (stream or opts.stream):
            return first_seq if v == "earliest" else last_seq + 1 if v == "latest" else int(v)
    if opts.starting_by_stream:
        return first_seq  # a stream the JSON does not name: earliest
    if opts.starting_latest:
        return last_seq + 1
    if opts.starting_sequence is not None:
        return opts.starting_sequence
    return first_seq


def _end_seq(js: JetStream, opts: ReadOptions, last_seq: int, stream: str | None = None) -> int:
    """The last sequence a batch read takes: ``endingSequence``, the last message stored at or
    before ``endingTime`` (to the microsecond, as the ``time`` column shows it), or the
    stream's last sequence; never past the last sequence."""
    if opts.ending_time is not None:
        after = _seq_at_time(js, opts, opts.ending_time + _dt.timedelta(microseconds=1), last_seq, stream)
        return min(after - 1, last_seq)
    ending = opts.ending_for(stream or opts.stream)
    if ending is not None:
        return min(ending, last_seq)
    return last_seq


def _check_schema(schema: Any, headers_format: str = "map") -> None:
    expected = schema_type(headers_format)
    if schema is not None and isinstance(schema, StructType) and schema != expected:
        raise ValidationError(
            f"the jetstream source has a fixed schema "
            f"({SCHEMA_ARRAY_HEADERS if headers_format == 'array' else SCHEMA}); got a user schema "
            f"{schema.simpleString()}"
        )


class JetStreamBatchReader(DataSourceReader):
    """Batch reads: plans sequence ranges on the driver, reads them on the executors."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        #: Stream -> the planned ``(first, last)`` sequences.
        self.planned: dict[str, tuple[int, int]] = {}

    def partitions(self) -> Sequence[InputPartition]:
        """Fix each stream's sequence range (one consistent snapshot of each) and split them.

        Each stream's range is split into ``numPartitions`` ranges. Blocks on one stream
        lookup per stream, and on a short-lived consumer per ``startingTime``/``endingTime``.
        """
        opts = self.opts
        conn = opts.conn.connect("planner")
        plans: list[tuple[_StreamNow, int, int]] = []
        try:
            js = conn.jetstream(timeout=opts.conn.timeout)
            nows = [_stream_now(js, name, opts.conn.timeout) for name in opts.names()]
            filters = _filters_by_stream(opts, nows)
            for now in nows:
                start = max(_start_seq(js, opts, now.first, now.last, now.name), 1)
                end = _end_seq(js, opts, now.last, now.name)
                plans.append((now, start, end))
        finally:
            conn.close()
        out: list[InputPartition] = []
        for now, start, end in plans:
            self.planned[now.name] = (start, end)
            # messages below the first sequence at planning were gone before the read: not lost
            out.extend(SequenceRange(lo, hi, now.first, now.created, now.name, filters[now.name])
                       for lo, hi in split_range(start, end, opts.num_partitions))
        return out or [SequenceRange(1, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SequenceRange)
        return read_range(self.opts, partition.first, partition.last, partition.expected_from,
                          partition.created, partition.stream, partition.subjects)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reads. With option ``stream`` an offset is ``{"seq": N, "created": T}``: the
    next stream sequence to read, in the stream created at ``T`` (ISO 8601; offsets
    checkpointed by older versions have no ``created`` and are read as they are). With
    option ``streams`` it is ``{"streams": {"A": {"seq": N, "created": T}, "B": ...}}``: one
    such position per stream, and everything below holds for each stream on its own.

    A micro-batch from ``{"seq": a}`` to ``{"seq": b}`` reads the sequences ``a..b-1``.
    With ``maxMessagesPerTrigger`` a micro-batch spans at most that many sequences (so
    at most that many messages), split across the streams in proportion to what each has
    waiting. With ``minMessagesPerTrigger`` no micro-batch starts until that many
    sequences (of all the streams) are there, or ``maxTriggerDelay`` has passed since the
    last micro-batch (or the start of the query); ``trigger(availableNow=True)`` ignores it.

    A checkpointed offset of a stream that was deleted and created again since (another
    creation time; without ``created``: a sequence past the stream's end) fails the query
    with :class:`DataLossError` naming both; with ``failOnDataLoss=false`` that stream
    starts over at its first sequence, a warning is logged and the new stream's sequences
    removed before the query got to them are counted.

    A stream added to ``streams`` after the query was checkpointed joins the offset at its
    starting position (``startingSequence`` / ``startingTime``) in the next micro-batch and
    is read from the one after; a stream left out is no longer read (its position is dropped).

    :meth:`reportLatestOffset` shows up as the source's ``latestOffset`` in every
    ``StreamingQueryProgress``: ``{"seq": <the stream's last sequence + 1>,
    "messagesBehind": <sequences after the micro-batch's end>, "lostSequences": <total
    skipped with failOnDataLoss=false>}``; with ``streams``, ``seq`` and ``messagesBehind``
    per stream under ``"streams"`` and the totals beside them.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] = {}
        self._end: dict[str, int] = {}
        self._lost = 0
        self._last_trigger = time.monotonic()
        self._conn: Connection | None = None
        #: Stream -> the subject filters that apply to it (set by the first lookup).
        self._filters: dict[str, tuple[str, ...]] | None = None
        #: Stream -> the creation time the last stream lookup saw.
        self._created: dict[str, str | None] = {}
        #: ``(stream, checkpointed seq, its created)`` of offsets of a former stream -> where the new one
        #: was started.
        self._started_over: dict[tuple[str, int, str | None], int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None  # connections do not travel
        return state

    def _js(self) -> JetStream:
        if self._conn is None or self._conn.is_closed:
            self._conn = self.opts.conn.connect("stream-planner")
        return self._conn.jetstream(timeout=self.opts.conn.timeout)

    def _state(self) -> dict[str, _StreamNow]:
        """Look each stream up (one request each); the first lookup also checks the subject filters."""
        js = self._js()
        nows = {name: _stream_now(js, name, self.opts.conn.timeout) for name in self.opts.names()}
        if self._filters is None:
            self._filters = _filters_by_stream(self.opts, list(nows.values()))
        for name, now in nows.items():
            self._latest[name] = now.last + 1
            self._created[name] = now.created
        return nows

    def _encode(self, per: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
        """The offset Spark checkpoints: one stream's position, or ``{"streams": {...}}``."""
        if self.opts.streams:
            return {"streams": dict(per)}
        return per[self.opts.stream]

    def _decode(self, off: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Stream -> position from a checkpointed offset of either form (a one-stream offset is
        the position of the first stream: a query may go from ``stream`` to ``streams``)."""
        per = off.get("streams")
        if isinstance(per, Mapping):
            return {str(k): dict(v) for k, v in per.items()}
        if "seq" in off:
            return {self.opts.stream: dict(off)}
        return {}

    def initialOffset(self) -> dict[str, Any]:
        nows = self._state()
        # a start before the first stored message starts at it (nothing was lost yet)
        return self._encode({
            name: _offset(max(1, now.first, _start_seq(self._js(), self.opts, now.first, now.last, name)), now)
            for name, now in nows.items()})

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {name: now.last + 1 for name, now in self._state().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        if self.opts.min_messages_per_trigger:
            return ReadMinRows(self.opts.min_messages_per_trigger)
        return ReadAllAvailable()

    def _start_over(self, name: str, start: Mapping[str, Any], now: _StreamNow, why: str) -> int:
        """The checkpointed position ``start`` is not in the stream ``now``: fail, or (with
        failOnDataLoss=false) return the new stream's first sequence, counting and logging
        the new stream's sequences removed before the query got to them (once per offset)."""
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{why}. Set option failOnDataLoss=false to start over at the stream's first "
                                f"sequence ({now.first})")
        key = (name, int(start["seq"]), start.get("created"))
        if key not in self._started_over:
            self._started_over[key] = now.first
            gone = max(0, now.first - now.base)
            self._lost += gone
            log.warning("jssync.spark: %s: starting over at sequence %d (failOnDataLoss=false)%s", why, now.first,
                        f"; sequences {now.base}..{now.first - 1} of the new stream were removed before they "
                        f"were read ({gone} skipped)" if gone else "")
        return self._started_over[key]

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        nows = self._state()
        ends: dict[str, int] = {}
        for name, now in nows.items():
            end = now.last + 1
            if self._target is not None and name in self._target:
                end = min(end, self._target[name])
            ending = self.opts.ending_for(name)
            if ending is not None:
                end = min(end, ending + 1)
            ends[name] = end
        if start is None:
            self._end = ends
            return self._encode({name: _offset(ends[name], now) for name, now in nows.items()})
        starts = self._decode(start)
        begins: dict[str, int] = {}
        same: dict[str, bool] = {}  # the position is the checkpointed one (not moved to a new stream)
        for name, now in nows.items():
            st = starts.get(name)
            if st is None:  # a stream added to the query: joins at its starting position
                begin = max(1, now.first, _start_seq(self._js(), self.opts, now.first, now.last, name))
                ends[name] = begin
                same[name] = False
            else:
                begin = int(st["seq"])
                why = _not_in_stream(st, now)
                if why is not None:
                    begin = self._start_over(name, st, now, why)
                same[name] = why is None
                ends[name] = max(ends[name], begin)
            begins[name] = begin
        if self._target is None and limit is not None and not isinstance(limit, ReadAllAvailable):
            # Spark passes one limit; the minimum comes from the options when the limit is the maximum
            least = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_messages_per_trigger
            waited = time.monotonic() - self._last_trigger
            if least and sum(ends[n] - begins[n] for n in nows) < least and waited < self.opts.max_trigger_delay:
                self._end = dict(begins)
                # no micro-batch: the same offset (a former stream's: moved to the new one)
                return self._encode({name: dict(starts[name]) if same[name] else _offset(begins[name], now)
                                     for name, now in nows.items()})
        if isinstance(limit, ReadMaxRows):
            take = share_limit({n: ends[n] - begins[n] for n in nows}, max(1, int(limit.max_rows)))
            ends = {n: begins[n] + take[n] for n in nows}
        if any(ends[n] > begins[n] for n in nows):
            self._last_trigger = time.monotonic()
            if not self.opts.fail_on_data_loss:
                for name, now in nows.items():
                    if now.first > begins[name] and ends[name] > begins[name]:
                        self._lost += min(now.first, ends[name]) - begins[name]  # the executors skip these
        self._end = ends
        return self._encode({name: _offset(ends[name], now) for name, now in nows.items()})

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self._latest:
            return None
        behind = {n: max(0, latest - self._end.get(n, latest)) for n, latest in self._latest.items()}
        if not self.opts.streams:
            name = self.opts.stream
            return {"seq": self._latest[name], "messagesBehind": behind[name], "lostSequences": self._lost}
        return {"streams": {n: {"seq": self._latest[n], "messagesBehind": behind[n]} for n in self._latest},
                "messagesBehind": sum(behind.values()), "lostSequences": self._lost}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Split the micro-batch ``start..end`` into ranges (each stream's on its own).

        A micro-batch that :meth:`latestOffset` moved from a former stream to the new one
        starts at the new stream's first sequence. A micro-batch planned on a stream that
        was deleted and created again since (replayed after a restart) fails like
        :meth:`latestOffset` (failOnDataLoss=false: skipped, counted and logged). Blocks on
        one lookup per stream when the streams' creation times are not known to this reader yet.
        """
        if self._filters is None:
            self._state()
        filters = self._filters or {}
        starts = self._decode(start)
        out: list[InputPartition] = []
        for name, e in self._decode(end).items():
            st = starts.get(name)
            if st is None:  # joined the offset in this micro-batch: read from the next one
                continue
            out.extend(self._stream_partitions(name, st, e, filters.get(name, self.opts.subjects)))
        return out

    def _stream_partitions(self, name: str, start: Mapping[str, Any], end: Mapping[str, Any],
                           subjects: tuple[str, ...]) -> list[InputPartition]:
        begin = int(start["seq"])
        stop = int(end["seq"])
        created = end.get("created")
        was = start.get("created")
        moved = (was is not None and created is not None and was != created) or (was is None and stop < begin)
        expected = begin
        if moved:
            key = (name, begin, was)
            begin = self._started_over.get(key, 1)
            expected = begin if key in self._started_over else 0  # unknown here: no check
        elif created is not None and created != self._created.get(name):
            now = self._state()[name]
            why = _not_in_stream({"seq": begin, "created": created}, now)
            if why is not None:
                why = f"{why}; the micro-batch {begin}..{stop - 1} was planned on the former stream"
                if self.opts.fail_on_data_loss:
                    raise DataLossError(f"{why}. Set option failOnDataLoss=false to skip it")
                if stop > begin:
                    self._lost += stop - begin
                    log.warning("jssync.spark: %s: skipped it, %d sequence(s) (failOnDataLoss=false)", why,
                                stop - begin)
                return []
        ranges = split_range(begin, stop - 1, self.opts.num_partitions)
        # every sequence from the micro-batch's start is still to be read: gone ones were lost
        return [SequenceRange(lo, hi, expected, created, name, subjects) for lo, hi in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SequenceRange)
        return read_range(self.opts, partition.first, partition.last, partition.expected_from,
                          partition.created, partition.stream, partition.subjects)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the position lives in Spark's checkpoint, not on the server."""

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# -- writing (executors) -------------------------------------------------------------------------


@dataclass
class JetStreamCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver."""

    partition: int
    rows: int
    duplicates: int
    first_seq: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True)
class _Columns4Write:
    data: int
    subject: int | None
    headers: int | None
    msg_id: int | None
    key: int | None = None


def _write_columns(names: list[str], opts: WriteOptions) -> _Columns4Write:
    low = [n.lower() for n in names]

    def idx(name: str | None) -> int | None:
        if name is None:
            return None
        try:
            return low.index(name.lower())
        except ValueError:
            return None

    data = idx("data")
    if data is None:
        hint = " (Kafka's 'value' column: select it as data)" if "value" in low else ""
        raise ValidationError(f"the jetstream sink needs a 'data' column (binary or string){hint}; the columns are "
                              f"{names}")
    msg_id = idx(opts.msg_id_column)
    if opts.msg_id_column is not None and msg_id is None:
        raise ValidationError(f"option 'msgIdColumn' names {opts.msg_id_column!r}, which is not a column of {names}")
    return _Columns4Write(data=data, subject=idx("subject"), headers=idx("headers"), msg_id=msg_id, key=idx("key"))


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Check on the driver that the DataFrame can be written (raises ValueError naming the problem)."""
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType

    names = [f.name for f in schema.fields]
    cols = _write_columns(names, opts)
    f = schema.fields
    if not isinstance(f[cols.data].dataType, BinaryType | StringType):
        raise ValidationError(f"column 'data' must be binary or string, not {f[cols.data].dataType.simpleString()}")
    if cols.subject is None and opts.subject is None:
        raise ValidationError("set option 'subject' or give the DataFrame a 'subject' column")
    if cols.subject is not None and not isinstance(f[cols.subject].dataType, StringType):
        raise ValidationError(f"column 'subject' must be a string, not {f[cols.subject].dataType.simpleString()}")
    if cols.key is not None and not isinstance(f[cols.key].dataType, BinaryType | StringType):
        raise ValidationError(f"column 'key' must be a string or binary (UTF-8), not "
                              f"{f[cols.key].dataType.simpleString()}")
    if cols.headers is not None:
        t = f[cols.headers].dataType
        is_map = (isinstance(t, MapType) and isinstance(t.keyType, StringType)
                  and isinstance(t.valueType, StringType))
        is_array = False
        if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
            el = {x.name.lower(): x.dataType for x in t.elementType.fields}
            is_array = (set(el) == {"key", "value"} and isinstance(el["key"], StringType)
                        and isinstance(el["value"], BinaryType | StringType))
        if not (is_map or is_array):
            raise ValidationError(f"column 'headers' must be map<string,string> or (as in Spark's Kafka sink) "
                                  f"array<struct<key:string,value:binary>>, not {t.simpleString()}")


class _HeaderLines(dict[str, str]):
    """Headers in which a name comes more than once (from an array ``headers`` column).

    As a dict it holds each name's last value; :meth:`items` gives every line, in order,
    repeated names included. jssync's publish path checks (``validate_headers``), sizes
    (``_headers_size``) and encodes (``_encode_headers``) a header block from ``items()``,
    so every line is sent; nothing copies the dict on the way (rows with such headers go
    straight to the publisher, see ``write_batches``).
    """

    __slots__ = ("lines",)

    def __init__(self, lines: list[tuple[str, str]]) -> None:
        super().__init__(lines)
        self.lines = lines

    def items(self) -> Any:  # every line, not one per name
        return list(self.lines)


def _row_headers(h: Any, row: int, partition: int) -> dict[str, str] | None:
    """A row's ``headers`` value as publish headers: map entries, or Kafka-style key/value structs
    (values as bytes, decoded as UTF-8, or strings; null values are empty). Headers with a
    repeated name come back as :class:`_HeaderLines`."""
    if not h:
        return None
    if isinstance(h, dict):
        return dict(h)
    pairs: list[tuple[str, str]] = []
    for item in h:
        if item is None:
            continue
        if isinstance(item, dict):  # a key/value struct
            k, v = item.get("key"), item.get("value")
        else:  # a map entry (Arrow gives a map as (key, value) tuples)
            k, v = item
        if not isinstance(k, str):
            raise SparkWriteError(f"row {row} of partition {partition}: a header has no name (key {k!r})")
        if isinstance(v, bytes | bytearray):
            try:
                v = bytes(v).decode()
            except UnicodeDecodeError:
                raise SparkWriteError(f"row {row} of partition {partition}: the value of header {k!r} is not "
                                      "UTF-8 (NATS header values are text)") from None
        pairs.append((k, "" if v is None else v))
    if not pairs:
        return None
    names = [k for k, _ in pairs]
    if len(set(names)) == len(names):
        return dict(pairs)
    return _HeaderLines(pairs)


def _row_subject(subj: str, key: Any, row: int, partition: int) -> str:
    """The subject of a row with a ``key`` column: ``<subject>.<key>`` (a null key: the subject)."""
    if key is None:
        return subj
    if isinstance(key, bytes | bytearray):
        try:
            key = bytes(key).decode()
        except UnicodeDecodeError:
            raise SparkWriteError(f"row {row} of partition {partition}: its key is not UTF-8 (the key becomes the "
                                  f"last token of subject {subj!r})") from None
    return f"{subj}.{key}"


def _task_info() -> tuple[int, int, dict[str, str | None]]:
    """``(partition id, attempt number, {local properties we use})`` of the running task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # pragma: no cover - only outside Spark
        return 0, 0, {}
    props = {k: tc.getLocalProperty(k) for k in ("sql.streaming.queryId", "streaming.sql.batchId")}
    return tc.partitionId(), tc.attemptNumber(), props


class _FastRows:
    """The checks and headers of ``JetStream.publish_async`` for a row without headers of its own.

    The subject is checked once per distinct subject (a small cache), the derived
    ``Nats-Msg-Id`` is built from a prefix checked once and a digest state per subject
    (the same id as :func:`derive_msg_id`), and the payload plus header block is checked
    against the server's max_payload; then the row goes to the task's
    :class:`~jssync.spark.rowpub.RowPublisher` (``maxPending`` window, PubAcks counted as they come).

    It also counts the rows of each content digest seen so far in the partition (the
    occurrence part of derived ids): one dict entry per distinct row, about 100 bytes each.
    """

    __slots__ = ("_head", "_extra", "_derive", "_max_payload", "_subjects", "_seen")

    #: Distinct subjects remembered as checked (more: checked again, the cache starts over).
    MAX_SUBJECTS = 4096

    def __init__(self, conn: Connection, prefix: str, batch: int, partition: int, derive: bool) -> None:
        from ..base.validate import validate_headers
        from ..jetstream.params import HDR_MSG_ID

        self._head = f"{prefix}.{batch}.{partition}."
        validate_headers({HDR_MSG_ID: self._head})  # an id adds only digits, dots and hex to it
        # the header block around the id: "NATS/1.0\r\n", "Nats-Msg-Id: ", CRLFs (27 bytes),
        # plus what the prefix takes beyond one byte a character in UTF-8
        self._extra = 27 + len(self._head.encode()) - len(self._head)
        self._derive = derive
        self._max_payload = conn.max_payload
        self._subjects: dict[str, Any] = {}  # subject -> blake2b state after "subject\0"
        self._seen: dict[str, int] = {}  # content digest -> rows with it so far

    def _next_id(self, digest: str) -> str:
        n = self._seen.get(digest, 0)
        self._seen[digest] = n + 1
        return f"{self._head}{digest}.{n}"

    def msg_id(self, subject: str, data: bytes, headers: Mapping[str, str] | None) -> str:
        """The derived id of a row that has headers of its own (see :func:`derive_msg_id`)."""
        return self._next_id(_row_digest(subject, data, headers).hexdigest())

    def checked(self, subject: str, data: bytes, headers: dict[str, str]) -> dict[str, str]:
        """``headers``, after the checks ``publish_async`` makes (subject, every header line, the
        size against max_payload); raises like it."""
        from ..base.validate import _headers_size, validate_headers, validate_subject

        validate_subject(subject, wildcards=False)
        validate_headers(headers)
        size = len(data) + _headers_size(headers)
        if size > self._max_payload:
            from ..base.errors import MaxPayloadError

            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        return headers

    def headers(self, subject: str, data: bytes) -> dict[str, str] | None:
        """The row's headers (its ``Nats-Msg-Id`` or None); raises like ``publish_async``."""
        base = self._subjects.get(subject)
        if base is None:
            from ..base.validate import validate_subject

            validate_subject(subject, wildcards=False)
            base = hashlib.blake2b(subject.encode(), digest_size=_DIGEST_SIZE)
            base.update(b"\x00")
            if len(self._subjects) >= self.MAX_SUBJECTS:
                self._subjects.clear()
            self._subjects[subject] = base
        if not self._derive:
            size = len(data)
            hdrs = None
        else:
            h = base.copy()
            h.update(data)
            msg_id = self._next_id(h.hexdigest())
            size = len(data) + len(msg_id) + self._extra
            hdrs = {"Nats-Msg-Id": msg_id}
        if size > self._max_payload:
            from ..base.errors import MaxPayloadError

            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {self._max_payload} bytes"
            )
        return hdrs

    def publish_all(self, pub: RowPublisher, subjects: list[Any] | None, datas: list[Any], default: str | None,
                    first: int, partition: int, every_256: Callable[[int], None]) -> None:
        """Publish rows of subject and data only through ``pub`` (rows numbered from ``first``).

        The same checks, ids and errors as :meth:`headers` plus ``pub.publish``, in one loop:
        ``every_256(rows so far)`` is called after each row whose count is a multiple of 256
        (the caller counts PubAcks and looks at stop requests there; it may raise). Waits
        while ``pub.max_pending`` rows are without a PubAck. Raises :class:`SparkWriteError`
        naming the row (and :class:`_RowFailed` from the PubAcks read while waiting).
        """
        from itertools import repeat

        subjects_seen = self._subjects
        seen = self._seen
        head = self._head
        extra = self._extra
        limit = self._max_payload
        derive = self._derive
        pending = pub.rows
        window = pub.max_pending
        enqueue = pub.enqueue
        reply = pub.reply_prefix
        row = first
        pub.mark(first)
        for s, d in zip(subjects if subjects is not None else repeat(None, len(datas)), datas, strict=True):
            subj = s or default
            if subj is None:
                raise SparkWriteError(
                    f"row {row} of partition {partition} has no subject (its 'subject' column is null "
                    "and option 'subject' is not set)"
                )
            if d is None:
                d = b""
            try:
                base = subjects_seen.get(subj)
                if base is None or not derive:
                    hdrs = self.headers(subj, d)  # checks the subject, remembers it; the size
                else:
                    h = base.copy()
                    h.update(d)
                    digest = h.hexdigest()
                    k = seen.get(digest, 0)
                    seen[digest] = k + 1
                    msg_id = f"{head}{digest}.{k}"
                    if len(d) + len(msg_id) + extra > limit:
                        from ..base.errors import MaxPayloadError

                        raise MaxPayloadError(
                            f"payload of {len(d) + len(msg_id) + extra} bytes (headers included) on {subj!r} is "
                            f"over the server's max_payload of {limit} bytes")
                    hdrs = {"Nats-Msg-Id": msg_id}
                if len(pending) >= window:
                    pub.wait_room()
                item = pending[row] = (subj, d, f"{reply}{row}", hdrs)  # (a resend queues it again)
                if enqueue is not None:
                    enqueue(item)
                else:
                    pub.send(item)
            except (SparkWriteError, _RowFailed):
                raise
            except Exception as exc:  # noqa: BLE001 - bad subject, payload size, closed connection
                pending.pop(row, None)
                raise SparkWriteError(
                    f"cannot publish row {row} of partition {partition} to {subj!r}: {type(exc).__name__}: {exc}"
                ) from exc
            row += 1
            if not row & 255:
                every_256(row)


#: The subjects on which the driver's abort stops a write's running tasks:
#: ``_JSSYNC.SPARK.STOP.<write token>.<micro-batch>`` (a core NATS request; each task still
#: publishing answers with what it stored, once it has stopped).
STOP_SUBJECT_PREFIX = "_JSSYNC.SPARK.STOP"


def stop_subject(token: str, batch_id: int) -> str:
    """The subject on which the abort of write ``token`` (micro-batch ``batch_id``) stops its tasks."""
    return f"{STOP_SUBJECT_PREFIX}.{token}.{batch_id}"


class _StopSignal:
    """A write task's ear for the driver's abort: a subscription to :func:`stop_subject`.

    The subscription callback (on the connection's worker pool) only records the request;
    the task's publishing loop polls :attr:`requested` between rows, stops publishing,
    waits for its PubAcks and answers the request with :meth:`report`. A server that
    refuses the subscription (permissions) leaves the task without it: it then stops only
    when Spark kills it.
    """

    __slots__ = ("requested", "_reply", "_sub", "_conn")

    def __init__(self, conn: Connection, subject: str) -> None:
        self.requested = False
        self._reply: str | None = None
        self._conn = conn
        self._sub: Any = None
        try:
            self._sub = conn.subscribe(subject, callback=self._on_stop)
        except Exception as exc:  # noqa: BLE001 - permissions: the task goes on without it
            log.info("jssync.spark: cannot listen for the write's abort on %r (the task stops only when Spark "
                     "kills it): %s: %s", subject, type(exc).__name__, exc)

    def _on_stop(self, msg: Msg) -> None:
        self._reply = msg.reply or None
        self.requested = True

    def report(self, fields: Mapping[str, Any]) -> None:
        """Answer the abort's request with ``fields`` (JSON); waits up to 2 s for the server to have it."""
        import json

        if self._reply is None:
            return
        try:
            self._conn.publish(self._reply, json.dumps(dict(fields)).encode())
            self._conn.flush(timeout=2.0)
        except Exception as exc:  # noqa: BLE001 - the abort then reports this task as not answering
            log.info("jssync.spark: cannot answer the write's abort: %s: %s", type(exc).__name__, exc)


def stop_tasks(opts: WriteOptions, token: str, batch_id: int) -> tuple[list[dict[str, Any]], bool]:
    """Stop the tasks of write ``token`` that are still publishing; return ``(reports, gone)``.

    Sends requests on :func:`stop_subject` (from the driver's abort). Every task of the
    write still publishing stops before its next row, waits for its PubAcks (up to
    ``min(5, publishTimeout)`` seconds) and answers with ``{"partition", "attempt", "rows",
    "stored", "duplicates", "unsettled"}``, then closes its connection. The request is
    repeated until the server says nobody listens any more (no-responders): then every
    task's connection is closed and the server has read everything they sent (a task Spark
    killed may have left up to ``maxPending`` rows in its socket, stored meanwhile);
    ``gone`` says whether that happened within ``min(5, publishTimeout) + 2`` seconds.
    Never raises: a failure is logged on the ``jssync.spark`` logger and gives the answers
    received so far.
    """
    import json

    from ..base.errors import NoRespondersError

    subject = stop_subject(token, batch_id)
    out: list[dict[str, Any]] = []
    try:
        conn = opts.conn.connect("aborter")
    except Exception as exc:  # noqa: BLE001 - the abort goes on; Spark kills the tasks
        log.warning("jssync.spark: cannot stop the write's tasks (no connection): %s: %s", type(exc).__name__, exc)
        return out, False
    deadline = time.monotonic() + min(5.0, opts.publish_timeout) + 2.0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out, False
            try:
                with conn.request_many(subject, b"", max_wait=min(left, 0.5), stall=0.2) as replies:
                    for msg in replies:
                        try:
                            rep = json.loads(msg.data)
                        except ValueError:
                            continue
                        if isinstance(rep, dict):
                            out.append(rep)
            except NoRespondersError:
                return out, True  # no task of the write is connected any more
    except Exception as exc:  # noqa: BLE001 - permissions, a closed connection: Spark kills the tasks
        log.warning("jssync.spark: cannot stop the write's tasks on %r: %s: %s", subject, type(exc).__name__, exc)
        return out, False
    finally:
        conn.close()


def _failed_write_text(cause: str, opts: WriteOptions, pub: RowPublisher | None, prefix: str, batch_id: int,
                       partition: int) -> str:
    """The text of a failed task's error: the cause, the rows in the stream, how to re-run.

    Waits up to 5 s for the PubAcks still missing (what the server stores anyway), then
    counts the rows of this partition that are in the stream.
    """
    stored = duplicates = 0
    if pub is not None:
        pub.settle_quietly(min(5.0, opts.publish_timeout))
        stored, duplicates = pub.stored, pub.duplicates
    text = (f"{cause}. {stored + duplicates} row(s) of partition {partition} are in the stream "
            f"({duplicates} of them were already there); what the write's other tasks stored stays too")
    if opts.derive_msg_id:
        text += (f". Derived message ids of this write start with '{prefix}.{batch_id}.': write the same rows "
                 f"again with option msgIdPrefix='{prefix}' within the stream's duplicate window and none "
                 "of them is stored twice")
    return text


def _stopped(stop: _StopSignal, opts: WriteOptions, pub: RowPublisher, partition: int, attempt: int,
             rows: int) -> None:
    """Stop publishing: wait for the PubAcks still missing, answer the abort, raise :class:`_Stopped`.

    A failed PubAck counts as not stored; a missing one as unsettled."""
    pub.settle_quietly(min(5.0, opts.publish_timeout))
    report = {"partition": partition, "attempt": attempt, "rows": rows, "stored": pub.stored,
              "duplicates": pub.duplicates, "unsettled": pub.pending}
    stop.report(report)
    raise _Stopped(report)


def _stopped_text(exc: _Stopped, opts: WriteOptions, prefix: str, batch_id: int, partition: int) -> str:
    r = exc.report
    text = (f"partition {partition} stopped publishing: the write was aborted (another task failed). "
            f"{r['stored'] + r['duplicates']} row(s) of partition {partition} are in the stream "
            f"({r['duplicates']} of them were already there)")
    if r["unsettled"]:
        text += f"; {r['unsettled']} more were published without a PubAck yet"
    if opts.derive_msg_id:
        text += (f". Derived message ids of this write start with '{prefix}.{batch_id}.': write the same rows "
                 f"again with option msgIdPrefix='{prefix}' within the stream's duplicate window")
    return text


def write_batches(opts: WriteOptions, batches: Iterator[Any], prefix: str, batch_id: int,
                  partition: int, token: str | None = None, attempt: int = 0) -> JetStreamCommitMessage:
    """Publish every row of ``batches`` (Arrow record batches) and wait for all PubAcks.

    With ``token`` (the write's, from the driver) the task listens on
    :func:`stop_subject` and stops publishing, before its next row, when the driver's
    abort asks (:func:`stop_tasks`); it answers with what it stored and fails.

    Raises:
        SparkWriteError: a row could not be published or its PubAck failed, or the write
            was aborted; the text also says how many rows of this partition are in the
            stream (their PubAcks came back, waited for up to 5 s after the failure) and,
            for derived ids, the id prefix to write the same rows again with
            (``msgIdPrefix``) so that none is stored twice.
    """
    import pyarrow as _pa

    conn = opts.conn.connect(f"writer-{partition}")
    rows = 0
    pub: RowPublisher | None = None

    def look(rows_so_far: int) -> None:
        # count the PubAcks received (fail early), and look at the abort's stop request
        assert pub is not None
        pub.mark(rows_so_far)
        pub.poll()
        if stop is not None and stop.requested:
            _stopped(stop, opts, pub, partition, attempt, rows_so_far)

    stop: _StopSignal | None = None
    try:
        try:
            js = conn.jetstream(timeout=opts.publish_timeout, max_pending=opts.max_pending)
            pub = RowPublisher(conn, opts.max_pending, opts.publish_timeout)
            stop = _StopSignal(conn, stop_subject(token, batch_id)) if token is not None else None
            fast = _FastRows(conn, prefix, batch_id, partition, opts.derive_msg_id)
            cols: _Columns4Write | None = None
            for rb in batches:
                if cols is None:
                    cols = _write_columns(list(rb.schema.names), opts)
                n = rb.num_rows
                if n == 0:
                    continue
                if stop is not None and stop.requested:
                    _stopped(stop, opts, pub, partition, attempt, rows)
                data_col = rb.column(cols.data)
                if _pa.types.is_string(data_col.type):  # the UTF-8 bytes as they are: no encode() per row
                    data_col = data_col.cast(_pa.binary())
                elif _pa.types.is_large_string(data_col.type):
                    data_col = data_col.cast(_pa.large_binary())
                datas = data_col.to_pylist()
                subjects = rb.column(cols.subject).to_pylist() if cols.subject is not None else None
                headers = rb.column(cols.headers).to_pylist() if cols.headers is not None else None
                ids = rb.column(cols.msg_id).to_pylist() if cols.msg_id is not None else None
                keys = rb.column(cols.key).to_pylist() if cols.key is not None else None
                if headers is None and ids is None and keys is None:
                    # the common batch: subject and data only, one loop over the rows
                    first = rows
                    fast.publish_all(pub, subjects, datas, opts.subject, first, partition, look)
                    rows = first + n
                    continue
                pub.mark(rows)
                for i in range(n):
                    row = rows
                    subj = (subjects[i] if subjects is not None else None) or opts.subject
                    if subj is None:
                        raise SparkWriteError(
                            f"row {row} of partition {partition} has no subject (its 'subject' column is null "
                            "and option 'subject' is not set)"
                        )
                    if keys is not None:
                        subj = _row_subject(subj, keys[i], row, partition)
                    d = datas[i]
                    if d is None:
                        d = b""
                    elif isinstance(d, str):
                        d = d.encode()
                    h = _row_headers(headers[i], row, partition) if headers is not None else None
                    try:
                        if not h and (ids is None or ids[i] is None):
                            # the common row: no headers of its own, a derived id (or none)
                            hdrs = fast.headers(subj, d)
                        else:
                            if ids is not None and ids[i] is not None:
                                msg_id: str | None = str(ids[i])
                            elif opts.derive_msg_id:
                                msg_id = fast.msg_id(subj, d, h)
                            else:
                                msg_id = None
                            if isinstance(h, _HeaderLines):  # a repeated name: every line is sent
                                if msg_id is not None:
                                    h = _HeaderLines([*h.lines, ("Nats-Msg-Id", msg_id)])
                                hdrs = fast.checked(subj, d, h)
                            else:  # publish_async's checks and headers
                                d, hdrs = js._prepare_publish(subj, d, h, msg_id, None, None, None, None)
                    except Exception as exc:  # noqa: BLE001 - bad subject, header, payload size
                        raise SparkWriteError(
                            f"cannot publish row {row} of partition {partition} to {subj!r}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                    try:
                        pub.publish(row, subj, d, hdrs)
                    except _RowFailed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - a closed connection
                        pub.rows.pop(row, None)
                        raise SparkWriteError(
                            f"cannot publish row {row} of partition {partition} to {subj!r}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from exc
                    rows += 1
                    if not rows & 255:  # count the PubAcks now and then: fail early
                        pub.poll()
                        if stop is not None and stop.requested:
                            _stopped(stop, opts, pub, partition, attempt, rows)
            try:
                pub.wait_all(opts.publish_timeout + 5.0)
            except TimeoutError as exc:
                raise SparkWriteError(
                    f"partition {partition}: {pub.pending} PubAck(s) still missing after "
                    f"{opts.publish_timeout + 5.0}s"
                ) from exc
        except _RowFailed as exc:
            err = exc.error
            raise SparkWriteError(
                f"publishing row {exc.row} of partition {partition} to {exc.subject!r} failed: "
                f"{type(err).__name__}: {err}"
            ) from err
    except _Stopped as exc:
        raise SparkWriteError(_stopped_text(exc, opts, prefix, batch_id, partition)) from None
    except SparkWriteError as exc:
        raise SparkWriteError(_failed_write_text(str(exc), opts, pub, prefix, batch_id, partition)) from exc
    finally:
        conn.close()
    return JetStreamCommitMessage(partition=partition, rows=rows, duplicates=pub.duplicates,
                                  first_seq=pub.first_seq, last_seq=pub.last_seq)


def _go_duration(seconds: float) -> str:
    """``seconds`` written like a Go duration: ``2m0s``, ``1h0m0s``, ``1m30s``, ``500ms``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    frac = seconds - whole
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    tail = f"{sec + frac:g}s"
    if h:
        return f"{h}h{m}m{tail}"
    if m:
        return f"{m}m{tail}"
    return tail


def check_duplicate_window(opts: WriteOptions) -> None:
    """Warn when the sink's stream forgets message ids sooner than ``expectedRestartTime``.

    Looks up (on the driver, when the write is planned) the stream that captures option
    ``subject`` and logs a warning on the ``jssync.spark`` logger when its duplicate window
    is shorter than ``opts.expected_restart_time``: a micro-batch replayed, or a batch
    write re-run with the same ``msgIdPrefix``, later than the window after the first
    attempt would store copies. Nothing is checked without option ``subject`` (subjects
    from a column are only known to the tasks), without message ids (``deriveMsgId=false``
    and no ``msgIdColumn``) or with ``expectedRestartTime=0``. Blocks for one connection
    and two JetStream API requests (``connectTimeout`` / ``timeout``); a lookup that fails
    is logged at INFO and never fails the write (the tasks report their own errors).
    """
    if opts.subject is None or opts.expected_restart_time <= 0:
        return
    if not opts.derive_msg_id and opts.msg_id_column is None:
        return
    try:
        conn = opts.conn.connect("planner")
    except Exception as exc:  # noqa: BLE001 - planning a write never needed the server before
        log.info("jssync.spark: cannot check the duplicate window for subject %r: %s: %s", opts.subject,
                 type(exc).__name__, exc)
        return
    try:
        js = conn.jetstream(timeout=opts.conn.timeout)
        name = js.find_stream_name_by_subject(opts.subject)
        window = float(js.stream(name).info().config.duplicate_window or 0.0)
    except Exception as exc:  # noqa: BLE001 - no stream captures it, permissions: the tasks say so
        log.info("jssync.spark: cannot check the duplicate window for subject %r: %s: %s", opts.subject,
                 type(exc).__name__, exc)
        return
    finally:
        conn.close()
    if window < opts.expected_restart_time:
        log.warning(
            "jssync.spark: the duplicate window of stream %r (%s) is shorter than expectedRestartTime (%s): a "
            "micro-batch replayed, or a write re-run with the same msgIdPrefix, more than %s after the first "
            "attempt stores its rows again. Raise the stream's duplicate_window, or set expectedRestartTime "
            "to the longest restart you expect", name, _go_duration(window), _go_duration(opts.expected_restart_time),
            _go_duration(window))


def _log_commit(messages: Sequence[Any], what: str) -> None:
    rows = sum(m.rows for m in messages if isinstance(m, JetStreamCommitMessage))
    dups = sum(m.duplicates for m in messages if isinstance(m, JetStreamCommitMessage))
    log.info("jssync.spark: %s: %d row(s) published, %d duplicate(s) dropped by the stream", what, rows, dups)


def _abort(opts: WriteOptions, token: str, batch_id: int, prefix: str | None, messages: Sequence[Any],
           what: str) -> str:
    """Stop the write's running tasks (:func:`stop_tasks`) and log (WARNING) what the write left in
    the stream besides the failed task's partition (whose error says it); returns that text."""
    reports, gone = stop_tasks(opts, token, batch_id)
    done = [m for m in messages if isinstance(m, JetStreamCommitMessage)]
    finished = sum(m.rows for m in done)
    stopped = sum(int(r.get("stored", 0)) + int(r.get("duplicates", 0)) for r in reports)
    unsettled = sum(int(r.get("unsettled", 0)) for r in reports)
    text = (f"{what} aborted: {finished + stopped} row(s) of the write's other tasks are in the stream "
            f"({finished} of {len(done)} finished task(s), {stopped} of {len(reports)} task(s) stopped by the "
            f"abort, partitions {sorted(int(r.get('partition', -1)) for r in reports)}")
    if unsettled:
        text += f"; {unsettled} more published without a PubAck yet"
    text += ("); tasks Spark killed first are not counted" + ("" if gone else
             ", and some task of the write was still connected when the abort stopped waiting")
             + "; the failed task's error says what its partition stored")
    if prefix is not None and opts.derive_msg_id:
        text += (f". Derived message ids start with '{prefix}.{batch_id}.': write the same rows again with "
                 f"option msgIdPrefix='{prefix}' within the stream's duplicate window and none is stored twice")
    log.warning("jssync.spark: %s", text)
    return text


class JetStreamBatchWriter(DataSourceArrowWriter):
    """Batch writes (``df.write.format("jetstream")...save()``)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        #: The first part of derived message ids: made once per write on the driver, so every
        #: task attempt of this write derives the same ids.
        self.prefix = opts.msg_id_prefix or uuid.uuid4().hex[:16]
        #: Names this write's stop subject (:func:`stop_subject`), made on the driver.
        self.token = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> JetStreamCommitMessage:
        partition, attempt, _ = _task_info()
        return write_batches(self.opts, iterator, self.prefix, 0, partition, self.token, attempt)

    def commit(self, messages: list[Any]) -> None:
        _log_commit(messages, "write")

    def abort(self, messages: list[Any]) -> None:
        """Stop the tasks still publishing (each answers once stopped, at most a few seconds) and
        log what the write stored; never raises (Spark raises the failed task's error)."""
        _abort(self.opts, self.token, 0, self.prefix, messages, "write")


class JetStreamStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes; derived message ids use the query id, the micro-batch and the partition."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.fallback_prefix = opts.msg_id_prefix or uuid.uuid4().hex[:16]
        #: Names this query's stop subjects (:func:`stop_subject`), made on the driver.
        self.token = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> JetStreamCommitMessage:
        partition, attempt, props = _task_info()
        prefix = self.opts.msg_id_prefix or props.get("sql.streaming.queryId") or self.fallback_prefix
        batch_raw = props.get("streaming.sql.batchId")
        try:
            batch_id = int(batch_raw) if batch_raw is not None else 0
        except ValueError:
            batch_id = 0
        return write_batches(self.opts, iterator, prefix, batch_id, partition, self.token, attempt)

    def commit(self, messages: list[Any], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Stop the micro-batch's tasks still publishing and log it; it is written again
        (de-duplicated) on replay."""
        _abort(self.opts, self.token, batchId, self.opts.msg_id_prefix, messages, f"micro-batch {batchId}")


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
        # a bad headersFormat is refused by reader() / streamReader(), naming it
        fmt = str(_plain(self.options).get("headersformat", "map")).strip().lower()
        return schema_type("array" if fmt == "array" else "map")

    def reader(self, schema: StructType) -> JetStreamBatchReader:
        opts = ReadOptions.parse(_plain(self.options))
        _check_schema(schema, opts.headers_format)
        return JetStreamBatchReader(opts)

    def streamReader(self, schema: StructType) -> JetStreamStreamReader:
        opts = ReadOptions.parse(_plain(self.options))
        _check_schema(schema, opts.headers_format)
        if opts.ending_time is not None:
            raise ValidationError(
                "option 'endingTime' is for batch reads only (as Kafka's endingTimestamp); bound a streaming "
                "read with option 'endingSequence'")
        return JetStreamStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> JetStreamBatchWriter:
        if overwrite:
            raise ValidationError(
                "the jetstream sink only appends: use mode('append') (a stream cannot be overwritten)")
        opts = WriteOptions.parse(_plain(self.options))
        check_write_schema(schema, opts)
        check_duplicate_window(opts)
        return JetStreamBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> JetStreamStreamWriter:
        opts = WriteOptions.parse(_plain(self.options))
        check_write_schema(schema, opts)
        check_duplicate_window(opts)
        return JetStreamStreamWriter(opts)


def _default_append() -> None:
    """Make ``df.write.format("jetstream")`` start in append mode (idempotent).

    Spark refuses its default save mode (ErrorIfExists) for Python data sources, and
    appending is the only thing a stream can do; an explicit ``.mode(...)`` after
    ``format`` still wins.
    """
    import functools

    from pyspark.sql.readwriter import DataFrameWriter

    orig = DataFrameWriter.format
    if getattr(orig, "_jssync_append", False):
        return

    @functools.wraps(orig)
    def format(self: Any, source: str) -> Any:  # noqa: A001 - the method's name
        w = orig(self, source)
        if isinstance(source, str) and source.lower() == FORMAT:
            w = w.mode("append")
        return w

    cast(Any, format)._jssync_append = True  # marks the patched method as ours
    cast(Any, DataFrameWriter).format = format


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


def register(spark: SparkSession) -> None:
    """Register the ``jetstream`` format on ``spark`` (once per session; again is harmless).

    Also makes ``df.write.format("jetstream")`` default to append mode: Spark's default
    (ErrorIfExists) is not allowed for Python data sources. Executors import
    :mod:`jssync.spark` by name, so jssync must be installed where the Python workers run.
    """
    spark.dataSource.register(JetStreamDataSource)
    _default_append()

