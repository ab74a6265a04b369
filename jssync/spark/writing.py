"""Writing rows to JetStream from Spark tasks, and the writers' driver side (commit, abort).

:func:`write_batches` publishes a task's Arrow batches (checks, headers, derived
``Nats-Msg-Id``, PubAcks counted by :class:`~jssync.spark.rowpub.RowPublisher`); how a
failed write stops the other tasks and counts what it left is in :mod:`jssync.spark.aborting`.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..base.errors import (
    TimeoutError,
    ValidationError,
)
from .aborting import (
    MAX_FAILURES_PROPERTY,
    _StopSignal,
    abort_counts,
    failed_write_text,
    in_stream,
    send_summary,
    stop_others,
    stop_tasks,
    stopped,
    stopped_text,
)
from .errors import SparkWriteError, _InputFailed, _RowFailed, _Stopped
from .options import WriteOptions
from .rowpub import RowPublisher

if TYPE_CHECKING:
    from ..core.connection import Connection

log = logging.getLogger("jssync.spark")


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
    (values as bytes, decoded as UTF-8, or strings; an entry whose value is null is no header).
    Headers with a repeated name come back as :class:`_HeaderLines`."""
    if not h:
        return None
    if isinstance(h, dict):
        return {k: v for k, v in h.items() if v is not None} or None
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
        if v is None:  # a null value: no header (an empty one would be a header)
            continue
        pairs.append((k, v))
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


def _max_failures(props: Mapping[str, str | None]) -> int | None:
    """The attempts a task has (:data:`MAX_FAILURES_PROPERTY`), or None when the driver did not say."""
    raw = props.get(MAX_FAILURES_PROPERTY)
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _task_info() -> tuple[int, int, dict[str, str | None]]:
    """``(partition id, attempt number, {local properties we use})`` of the running task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:  # pragma: no cover - only outside Spark
        return 0, 0, {}
    props = {k: tc.getLocalProperty(k) for k in ("sql.streaming.queryId", "streaming.sql.batchId",
                                                 MAX_FAILURES_PROPERTY)}
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

    @property
    def max_payload(self) -> int:
        """The server's max_payload (payload plus header block)."""
        return self._max_payload

    @property
    def min_id_block(self) -> int | None:
        """The smallest header block of a derived id (occurrence 0), None when ids are not derived."""
        if not self._derive:
            return None
        return self._extra + len(self._head) + 2 * _DIGEST_SIZE + 2

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


#: Bytes of a header block of one ``Nats-Msg-Id`` line beyond the id itself:
#: ``NATS/1.0\r\n``, ``Nats-Msg-Id: ``, the line's CRLF and the closing CRLF.
_ID_BLOCK = 27


def _check_batch_sizes(data_col: Any, ids_col: Any, limit: int, derived_min: int | None, first: int,
                       partition: int) -> None:
    """Refuse an Arrow batch before any of its rows is published when a row's payload plus its
    ``Nats-Msg-Id`` header is over ``limit`` (the server's max_payload).

    ``data_col`` is the binary data column, ``ids_col`` the id column (or None),
    ``derived_min`` the smallest header block a derived id takes (None: ids are not
    derived). Rows with headers of their own count only their id here (the publish checks
    the rest). Raises :class:`SparkWriteError` naming the row, its size and the limit.
    """
    import pyarrow as _pa
    import pyarrow.compute as pc

    data_len = pc.fill_null(pc.binary_length(data_col), 0)
    if ids_col is not None:  # an id of its own, else a derived one (or none)
        own = pc.add(pc.binary_length(ids_col.cast(_pa.string())), _ID_BLOCK)
        total = pc.add(data_len, pc.fill_null(own, derived_min or 0))
    else:
        total = pc.add(data_len, derived_min or 0)
    biggest = pc.max(total).as_py()
    if biggest is None or biggest <= limit:
        return
    i = pc.index(pc.greater(total, limit), True).as_py()
    size = int(data_len[i].as_py())
    hdr = int(total[i].as_py()) - size
    raise SparkWriteError(
        f"row {first + i} of partition {partition} is {size} bytes of data plus {hdr} bytes of its Nats-Msg-Id "
        f"header: {size + hdr} bytes, over the server's max_payload of {limit} bytes (nothing of this batch "
        "was published). Data of a derived id's row may be up to "
        f"{limit - (derived_min or 0)} bytes; write such rows with option deriveMsgId=false, shorter ids in a "
        "msgIdColumn, or raise the server's max_payload"
    )


