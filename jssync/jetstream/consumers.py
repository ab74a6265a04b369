"""Consumer: a handle on one (pull) consumer of a stream, and ADR-37's fetch/next/consume."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, no_wait
from ..base.durations import optional_seconds, seconds
from ..base.errors import PullRequestError, TimeoutError, UnknownOptionError, ValidationError
from ..base.reprs import Rows, SummaryRepr
from ..core.hooks import HOOKS as _CORE
from ..core.msg import Msg
from .consume.options import DEFAULT_MAX_MESSAGES
from .priority import Pins, PriorityConfig, PullPriority, of, pull_options, validate_group
from .pull import (
    BYTES_ONLY_BATCH,
    DEFAULT_EXPIRES,
    NO_LIMIT_PULL,
    ConsumeContext,
    ConsumeOptions,
    FetchResult,
    _pos_float,
    _pos_int,
    consume,
    fetch,
    pull_lost,
    validate_fetch,
)
from .reprs import consumer_rows

if TYPE_CHECKING:
    from .context import JetStream

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _expires_not_timeout(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Refuse ``timeout=`` on a fetch, naming ``expires=`` (``next`` is the call that takes ``timeout=``)."""

    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if "timeout" in kwargs:
            raise UnknownOptionError(
                f"{fn.__name__} takes expires= (how long the pull request waits, in seconds), not "
                f"timeout={kwargs['timeout']!r}; next() is the call that takes timeout=")
        return fn(*args, **kwargs)

    return call


