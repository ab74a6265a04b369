"""The options of the ``jetstream`` format: names (Kafka's too), parsing and checks (pure, driver side).

:class:`ConnectOptions`, :class:`ReadOptions` and :class:`WriteOptions` hold plain values
only, so they pickle to the executors; :func:`check_option_names` refuses an option a read
or write does not take, naming Spark's Kafka equivalent where there is one.
"""

from __future__ import annotations

import datetime as _dt
import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from ..base.times import parse_server_time

if TYPE_CHECKING:
    from ..core.connection import Connection


#: The format name registered by :func:`register`.
FORMAT = "jetstream"

#: The schema of a read, as a DDL string.
SCHEMA = "stream string, subject string, seq long, time timestamp, data binary, headers map<string,string>"
#: The schema of a read with ``headersFormat=array`` (the ``headers`` column of Spark's Kafka source).
SCHEMA_ARRAY_HEADERS = ("stream string, subject string, seq long, time timestamp, data binary, "
                        "headers array<struct<key:string,value:binary>>")
#: What option ``includeKey=true`` adds at the end of either schema: the subject's last token,
#: the ``key`` the sink appends to its subject (Kafka's message key).
KEY_COLUMN = "key string"


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


#: The default of options ``batchBytes`` and ``arrowBatchBytes`` (16 MiB): what a read task
#: holds stays near 3 x 16 MiB plus three messages whatever the size of its messages.
DEFAULT_BATCH_BYTES = 16 * 1024 * 1024


#: The options each kind of query takes, as documented (compared case-insensitively: Spark
#: hands the data source its options with lower-cased keys).
_CONNECT_OPTIONS = ("servers", "user", "password", "token", "creds", "nkeysSeed", "tlsCaFile", "tlsCertFile",
                    "tlsKeyFile", "tlsHostname", "connectTimeout", "timeout", "connectionName")
_READ_OPTIONS = ("stream", "streams", "subjects", "subject", "startingSequence", "startingTime", "endingSequence",
                 "endingTime", "numPartitions", "includeHeaders", "headersFormat", "includeKey", "readMethod",
                 "batchSize", "arrowBatchSize", "batchBytes", "arrowBatchBytes",
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
    #: Option ``includeKey``: a last ``key`` column, the subject's last token (the sink's ``key``).
    include_key: bool = False
    read_method: str = "consumer"
    batch_size: int = 1000
    arrow_batch_size: int = 10_000
    #: Bytes one pull request / Direct Get batch asks for at most (at least the server's
    #: max_payload plus room for subject and headers: one message always fits).
    batch_bytes: int = DEFAULT_BATCH_BYTES
    #: Bytes of message data after which an Arrow batch is yielded (it holds at most this
    #: plus one message).
    arrow_batch_bytes: int = DEFAULT_BATCH_BYTES
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
            include_key=_opt_bool(opts, "includeKey", False),
            read_method=method,
            batch_size=_opt_int(opts, "batchSize", 1000) or 1000,
            arrow_batch_size=_opt_int(opts, "arrowBatchSize", 10_000) or 10_000,
            batch_bytes=_opt_int(opts, "batchBytes", DEFAULT_BATCH_BYTES) or DEFAULT_BATCH_BYTES,
            arrow_batch_bytes=_opt_int(opts, "arrowBatchBytes", DEFAULT_BATCH_BYTES) or DEFAULT_BATCH_BYTES,
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
