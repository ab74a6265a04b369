"""The JetStream context (ADR-37): stream and consumer management, and publishing."""

from __future__ import annotations

import base64  # noqa: F401  (re-used by sibling modules through this one)
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from nats.js import api

from ..base.cpython import LeanFuture
from ..base.deadline import DEFAULT, Deadline, Default, check_setting, no_wait, resolve_timeout
from ..base.errors import (
    ConnectionClosedError,
    Error,
    NoAckStreamError,
    NoRespondersError,
    ReconnectBufferExceededError,
    RequestTimeoutError,
    TimeoutError,
    ValidationError,
    worth_retrying,
)
from ..base.status import is_no_responders
from ..base.validate import (
    _check_data,
    _headers_size,
    check_int,
    check_number,
    validate_headers,
    validate_subject,
)
from ..core import hooks as _core_hooks
from ..core.hooks import HOOKS as _CORE
from ..core.request_errors import cancelled, no_responders
from .consumeradmin import ConsumerAdmin
from .factories import Factories
from .params import (  # (validate_name is a name of the context too)
    HDR_EXPECTED_LAST_MSG_ID,
    HDR_EXPECTED_LAST_SEQ,
    HDR_EXPECTED_LAST_SUBJECT_SEQ,
    HDR_EXPECTED_STREAM,
    HDR_MSG_ID,
    validate_name,
)
from .replies import PubAck, _parse_pub_ack
from .resend import resend_delay
from .streamadmin import StreamAdmin
from .transport import APITransport, ConnectionTransport

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg

log = logging.getLogger("jssync")