class Consumer(SummaryRepr):
    """A handle on one consumer. Made by :meth:`JetStream.consumer` / ``create_consumer``.

    Read messages with :meth:`fetch`, :meth:`fetch_bytes`, :meth:`fetch_no_wait`,
    :meth:`next` (one pull request each) or :meth:`consume` (continuous, buffered).
    Thread-safe.
    """

    def __init__(self, js: JetStream, stream: str, info: api.ConsumerInfo) -> None:
        self._js = js
        self.stream = stream
        self._info = info
        self.name: str = info.name
        self._pins = Pins()  # pinned_client (ADR-42): the pin id the server gave, per group

    def __repr__(self) -> str:
        return f"<jssync.Consumer {self.stream!r}/{self.name!r}>"

    _repr_pretty_ = SummaryRepr._repr_pretty_  # here, not only inherited: IPython takes the nearest __repr__

    def _summary(self) -> tuple[str, Rows]:
        return f"jssync.Consumer {self.stream!r}/{self.name!r} (cached info)", consumer_rows(self._info)

    @property
    def cached_info(self) -> api.ConsumerInfo:
        """The info from when this handle was made or last refreshed (no I/O)."""
        return self._info

    def info(self, *, timeout: float | None | Default = DEFAULT) -> api.ConsumerInfo:
        """Fetch the consumer's info (refreshes :attr:`cached_info`).

        Raises:
            jssync.ConsumerNotFoundError, jssync.StreamNotFoundError.
        """
        self._info = self._js._consumer_info(self.stream, self.name, timeout)
        return self._info

    def delete(self, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete this consumer on the server."""
        return self._js.delete_consumer(self.stream, self.name, timeout=timeout)

    def reset(self, seq: int | None = None, *, timeout: float | None | Default = DEFAULT) -> int:
        """Reset this consumer's delivery state (ADR-60; nats-server 2.14+).

        Returns the stream sequence delivery restarts at and refreshes :attr:`cached_info`
        with the state the server reports. See :meth:`JetStream.reset_consumer`.

        Raises:
            ValueError: ``seq`` not an int >= 1 (nothing is sent).
            jssync.NotSupportedError: the server is older than 2.14 (nothing is sent).
            jssync.ConsumerNotFoundError, jssync.APIError.
        """
        reset_seq, info = self._js._reset_consumer(self.stream, self.name, seq, timeout)
        self._info = info
        return reset_seq

    @property
    def priority(self) -> PriorityConfig:
        """The consumer's priority group settings (ADR-42) from :attr:`cached_info` (no I/O).

        ``policy`` (``overflow``, ``pinned_client``, ``prioritized`` or None), ``groups``,
        ``timeout`` (pinned_client: seconds).
        """
        return of(self._info)

    def pin_id(self, group: str) -> str | None:
        """The pin id the server gave this handle for ``group`` (pinned_client), or None (no I/O).

        Set by the first message that arrives with a ``Nats-Pin-Id`` header; cleared when a
        pull carrying it is answered with 423 (another client is pinned now) or by :meth:`unpin`.
        """
        return self._pins.get(group)

    def unpin(self, group: str, *, timeout: float | None | Default = DEFAULT) -> None:
        """Unpin the client pinned to ``group`` (ADR-42 ``pinned_client``; nats-server 2.11+).

        The server picks a new pinned client among the waiting pulls of the group, which may
        be this one: the pin id this handle holds for ``group`` is forgotten.

        Raises:
            ValueError: ``group`` is not a valid group name, not one of the consumer's groups,
                or the consumer's policy is not ``pinned_client`` (nothing is sent).
            jssync.NotSupportedError, jssync.APIError, jssync.ConsumerNotFoundError.
        """
        prio = self.priority
        validate_group(group, "group")
        if prio.policy != "pinned_client":
            raise ValidationError(f"unpin needs a consumer with priority_policy 'pinned_client'; "
                             f"consumer {self.name!r} has {prio.policy!r}")
        if prio.groups is not None and group not in prio.groups:
            raise ValidationError(f"group={group!r} is not one of consumer {self.name!r}'s priority groups "
                             f"{list(prio.groups)!r}")
        self._js.unpin_consumer(self.stream, self.name, group, timeout=timeout)
        self._pins.clear(group)

    def _prio(self, group: str | None, min_pending: int | None, min_ack_pending: int | None,
              priority: int | None) -> PullPriority | None:
        return pull_options(self.priority, self.name, group, min_pending, min_ack_pending, priority)

    def _check_limits(self, call: str, batch: int, max_bytes: int, expires: float | None = None) -> None:
        """Refuse a pull the consumer's pull request limits (``max_batch``, ``max_bytes``,
        ``max_expires``) would refuse (the server's 409 "Exceeded MaxRequest..." otherwise)."""
        cfg = self._info.config
        limit_s = getattr(cfg, "max_expires", None)
        if limit_s and expires is not None and expires > limit_s:
            raise ValidationError(f"{call} with expires {expires:g}s: consumer {self.name!r} has max_expires "
                                  f"{limit_s:g}s (the longest one pull request may wait); pass expires= at most that")
        limit = getattr(cfg, "max_batch", None)
        if limit and batch > limit:
            raise ValidationError(f"{call} of {batch} messages: consumer {self.name!r} has max_batch {limit} "
                                  f"(the most one pull request may ask for)")
        limit = getattr(cfg, "max_bytes", None)
        if limit and max_bytes > limit:
            raise ValidationError(f"{call} of {max_bytes} bytes: consumer {self.name!r} has max_bytes {limit} "
                                  f"(the most one pull request may ask for)")

    def _bytes_only_batch(self) -> int:
        """The batch of a pull limited by bytes only: large, but within the consumer's ``max_batch``."""
        limit = getattr(self._info.config, "max_batch", None)
        return min(BYTES_ONLY_BATCH, limit) if limit else BYTES_ONLY_BATCH

    @property
    def _ack_none(self) -> bool:
        cfg = self._info.config
        pol = cfg.ack_policy if cfg is not None else None
        return pol is not None and (pol == api.AckPolicy.NONE or str(pol) == "none")

    # -- one pull request ---------------------------------------------------------------------

    @_expires_not_timeout
    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        expires: float = DEFAULT_EXPIRES,
        idle_heartbeat: float | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> FetchResult:
        """Send one pull request for up to ``max_messages`` messages (and/or ``max_bytes``).

        Returns an iterator that yields each message as it arrives and ends when the
        request ends: the batch is complete, or ``expires`` seconds passed (then with fewer
        messages, or none). Its ``.error`` says why it ended when that was not normal.
        ``idle_heartbeat`` (seconds) asks the server for heartbeats while the request waits;
        it is on (5 s) by default when ``expires`` is over 30 s.

        Priority groups (ADR-42; see docs/consuming.md): ``group`` names the consumer's
        group (required when it has any); ``min_pending`` / ``min_ack_pending`` (``overflow``
        policy) and ``priority`` (``prioritized``, 0 to 9). With ``pinned_client`` the pull
        carries the pin id this handle holds; a 423 (another client is pinned) ends the
        request with ``.error`` set and clears the id, so the next pull is a standby candidate.

        Blocks only to subscribe a reply inbox (none is idle); the iteration blocks up to
        ``expires`` + 1 s in all.

        ``expires`` and ``idle_heartbeat`` take seconds, a ``timedelta`` or a Go duration
        string (``"30s"``). ``timeout=`` is refused with a message naming ``expires=`` (a
        fetch's wait is its expiry; :meth:`next` is the call that takes ``timeout=``).

        Raises:
            ValueError: a bad argument, or more messages (bytes) than the consumer's ``max_batch``
                (``max_bytes``) in :attr:`cached_info` allow, or ``expires`` over its
                ``max_expires`` (nothing is sent).
            jssync.UnknownOptionError: ``timeout=`` given (also a TypeError).
            jssync.ConsumerDeletedError (also when the consumer is gone and the pull got no
                responders: the iteration then looks it up, one CONSUMER.INFO request),
            jssync.ConsumerIsPushBasedError, jssync.PullRequestError (400),
            jssync.NoRespondersError (the consumer exists but has no leader):
            raised by the iteration.
        """
        expires = seconds(expires, "expires")
        idle_heartbeat = optional_seconds(idle_heartbeat, "idle_heartbeat")
        batch, mb = validate_fetch(max_messages, max_bytes, expires, idle_heartbeat)
        self._check_limits("fetch", batch, mb, expires)
        prio = self._prio(group, min_pending, min_ack_pending, priority)
        return fetch(self._js, self.stream, self.name, batch, max_bytes=mb, expires=expires,
                     idle_heartbeat=idle_heartbeat, ack_none=self._ack_none, prio=prio, pins=self._pins)

    @_expires_not_timeout
    def fetch_bytes(
        self,
        max_bytes: int,
        *,
        max_messages: int | None = None,
        expires: float = DEFAULT_EXPIRES,
        idle_heartbeat: float | None = None,
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
    ) -> FetchResult:
        """Like :meth:`fetch`, limited to ``max_bytes`` bytes (counted as the server does).

        The request asks for a large batch (1,000,000 messages) unless ``max_messages`` is
        given. The iteration ends cleanly when the next message would not fit
        (409 Message Size Exceeds MaxBytes).
        """
        _pos_int(max_bytes, "max_bytes")
        expires = seconds(expires, "expires")
        idle_heartbeat = optional_seconds(idle_heartbeat, "idle_heartbeat")
        batch, mb = validate_fetch(self._bytes_only_batch() if max_messages is None else max_messages, max_bytes,
                                   expires, idle_heartbeat)
        self._check_limits("fetch_bytes", batch, mb, expires)
        prio = self._prio(group, min_pending, min_ack_pending, priority)
        return fetch(self._js, self.stream, self.name, batch, max_bytes=mb, expires=expires,
                     idle_heartbeat=idle_heartbeat, ack_none=self._ack_none, prio=prio, pins=self._pins)

    def fetch_no_wait(self, max_messages: int, *, max_bytes: int | None = None, group: str | None = None,
                      min_pending: int | None = None, min_ack_pending: int | None = None,
                      priority: int | None = None) -> FetchResult:
        """Fetch up to ``max_messages`` messages that are available now; never waits for new ones.

        The iteration ends as soon as the server has sent what it has (404 No Messages when
        there is nothing), at most the context's timeout.
        """
        batch, mb = validate_fetch(max_messages, max_bytes, DEFAULT_EXPIRES, None)
        self._check_limits("fetch_no_wait", batch, mb)
        prio = self._prio(group, min_pending, min_ack_pending, priority)
        return fetch(self._js, self.stream, self.name, batch, max_bytes=mb, no_wait=True,
                     ack_none=self._ack_none, prio=prio, pins=self._pins)

    def next(self, timeout: float | None = DEFAULT_EXPIRES, *, idle_heartbeat: float | None = None,
             group: str | None = None, min_pending: int | None = None, min_ack_pending: int | None = None,
             priority: int | None = None) -> Msg:
        """Pull one message, waiting up to ``timeout`` seconds for it (None: no limit).

        The pull request is sent when ``next`` is called and expires on the server after
        ``timeout``; with None, pulls of 30 s follow one another until a message comes (also
        after a pull was lost: a reconnect, missed heartbeats, 409 Server Shutdown).
        Priority group options as for :meth:`fetch`; when the pull is answered
        with 423 (pinned_client: another client is pinned now) the pin id is cleared and
        the pull is sent again, without it, for the time left.

        Raises:
            jssync.TimeoutError: no message within ``timeout``.
            jssync.PullRequestError: the server ended the pull with a warning (409 Exceeded ...)
                or 400.
            jssync.NoHeartbeatError: no heartbeat within 2 x ``idle_heartbeat``.
            jssync.ConnectionClosedError: the connection closed meanwhile.
            jssync.ConsumerDeletedError: the consumer is gone (a pull without responders looks
                it up: one CONSUMER.INFO request).
            jssync.ConsumerIsPushBasedError, jssync.NoRespondersError (no leader).
        """
        tracer = _CORE.tracer  # jssync.otel: one receive span (None: off)
        if tracer is not None and tracer.wants():
            return tracer.receive("next", lambda: self.next(timeout, idle_heartbeat=idle_heartbeat, group=group,
                                                            min_pending=min_pending, min_ack_pending=min_ack_pending,
                                                            priority=priority),
                                  self._js.conn, self.stream, self.name)
        if timeout is None:  # no limit: one pull after another
            each = NO_LIMIT_PULL
        else:
            secs = seconds(timeout, "timeout")
            no_wait(secs, f"next on consumer {self.name!r} (a pull waits for the server's message)")
            each = timeout = _pos_float(secs, "timeout")  # one pull's expiry
        idle_heartbeat = optional_seconds(idle_heartbeat, "idle_heartbeat")
        validate_fetch(1, None, each, idle_heartbeat)
        prio = self._prio(group, min_pending, min_ack_pending, priority)
        deadline = Deadline(timeout)
        left = each
        while True:
            # every way out of this pull settles it at once (not when the result is collected)
            res: FetchResult | None = None
            msg: Msg | None = None
            try:
                res = fetch(self._js, self.stream, self.name, 1, expires=left, idle_heartbeat=idle_heartbeat,
                            ack_none=self._ack_none, grace=min(1.0, 0.1 + left * 0.1), prio=prio,
                            pins=self._pins, lost_on_reconnect=timeout is None)
                for msg in res:
                    # ended here, not by its finalizer when collected: the garbage collector's
                    # run of it could take a Ctrl-C (3.13), printed as unraisable and lost
                    res.stop()
                    return msg
            except BaseException:
                if res is not None:
                    if msg is not None:  # taken and not returned: back to the front, nak'ed by stop()
                        res._give_back(msg)
                    res.stop()
                raise
            err = res.error
            if isinstance(err, PullRequestError) and err.code == 423:
                # pin lost: the id is cleared; pull again (a standby candidate) for the time left
                rem = deadline.remaining()
                left = each if rem is None else rem
                if left >= 0.01 and (idle_heartbeat is None or idle_heartbeat <= left / 2):
                    continue
                break
            if timeout is None and pull_lost(err):  # no limit: a pull lost or cut short, pull again
                continue
            if err is not None:  # a warning, a missed heartbeat, the connection closed, ...
                raise err
            if timeout is None:  # the pull expired empty: no limit, pull again
                continue
            break
        raise TimeoutError(f"no message from consumer {self.name!r} on stream {self.stream!r} within {timeout}s")

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
        group: str | None = None,
        min_pending: int | None = None,
        min_ack_pending: int | None = None,
        priority: int | None = None,
        stop_after: int | None = None,
    ) -> ConsumeContext:
        """Consume continuously, keeping a buffer of pulled messages (ADR-37 "Consume").

        Without ``callback`` the result is an iterator (use it as a context manager);
        with it, ``callback(msg)`` runs on the connection's worker pool, one message at a
        time, in order. The buffer holds up to ``max_messages`` (default 500) messages or
        ``max_bytes`` bytes (exclusive options); a new pull request is sent when the
        pending count falls to ``threshold_messages`` / ``threshold_bytes`` (default half).
        Each pull request expires after ``expires`` seconds (default 30, at least 1) and
        asks for heartbeats every ``idle_heartbeat`` seconds (default half of expires,
        0.5 to 30). Warnings go to ``error_cb`` (default: the connection's) and the
        ``jssync`` logger. Priority group options as for :meth:`fetch`, sent with every pull;
        with ``pinned_client`` a 423 clears the pin id and a new pull goes out at once
        without it (this consume stays a standby candidate; not reported as an error).
        The consumer's pull request limits (:attr:`cached_info`) bound the options: ``max_messages``
        (default 500, or the consumer's ``max_batch`` when lower) may not be over ``max_batch``,
        ``max_bytes`` over its ``max_bytes``, ``expires`` over its ``max_expires``.
        ``stop_after=N`` ends the consume once N messages were handed over (nats.go's
        ``StopAfter``): no pull asks for more than what is left of N, the iterator ends
        after the Nth (callback form: once the Nth callback returned; :meth:`ConsumeContext.wait`
        returns), and anything received past it is nak'ed, as on :meth:`ConsumeContext.stop`.

        Blocks until the reply inbox is subscribed (at most the connect timeout + 5 s).

        Raises:
            ValueError: bad or conflicting options (nothing is sent).
            TypeError: ``callback`` or ``error_cb`` is not callable.
        """
        expires = seconds(expires, "expires")
        idle_heartbeat = optional_seconds(idle_heartbeat, "idle_heartbeat")
        limit = getattr(self._info.config, "max_batch", None)
        if max_messages is None and max_bytes is None and limit and limit < DEFAULT_MAX_MESSAGES:
            max_messages = limit  # the default buffer, within what one pull may ask for
        opts = ConsumeOptions(max_messages, max_bytes, expires, idle_heartbeat, threshold_messages,
                              threshold_bytes, stop_after)
        self._check_limits("consume", 0 if opts.bytes_mode else opts.max_messages, opts.max_bytes, opts.expires)
        prio = self._prio(group, min_pending, min_ack_pending, priority)
        cfg = self._info.config
        ack_wait = cfg.ack_wait if cfg is not None else None
        return consume(self._js, self.stream, self.name, callback, error_cb, opts, self._ack_none, prio,
                       self._pins, ack_wait)
