"""Reading one planned sequence range of a stream in a Spark task (executor side).

:func:`split_range` cuts a stream's sequences into ranges, :class:`SequenceRange` is the
partition a task gets, and :class:`_RangeReader` reads it (ordered consumer or batched
Direct Gets) into Arrow record batches of the read schema (:func:`schema_type`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from ..base.errors import (
    MessageNotFoundError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from ..core import natspy as _natspy
from .errors import DataLossError
from .options import ReadOptions

if TYPE_CHECKING:
    from ..jetstream.streams import Stream

log = logging.getLogger("jssync.spark")


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


# -- reading (executors) -------------------------------------------------------------------------


def _created_text(created: Any) -> str | None:
    """A stream's creation time as kept in offsets and ranges (ISO 8601, UTC), or None."""
    if created is None:
        return None
    if isinstance(created, _dt.datetime):
        t: _dt.datetime = created if created.tzinfo is not None else created.replace(tzinfo=_dt.UTC)
        return t.astimezone(_dt.UTC).isoformat()
    return str(created)


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

#: What a pull request or Direct Get batch asks for beyond the server's max_payload at least:
#: room for one message's subject, reply subject and protocol lines next to its payload.
_REQUEST_ROOM = 64 * 1024


class _Columns:
    """Column lists for one Arrow record batch."""

    __slots__ = ("subjects", "seqs", "times", "datas", "headers", "data_bytes")

    def __init__(self) -> None:
        #: bytes of message data in :attr:`datas`
        self.data_bytes = 0
        self.subjects: list[str] = []
        self.seqs: list[int] = []
        self.times: list[int] = []
        self.datas: list[bytes] = []
        #: (name, value) pairs; the value is bytes with headersFormat=array
        self.headers: list[list[tuple[str, str]] | list[tuple[str, bytes]] | None] = []

    def __len__(self) -> int:
        return len(self.seqs)


def schema_type(headers_format: str = "map", include_key: bool = False) -> StructType:
    """The schema of a read as a StructType (:data:`SCHEMA`; with ``headers_format="array"``,
    :data:`SCHEMA_ARRAY_HEADERS`; ``include_key``: a last column :data:`KEY_COLUMN`)."""
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
    fields = [
        StructField("stream", StringType()),
        StructField("subject", StringType()),
        StructField("seq", LongType()),
        StructField("time", TimestampType()),
        StructField("data", BinaryType()),
        StructField("headers", headers),
    ]
    if include_key:
        fields.append(StructField("key", StringType()))
    return StructType(fields)


def _arrow_schema(headers_format: str = "map", include_key: bool = False) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema_type(headers_format, include_key), timezone="UTC")