class JetStream(StreamAdmin, ConsumerAdmin, Factories):
    """A JetStream context: streams, consumers and publishing on one connection.

    Made with :meth:`jssync.Connection.jetstream`. Every blocking call takes ``timeout``
    (default: the context's) and raises :class:`jssync.TimeoutError` when it runs out.
    Thread-safe.
    """

    # The context is made of rooms, one job each: stream management (jetstream/streamadmin.py),
    # consumer management (consumeradmin.py), the objects it makes (factories.py), all on the
    # API layer (apicalls.py), whose one call to the server goes through the transport
    # (transport.py). Publishing lives here.

    def __init__(
        self,
        conn: Connection,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
        max_pending: int = 4000,
    ) -> None:
        if domain is not None and api_prefix is not None:
            raise ValidationError("set domain or api_prefix, not both")
        if domain is not None:
            validate_name(domain, "domain")
            self.prefix = f"$JS.{domain}.API"
        elif api_prefix is not None:
            if not api_prefix or " " in api_prefix:
                raise ValidationError(f"invalid api_prefix {api_prefix!r}")
            self.prefix = api_prefix.rstrip(".")
        else:
            self.prefix = "$JS.API"
        timeout = check_setting(timeout, "timeout")
        if max_pending < 1:
            raise ValidationError(f"max_pending must be >= 1, got {max_pending!r}")
        self.domain = domain
        self._conn = conn
        self._api_transport: APITransport = ConnectionTransport(conn)
        self.timeout = timeout
        self.max_pending = max_pending
        self._async = _AsyncPublisher(self)
        #: subject -> stream name, for subjects found to be captured by a ``no_ack`` stream
        self._no_ack: dict[str, str] = {}
        self._no_ack_looking: set[str] = set()

    def __repr__(self) -> str:
        return f"<jssync.JetStream prefix={self.prefix!r}>"

    @property
    def conn(self) -> Connection:
        """The :class:`jssync.Connection` this context was made from (no I/O).

        A context owns no connection of its own: to shut down, close this one
        (``js.conn.close()``; see docs/frameworks.md, rule 4), which also ends every consumer,
        subscription and pending publish of the context.
        """
        return self._conn

    # -- publishing ------------------------------------------------------------------------

    def _pub_headers(self, headers: dict[str, str] | None, msg_id: str | None, expected_stream: str | None,
                     expected_last_seq: int | None, expected_last_subject_seq: int | None,
                     expected_last_msg_id: str | None, ttl: float | str | None = None) -> dict[str, str] | None:
        if msg_id is None and expected_stream is None and expected_last_seq is None and \
                expected_last_subject_seq is None and expected_last_msg_id is None and ttl is None:
            return headers
        h = dict(headers) if headers else {}
        if ttl is not None:
            from .msgfeatures import HDR_TTL, ttl_header

            h[HDR_TTL] = ttl_header(ttl)
        if msg_id is not None:
            if not isinstance(msg_id, str) or not msg_id:
                raise ValidationError(f"msg_id must be a non-empty str, got {msg_id!r}")
            h[HDR_MSG_ID] = msg_id
        if expected_stream is not None:
            h[HDR_EXPECTED_STREAM] = validate_name(expected_stream, "expected_stream")
        if expected_last_seq is not None:
            h[HDR_EXPECTED_LAST_SEQ] = str(_nonneg(expected_last_seq, "expected_last_seq"))
        if expected_last_subject_seq is not None:
            h[HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(_nonneg(expected_last_subject_seq, "expected_last_subject_seq"))
        if expected_last_msg_id is not None:
            h[HDR_EXPECTED_LAST_MSG_ID] = expected_last_msg_id
        return h

    def _prepare_publish(self, subject: str, data: bytes, headers: dict[str, str] | None, msg_id: str | None,
                         expected_stream: str | None, expected_last_seq: int | None,
                         expected_last_subject_seq: int | None,
                         expected_last_msg_id: str | None,
                         ttl: float | str | None = None) -> tuple[bytes, dict[str, str] | None]:
        """Validate a JetStream publish before anything is sent; return the payload and headers.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError, ValueError, TypeError.
            jssync.MaxPayloadError: payload plus header block over the server's max_payload
            (the server would close the connection).
        """
        validate_subject(subject, wildcards=False)
        if msg_id is None and expected_stream is None and expected_last_seq is None and \
                expected_last_subject_seq is None and expected_last_msg_id is None and ttl is None:
            h = headers  # (what _pub_headers returns then, without the call)
        else:
            h = self._pub_headers(headers, msg_id, expected_stream, expected_last_seq,
                                  expected_last_subject_seq, expected_last_msg_id, ttl)
        if h is not None:
            validate_headers(h)
        if data.__class__ is not bytes:  # (bytes pass without the call)
            data = _check_data(data)
        size = len(data) if h is None else len(data) + _headers_size(h)
        max_payload = self._conn.max_payload
        if size > max_payload:
            from ..base.errors import MaxPayloadError

            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {max_payload} bytes"
            )
        return data, h

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: Literal[True] = True,
    ) -> PubAck: ...

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: Literal[False],
    ) -> None: ...

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: bool,
    ) -> PubAck | None: ...

    def publish(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT,
        retry_attempts: int = 2,
        retry_wait: float = 0.25,
        ack: bool = True,
    ) -> PubAck | None:
        """Publish to a stream and wait for its acknowledgement.

        ``msg_id`` sets ``Nats-Msg-Id`` for de-duplication (a duplicate within the stream's
        duplicate window returns a PubAck with ``duplicate=True``); the ``expected_*``
        options make the publish conditional. ``ttl`` (seconds, >= 1, or ``"never"``) sets
        ``Nats-TTL``: the stream removes the message that long after storing it (ADR-43; the
        stream needs ``allow_msg_ttl=True``, else the publish fails with an APIError,
        err_code 10166). While no stream answers (503 / no
        responders, e.g. during a leader election) the publish is retried up to
        ``retry_attempts`` times with growing waits, within ``timeout``.

        Blocks until the PubAck arrives (default timeout: the context's).

        ``ack=False`` is for streams configured with ``no_ack``, which store messages
        without ever answering: the message is published like :meth:`Connection.publish`
        (buffered, returns None at once, nothing confirms it was stored; ``conn.flush()``
        waits until the server has it). The ``expected_*`` checks need a PubAck to report
        a failure, so they are refused with ``ack=False``.

        Raises:
            jssync.NoRespondersError: no stream captures ``subject``.
            jssync.WrongLastSequenceError, jssync.WrongLastMsgIdError,
            jssync.StreamNotMatchError: an expectation failed.
            jssync.NoAckStreamError: no PubAck came in time and the stream capturing
                ``subject`` has ``no_ack`` (it never sends one; the message was sent). Known
                from a background lookup started by an earlier timeout on ``subject``.
            jssync.TimeoutError, jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError.
            ValueError: e.g. ``ttl`` not a number >= 1 or ``"never"`` (nothing is sent).
        """
        tracer = _CORE.tracer  # jssync.otel: a send span, trace context in the headers (None: off)
        if tracer is not None and tracer.wants():
            return tracer.js_publish(self, subject, data, headers, dict(
                msg_id=msg_id, expected_stream=expected_stream, expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq, expected_last_msg_id=expected_last_msg_id,
                ttl=ttl, timeout=timeout, retry_attempts=retry_attempts, retry_wait=retry_wait, ack=ack))
        data, h = self._prepare_publish(subject, data, headers, msg_id, expected_stream, expected_last_seq,
                                        expected_last_subject_seq, expected_last_msg_id, ttl)
        if not ack:
            if expected_stream is not None or expected_last_seq is not None or \
                    expected_last_subject_seq is not None or expected_last_msg_id is not None:
                raise ValidationError("the expected_* checks are reported in the PubAck: they need ack=True")
            self.conn.publish(subject, data, headers=h)
            return None
        if not (retry_attempts.__class__ is int and retry_wait.__class__ is float
                and 0 <= retry_attempts <= 1_000_000 and 0.0 <= retry_wait < math.inf):
            _check_retry(retry_attempts, retry_wait)  # (the usual values pass without the call)
        wait = self.timeout if timeout is DEFAULT else resolve_timeout(timeout, self.timeout)
        no_wait(wait, f"js.publish to {subject!r}")
        deadline = Deadline(wait)
        request = self._conn.internal.request
        attempt = 0
        while True:
            failed: BaseException | None = None
            try:
                # _prepare_publish validated everything request() would; the deadline spans the
                # retries (passed as it is: no second Deadline per round trip)
                msg = request(subject, data, h, deadline)
            except TimeoutError:
                failed = self._no_pub_ack(subject, deadline.timeout)
            except Error as exc:
                if not worth_retrying(exc):
                    raise
                left = deadline.remaining()
                if attempt < retry_attempts and (left is None or left > retry_wait * (attempt + 1)):
                    attempt += 1
                elif isinstance(exc, NoRespondersError):
                    failed = no_responders(
                        subject, f"no stream responded to the publish on {subject!r} (no stream captures it, "
                        "or its leader is not elected)"
                    )
                else:
                    raise
            else:
                return _parse_pub_ack(msg)
            if failed is not None:  # raised outside the handler: no internal context
                raise failed
            time.sleep(retry_wait * attempt)

    def _no_pub_ack(self, subject: str, waited: float | None) -> BaseException:
        """The error for a publish whose PubAck did not come in time (never blocks).

        :class:`NoAckStreamError` when ``subject`` is known to be captured by a ``no_ack``
        stream (it never answers), else :class:`TimeoutError`. A subject not looked at yet is
        looked up in the background on the worker pool (stream for the subject, its info),
        so the caller's timeout is kept: the first timed-out publish to a ``no_ack`` stream
        raises TimeoutError (with a hint) and logs a warning naming the stream once the
        lookup has answered; later ones raise NoAckStreamError. While the connection is not
        connected the TimeoutError says so instead (reconnecting: to which server, which
        attempt; or closed: why), and nothing is looked up.
        """
        state = self.conn.internal.link_state()
        if state is not None:  # not the stream's fault: no PubAck can come while disconnected
            return RequestTimeoutError(f"no PubAck for the publish on {subject!r} within {waited}s: {state}",
                                       subject=subject, disconnected=True)
        name = self._no_ack.get(subject)
        if name is not None:
            return NoAckStreamError(
                name, subject,
                f"stream {name!r} is configured with no_ack: it never sends a PubAck, so none came for the "
                f"publish on {subject!r} within {waited}s; the message was sent and is stored unless a limit "
                "refused it; publish to this stream with ack=False")
        if subject not in self._no_ack_looking and len(self._no_ack_looking) < 64:
            self._no_ack_looking.add(subject)
            try:
                self.conn.internal.pool.submit(self._look_for_no_ack, subject)
            except Exception:  # the pool is gone: the connection is closing
                self._no_ack_looking.discard(subject)
        return RequestTimeoutError(
            f"no PubAck for the publish on {subject!r} within {waited}s (if its stream has no_ack, "
            "publish with ack=False)", subject=subject)

    def _look_for_no_ack(self, subject: str) -> None:
        """Worker pool: remember ``subject`` when the stream capturing it has ``no_ack``."""
        try:
            t = min(self.timeout, 2.0)
            name = self.find_stream_name_by_subject(subject, timeout=t)
            if self._stream_info(name, timeout=t).config.no_ack:
                self._no_ack[subject] = name
                log.warning("stream %r has no_ack: publishes on %r never get a PubAck (the messages are "
                            "stored); publish to it with ack=False", name, subject)
        except Error:
            pass
        finally:
            self._no_ack_looking.discard(subject)

    def publish_async(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT,
        retry_attempts: int = 2,
        retry_wait: float = 0.25,
    ) -> concurrent.futures.Future[PubAck]:
        """Publish without waiting; the returned Future resolves to the PubAck.

        The options are :meth:`publish`'s (``ttl=`` included).
        Blocks (never drops) while ``max_pending`` PubAcks are outstanding. While no
        stream answers (503 / no responders, e.g. during a leader election) the message is
        sent again up to ``retry_attempts`` times after growing waits (``retry_wait``,
        2 x ``retry_wait``, ...), within ``timeout``; the Future then fails with
        :class:`jssync.NoRespondersError`. A resent message is stored after messages
        published later that did not need a resend: pass ``retry_attempts=0`` when the
        order in the stream matters (or chain ``expected_last_seq``). A PubAck that
        does not arrive within ``timeout`` (default: the context's) fails its Future with
        :class:`jssync.TimeoutError`; closing the connection fails the Futures still
        waiting with :class:`jssync.ConnectionClosedError`, and ``Connection.drain()``
        waits for them first. While disconnected the message waits for the reconnect in
        the connection's publish queue (a message whose Future failed meanwhile is not
        sent); with the connection's ``reconnect_buffer_size`` used up the Future fails at
        once with :class:`jssync.ReconnectBufferExceededError`. Done-callbacks added to
        the Future run on the worker pool (or at once, on the caller's thread, when the
        Future is already done), never on the I/O thread.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError (before sending).
            jssync.ConnectionClosedError: the connection is closed.
        """
        tracer = _CORE.tracer  # jssync.otel: a send span ended by the PubAck (None: off)
        if tracer is not None and tracer.wants():
            return tracer.js_publish_async(self, subject, data, headers, dict(
                msg_id=msg_id, expected_stream=expected_stream, expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq, expected_last_msg_id=expected_last_msg_id,
                ttl=ttl, timeout=timeout, retry_attempts=retry_attempts, retry_wait=retry_wait))
        data, h = self._prepare_publish(subject, data, headers, msg_id, expected_stream, expected_last_seq,
                                        expected_last_subject_seq, expected_last_msg_id, ttl)
        _check_retry(retry_attempts, retry_wait)
        t = resolve_timeout(timeout, self.timeout)
        return self._async.publish(subject, data, h, math.inf if t is None else t,  # inf: no limit
                                   retry_attempts, float(retry_wait))

    def publish_async_pending(self) -> int:
        """PubAcks outstanding."""
        return self._async.pending

    def publish_async_completed(self, timeout: float | None = 30.0) -> None:
        """Wait until every outstanding publish_async has its PubAck (or failed).

        Blocks up to ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: some are still outstanding after ``timeout``.
        """
        self._async.wait_all(Deadline(timeout))

    # -- schedules (ADR-51; the headers are built in jetstream/msgfeatures.py) ------------------------

    def publish_scheduled(
        self,
        subject: str,
        data: bytes = b"",
        *,
        target: str,
        at: Any = None,
        every: Any = None,
        cron: str | None = None,
        ttl: float | str | None = None,
        time_zone: str | None = None,
        source: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None | Default = DEFAULT,
    ) -> api.PubAck:
        """Store a schedule on ``subject`` that publishes ``data`` to ``target`` (ADR-51).

        Exactly one of: ``at`` (an aware datetime: once, then the schedule is removed),
        ``every`` (seconds or a timedelta, >= 1) or ``cron`` (6 fields, seconds first, or
        ``@hourly``/``@daily``/...; UTC unless ``time_zone``, e.g. ``"Europe/Amsterdam"``).
        ``ttl`` sets the TTL of each message produced (needs ``allow_msg_ttl`` too);
        ``source`` publishes the last message on that subject instead of ``data``. The
        stream needs ``allow_msg_schedules=True`` and must capture ``target``; one schedule
        per subject (publishing another on the subject replaces it; purging the subject
        stops it). Other ``headers`` are copied to the produced messages.

        Raises:
            ValueError: no or several of at/every/cron, a naive ``at``, ``every`` < 1 s, a
                cron expression without 6 fields, ``target`` equal to ``subject`` (nothing is sent).
            jssync.APIError: the server refused the schedule (err_code 10188: schedules not
                allowed on the stream; 10189: invalid pattern; 10190: invalid target).
        """
        from .msgfeatures import schedule_headers

        validate_subject(subject, wildcards=False)
        h = schedule_headers(subject, target, at, every, cron, ttl, time_zone, source, headers)
        return self.publish(subject, data, headers=h, timeout=timeout)


