"""Ordered consumers (ADR-17 on the ADR-37 pull API): every stream message once, in order.

An :class:`OrderedConsumer` reads a stream through an ephemeral, ack-none, in-memory,
single-replica pull consumer that it owns. It checks the consumer sequence of every
message; on a gap, a missed heartbeat, a reconnect, or when the consumer is deleted or
stops answering, it drops the consumer and creates a new one that starts at the stream
sequence after the last message it accepted; with deliver_policy ``last_per_subject``,
while the initial values (the last message per subject) are still being read, the new one
asks for the last per subject again and passes over those delivered already.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, no_wait
from ..base.errors import (
    ConnectionClosedError,
    ConsumerDeletedError,
    Error,
    JetStreamError,
    NoRespondersError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
    translating,
    worth_retrying,
)
from ..base.status import is_user_msg, message_size
from ..base.validate import validate_subject
from ..core import natspy as _natspy
from ..core.msg import Msg
from .consume.engine import NOTHING, Recreate
from .consume.gaps import DELIVER, SKIP, GapTracker, Reset
from .params import validate_name
from .pull import (
    _DISCARD,
    BYTES_ONLY_BATCH,
    DEFAULT_EXPIRES,
    NO_LIMIT_PULL,
    ConsumeContext,
    ConsumeOptions,
    FetchResult,
    _Control,
    _FetchState,
    _pos_float,
    _pos_int,
    _State,
    _unsubscribe_soon,
    _wire_header_len,
    fetch,
    validate_fetch,
)

if TYPE_CHECKING:
    from .context import JetStream

log = logging.getLogger("jssync")

_POLICIES = {p.value: p for p in api.DeliverPolicy}
_REPLAY = {p.value: p for p in api.ReplayPolicy}
DEFAULT_INACTIVE_THRESHOLD = 300.0


def _ack_tokens(reply: str) -> tuple[str, int, int] | None:
    """(consumer name, stream sequence, consumer sequence) from a JSAck v1/v2 subject, or None."""
    toks = reply.split(".")
    n = len(toks)
    try:
        if n == 9:
            return toks[3], int(toks[5]), int(toks[6])
        if n >= 11:
            return toks[5], int(toks[7]), int(toks[8])
    except ValueError:
        return None
    return None


class OrderedConsumer:
    """Reads a stream in order, each message exactly once, recovering by itself.

    Made with :meth:`jssync.Stream.ordered_consumer`. Use :meth:`fetch`,
    :meth:`fetch_bytes`, :meth:`fetch_no_wait`, :meth:`next` or :meth:`consume` as on
    a :class:`jssync.Consumer`; messages are never acknowledged (ack policy none).
    One operation at a time: a new fetch ends the previous one (its messages not taken
    yet are read again), and fetching while a consume runs raises
    :class:`jssync.JetStreamError`. The ephemeral consumer is removed by the server
    after ``inactive_threshold`` seconds without use. Thread-safe.

    Args:
        filter_subjects: a subject or list of subjects to read (default: all).
        deliver_policy: where to start (``"all"``, ``"last"``, ``"new"``,
            ``"by_start_sequence"``, ``"by_start_time"``, ``"last_per_subject"``). With
            ``"last_per_subject"``, a consumer re-created while the initial values are read
            asks for the last per subject again and passes over those delivered already;
            without ``filter_subjects`` it filters on ``">"`` (every subject).
        opt_start_seq: first stream sequence (implies ``by_start_sequence``).
        opt_start_time: first time, an aware datetime (implies ``by_start_time``).
        replay_policy: ``"instant"`` (default) or ``"original"``.
        inactive_threshold: seconds before the server drops an unused consumer (default 300).
        headers_only: deliver headers without payloads.
        name_prefix: prefix of the consumer names (default: random).
    """

    def __init__(
        self,
        js: JetStream,
        stream_name: str,
        *,
        filter_subjects: str | list[str] | None = None,
        deliver_policy: api.DeliverPolicy | str | None = None,
        opt_start_seq: int | None = None,
        opt_start_time: _dt.datetime | None = None,
        replay_policy: api.ReplayPolicy | str | None = None,
        inactive_threshold: float | None = None,
        headers_only: bool | None = None,
        name_prefix: str | None = None,
    ) -> None:
        validate_name(stream_name)
        self._js = js
        self.stream = stream_name
        if isinstance(filter_subjects, str):
            filter_subjects = [filter_subjects]
        if filter_subjects is not None:
            if not isinstance(filter_subjects, list | tuple):
                raise TypeError(f"filter_subjects must be a subject or a list of them, got {filter_subjects!r}")
            for f in filter_subjects:
                validate_subject(f, "filter subject")
        self._filters = list(filter_subjects or [])
        if deliver_policy is not None and not isinstance(deliver_policy, api.DeliverPolicy):
            if deliver_policy not in _POLICIES:
                raise ValidationError(f"unknown deliver_policy {deliver_policy!r}; one of {sorted(_POLICIES)}")
            deliver_policy = _POLICIES[deliver_policy]
        if opt_start_seq is not None:
            _pos_int(opt_start_seq, "opt_start_seq")
            if deliver_policy not in (None, api.DeliverPolicy.BY_START_SEQUENCE):
                raise ValidationError(f"opt_start_seq needs deliver_policy by_start_sequence, not {deliver_policy}")
            deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        if opt_start_time is not None:
            if not isinstance(opt_start_time, _dt.datetime):
                raise TypeError(f"opt_start_time must be a datetime, got {opt_start_time!r}")
            if deliver_policy not in (None, api.DeliverPolicy.BY_START_TIME):
                raise ValidationError(f"opt_start_time needs deliver_policy by_start_time, not {deliver_policy}")
            deliver_policy = api.DeliverPolicy.BY_START_TIME
        if deliver_policy is api.DeliverPolicy.BY_START_SEQUENCE and opt_start_seq is None:
            raise ValidationError("deliver_policy by_start_sequence needs opt_start_seq")
        if deliver_policy is api.DeliverPolicy.BY_START_TIME and opt_start_time is None:
            raise ValidationError("deliver_policy by_start_time needs opt_start_time")
        if replay_policy is not None and not isinstance(replay_policy, api.ReplayPolicy):
            if replay_policy not in _REPLAY:
                raise ValidationError(f"unknown replay_policy {replay_policy!r}; one of {sorted(_REPLAY)}")
            replay_policy = _REPLAY[replay_policy]
        self._policy = deliver_policy or api.DeliverPolicy.ALL
        self._opt_start_seq = opt_start_seq
        self._opt_start_time = opt_start_time
        self._replay = replay_policy
        self._inactive = DEFAULT_INACTIVE_THRESHOLD if inactive_threshold is None else _pos_float(
            inactive_threshold, "inactive_threshold")
        self._headers_only = bool(headers_only) if headers_only is not None else None
        if name_prefix is not None:
            validate_name(name_prefix, "name_prefix")
        self._prefix = name_prefix or f"OC_{uuid.uuid4().hex[:16].upper()}"
        self._serial = itertools.count(1)
        self._lock = threading.RLock()
        #: the consumer in use
        self._name: str | None = None
        #: where it stands: the consumer sequence check, the next stream sequence to start a new
        #: consumer at (next_stream_seq 0: the configured start), the generation of the consumer
        #: in use (each consumer made is a new one: what an older one sends is ignored)
        self._tracker = GapTracker()
        self._needs_reset = False
        #: last_per_subject: True while the initial values (the last per subject when the
        #: consumer was created) are read; _initial_left of them are still to come
        self._initial = self._policy is api.DeliverPolicy.LAST_PER_SUBJECT
        self._initial_left = 0
        self._passed = 0  # messages passed over as delivered already (fetch/next)
        self._fetch: FetchResult | None = None
        self._consume: OrderedConsumeContext | None = None

    def __repr__(self) -> str:
        return (f"<jssync.OrderedConsumer {self.stream!r} consumer={self._name!r} "
                f"next_seq={self._tracker.next_stream_seq}>")

    @property
    def name(self) -> str | None:
        """The name of the ephemeral consumer in use (None before the first read)."""
        return self._name

    # -- the consumer -------------------------------------------------------------------------

    def _config(self, name: str) -> api.ConsumerConfig:
        cfg = api.ConsumerConfig(
            name=name,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=self._inactive,
            replay_policy=self._replay,
            headers_only=self._headers_only,
        )
        if len(self._filters) == 1:
            cfg.filter_subject = self._filters[0]
        elif self._filters:
            cfg.filter_subjects = list(self._filters)
        if self._initial:
            # (again) the last per subject: those before _next_seq were delivered already;
            # the server needs a filter for it: without one, every subject (">")
            cfg.deliver_policy = api.DeliverPolicy.LAST_PER_SUBJECT
            if not self._filters:
                cfg.filter_subject = ">"
        elif self._tracker.next_stream_seq > 0:
            cfg.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            cfg.opt_start_seq = self._tracker.next_stream_seq
        else:
            cfg.deliver_policy = self._policy
            cfg.opt_start_seq = self._opt_start_seq
            cfg.opt_start_time = self._opt_start_time
        return cfg

    def _create(self, timeout: float | None | Default = DEFAULT) -> str:
        """Create the next consumer (blocking); returns its name."""
        name = f"{self._prefix}_{next(self._serial)}"
        cons = self._js.create_consumer(self.stream, self._config(name), timeout=timeout)
        info = cons.cached_info
        tracker = self._tracker
        if tracker.next_stream_seq == 0 and self._policy is not api.DeliverPolicy.LAST_PER_SUBJECT:
            # pin the start: a later reset must not move it (e.g. with deliver_policy "new")
            floor = info.delivered.stream_seq if info.delivered is not None else 0
            if floor:
                tracker.next_stream_seq = floor + 1
            elif self._policy is api.DeliverPolicy.ALL:
                tracker.next_stream_seq = 1
        if self._initial:
            # all it has pending now is initial (it delivers them first, in stream order)
            left = int(info.num_pending or 0) + int(getattr(info.delivered, "consumer_seq", 0) or 0)
            self._initial_left = left
            if left == 0:
                self._initial_done(info)
        self._name = name
        self._needs_reset = False
        return name

    def _initial_done(self, info: api.ConsumerInfo | None = None) -> None:
        """The initial values are read: a later consumer starts at the next stream sequence."""
        self._initial = False
        if self._tracker.next_stream_seq == 0 and info is not None:
            # none matched: what is stored later comes after the consumer's start (1 on an empty stream)
            self._tracker.next_stream_seq = int(getattr(info.delivered, "stream_seq", 0) or 0) + 1

    def _initial_msg(self) -> None:
        """While the initial values are read (I/O thread, under the sequence check's lock):
        count one (delivered, or passed over as delivered already by a consumer this one replaced)."""
        self._initial_left -= 1
        if self._initial_left <= 0:
            self._initial = False

    def _delete_soon(self, name: str | None) -> None:
        """Delete a consumer we no longer use, in the background (best effort)."""
        if name is None:
            return
        js = self._js

        def _delete() -> None:
            try:
                js.delete_consumer(self.stream, name, timeout=2.0)
            except Exception:  # noqa: BLE001 - gone already, or the server is away: it expires anyway
                log.debug("ordered consumer: could not delete %s", name, exc_info=True)

        js.conn.internal.pool.submit(_delete)

    def _begin(self, timeout: float | None | Default = DEFAULT) -> str:
        """Make a consumer for the next operation (blocking, under ``_lock``): a new generation."""
        self._tracker.begin()
        return self._reset(timeout)

    def _reset(self, timeout: float | None | Default = DEFAULT) -> str:
        """Replace the consumer (blocking) for the tracker's current generation."""
        old = self._name
        self._name = None
        self._delete_soon(old)
        return self._create(timeout)

    def _is_recoverable(self, exc: BaseException | None) -> bool:
        return isinstance(exc, ConsumerDeletedError | NoRespondersError)

    # -- one pull request ---------------------------------------------------------------------

    def _start_fetch(self, batch: int, max_bytes: int, expires: float | None, idle_heartbeat: float | None,
                     no_wait: bool, grace: float | None = None,
                     create_timeout: float | None | Default = DEFAULT) -> FetchResult:
        with self._lock:
            if self._consume is not None and not self._consume.closed:
                raise JetStreamError("this ordered consumer is consuming: stop the consume before fetching")
            prev = self._fetch
            if prev is not None:
                prev.stop()
            res = _OrderedFetch(self, batch, max_bytes, expires, idle_heartbeat, no_wait, grace, create_timeout)
            self._fetch = res
            return res

    def _pull(self, batch: int, max_bytes: int, expires: float | None, idle_heartbeat: float | None,
              no_wait: bool, grace: float | None, create_timeout: float | None | Default,
              ) -> tuple[FetchResult, _FetchControl]:
        """Send one pull request (under ``_lock``), creating the consumer first when needed (blocking).

        The create's time counts against ``expires``: the pull asks for what is left of it.
        """
        if self._name is None or self._needs_reset:
            t0 = time.monotonic()
            self._begin(create_timeout)
            if expires is not None:
                expires = max(0.01, expires - (time.monotonic() - t0))
                if idle_heartbeat is not None and idle_heartbeat > expires / 2:
                    idle_heartbeat = None
        assert self._name is not None
        kw: dict[str, Any] = {}
        if grace is not None:
            kw["grace"] = grace
        ctl = _FetchControl(self, self._name, self._tracker.generation)
        res = fetch(self._js, self.stream, self._name, batch, max_bytes=max_bytes, expires=expires,
                    idle_heartbeat=idle_heartbeat, no_wait=no_wait, ack_none=True,
                    check=ctl.check, on_end=ctl.on_end, **kw)
        return res, ctl

    def fetch(self, max_messages: int | None = None, *, max_bytes: int | None = None,
              expires: float = DEFAULT_EXPIRES, idle_heartbeat: float | None = None) -> FetchResult:
        """Like :meth:`jssync.Consumer.fetch`, in stream order.

        Blocks to create the ephemeral consumer when there is none (or it must be replaced),
        at most the JetStream API timeout and at most ``expires`` + 1 s (then raises
        jssync.TimeoutError); the create's time counts against ``expires``, so the fetch
        ends within ``expires`` + 1 s. A missing or deleted consumer does not raise: the
        iteration recreates it (blocking, as long) and gets the messages within the same fetch.
        """
        batch, mb = validate_fetch(max_messages, max_bytes, expires, idle_heartbeat)
        return self._start_fetch(batch, mb, expires, idle_heartbeat, False,
                                 create_timeout=min(self._js.timeout, expires + 1.0))

    def fetch_bytes(self, max_bytes: int, *, max_messages: int | None = None, expires: float = DEFAULT_EXPIRES,
                    idle_heartbeat: float | None = None) -> FetchResult:
        """Like :meth:`jssync.Consumer.fetch_bytes`, in stream order (and bounded as :meth:`fetch`)."""
        _pos_int(max_bytes, "max_bytes")
        batch, mb = validate_fetch(BYTES_ONLY_BATCH if max_messages is None else max_messages, max_bytes,
                                   expires, idle_heartbeat)
        return self._start_fetch(batch, mb, expires, idle_heartbeat, False,
                                 create_timeout=min(self._js.timeout, expires + 1.0))

    def fetch_no_wait(self, max_messages: int, *, max_bytes: int | None = None) -> FetchResult:
        """Like :meth:`jssync.Consumer.fetch_no_wait`, in stream order."""
        batch, mb = validate_fetch(max_messages, max_bytes, DEFAULT_EXPIRES, None)
        return self._start_fetch(batch, mb, None, None, True)

    def next(self, timeout: float | None = DEFAULT_EXPIRES, *, idle_heartbeat: float | None = None) -> Msg:
        """The next message in stream order, waiting up to ``timeout`` seconds.

        ``timeout`` None: no limit (pulls of 30 s follow one another until a message comes).

        Recreating the consumer is retried within ``timeout`` while the server does not
        answer (it is restarting, the connection is down, JetStream is unavailable).

        Raises:
            jssync.TimeoutError: no message within ``timeout``.
        """
        if timeout is None:  # no limit: one pull after another
            each = NO_LIMIT_PULL
        else:
            no_wait(timeout, "next on an ordered consumer (a pull waits for the server's message)")
            each = timeout = _pos_float(timeout, "timeout")
        validate_fetch(1, None, each, idle_heartbeat)
        deadline = Deadline(timeout)
        failed = 0
        last: Error | None = None
        while True:
            rem = deadline.remaining()
            left = NO_LIMIT_PULL if rem is None else rem  # this pull's expiry
            if left <= 0.001:
                break
            passed = self._passed
            try:
                res = self._start_fetch(1, 0, left, idle_heartbeat if idle_heartbeat and idle_heartbeat <= left / 2
                                        else None, False, grace=min(1.0, 0.1 + left * 0.1),
                                        create_timeout=min(self._js.timeout, left))
            except Error as exc:
                # a create lost with a server going down, or no JetStream yet: not the caller's timeout
                if not worth_retrying(exc, timeouts=True):
                    raise
                failed += 1
                last = exc
                log.debug("ordered consumer on %s: recreating failed (%s), retrying", self.stream, exc)
                rem = deadline.remaining()
                time.sleep(min(left if rem is None else rem, 0.05 * 2 ** min(failed, 5)))
                continue
            msg: Msg | None = None
            try:
                for msg in res:
                    return msg
            except BaseException:
                if msg is not None:  # taken and not returned: back to the front (the next read starts there)
                    res._give_back(msg)
                res.stop()  # settled now: the next read starts at the first message not handed over
                raise
            if timeout is not None and not self._needs_reset and self._passed == passed:
                break
        raise TimeoutError(
            f"no message from the ordered consumer on stream {self.stream!r} within {timeout}s"
        ) from last

    # -- continuous ---------------------------------------------------------------------------

    def consume(
        self,
        callback: Callable[[Msg], Any] | None = None,
        *,
        error_cb: Callable[[BaseException], Any] | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        expires: float = DEFAULT_EXPIRES,
        idle_heartbeat: float | None = None,
        threshold_messages: int | None = None,
        threshold_bytes: int | None = None,
    ) -> OrderedConsumeContext:
        """Like :meth:`jssync.Consumer.consume`, in stream order, recovering by itself.

        Recoveries (gaps, missed heartbeats, reconnects, the consumer deleted) are not
        errors: the consume goes on from the next stream sequence. Missed heartbeats are
        still reported to ``error_cb`` as warnings. It ends with an error only when the
        stream is deleted (:class:`jssync.StreamNotFoundError`).

        Blocks until the first ephemeral consumer is created and its inbox subscribed.

        Raises:
            ValueError: bad or conflicting options.
            jssync.JetStreamError: another consume of this ordered consumer is running.
            jssync.StreamNotFoundError: the stream does not exist.
        """
        opts = ConsumeOptions(max_messages, max_bytes, expires, idle_heartbeat, threshold_messages,
                              threshold_bytes)
        with self._lock:
            if self._consume is not None and not self._consume.closed:
                raise JetStreamError("this ordered consumer is already consuming: stop it first")
            if self._fetch is not None:
                self._fetch.stop()
                self._fetch = None
            if self._name is None or self._needs_reset:
                self._begin()
            assert self._name is not None
            cc = OrderedConsumeContext(self, opts, callback, error_cb)
            self._consume = cc
            cc._start()
        cc._started()
        return cc


class _FetchControl:
    """The sequence check of one ordered fetch (I/O thread) and its end (user thread)."""

    __slots__ = ("oc", "name", "gen", "lock", "ended", "gone")

    def __init__(self, oc: OrderedConsumer, name: str, gen: int) -> None:
        self.oc = oc
        self.name = name
        self.gen = gen  # the gap tracker's generation of consumer ``name``
        self.lock = threading.Lock()
        self.ended = False
        #: the pull ended because the consumer does not exist (any more): recreate it
        self.gone = False

    def check(self, msg: Msg) -> bool | None:
        oc = self.oc
        t = _ack_tokens(msg.reply)
        with self.lock:
            if self.ended:
                return False
            if t is None:
                oc._needs_reset = True
                return False
            act = oc._tracker.message(t[1], t[2], self.gen if t[0] == self.name else -1)
            if act is DELIVER:
                if oc._initial:
                    oc._initial_msg()
                return True
            if act is SKIP:
                if oc._initial:
                    oc._initial_msg()
                oc._passed += 1
                return None  # delivered already: passed over
            oc._needs_reset = True  # a gap (a Reset: the next pull makes the new consumer), or not ours
            return False

    def on_end(self, state: _FetchState) -> None:
        oc = self.oc
        with self.lock:
            self.ended = True
            # messages accepted but never taken are read again by the next operation (those
            # given back to the front by an interrupted read first: the earliest is last)
            firsts = [m for m in state.front if m.__class__ is not _Control]
            state.front.clear()
            first = None
            while True:
                try:
                    item = state.q.get_nowait()
                except Empty:
                    break
                if first is None and item.__class__ is not _Control:
                    first = item
        if first is not None:
            firsts.append(first)
        for item in firsts:
            t = _ack_tokens(item.reply)
            if t is not None:
                oc._tracker.rewind(t[1])
            oc._needs_reset = True
        if not (state.done and state.clean) or state.error is not None:
            oc._needs_reset = True
        if oc._is_recoverable(state.error):
            self.gone = True
            state.raise_error = False
            state.error = None


class _OrderedFetch(FetchResult):
    """One ordered fetch: the messages of its pull request, in stream order.

    When the pull ends because the consumer is gone (deleted, or lost with a server
    restart: ``409 Consumer Deleted`` or no responders), the iteration recreates the
    consumer (blocking, up to the JetStream API timeout) and pulls the rest of the batch
    within what is left of ``expires``, at most :attr:`RECREATE` times per fetch. A
    recreate that fails ends the iteration with that error on :attr:`error` (not raised).
    """

    #: consumers created again within one fetch, at most
    RECREATE = 2

    def __init__(self, oc: OrderedConsumer, batch: int, max_bytes: int, expires: float | None,
                 idle_heartbeat: float | None, no_wait: bool, grace: float | None,
                 create_timeout: float | None | Default) -> None:
        # no FetchResult.__init__: this delegates to the pull request of the moment
        self._oc = oc
        self._args = (expires, idle_heartbeat, no_wait, grace, create_timeout)
        self._until = None if expires is None else Deadline(expires)
        self._stopped = False
        self._recreated = 0
        self._before = 0  # messages received by the pulls before the current one
        self._fail: Error | None = None
        self._inner, self._ctl = oc._pull(batch, max_bytes, expires, idle_heartbeat, no_wait, grace, create_timeout)

    def __repr__(self) -> str:
        return f"<jssync.FetchResult ordered {self._oc.stream}/{self._ctl.name} received={self.received}>"

    @property
    def error(self) -> BaseException | None:
        """Why the fetch ended, when it was not a normal end; None otherwise."""
        return self._fail if self._fail is not None else self._inner.error

    @property
    def received(self) -> int:
        """Messages received so far."""
        return self._before + self._inner.received

    def __next__(self) -> Msg:
        while True:
            # FOR_ITER, not next(): no signal check between the inner read returning the
            # message and this frame holding it (jssync/base/ledger.py)
            msg: Msg | None = None
            inner = self._inner
            try:
                for msg in inner:
                    return msg
            except BaseException:
                if msg is not None:
                    inner._give_back(msg)
                raise
            if not self._pull_again():
                raise StopIteration

    def _pull_again(self) -> bool:
        """The pull ended: when the consumer was gone, recreate it and pull the rest (True)."""
        if self._stopped or self._fail is not None or not self._ctl.gone or self._recreated >= self.RECREATE:
            return False
        st = self._inner._state
        rest = st.batch - st.received
        rest_b = st.max_bytes - st.eng.rx_b if st.max_bytes else 0
        if rest <= 0 or (st.max_bytes and rest_b <= 0):
            return False
        expires, hb, no_wait, grace, create_timeout = self._args
        if self._until is not None:
            expires = self._until.remaining()
            if expires is None or expires < 0.01:
                return False
            if hb is not None and hb > expires / 2:
                hb = None
        oc = self._oc
        with oc._lock:
            if oc._fetch is not self or self._stopped:
                return False
            self._recreated += 1
            try:
                inner, ctl = oc._pull(rest, rest_b, expires, hb, no_wait, grace, create_timeout)
            except Error as exc:
                self._fail = exc
                return False
            self._before += st.received
            self._inner, self._ctl = inner, ctl
        return True

    def _end(self) -> None:
        self._inner._end()

    def _give_back(self, msg: Msg) -> None:
        self._inner._give_back(msg)

    def stop(self) -> None:
        """Stop iterating (the messages not taken yet are read again by the next operation)."""
        self._stopped = True
        self._inner.stop()


class OrderedConsumeContext(ConsumeContext):
    """A running ordered consume (see :class:`ConsumeContext` and :class:`OrderedConsumer`)."""

    def __init__(self, oc: OrderedConsumer, opts: ConsumeOptions, callback: Callable[[Msg], Any] | None,
                 error_cb: Callable[[BaseException], Any] | None) -> None:
        assert oc._name is not None
        super().__init__(oc._js, oc.stream, oc._name, opts, callback, error_cb, ack_none=True)
        self._oc = oc
        self._tracker = oc._tracker
        #: the gap tracker's generation of the consumer read now (what older ones send is ignored)
        self._cgen = oc._tracker.generation
        self._resets = 0

    @property
    def resets(self) -> int:
        """How many times the ephemeral consumer was recreated during this consume."""
        return self._resets

    # I/O thread: every message on the inbox

    _RECREATE = True

    def put_nowait(self, msg: Msg) -> None:
        h = msg.headers
        eng = self._eng
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            oc = self._oc
            t = _ack_tokens(msg.reply)
            if t is None:
                eng.heard()
                return
            acts = NOTHING
            with self._lock:
                if eng.state is not _State.RUNNING and eng.state is not _State.DRAINING:
                    eng.heard()
                    return
                # a late message of a consumer dropped (another name, or the one being replaced) is ignored
                act = self._tracker.message(t[1], t[2], self._cgen if t[0] == self.consumer else -1)
                if act is DELIVER or act is SKIP:
                    size = message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(
                        self._conn, msg)) if self._bytes_mode else 0
                    if oc._initial:
                        oc._initial_msg()
                    if act is SKIP:
                        # delivered already (by a consumer this one replaced): it took its place
                        # in a pull request but is never taken, so it is written off at once
                        eng.skipped(size)
                        return
                    eng.message(size)
                    if self._bytes_mode:
                        self._sizes.append(size)
                    msg._ack_none = True
                    self._q.put(msg)
                else:
                    eng.heard()
                    if type(act) is Reset:
                        acts = eng.gap()
            if acts:
                self._do(acts)
            elif self._cb is not None and not self._running:
                self._kick_lane()
            return
        if eng.resetting:
            eng.heard()
            return
        self._status(msg, False)

    def _written_off_msg(self, msg: Msg) -> None:
        """A message on the inbox of written-off pull requests (see ConsumeContext._swap_inbox).

        One the consumer in use delivers in order was written off as never to come: it
        counts as requested again, then goes through :meth:`put_nowait`. Anything else (a
        dropped consumer's message or status, a status of a written-off request) is ignored.
        """
        h = msg.headers
        if h is None or msg.data or "Status" not in h or is_user_msg(msg.reply):
            t = _ack_tokens(msg.reply)
            with self._lock:
                if t is not None and t[0] == self.consumer and self._tracker.is_next(t[2], self._cgen):
                    self._eng.unwrite(message_size(msg.subject, msg.reply, h, msg.data, _wire_header_len(
                        self._conn, msg)) if self._bytes_mode else 0)
            self.put_nowait(msg)
        else:
            self._eng.heard()

    def _recreate(self, act: Recreate) -> None:
        """The engine wants a new consumer (a missed heartbeat, a reconnect, the consumer gone,
        no responders, a gap): tell the gap tracker; on its :class:`Reset`, drop the current
        consumer and make a new one (on the worker pool). One reset at a time (the engine
        sends no other Recreate until this one is over)."""
        if act.reason != "gap":
            with self._lock:
                if act.reason == "missed heartbeat":
                    res = self._tracker.missed_heartbeat()
                elif act.reason == "reconnected":
                    res = self._tracker.reconnected()
                else:
                    res = self._tracker.status_from(self._cgen, str(act.error))
                acts = NOTHING if type(res) is Reset else self._eng.recreate_skipped()
            if acts or type(res) is not Reset:
                self._do(acts)
                return
        log.debug("ordered consumer on %s: reset (%s)", self.stream, act.reason)
        self._conn.internal.pool.submit(self._do_reset)

    def _do_reset(self) -> None:
        """On the worker pool: create the next consumer, give it a fresh inbox, pull from it.

        Each consumer generation has its own inbox: what still arrives for the pulls of the
        consumers dropped (``409 Consumer Deleted`` once the old one is deleted, a late
        ``408`` with pending counts written off already, their messages) arrives on an inbox
        that is no longer listened to, so it can neither start another reset nor change the
        counts. Retries (backing off, up to 2 s apart) while the server does not answer.
        """
        oc = self._oc
        attempt = 0
        while self._state is _State.RUNNING:
            try:
                with oc._lock:
                    name = oc._reset(timeout=self._js.timeout)
                inbox, nsub = self._subscribe_inbox()
            except StreamNotFoundError as exc:
                self._fail(exc)
                return
            except ConnectionClosedError as exc:
                self._closed_during_reset(exc)
                return
            except Error as exc:
                attempt += 1
                if attempt == 1 or attempt % 10 == 0:
                    self._report(exc)
                end = time.monotonic() + min(2.0, 0.1 * 2 ** min(attempt, 5))
                while self._state is _State.RUNNING and time.monotonic() < end:
                    time.sleep(0.05)
                continue
            try:
                self._conn.internal.loop.call_soon(self._switch, name, inbox, nsub)
            except Error as exc:  # the connection is closing: it ends this consume
                self._closed_during_reset(exc)
            return

    def _subscribe_inbox(self) -> tuple[str, Any]:
        """Subscribe a new inbox (blocking, worker pool); what arrives is dropped until :meth:`_switch`."""
        conn = self._conn
        inbox = conn.new_inbox()

        async def _sub() -> Any:
            with translating():
                return await _natspy.subscribe(conn.internal.nc, inbox, _DISCARD)

        return inbox, conn.run(_sub(), Deadline(conn.internal.timeout + 5), "subscribe")

    def _switch(self, name: str, inbox: str, nsub: Any) -> None:
        """On the I/O thread: read from consumer ``name`` on ``inbox`` from now on, and pull."""
        with self._lock:
            eng = self._eng
            current = eng.state is _State.RUNNING and not self._winding_down
            old = self._nsub
            if current:
                self.consumer = name
                eng.consumer = name
                self._cgen = self._tracker.generation
                self._next_subject = f"{self._js.prefix}.CONSUMER.MSG.NEXT.{self.stream}.{name}"
                self._inbox = inbox
                self._nsub = nsub
                self._resets += 1
                acts = eng.recreated()  # everything in flight for the old consumer is written off
            else:
                acts = eng.recreate_skipped()
        if not current:  # stopped or drained meanwhile: the wind-down has the old inbox
            _unsubscribe_soon(self._conn, nsub)
            return
        _natspy.set_sub_queue(nsub, self)
        if old is not None:
            _natspy.set_sub_queue(old, _DISCARD)
            _unsubscribe_soon(self._conn, old)
        self._do(acts)

    def _closed_during_reset(self, exc: BaseException) -> None:
        """The connection closed while the consumer was being recreated: nothing can be read any more.

        After :meth:`jssync.Connection.close` the consume ends quietly (as every consume does);
        when the connection closed by itself (nats-py gave up reconnecting) it ends with ``exc``.
        """
        if self._conn.internal.closed or self._conn.internal.closing:
            with self._lock:
                self._eng.resetting = False
            return
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._terminal(exc)

    def _not_handed_over(self, msg: Msg) -> None:
        # ack none: nothing to nak; the next read starts at the first message not handed over
        # (the lane may hold one it took just before stop(): it counts, whichever runs first)
        t = _ack_tokens(msg.reply)
        if t is not None:
            with self._lock:  # the lock put_nowait moves the tracker under (never held for long)
                self._tracker.rewind(t[1])

    def stop(self) -> None:
        super().stop()
        oc = self._oc
        with oc._lock:
            oc._needs_reset = True

    def drain(self, timeout: float | None | Default = DEFAULT) -> None:
        with self._oc._lock:
            self._oc._needs_reset = True
        super().drain(timeout)