def _input(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, with an exception of the input raised as :class:`_InputFailed`."""
    it = iter(batches)
    while True:
        try:
            rb = next(it)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - whatever the input raised: the task fails with it
            raise _InputFailed(exc) from exc
        yield rb


def write_batches(opts: WriteOptions, batches: Iterator[Any], prefix: str, batch_id: int,
                  partition: int, token: str | None = None, attempt: int = 0,
                  max_failures: int | None = None) -> JetStreamCommitMessage:
    """Publish every row of ``batches`` (Arrow record batches) and wait for all PubAcks.

    With ``token`` (the write's, from the driver) the task listens on
    :func:`stop_subject` and stops publishing, before its next row, when the driver's
    abort or a failed task asks (:func:`stop_tasks`); it answers with what it stored and
    fails. It also keeps what the write's finished tasks announce (see
    :mod:`jssync.spark.aborting`) and announces its own count when it finishes. When it
    fails on its last attempt (``attempt + 1 >= max_failures``; None: not known), it first
    stops the write's other running tasks (up to ``min(5, publishTimeout) + 2`` seconds)
    so that its error can count what the whole write left in the stream.

    Raises:
        SparkWriteError: a row could not be published or its PubAck failed, the connection
            closed, the input (``batches``) failed, or the write was aborted; the text also
            says how many rows of this partition are in the stream (their PubAcks came
            back, waited for up to 5 s after the failure), how many of the whole write
            (what the stopped and finished tasks reported; what could not be counted is
            named) and, for derived ids, the id prefix to write the same rows again with
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
            stopped(stop, opts, pub, partition, attempt, rows_so_far)

    stop: _StopSignal | None = None
    try:
        try:
            js = conn.jetstream(timeout=opts.publish_timeout, max_pending=opts.max_pending)
            pub = RowPublisher(conn, opts.max_pending, opts.publish_timeout)
            stop = _StopSignal(conn, token, batch_id, partition, attempt) if token is not None else None
            fast = _FastRows(conn, prefix, batch_id, partition, opts.derive_msg_id)
            cols: _Columns4Write | None = None
            for rb in _input(batches):
                if cols is None:
                    cols = _write_columns(list(rb.schema.names), opts)
                n = rb.num_rows
                if n == 0:
                    continue
                if stop is not None and stop.requested:
                    stopped(stop, opts, pub, partition, attempt, rows)
                data_col = rb.column(cols.data)
                if _pa.types.is_string(data_col.type):  # the UTF-8 bytes as they are: no encode() per row
                    data_col = data_col.cast(_pa.binary())
                elif _pa.types.is_large_string(data_col.type):
                    data_col = data_col.cast(_pa.large_binary())
                _check_batch_sizes(data_col, rb.column(cols.msg_id) if cols.msg_id is not None else None,
                                   fast.max_payload, fast.min_id_block, rows, partition)
                datas = data_col.to_pylist()
                # option 'subject' wins over the column, as Kafka's 'topic' option over its column
                subjects = (rb.column(cols.subject).to_pylist()
                            if cols.subject is not None and opts.subject is None else None)
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
                            stopped(stop, opts, pub, partition, attempt, rows)
            try:
                pub.wait_all(opts.publish_timeout + 5.0)
            except TimeoutError as exc:
                raise SparkWriteError(
                    f"partition {partition}: {pub.pending} PubAck(s) still missing after "
                    f"{opts.publish_timeout + 5.0}s"
                ) from exc
            except _RowFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - the connection closed while waiting
                raise SparkWriteError(
                    f"partition {partition}: waiting for {pub.pending} PubAck(s) failed: {type(exc).__name__}: {exc}"
                ) from exc
            if stop is not None:
                stop.announce_done({"partition": partition, "attempt": attempt, "rows": rows,
                                    "stored": pub.stored, "duplicates": pub.duplicates})
        except _RowFailed as exc:
            err = exc.error
            raise SparkWriteError(
                f"publishing row {exc.row} of partition {partition} to {exc.subject!r} failed: "
                f"{type(err).__name__}: {err}"
            ) from err
        except _InputFailed as exc:
            err = exc.error
            raise SparkWriteError(
                f"the input of partition {partition} failed after {rows} row(s): {type(err).__name__}: {err}"
            ) from err
        except (SparkWriteError, _Stopped):
            raise
        except Exception as exc:  # noqa: BLE001 - the connection closed while counting PubAcks, a refused SUB
            raise SparkWriteError(
                f"publishing the rows of partition {partition} failed: {type(exc).__name__}: {exc}"
            ) from exc
    except _Stopped as exc:
        raise SparkWriteError(stopped_text(exc, opts, prefix, batch_id, partition)) from None
    except SparkWriteError as exc:
        others = None
        if stop is not None:
            stop.decline()  # a stopper that asked meanwhile does not wait for this task
        if token is not None:
            final = max_failures is not None and attempt + 1 >= max_failures
            if pub is not None and final:
                # its own PubAcks first: the tasks it stops wait for its summary only so long
                pub.settle_quietly(min(5.0, opts.publish_timeout))
            others = stop_others(conn, stop, opts, token, batch_id, partition, attempt, final)
        text = failed_write_text(str(exc), opts, pub, prefix, batch_id, partition, others, attempt)
        if others is not None:
            send_summary(conn, others)
        raise SparkWriteError(text) from exc
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
    done_by, stopped_by = abort_counts(
        {m.partition: m.rows for m in messages if isinstance(m, JetStreamCommitMessage)}, reports)
    finished = sum(done_by.values())
    stopped = sum(in_stream(r) for r in stopped_by.values())
    unsettled = sum(int(r.get("unsettled", 0)) for r in stopped_by.values())
    text = (f"{what} aborted: {finished + stopped} row(s) of the write's other tasks are in the stream "
            f"({finished} of {len(done_by)} finished task(s), {stopped} of {len(stopped_by)} task(s) stopped by the "
            f"abort, partitions {sorted(stopped_by)}")
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
    """Batch writes (``df.write.format("jetstream").mode("append")...save()``)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        #: The first part of derived message ids: made once per write on the driver, so every
        #: task attempt of this write derives the same ids.
        self.prefix = opts.msg_id_prefix or uuid.uuid4().hex[:16]
        #: Names this write's stop subject (:func:`stop_subject`), made on the driver.
        self.token = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> JetStreamCommitMessage:
        partition, attempt, props = _task_info()
        return write_batches(self.opts, iterator, self.prefix, 0, partition, self.token, attempt,
                             _max_failures(props))

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
        return write_batches(self.opts, iterator, prefix, batch_id, partition, self.token, attempt,
                             _max_failures(props))

    def commit(self, messages: list[Any], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Stop the micro-batch's tasks still publishing and log it; it is written again
        (de-duplicated) on replay."""
        _abort(self.opts, self.token, batchId, self.opts.msg_id_prefix, messages, f"micro-batch {batchId}")