def _nonneg(v: Any, what: str) -> int:
    return check_int(v, what, minimum=0)  # an expected sequence: uint64


def _check_retry(attempts: Any, wait: Any) -> None:
    """Raise ValueError for a retry count or wait a publish cannot use."""
    check_int(attempts, "retry_attempts", minimum=0, open_ended=True)
    check_number(wait, "retry_wait", above=None, minimum=0)


class _PubAckFuture(LeanFuture["PubAck"]):
    """The Future of a publish_async: its done-callbacks never run on the I/O thread.

    The PubAck is handled on the connection's I/O thread, where a plain Future would run
    the callbacks; a slow or blocking callback there would stall the whole connection
    (and a blocking jssync call in it would fail). Here a callback that would run on the
    I/O thread runs on the worker pool instead; elsewhere (a callback added to a Future
    that is already done, or completed by ``close()``) it runs at once, as usual. The
    Futures of one publisher share a Condition (see :class:`jssync.base.cpython.LeanFuture`).
    """

    def __init__(self, conn: Connection, condition: threading.Condition) -> None:
        super().__init__(condition)
        self._conn = conn

    def new_deadline(self, timeout: float | None) -> Deadline:
        return Deadline(timeout)

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[PubAck]], object]) -> None:
        conn = self._conn

        def call(fut: concurrent.futures.Future[PubAck]) -> None:
            pool = conn.internal.pool
            if conn.internal.loop.in_loop_thread() and not pool._closed:
                pool.submit(fn, fut)
            else:
                fn(fut)

        super().add_done_callback(call)


