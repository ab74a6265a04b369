"""JetStream message features of nats-server 2.11+: per-message TTL (ADR-43), counters
(ADR-49), atomic batch publish (ADR-50) and message schedules (ADR-51).

The stream must opt in to each (``allow_msg_ttl``, ``allow_msg_counter``, ``allow_atomic``,
``allow_msg_schedules``); a publish using a feature the stream does not allow is refused by
the server with an :class:`jssync.APIError` naming it. Everything here validates its input
before anything is sent.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout, round_trip_timeout
from ..base.durations import seconds as _seconds
from ..base.errors import (
    APIError,
    JetStreamError,
    MessageNotFoundError,
    NoRespondersError,
    RequestTimeoutError,
    TimeoutError,
    ValidationError,
)
from ..base.validate import validate_subject
from .params import validate_name
from .replies import _parse_pub_ack

if TYPE_CHECKING:
    from types import TracebackType

    from .context import JetStream
    from .streams import Stream

HDR_TTL = "Nats-TTL"
HDR_INCR = "Nats-Incr"
HDR_COUNTER_SOURCES = "Nats-Counter-Sources"
HDR_BATCH_ID = "Nats-Batch-Id"
HDR_BATCH_SEQ = "Nats-Batch-Sequence"
HDR_BATCH_COMMIT = "Nats-Batch-Commit"
HDR_SCHEDULE = "Nats-Schedule"
HDR_SCHEDULE_TARGET = "Nats-Schedule-Target"
HDR_SCHEDULE_SOURCE = "Nats-Schedule-Source"
HDR_SCHEDULE_TTL = "Nats-Schedule-TTL"
HDR_SCHEDULE_TZ = "Nats-Schedule-Time-Zone"

#: ADR-50: the server's limit on the messages in one atomic batch (its default; more is refused
#: with err_code 10199 at the commit), and on the length of a batch id.
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_ID_LEN = 64

#: ADR-51 predefined schedules (``@every`` and ``@at`` have their own arguments).
CRON_SHORTCUTS = frozenset(("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"))


# -- durations -------------------------------------------------------------------------------


def go_duration(seconds: Any, what: str, minimum: float = 1.0) -> str:
    """``seconds`` (>= ``minimum``) as a Go duration string (``5s``, ``1500ms``).

    ``seconds`` is a number, a ``datetime.timedelta`` or a Go duration string (``"1m"``),
    read by :func:`jssync.base.durations.seconds`.

    Raises:
        jssync.ValidationError: not a duration, or below ``minimum`` (nothing is sent).
    """
    seconds = _seconds(seconds, what, minimum=minimum)
    if isinstance(seconds, int) or float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def ttl_header(ttl: Any, what: str = "ttl") -> str:
    """The ``Nats-TTL`` value for ``ttl``: seconds (>= 1, the server's minimum) or ``"never"``.

    ``"never"`` keeps the message even past the stream's ``max_age`` (ADR-43).
    """
    if ttl == "never" and isinstance(ttl, str):
        return "never"
    return go_duration(ttl, what)


# -- counters (ADR-49) -------------------------------------------------------------------------


@dataclass
class CounterEntry:
    """A counter's current state (the last message on its subject).

    Attributes:
        subject: the counter's subject.
        value: its total (any size: Python ints are big integers).
        seq: the stream sequence of the message holding it.
        incr: the increment that message applied (``Nats-Incr``), or None.
        sources: for a counter fed by sourced streams, the last value seen from each
            source, ``{stream: {subject: value}}`` (``Nats-Counter-Sources``); else empty.
    """

    subject: str
    value: int
    seq: int
    incr: int | None = None
    sources: dict[str, dict[str, int]] = field(default_factory=dict)


def _big_int(value: Any, what: str) -> int:
    if not isinstance(value, str) or not re.fullmatch(r"[+-]?\d+", value):
        raise APIError(None, None, f"malformed counter {what}: {value!r} is not an integer string")
    return int(value)


class Counter:
    """A distributed counter (ADR-49) on one subject of a stream with ``allow_msg_counter=True``.

    Made with :meth:`jssync.JetStream.counter`. :meth:`add` returns the total after the
    increment (the PubAck's ``val``); :meth:`get` / :meth:`entry` read the last message on
    the subject. Values are Python ints of any size (the server keeps them as decimal
    strings). Thread-safe.
    """

    def __init__(self, js: JetStream, subject: str, stream: str | None = None) -> None:
        validate_subject(subject, "counter subject", wildcards=False)
        if stream is not None:
            validate_name(stream)
        self._js = js
        self.subject = subject
        self._stream = stream
        self._handle: Stream | None = None

    def __repr__(self) -> str:
        return f"<jssync.Counter {self.subject!r}>"

    def add(self, n: int = 1, *, timeout: float | None | Default = DEFAULT) -> int:
        """Add ``n`` (negative subtracts, 0 reads) and return the new total.

        Raises:
            ValueError: ``n`` is not an int (nothing is sent).
            jssync.APIError: e.g. err_code 10168, the stream does not allow counters.
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValidationError(f"counter increment must be an int, got {n!r}")
        ack = self._js.publish(self.subject, b"", headers={HDR_INCR: f"{n:+d}"}, timeout=timeout)
        if ack.val is None:
            raise JetStreamError(f"the PubAck for counter {self.subject!r} has no value (is the stream a counter?)")
        return _big_int(ack.val, "value")

    def get(self, *, timeout: float | None | Default = DEFAULT) -> int:
        """The counter's current total.

        Raises:
            jssync.MessageNotFoundError: nothing was ever added on this subject.
        """
        return self.entry(timeout=timeout).value

    def entry(self, *, timeout: float | None | Default = DEFAULT) -> CounterEntry:
        """The counter's total, last increment and, when sourced, each source's contribution.

        Raises:
            jssync.MessageNotFoundError: nothing was ever added on this subject.
        """
        deadline = Deadline(round_trip_timeout(timeout, self._js.timeout, "the counter read"))
        stream = self._handle
        if stream is None:  # looked up once
            name = self._stream or self._js.find_stream_name_by_subject(self.subject, timeout=deadline.remaining())
            stream = self._handle = self._js.stream(name, timeout=deadline.left())
        try:
            msg = stream.get_msg(last_by_subject=self.subject, timeout=deadline.left())
        except MessageNotFoundError:
            raise MessageNotFoundError(404, 10037, f"no counter value on {self.subject!r}") from None
        try:
            body = json.loads(msg.data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise APIError(None, None, f"malformed counter message on {self.subject!r}: {msg.data[:100]!r}")
        hdrs = msg.headers or {}
        incr = hdrs.get(HDR_INCR)
        sources: dict[str, dict[str, int]] = {}
        raw = hdrs.get(HDR_COUNTER_SOURCES)
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                raise APIError(None, None, f"malformed {HDR_COUNTER_SOURCES} header: {raw[:100]!r}")
            for src, subjects in parsed.items():
                if not isinstance(subjects, dict):
                    raise APIError(None, None, f"malformed {HDR_COUNTER_SOURCES} header: {raw[:100]!r}")
                sources[str(src)] = {str(s): _big_int(v, "source value") for s, v in subjects.items()}
        return CounterEntry(subject=msg.subject, value=_big_int(body.get("val"), "value"), seq=msg.seq,
                            incr=None if incr is None else _big_int(incr, "increment"), sources=sources)


# -- atomic batch publish (ADR-50) -------------------------------------------------------------


class BatchPublisher:
    """An atomic batch (ADR-50): every message added is stored, or none is.

    Made with :meth:`jssync.JetStream.batch_publish`; use it as a context manager::

        with js.batch_publish() as batch:
            batch.add("ORDERS.1", b"...")
            batch.add("ORDERS.2", b"...")
        print(batch.ack.batch_size)

    :meth:`add` only validates and keeps the message: nothing is sent until :meth:`commit`
    (called by a ``with`` block that ends normally), so a batch left by an exception, or
    :meth:`discard`-ed, sends nothing and stores nothing. The commit sends the first message
    as a request (the stream answers at once if it does not allow atomic batches), the
    middle ones without a reply, and the last with ``Nats-Batch-Commit: 1``, then waits for
    the batch's PubAck. The server checks the ``expected_*`` conditions when it commits;
    one failing fails the whole batch. Not thread-safe: one thread fills and commits a batch.
    """

    def __init__(self, js: JetStream, *, batch_id: str | None = None,
                 timeout: float | None | Default = DEFAULT) -> None:
        if batch_id is None:
            batch_id = uuid.uuid4().hex
        elif (not isinstance(batch_id, str) or not batch_id or len(batch_id) > MAX_BATCH_ID_LEN
              or not batch_id.isprintable() or " " in batch_id):
            raise ValidationError(f"batch_id must be 1-{MAX_BATCH_ID_LEN} printable characters without spaces, "
                             f"got {batch_id!r}")
        self._js = js
        self.batch_id = batch_id
        self.timeout = resolve_timeout(timeout, js.timeout)
        self._msgs: list[tuple[str, bytes, dict[str, str]]] = []
        self._msg_ids: set[str] = set()
        self._state = "open"
        #: The batch's PubAck (``batch_id``, ``batch_size``, the last message's ``seq``) once committed.
        self.ack: api.PubAck | None = None

    def __repr__(self) -> str:
        return f"<jssync.BatchPublisher {self.batch_id!r} messages={len(self._msgs)} {self._state}>"

    def __len__(self) -> int:
        return len(self._msgs)

    def add(self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
            msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
            expected_last_subject_seq: int | None = None, ttl: float | str | None = None) -> None:
        """Validate one message and add it to the batch (nothing is sent yet).

        ``expected_last_seq`` is allowed on the first message only;
        ``Nats-Expected-Last-Msg-Id`` is not supported in batches (ADR-50).

        Raises:
            ValueError: the batch already has ``MAX_BATCH_MESSAGES`` (1000) messages, is
                committed or discarded, or an option is invalid or not allowed in a batch.
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError.
        """
        if self._state != "open":
            raise ValidationError(f"batch {self.batch_id!r} is {self._state}: nothing more can be added")
        if len(self._msgs) >= MAX_BATCH_MESSAGES:
            raise ValidationError(f"batch {self.batch_id!r} is full: the server takes at most {MAX_BATCH_MESSAGES} "
                             "messages in one atomic batch")
        if expected_last_seq is not None and self._msgs:
            raise ValidationError("expected_last_seq is allowed on the first message of a batch only (ADR-50), "
                             f"not on message {len(self._msgs) + 1}")
        if headers and any(k.lower() == "nats-expected-last-msg-id" for k in headers):
            raise ValidationError("Nats-Expected-Last-Msg-Id is not supported in an atomic batch (ADR-50)")
        if headers and any(k.lower().startswith("nats-batch-") for k in headers):
            raise ValidationError("the Nats-Batch-* headers are set by the batch publisher, not in headers=")
        if msg_id is not None and msg_id in self._msg_ids:
            raise ValidationError(f"msg_id {msg_id!r} is already in this batch: the server refuses duplicates")
        extra = {HDR_BATCH_ID: self.batch_id, HDR_BATCH_SEQ: str(len(self._msgs) + 1)}
        # the commit header adds ~22 bytes to the last message: leave room for it in the size check
        extra[HDR_BATCH_COMMIT] = "1"
        h = dict(headers, **extra) if headers else extra
        payload, h2 = self._js._prepare_publish(subject, data, h, msg_id, expected_stream, expected_last_seq,
                                                expected_last_subject_seq, None, ttl)
        assert h2 is not None
        del h2[HDR_BATCH_COMMIT]
        self._msgs.append((subject, payload, h2))
        if msg_id is not None:
            self._msg_ids.add(msg_id)

    def discard(self) -> None:
        """Drop the batch: nothing was sent, so nothing is stored. Idempotent."""
        if self._state == "open":
            self._state = "discarded"
            self._msgs.clear()

    def commit(self, *, timeout: float | None | Default = DEFAULT) -> api.PubAck:
        """Send the batch and wait for its PubAck; all its messages are stored, or none.

        Raises:
            ValueError: the batch is empty, or was committed or discarded (nothing is sent).
            jssync.APIError: the server refused the batch (e.g. err_code 10174, the stream
                does not allow atomic batches; 10071, an ``expected_*`` check failed;
                10176, the batch was incomplete); nothing of it is stored.
            jssync.NoRespondersError: no stream captures the first subject.
            jssync.TimeoutError: no reply within ``timeout`` (the server abandons a batch
                it did not see committed within 10 s).
        """
        if self._state != "open":
            raise ValidationError(f"batch {self.batch_id!r} is {self._state}: it cannot be committed")
        if not self._msgs:
            raise ValidationError(f"batch {self.batch_id!r} is empty: nothing to commit")
        self._state = "committed"
        deadline = Deadline(round_trip_timeout(timeout, self.timeout, f"the commit of batch {self.batch_id!r}"))
        conn = self._js.conn
        msgs, self._msgs = self._msgs, []
        last = len(msgs) - 1
        try:
            for i, (subject, data, h) in enumerate(msgs):
                if i == last:
                    h[HDR_BATCH_COMMIT] = "1"
                    reply = conn.internal.request(subject, data, h, deadline.left())
                    self.ack = _parse_pub_ack(reply)
                    return self.ack
                if i == 0:
                    # the first as a request: a stream without allow_atomic answers with an error
                    reply = conn.internal.request(subject, data, h, deadline.left())
                    if reply.data or reply.headers:
                        _parse_pub_ack(reply)  # raises the refusal
                        raise APIError(None, None, f"unexpected reply to the start of batch {self.batch_id!r}: "
                                                   f"{reply.data[:100]!r}")
                else:
                    conn.publish(subject, data, headers=h)
        except NoRespondersError:
            raise NoRespondersError(f"no stream responded to batch {self.batch_id!r} on {msgs[0][0]!r}",
                                    subject=msgs[0][0]) from None
        except TimeoutError as exc:
            raise RequestTimeoutError(f"no reply to batch {self.batch_id!r} within {deadline.timeout}s",
                                      subject=msgs[0][0],
                                      disconnected=getattr(exc, "disconnected", False)) from None
        raise AssertionError("unreachable")

    def __enter__(self) -> BatchPublisher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.discard()
        elif self._state == "open" and self._msgs:
            self.commit()


# -- message schedules (ADR-51) ---------------------------------------------------------------


def schedule_header(at: Any, every: Any, cron: Any) -> str:
    """The ``Nats-Schedule`` value for exactly one of ``at``, ``every`` or ``cron``."""
    given = [n for n, v in (("at", at), ("every", every), ("cron", cron)) if v is not None]
    if len(given) != 1:
        raise ValidationError(f"give exactly one of at=, every= or cron=, got {given or 'none'}")
    if at is not None:
        if not isinstance(at, _dt.datetime):
            raise ValidationError(f"at must be a timezone-aware datetime, got {at!r}")
        if at.tzinfo is None or at.tzinfo.utcoffset(at) is None:
            raise ValidationError(f"at must be a timezone-aware datetime, got the naive {at!r} "
                             "(use e.g. datetime.now(timezone.utc))")
        return "@at " + at.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if every is not None:
        return "@every " + go_duration(every, "every")
    if not isinstance(cron, str) or not cron.strip():
        raise ValidationError(f"cron must be a non-empty string, got {cron!r}")
    expr = " ".join(cron.split())
    if expr.startswith("@"):
        if expr.lower() in CRON_SHORTCUTS:
            return expr.lower()
        raise ValidationError(f"cron {cron!r} is not one of {sorted(CRON_SHORTCUTS)} (use at= or every= for "
                         "@at and @every)")
    fields = expr.split(" ")
    if len(fields) != 6:
        raise ValidationError(f"cron {cron!r} has {len(fields)} fields; NATS schedules need 6: "
                         "seconds minutes hours day-of-month month day-of-week")
    if not all(re.fullmatch(r"[0-9A-Za-z*,/?-]+", f) for f in fields):
        raise ValidationError(f"cron {cron!r} has a field with characters a cron field cannot have")
    return expr


def schedule_headers(subject: str, target: Any, at: Any, every: Any, cron: Any, ttl: Any, time_zone: Any,
                     source: Any, headers: dict[str, str] | None) -> dict[str, str]:
    """Validate a schedule and return its headers (added to ``headers``)."""
    sched = schedule_header(at, every, cron)
    validate_subject(target, "schedule target", wildcards=False)
    if target == subject:
        raise ValidationError(f"the schedule target {target!r} must differ from the schedule's own subject")
    h = dict(headers) if headers else {}
    h[HDR_SCHEDULE] = sched
    h[HDR_SCHEDULE_TARGET] = target
    if ttl is not None:
        h[HDR_SCHEDULE_TTL] = ttl_header(ttl)
    if time_zone is not None:
        if cron is None:
            raise ValidationError("time_zone applies to cron schedules only (the server refuses it with at=/every=)")
        if not isinstance(time_zone, str) or not time_zone.strip() or " " in time_zone:
            raise ValidationError(f"time_zone must be a zone name like 'Europe/Amsterdam', got {time_zone!r}")
        h[HDR_SCHEDULE_TZ] = time_zone
    if source is not None:
        validate_subject(source, "schedule source", wildcards=False)
        h[HDR_SCHEDULE_SOURCE] = source
    return h
