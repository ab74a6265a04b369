"""Planning reads on the driver: stream state, starting and ending sequences, offsets, the readers.

:class:`JetStreamBatchReader` splits each stream's range into partitions;
:class:`JetStreamStreamReader` keeps streaming offsets (a position per stream, with the
stream's creation time) and plans micro-batches within the read limits. The tasks read
their ranges with :func:`jssync.spark.ranges.read_range`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..base.errors import (
    ConnectionClosedError,
    JetStreamError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from .errors import DataLossError
from .options import KEY_COLUMN, SCHEMA, SCHEMA_ARRAY_HEADERS, ReadOptions
from .ranges import SequenceRange, _created_text, _parse_reply, read_range, schema_type, split_range

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..jetstream.context import JetStream

log = logging.getLogger("jssync.spark")


# -- planning (driver) ---------------------------------------------------------------------------


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


def _check_schema(schema: Any, headers_format: str = "map", include_key: bool = False) -> None:
    expected = schema_type(headers_format, include_key)
    if schema is not None and isinstance(schema, StructType) and schema != expected:
        ddl = SCHEMA_ARRAY_HEADERS if headers_format == "array" else SCHEMA
        raise ValidationError(
            f"the jetstream source has a fixed schema "
            f"({ddl}{', ' + KEY_COLUMN if include_key else ''}); got a user schema "
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
    removed before the query got to them are counted. A stream that no longer exists when a
    trigger looks (deleted, not created again yet) fails the query with
    :class:`DataLossError`; with ``failOnDataLoss=false`` no micro-batch reads it until it is
    created again (a warning is logged once), then it starts over as above.

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
        #: ``(stream, checkpointed seq, its created)`` of deleted streams waited for (failOnDataLoss=false).
        self._waiting: set[tuple[str, int, Any]] = set()
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

    def _state(self, missing: dict[str, StreamNotFoundError] | None = None) -> dict[str, _StreamNow]:
        """Look each stream up (one request each); the first lookup of them all also checks the
        subject filters. A stream that does not exist raises :class:`jssync.StreamNotFoundError`,
        or, given ``missing``, is left out and put there with its error."""
        js = self._js()
        nows: dict[str, _StreamNow] = {}
        for name in self.opts.names():
            try:
                nows[name] = _stream_now(js, name, self.opts.conn.timeout)
            except StreamNotFoundError as exc:
                if missing is None:
                    raise
                missing[name] = exc
        if self._filters is None and not missing:
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
        missing: dict[str, StreamNotFoundError] = {}
        self._target = {name: now.last + 1 for name, now in self._state(missing).items()}
        self._target.update({name: 0 for name in missing})  # deleted: nothing of it is read in this run

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

    def _deleted(self, name: str, start: Mapping[str, Any], exc: StreamNotFoundError) -> None:
        """The stream ``name`` of the checkpointed position ``start`` does not exist: fail, or
        (failOnDataLoss=false) log once that the query waits for it to be created again."""
        what = (f"stream {name!r} no longer exists (deleted after the query read it up to sequence "
                f"{int(start['seq']) - 1}{', created at ' + str(start['created']) if start.get('created') else ''})")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}. Set option failOnDataLoss=false to wait for it to be created again and "
                                "start over at its first sequence") from exc
        key = (name, int(start["seq"]), start.get("created"))
        if key not in self._waiting:
            self._waiting.add(key)
            log.warning("jssync.spark: %s: no micro-batch reads it until it is created again, then the query "
                        "starts over at its first sequence (failOnDataLoss=false)", what)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        missing: dict[str, StreamNotFoundError] = {}
        nows = self._state(missing if start is not None else None)
        if missing:
            assert start is not None
            starts_now = self._decode(start)
            for name, exc in missing.items():
                st = starts_now.get(name)
                if st is None:  # never read (added to option streams): not there to wait for
                    raise exc
                self._deleted(name, st, exc)
        waiting = {name: int(starts_now[name]["seq"]) for name in missing} if missing else {}
        if start is not None and missing and not nows:  # nothing to read: the same offset, no micro-batch
            self._end = waiting
            return dict(start)
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
                self._end = {**dict(begins), **waiting}
                # no micro-batch: the same offset (a former stream's: moved to the new one)
                return self._with_waiting({name: dict(starts[name]) if same[name] else _offset(begins[name], now)
                                           for name, now in nows.items()}, starts, waiting)
        if isinstance(limit, ReadMaxRows):
            take = share_limit({n: ends[n] - begins[n] for n in nows}, max(1, int(limit.max_rows)))
            ends = {n: begins[n] + take[n] for n in nows}
        if any(ends[n] > begins[n] for n in nows):
            self._last_trigger = time.monotonic()
            if not self.opts.fail_on_data_loss:
                for name, now in nows.items():
                    if now.first > begins[name] and ends[name] > begins[name]:
                        self._lost += min(now.first, ends[name]) - begins[name]  # the executors skip these
        self._end = {**ends, **waiting}
        return self._with_waiting({name: _offset(ends[name], now) for name, now in nows.items()}, starts, waiting)

    def _with_waiting(self, per: Mapping[str, dict[str, Any]], starts: Mapping[str, Mapping[str, Any]],
                      waiting: Mapping[str, int]) -> dict[str, Any]:
        """:meth:`_encode` of ``per`` plus the unchanged positions of the deleted streams waited
        for, in the order of the options (the offset's text stays the same while nothing moves)."""
        both = {**per, **{n: dict(starts[n]) for n in waiting}}
        return self._encode({n: both[n] for n in self.opts.names() if n in both})

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
            self._state({})  # a deleted stream: its ranges fail or are skipped below, or in the tasks
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
            missing: dict[str, StreamNotFoundError] = {}
            now_or_none = self._state(missing).get(name)
            if now_or_none is None:  # deleted since the micro-batch was planned
                self._deleted(name, start, missing[name])
                if stop > begin:
                    self._lost += stop - begin
                    log.warning("jssync.spark: stream %r no longer exists: skipped the micro-batch %d..%d, %d "
                                "sequence(s) (failOnDataLoss=false)", name, begin, stop - 1, stop - begin)
                return []
            now = now_or_none
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