def subject_keys(subjects: Any) -> Any:
    """The ``key`` column of a read: each subject's last token (``ORDERS.eu.42`` -> ``42``, a
    subject of one token -> itself), as an Arrow string array, computed in Arrow (no Python
    object per row). Pure."""
    import pyarrow.compute as pc

    return pc.replace_substring_regex(subjects, pattern=r"^.*\.", replacement="")


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
    if len(schema) > len(arrays):  # includeKey
        arrays.append(subject_keys(arrays[1]))
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
        schema = _arrow_schema(self.opts.headers_format, self.opts.include_key)
        conn = self.opts.conn.connect("reader")
        try:
            self._pairs = self.opts.headers_format == "array"
            if self._pairs and self.opts.include_headers and not _natspy.keep_header_blocks(conn.internal.nc):
                log.warning("jssync.spark: this nats-py cannot keep header blocks: headersFormat=array gives one "
                            "value per header name")
            js = conn.jetstream(timeout=self.opts.conn.timeout)
            try:
                stream = js.stream(self.stream)
            except StreamNotFoundError as exc:
                what = (f"stream {self.stream!r} no longer exists (deleted after the range {self.first}..{self.last} "
                        "was planned): the whole range was lost")
                if self.opts.fail_on_data_loss:
                    raise DataLossError(f"{what}. Set option failOnDataLoss=false to skip it") from exc
                self.lost += self.last - self.first + 1
                log.warning("jssync.spark: %s: skipped %d sequence(s) (failOnDataLoss=false)", what,
                            self.last - self.first + 1)
                return
            self._check_lost(stream)
            if self.last < self.first:
                return
            # a pull / Direct Get batch always has room for one message of max_payload
            self._request_bytes = max(self.opts.batch_bytes, conn.max_payload + _REQUEST_ROOM)
            self._cols = _Columns()
            source = self._direct(stream) if self.opts.read_method == "direct" else self._consumer(stream)
            for _ in source:  # the columns are full
                yield _to_batch(self.stream, self._cols, schema)
                self._cols = _Columns()
            if len(self._cols):
                yield _to_batch(self.stream, self._cols, schema)
        finally:
            conn.close()

    #: Each source appends the messages to ``self._cols`` and yields None when they hold
    #: ``arrowBatchSize`` rows or ``arrowBatchBytes`` of data; :meth:`batches` then turns them
    #: into a record batch and starts new ones (the source takes them up again after its
    #: yield), and takes what is left when the source ends.
    _cols: _Columns
    #: headersFormat=array: the headers column holds (key, value bytes) pairs.
    _pairs: bool = False
    #: ``max_bytes`` of each pull request / Direct Get batch.
    _request_bytes: int = 0

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
        pairs = self._pairs
        limit = opts.arrow_batch_size
        byte_limit = opts.arrow_batch_bytes
        next_seq = self.first
        last = self.last
        oc = stream.ordered_consumer(filter_subjects=list(self.subjects) or None, opt_start_seq=next_seq,
                                     inactive_threshold=30.0)
        empty = 0
        # the columns' appends bound once per Arrow batch, not looked up per message
        c = self._cols
        add_subject, add_seq, add_time = c.subjects.append, c.seqs.append, c.times.append
        add_data, add_headers = c.datas.append, c.headers.append
        rows = len(c)
        try:
            while next_seq <= last:
                want = min(opts.batch_size, last - next_seq + 1)
                got = 0
                with oc.fetch_no_wait(want, max_bytes=self._request_bytes) as res:
                    for m in res:
                        got += 1
                        t = m.reply.split(".")
                        if len(t) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>
                            sseq, ts, pending = int(t[5]), int(t[7]), int(t[8])
                        else:
                            sseq, _cseq, pending, ts = _parse_reply(m.reply)
                        if sseq > last:
                            return
                        if sseq >= next_seq:
                            data = m.data
                            add_subject(m.subject)
                            add_seq(sseq)
                            add_time(ts // 1000)
                            add_data(data)
                            c.data_bytes += len(data)
                            h = m.headers if include_headers else None
                            if pairs:
                                add_headers(_header_pairs(h))
                            else:
                                add_headers(list(h.items()) if h else None)
                            next_seq = sseq + 1
                            rows += 1
                            if rows >= limit or c.data_bytes >= byte_limit:
                                yield None
                                c = self._cols
                                add_subject, add_seq, add_time = c.subjects.append, c.seqs.append, c.times.append
                                add_data, add_headers = c.datas.append, c.headers.append
                                rows = len(c)
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

    def _direct(self, stream: Stream) -> Iterator[None]:
        opts = self.opts
        subject = self.subjects[0] if self.subjects else ">"
        include_headers = opts.include_headers
        limit = opts.arrow_batch_size
        byte_limit = opts.arrow_batch_bytes
        next_seq = self.first
        last = self.last
        micro = _dt.timedelta(microseconds=1)
        while next_seq <= last:
            want = min(opts.batch_size, last - next_seq + 1)
            with stream.direct_get_batch(subject, want, seq=next_seq, max_bytes=self._request_bytes,
                                         timeout=opts.conn.timeout) as batch:
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
                    c.data_bytes += len(sm.data)
                    h = sm.headers if include_headers else None
                    c.headers.append(list(h.items()) if h else None)
                    next_seq = sm.seq + 1
                    if len(c.seqs) >= limit or c.data_bytes >= byte_limit:
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