def _resolve(fut: concurrent.futures.Future[PubAck], result: PubAck | None,
             exc: BaseException | None) -> None:
    """Complete ``fut`` unless it is done already (never raises InvalidStateError)."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        elif result is not None:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


_Entry = tuple["concurrent.futures.Future[PubAck]", float, str, bytes, "dict[str, str] | None", int, float]


class _AsyncPublisher:
    """Outstanding publish_async Futures, completed on the I/O thread as PubAcks arrive.

    The table of outstanding Futures is shared: user threads add to it, the I/O thread
    takes from it (PubAcks, the timeout sweep) and ``close()`` fails what is left. Whoever
    pops an entry completes its Future. A publish adds its entry without a lock (see
    ``publish``); arming the sweep, its snapshot and the registration with the
    connection are under ``_lock`` (never held while waiting).

    While it has Futures outstanding the publisher is registered with the connection
    like a subscription, so ``Connection.drain()`` waits for the PubAcks and ``close()``
    fails the Futures still waiting with :class:`jssync.ConnectionClosedError` (the I/O
    loop stops, so no sweep would ever fail them).
    """

    def __init__(self, js: JetStream) -> None:
        self._js = js
        self._cond = threading.Condition()
        self._lock = threading.Lock()
        # token -> (Future, deadline, subject, data, headers, retry_attempts, retry_wait):
        # what the reply handler needs, so that one bound method serves every publish
        self._inflight: dict[str, _Entry] = {}
        self._on_reply = self._handle_reply
        self._sweeping = False
        self._registered = False
        self._ended = False
        self._waiters = 0  # publishers blocked on max_pending (waiting on _room)
        # Publishers blocked on max_pending wait on their own Condition and are woken one
        # at a time: at 3/4 of the limit one, and one more each time another quarter of
        # the window drains while some still wait (the level is _kick_at). Waking them all
        # at once made 16 publishers runnable together, and the I/O thread, which needs
        # the GIL to send and to handle the PubAcks, got it only after all of them.
        self._room = threading.Condition()
        self._kick_at = -1
        self._all_waiters = 0  # threads in wait_all (publish_async_completed, drain)
        self._retries: dict[str, int] = {}  # token -> resends after a 503 (I/O thread; _end clears it)
        # one Condition shared by this publisher's Futures (see _PubAckFuture)
        self._fcond = threading.Condition()

    def __repr__(self) -> str:
        return f"<jssync publish_async pending={len(self._inflight)}>"

    @property
    def pending(self) -> int:
        return len(self._inflight)

    def publish(self, subject: str, data: bytes, headers: dict[str, str] | None,
                timeout: float, retry_attempts: int = 2,
                retry_wait: float = 0.25) -> concurrent.futures.Future[PubAck]:
        conn = self._js.conn
        conn.internal.check_open()
        limit = self._js.max_pending
        if len(self._inflight) >= limit:
            deadline = Deadline(None)
            room = self._room
            low = limit - max(1, limit // 4)
            woken = False
            with room:
                self._waiters += 1
                try:
                    while True:
                        n = len(self._inflight)
                        if n > low:
                            # about to wait: wake one at 3/4. Set before looking at the count
                            # again, so a PubAck that missed this level was counted in it.
                            # (Not only when full: a publisher that found the window full,
                            # then one PubAck short of it here, waited on a level that an
                            # earlier kick had lowered, and the 16-thread runs stalled for
                            # its 0.1 s wait slice while the window drained.)
                            self._kick_at = low
                            n = len(self._inflight)
                        # Go when woken, or when the window drained below 3/4 anyway; a
                        # waiter whose wait slice ran out while the woken publisher refills
                        # the window waits on (they would all become runnable together).
                        if n < limit and (woken or n <= low):
                            break
                        conn.internal.check_open()
                        woken = room.wait(deadline.slice())
                finally:
                    self._waiters -= 1
        fut: concurrent.futures.Future[PubAck] = _PubAckFuture(conn, self._fcond)
        if conn.internal.offline_limit is not None and not conn.internal.nc.is_connected:
            try:
                size = len(data) if headers is None else len(data) + _headers_size(headers)
                conn.internal.offline_check(size, subject)
            except ReconnectBufferExceededError as exc:
                fut.set_exception(exc)  # failed at once; nothing was queued
                return fut
        pending = self._inflight

        prefix = conn.internal.mux_prefix or conn.internal.start_mux(Deadline(self._js.timeout))
        token = str(next(conn.internal.tokens))
        # No lock on this path: a thread preempted while holding one made the other
        # publishers queue behind it, a convoy of context switches (16 threads: one
        # switch per one or two messages). Each dict operation is atomic; the orderings
        # below close the races with _end() and the sweep (see there).
        # No reply closure per publish: it referred to itself (a reference cycle that only
        # the cyclic GC freed, and with thousands in flight the collector took ~40 % of the
        # CPU); the entry carries what the shared handler needs.
        pending[token] = (fut, time.monotonic() + timeout, subject, data, headers, retry_attempts, retry_wait)
        conn.internal.replies[token] = self._on_reply
        if self._ended:  # _end() sets it before it collects the entries: it may not see ours
            if pending.pop(token, None) is not None:
                conn.internal.replies.pop(token, None)
            raise ConnectionClosedError("the connection is closed")
        arm = False
        if not self._sweeping:  # read after adding: the sweep clears it before it looks
            with self._lock:
                arm = not self._sweeping
                self._sweeping = True
                if not self._registered:
                    self._registered = True
                    with conn.internal.subs_lock:
                        conn.internal.subs.add(self)  # type: ignore[arg-type]  # drained/ended with the connection
        if conn.internal.closed:
            # the connection closed while this was added; its close may not have seen us
            self._end()
            raise ConnectionClosedError("the connection is closed")
        conn.internal.enqueue((subject, data, prefix + token, headers))
        if arm:
            try:
                conn.internal.loop.call_soon(self._arm_sweep)
            except Error:
                self._end()
                raise
        return fut

    def _handle_reply(self, msg: Msg) -> None:
        """On the I/O thread: the reply to one publish (the multiplexer's handler)."""
        pending = self._inflight
        tok = msg.subject.rsplit(".", 1)[-1]
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            entry = pending.get(tok)
            if entry is not None and entry[5] and self._resend(tok, entry, msg.subject):
                return
        entry = pending.pop(tok, None)
        if entry is None:
            return
        if self._retries:
            self._retries.pop(tok, None)
        try:
            ack = _parse_pub_ack(msg)
        except BaseException as exc:  # noqa: BLE001
            _resolve(entry[0], None, exc)
        else:
            _resolve(entry[0], ack, None)
        left = len(pending)
        if self._waiters and left <= self._kick_at:
            # wake one publisher blocked on max_pending once there is room for a
            # burst (not on every PubAck: that would ping-pong between the threads),
            # and one more for each further quarter of the window drained
            self._kick_at = left - max(1, self._js.max_pending // 4)
            with self._room:
                self._room.notify()
        if self._all_waiters and not left:
            with self._cond:  # wait_all only at the end
                self._cond.notify_all()

    def _resend(self, tok: str, entry: _Entry, reply: str) -> bool:
        """On the I/O thread: after a 503, send the message again later; False when out of tries."""
        attempts, wait = entry[5], entry[6]
        n = self._retries.get(tok, 0)
        delay = resend_delay(n, attempts, wait, time.monotonic(), entry[1])
        if delay is None:
            return False
        self._retries[tok] = n + 1
        conn = self._js.conn
        conn.internal.replies[tok] = self._on_reply  # the multiplexer dropped it when the 503 came
        pending = self._inflight
        item = (entry[2], entry[3], reply, entry[4])

        def fire() -> None:
            # not when the sweep (timeout) or close() has failed the Future meanwhile: a
            # message sent after its Future reported failure could be stored twice
            if tok in pending:
                conn.internal.enqueue(item)

        conn.internal.loop.loop.call_later(delay, fire)
        return True

    def _arm_sweep(self) -> None:
        self._js.conn.internal.loop.loop.call_later(0.25, self._sweep)

    def _sweep(self) -> None:
        # on the I/O thread: fail Futures whose PubAck is overdue
        now = time.monotonic()
        conn = self._js.conn
        with self._lock:
            snapshot = self._inflight.copy()
        expired = [t for t, entry in snapshot.items() if entry[1] <= now]
        for t in expired:
            item = self._inflight.pop(t, None)
            conn.internal.replies.pop(t, None)
            self._retries.pop(t, None)
            if item is not None:
                state = conn.internal.link_state()
                _resolve(item[0], None, RequestTimeoutError(
                    f"no PubAck for the publish on {item[2]!r} within the publish timeout"
                    + (f": {state}" if state else " (a stream with no_ack never sends one: "
                       "publish to it with publish(..., ack=False))"), subject=item[2], disconnected=state is not None))
        if expired:
            self._wake_all()
        with self._lock:
            # cleared before looking: a publisher that adds an entry after this look
            # then finds it cleared and arms the sweep again itself
            self._sweeping = False
            if self._inflight and not conn.internal.closed:
                self._sweeping = True
                self._arm_sweep()
                return
            if self._registered:
                self._registered = False
                with conn.internal.subs_lock:
                    conn.internal.subs.discard(self)

    def _end(self, error: Error | None = None) -> None:
        """The connection closed (any thread): fail every Future still waiting. Idempotent.

        ``error``: why it closed by itself (it gave up reconnecting), named by the Futures' error.
        """
        conn = self._js.conn
        why = f": {error}" if error is not None else ""
        with self._lock:
            self._ended = True
            self._registered = False
            tokens = list(self._inflight)
            self._retries.clear()
        for t in tokens:
            item = self._inflight.pop(t, None)
            conn.internal.replies.pop(t, None)
            if item is not None:
                _resolve(item[0], None, cancelled(conn, item[2],
                                                  f"the connection closed before the PubAck arrived{why}"))
        self._wake_all()

    def _wake_all(self) -> None:
        with self._room:
            self._room.notify_all()
        with self._cond:
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the outstanding PubAcks (``Connection.drain``), at most ``timeout`` seconds.

        Raises:
            jssync.TimeoutError: some are still outstanding after ``timeout``.
        """
        self.wait_all(Deadline(timeout))

    def wait_all(self, deadline: Deadline) -> None:
        with self._cond:
            self._all_waiters += 1
            try:
                while self._inflight:
                    self._js.conn.internal.check_open()
                    self._cond.wait(deadline.slice())
                    if self._inflight and deadline.expired():
                        raise TimeoutError(
                            f"{len(self._inflight)} publish_async PubAck(s) still outstanding "
                            f"after {deadline.timeout}s"
                        )
            finally:
                self._all_waiters -= 1


# Connection.jetstream() (core) builds the context through its hook: core does not import this layer.
_core_hooks.HOOKS.jetstream = JetStream


def context_over(transport: APITransport, conn: Connection | None = None, *, domain: str | None = None,
                 api_prefix: str | None = None, timeout: float = 5.0) -> JetStream:
    """A JetStream context whose API requests go through ``transport`` (no I/O here).

    For code and tests that drive the management calls (streams, consumers, KV bucket
    configuration, the push checks) over another transport, e.g. one playing server replies
    recorded earlier. Without ``conn`` only the calls that go through the API layer work:
    publishing, consuming and subscribing need a connection.
    """
    js = JetStream(cast("Connection", conn), domain=domain, api_prefix=api_prefix, timeout=timeout)
    js._api_transport = transport
    return js
