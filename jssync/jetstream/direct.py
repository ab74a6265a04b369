"""Direct Get (ADR-31): read stored messages from any replica or mirror of a stream.

A Direct Get request goes to ``<prefix>.DIRECT.GET.<stream>`` (``<prefix>`` is the
JetStream context's API prefix, so domains work) with a JSON body, or to
``<prefix>.DIRECT.GET.<stream>.<subject>`` with no body for a last-by-subject read.
Replies are the stored messages themselves, with ``Nats-Stream``, ``Nats-Subject``,
``Nats-Sequence`` and ``Nats-Time-Stamp`` headers, or a status-only reply
(404 not found, 408 bad request, 413 too many subjects, 204 end of batch).

Single reads use the connection's request multiplexer. Batched and multi-subject reads
get many replies to one request: each :class:`DirectBatch` makes its own core
subscription on a fresh inbox, publishes the request with that inbox as the reply
subject, and reads replies until the server's end-of-batch marker.

A read sends the Direct Get request and nothing before it: no stream info, so no
leader is needed (ADR-31's point: any replica or mirror answers). Only when nobody
answers (status 503) is the stream's info asked for, to tell a stream without
``allow_direct`` or a missing stream from replicas and mirrors that are all down.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..base.deadline import DEFAULT, Default, no_wait, resolve_timeout
from ..base.errors import (
    APIError,
    BadRequestError,
    ConnectionClosedError,
    DirectGetNotAllowedError,
    JetStreamNotEnabledError,
    MessageNotFoundError,
    NoRespondersError,
    RequestTimeoutError,
    ServiceUnavailableError,
    StreamNotFoundError,
    SubscriptionClosedError,
    TimeoutError,
    TooManySubjectsError,
    ValidationError,
)
from ..base.status import END_OF_BATCH, NO_RESPONDERS, NOT_FOUND, REQUEST_TIMEOUT, TOO_MANY_SUBJECTS, Status, classify
from ..base.times import format_server_time, server_time_or_none
from ..base.validate import MAX_I64, check_int, validate_subject
from .replies import StoredMsg

if TYPE_CHECKING:
    from ..core.msg import Msg
    from ..core.subscription import Subscription
    from .context import JetStream

__all__ = [
    "BadRequestError",
    "DirectBatch",
    "TooManySubjectsError",
    "direct_get",
    "direct_get_batch",
    "direct_get_last_for",
]

HDR_STREAM = "Nats-Stream"
HDR_SUBJECT = "Nats-Subject"
HDR_SEQUENCE = "Nats-Sequence"
HDR_TIME_STAMP = "Nats-Time-Stamp"
HDR_NUM_PENDING = "Nats-Num-Pending"
HDR_LAST_SEQUENCE = "Nats-Last-Sequence"
HDR_UP_TO_SEQUENCE = "Nats-UpTo-Sequence"

#: Headers the server adds to a Direct Get reply; they are not part of the stored message.
_REPLY_HEADERS = frozenset(
    {HDR_STREAM, HDR_SUBJECT, HDR_SEQUENCE, HDR_TIME_STAMP, HDR_NUM_PENDING, HDR_LAST_SEQUENCE,
     HDR_UP_TO_SEQUENCE}
)

#: A multi_last request may match at most this many subjects (else 413).
MAX_MULTI_SUBJECTS = 1024


# -- pure helpers ---------------------------------------------------------------------------

#: A ``Nats-Time-Stamp`` value (RFC 3339, or Go's ``time.String()`` of older servers) as an
#: aware UTC datetime, None when missing or unreadable (the one parser: base/times.py).
parse_timestamp = server_time_or_none


def format_time(t: _dt.datetime, what: str = "time") -> str:
    """Format a datetime as RFC 3339 in UTC (the one formatter, base/times.py); naive is UTC.

    Raises:
        TypeError: ``t`` is not a datetime (``what`` names the option).
    """
    if not isinstance(t, _dt.datetime):
        raise TypeError(f"{what} must be a datetime, got {type(t).__name__}: {t!r}")
    return format_server_time(t)


def _check_seq(seq: Any, what: str = "seq") -> int:
    return check_int(seq, what)  # a stream sequence: uint64


def _check_positive(v: Any, what: str) -> int:
    return check_int(v, what, maximum=MAX_I64)  # a batch or byte count: int64


def _has_wildcard(subject: str) -> bool:
    return any(tok in ("*", ">") for tok in subject.split("."))


def status_error(msg: Msg, what: str) -> BaseException | None:
    """The exception for a status-only Direct Get reply, or None for a stored message.

    204 (end of batch) is not an error and also gives None; the caller checks for it.
    """
    st = classify(msg.headers, msg.data, msg.reply)
    if st is None or st.code == END_OF_BATCH:
        return None
    return _status_exc(st, what)


def _status_exc(st: Status, what: str) -> BaseException:
    code, desc = st.code, st.description
    if code == NOT_FOUND:
        return MessageNotFoundError(404, None, f"{desc or 'message not found'} ({what})")
    if code == REQUEST_TIMEOUT:
        return BadRequestError(408, None, f"{desc or 'bad request'} ({what})")
    if code == TOO_MANY_SUBJECTS:
        return TooManySubjectsError(
            413, None, f"{desc or 'too many results'} ({what}: more than {MAX_MULTI_SUBJECTS} subjects match)"
        )
    if code == NO_RESPONDERS:
        return NoRespondersError(f"no responders for {what}")
    return APIError(code or None, None, f"{desc or 'direct get failed'} ({what})")


def to_stored_msg(msg: Msg) -> StoredMsg:
    """Turn a Direct Get reply carrying a stored message into a :class:`StoredMsg`.

    The reply headers the server adds (``Nats-Stream``, ``Nats-Sequence``, ...) are taken
    off, so ``headers`` holds the stored message's own headers, or None.
    """
    hdrs = msg.headers or {}
    subject = hdrs.get(HDR_SUBJECT, "")
    try:
        seq = int(hdrs.get(HDR_SEQUENCE, "0"))
    except ValueError:
        seq = 0
    own = {k: v for k, v in hdrs.items() if k not in _REPLY_HEADERS}
    return StoredMsg(subject=subject, seq=seq, data=msg.data, headers=own or None,
                     time=parse_timestamp(hdrs.get(HDR_TIME_STAMP)))


# -- checks that need the server ------------------------------------------------------------


def _api_subject(js: JetStream, stream: str) -> str:
    return f"{js.prefix}.DIRECT.GET.{stream}"


def _no_responders(js: JetStream, stream: str, timeout: float | None | Default) -> BaseException:
    """Work out why nobody answered a Direct Get request; returns the error to raise.

    Only now is the stream's info asked for (a Direct Get itself never needs it): a
    stream without allow_direct has no responder, and neither has a missing stream.
    """
    try:
        info = js._stream_info(stream, timeout=timeout)
    except JetStreamNotEnabledError as exc:
        return exc
    except (NoRespondersError, ServiceUnavailableError, TimeoutError):
        info = None
    except StreamNotFoundError as exc:
        return StreamNotFoundError(exc.code, exc.err_code, f"stream {stream!r} not found (direct get)")
    if info is not None and not info.config.allow_direct:
        return DirectGetNotAllowedError(
            f"stream {stream!r} does not allow direct gets (allow_direct is off); "
            "enable allow_direct on the stream or use stream.get_msg()"
        )
    return NoRespondersError(
        f"no server answered the direct get on stream {stream!r} (are its replicas and mirrors down?)",
        subject=_api_subject(js, stream),
    )


def _timeout(js: JetStream, timeout: float | None | Default) -> float | None:
    t = resolve_timeout(timeout, js.timeout)
    no_wait(t, "the direct get")
    return t


# -- single reads -----------------------------------------------------------------------------


def direct_get(js: JetStream, stream: str, *, seq: int | None = None, last_by_subject: str | None = None,
               next_by_subject: str | None = None, start_time: _dt.datetime | None = None,
               timeout: float | None | Default = DEFAULT) -> StoredMsg:
    """Read one message with Direct Get.

    The selectors: ``seq`` alone (that sequence); ``last_by_subject`` alone (the last
    message on that subject, sent in the subject-appended form when the subject has no
    wildcard); ``next_by_subject`` (the first message on it, at or after ``seq`` when
    given, or at or after ``start_time``); ``start_time`` alone (the first message stored
    at or after it; a naive datetime is taken as UTC).

    Sends the Direct Get request and nothing else (no stream info first): any replica
    or mirror may answer, with no leader needed. Blocks until the reply arrives, at most
    ``timeout`` seconds (default: the JetStream context's timeout).

    Raises:
        ValueError, TypeError: no selector, or selectors that cannot be combined (nothing is sent).
        jssync.StreamNotFoundError: no such stream (asked only after nobody answered).
        jssync.MessageNotFoundError: no such message.
        jssync.DirectGetNotAllowedError: the stream does not allow direct gets.
        jssync.NoRespondersError: no replica or mirror answered.
        jssync.TimeoutError: no reply in time.
    """
    t = _timeout(js, timeout)
    req: dict[str, Any] = {}
    subject = _api_subject(js, stream)
    if last_by_subject is not None:
        if seq is not None or next_by_subject is not None or start_time is not None:
            raise ValidationError("last_by_subject cannot be combined with seq, next_by_subject or start_time")
        validate_subject(last_by_subject, "last_by_subject")
        if _has_wildcard(last_by_subject):
            req["last_by_subj"] = last_by_subject
        else:
            subject = f"{subject}.{last_by_subject}"
    else:
        if seq is not None and start_time is not None:
            raise ValidationError("seq and start_time cannot be combined")
        if seq is not None:
            req["seq"] = _check_seq(seq)
        if start_time is not None:
            req["start_time"] = format_time(start_time, "start_time")
        if next_by_subject is not None:
            validate_subject(next_by_subject, "next_by_subject")
            req["next_by_subj"] = next_by_subject
        if not req:
            raise ValidationError("direct_get needs seq, last_by_subject, next_by_subject or start_time")
    what = f"direct get on stream {stream!r}"
    data = json.dumps(req).encode() if req else b""
    failed: BaseException | None = None
    try:
        msg = js.conn.request(subject, data, timeout=t)
    except NoRespondersError:
        failed = _no_responders(js, stream, t)
    except TimeoutError:
        failed = RequestTimeoutError(f"no reply to the {what} within {t}s", subject=subject,
                                     disconnected=js.conn.internal.link_state() is not None)
    if failed is not None:  # raised outside the handler: no internal context
        raise failed
    st = classify(msg.headers, msg.data, msg.reply)
    if st is not None:
        if st.code == END_OF_BATCH:  # pragma: no cover - only sent for batches
            raise MessageNotFoundError(404, None, f"message not found ({what})")
        err = _status_exc(st, what)
        if isinstance(err, NoRespondersError):
            raise _no_responders(js, stream, t)
        raise err
    return to_stored_msg(msg)


# -- batches ----------------------------------------------------------------------------------


def _close_sub(sub: Subscription) -> None:
    """End ``sub`` and send its UNSUB without waiting; never raises, takes no lock.

    It also runs as a finalizer, that is wherever the garbage collector happens to run:
    on any thread (the I/O thread included), possibly one that holds the connection's
    subscription lock right now; so it must neither block nor take that lock.
    """
    if not sub._closed:
        sub._unsubscribe_soon()


class DirectBatch:
    """The replies to one batched or multi-subject Direct Get request: an iterator of StoredMsg.

    Iteration ends at the server's end-of-batch marker (204 EOB), which also sets
    :attr:`num_pending` (matching messages left after this batch), :attr:`last_sequence`
    (the stream sequence of the last message sent) and, for multi-subject reads,
    :attr:`up_to_sequence` (the point in time the read was made at). A request that
    matches nothing ends with no messages. A server that does not know batches (before
    2.11) sends one message and no marker; then ``num_pending`` stays None.

    Each wait for the next reply lasts at most the ``timeout`` given when the batch was
    requested. :meth:`next_batch` requests the following batch; :meth:`all` iterates over
    this batch and every following one. Close the batch (or use it as a context manager,
    or read it to the end) to drop its subscription; abandoned batches are cleaned up
    when garbage-collected. Thread-safe: several threads may take messages from one batch.
    """

    def __init__(self, js: JetStream, stream: str, request: dict[str, Any], timeout: float | None, *,
                 multi: bool) -> None:
        self._js = js
        self._stream = stream
        self._request = request
        self._timeout = timeout
        self._multi = multi
        self._what = f"direct get {'multi_last' if multi else 'batch'} on stream {stream!r}"
        #: Matching messages left after this batch (from the end-of-batch marker), or None.
        self.num_pending: int | None = None
        #: The stream sequence of the last message of this batch, or None.
        self.last_sequence: int | None = None
        #: For multi-subject reads: the stream sequence this read was made "as of", or None.
        self.up_to_sequence: int | None = None
        self.received = 0
        self._done = False
        self._ended_by_marker = False
        self._lock = threading.Lock()
        conn = js.conn
        batch = int(request.get("batch") or 0)
        limit = max(batch, MAX_MULTI_SUBJECTS if multi else 1) + 16
        if not batch and not multi:
            limit = 1 << 20
        self._sub = conn.subscribe(conn.new_inbox(), pending_msgs_limit=limit)
        self._finalizer = weakref.finalize(self, _close_sub, self._sub)
        try:
            conn.publish(_api_subject(js, stream), json.dumps(request).encode(), reply=self._sub.subject)
        except BaseException:
            self._finalizer()
            raise

    def __repr__(self) -> str:
        state = "done" if self._done else "open"
        return (f"<jssync.DirectBatch {self._what} {state} received={self.received} "
                f"num_pending={self.num_pending}>")

    @property
    def request(self) -> dict[str, Any]:
        """The JSON request that was sent (a copy)."""
        return dict(self._request)

    @property
    def done(self) -> bool:
        """True once the batch ended (marker, not-found, error, or :meth:`close`)."""
        return self._done

    def __iter__(self) -> Iterator[StoredMsg]:
        return self

    def __enter__(self) -> DirectBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and drop the subscription (idempotent). Replies still in flight are ignored."""
        self._done = True
        self._finalizer()

    def _finish(self) -> None:
        self._done = True
        self._finalizer()

    def __next__(self) -> StoredMsg:
        """Return the next message of the batch.

        Blocks until it arrives, at most the batch's ``timeout``.

        Raises:
            StopIteration: the batch ended.
            jssync.TimeoutError: no reply in time (the batch is closed).
            BadRequestError, TooManySubjectsError, jssync.APIError: the server refused the request.
            jssync.NoRespondersError, jssync.DirectGetNotAllowedError: nobody answered.
            jssync.ConnectionClosedError: the connection closed during the batch.
        """
        with self._lock:
            if self._done:
                raise StopIteration
            conn = self._js.conn
            failed: BaseException | None = None
            try:
                msg = self._sub.next_msg(timeout=self._timeout)
            except TimeoutError:
                self._finish()
                failed = RequestTimeoutError(
                    f"no reply within {self._timeout}s in the {self._what} "
                    f"(after {self.received} message(s))", subject=_api_subject(self._js, self._stream),
                    disconnected=conn.internal.link_state() is not None,
                )
            except SubscriptionClosedError:
                self._done = True
                failed = StopIteration()
                if conn.is_closed:
                    failed = ConnectionClosedError(f"the connection closed during the {self._what}")
            if failed is not None:  # raised outside the handler: no internal context
                raise failed
            hdrs = msg.headers
            st = classify(hdrs, msg.data, msg.reply) if hdrs and not msg.data and "Status" in hdrs else None
            if st is not None:
                assert hdrs is not None
                if st.code == END_OF_BATCH:
                    self._ended_by_marker = True
                    self.num_pending = _int(hdrs.get(HDR_NUM_PENDING), self.num_pending)
                    self.last_sequence = _int(hdrs.get(HDR_LAST_SEQUENCE), self.last_sequence)
                    self.up_to_sequence = _int(hdrs.get(HDR_UP_TO_SEQUENCE), self.up_to_sequence)
                    self._finish()
                    raise StopIteration
                err = _status_exc(st, self._what)
                self._finish()
                if isinstance(err, MessageNotFoundError):
                    # nothing (more) matches: an empty or shortened batch, not an error
                    if self.num_pending is None or self.received == 0:
                        self.num_pending = 0
                    raise StopIteration
                if isinstance(err, NoRespondersError):
                    raise _no_responders(self._js, self._stream, self._timeout)
                raise err
            if self.received == 0 and not (hdrs and HDR_NUM_PENDING in hdrs):
                # a server without batch support answers with one plain message
                self._finish()
            sm = to_stored_msg(msg)
            self.received += 1
            self.last_sequence = sm.seq
            if hdrs and HDR_NUM_PENDING in hdrs:
                self.num_pending = _int(hdrs.get(HDR_NUM_PENDING), self.num_pending)
            return sm

    def next_batch(self, *, timeout: float | None | Default = DEFAULT) -> DirectBatch | None:
        """Request the batch that follows this one, or return None when nothing is left.

        A batch read continues after :attr:`last_sequence`; a multi-subject read also
        keeps ``up_to_seq`` at :attr:`up_to_sequence`, so every batch of it shows the
        stream at the same point in time. Call it once this batch was read to the end.

        Blocks only to subscribe and send the request (the replies are read by iterating).

        Raises:
            RuntimeError: this batch was not read to its end marker yet.
        """
        if not self._done:
            raise RuntimeError("read this batch to the end before asking for the next one")
        if not self._ended_by_marker or not self.num_pending or self.last_sequence is None:
            return None
        req = dict(self._request)
        req.pop("start_time", None)
        req["seq"] = self.last_sequence + 1
        if self._multi:
            req.pop("up_to_time", None)
            if self.up_to_sequence:
                req["up_to_seq"] = self.up_to_sequence
        t = self._timeout if isinstance(timeout, Default) else _timeout(self._js, timeout)
        return DirectBatch(self._js, self._stream, req, t, multi=self._multi)

    def all(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[StoredMsg]:
        """Iterate over the rest of this batch, then over every following batch until none is left.

        For multi-subject reads every batch is read as of the same ``up_to_seq``.
        Blocks like iteration does.
        """
        batch: DirectBatch | None = self
        while batch is not None:
            try:
                yield from batch
            finally:
                if batch is not self:
                    batch.close()
            batch = batch.next_batch(timeout=timeout)


def _int(value: str | None, default: int | None) -> int | None:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def direct_get_batch(js: JetStream, stream: str, subject: str, batch: int, *, seq: int | None = None,
                     start_time: _dt.datetime | None = None, max_bytes: int | None = None,
                     timeout: float | None | Default = DEFAULT) -> DirectBatch:
    """Read up to ``batch`` messages on ``subject`` (wildcards allowed) with one Direct Get request.

    Starts at ``seq`` (default 1) or at the first message stored at or after
    ``start_time`` (a naive datetime is taken as UTC); ``max_bytes`` caps the size of the
    batch (the server stops after the message that crosses it). Needs nats-server 2.11+
    for more than one message.

    Blocks until the request is sent; each message is waited for while iterating, at
    most ``timeout`` seconds (default: the JetStream context's timeout).

    Raises:
        ValueError, TypeError, jssync.BadSubjectError: bad arguments (nothing is sent).
        jssync.DirectGetNotAllowedError, jssync.StreamNotFoundError: (while iterating) nobody
            answered because the stream does not allow direct gets or does not exist.
    """
    validate_subject(subject, "subject")
    req: dict[str, Any] = {"batch": _check_positive(batch, "batch")}
    if seq is not None and start_time is not None:
        raise ValidationError("seq and start_time cannot be combined")
    if start_time is not None:
        req["start_time"] = format_time(start_time, "start_time")
    else:
        req["seq"] = 1 if seq is None else _check_seq(seq)
    req["next_by_subj"] = subject
    if max_bytes is not None:
        req["max_bytes"] = _check_positive(max_bytes, "max_bytes")
    t = _timeout(js, timeout)
    return DirectBatch(js, stream, req, t, multi=False)


def direct_get_last_for(js: JetStream, stream: str, subjects: list[str], *, up_to_seq: int | None = None,
                        up_to_time: _dt.datetime | None = None, batch: int | None = None,
                        timeout: float | None | Default = DEFAULT) -> DirectBatch:
    """Read the last message of each subject in ``subjects`` (wildcards allowed) in one request.

    ``up_to_seq`` / ``up_to_time`` read the subjects as they were at that stream sequence
    or time (consistent point-in-time reads); ``batch`` caps the number of messages, and
    :meth:`DirectBatch.next_batch` / :meth:`DirectBatch.all` continue at the same point in
    time (``Nats-UpTo-Sequence``). An ``up_to_seq`` past the stream's last sequence is
    not refused (no 404): the read sees the stream as it is now; following batches keep
    that ``up_to_seq``, so they may also see messages stored after the first batch.
    At most 1024 subjects may match. Messages come in stream order. Needs nats-server 2.11+.

    Blocks until the request is sent; each message is waited for while iterating, at
    most ``timeout`` seconds (default: the JetStream context's timeout).

    Raises:
        ValueError, TypeError, jssync.BadSubjectError: bad arguments (nothing is sent).
        jssync.DirectGetNotAllowedError, jssync.StreamNotFoundError: (while iterating) nobody
            answered because the stream does not allow direct gets or does not exist.
        TooManySubjectsError: (while iterating) more than 1024 subjects matched.
    """
    if isinstance(subjects, str) or not isinstance(subjects, list | tuple):
        raise TypeError(f"subjects must be a list of subjects, got {subjects!r}")
    if not subjects:
        raise ValidationError("subjects must not be empty")
    for s in subjects:
        validate_subject(s, "subject")
    req: dict[str, Any] = {"multi_last": list(subjects)}
    if up_to_seq is not None and up_to_time is not None:
        raise ValidationError("up_to_seq and up_to_time cannot be combined")
    if up_to_seq is not None:
        req["up_to_seq"] = _check_seq(up_to_seq, "up_to_seq")
    if up_to_time is not None:
        req["up_to_time"] = format_time(up_to_time, "up_to_time")
    if batch is not None:
        req["batch"] = _check_positive(batch, "batch")
    t = _timeout(js, timeout)
    return DirectBatch(js, stream, req, t, multi=True)
