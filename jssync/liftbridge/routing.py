"""The ground every room of the Liftbridge client stands on: checks, deadlines, retries, routing.

:class:`Routing` belongs to one :class:`jssync.liftbridge.Client` and reads its connection,
JetStream context, metadata cache and timeout. It gives the client and its rooms
(:mod:`.admin`: creating and deleting streams; :mod:`.publishing`: publishing and acks) the
open check, the call deadline, the resilient retry of idempotent requests, and where a
subject or a partition lives (the metadata cache, refreshed when it does not know).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.backoff import retry
from ..base.deadline import Deadline, Default, resolve_timeout
from ..base.errors import (
    ConnectionClosedError,
    Error,
    StreamNotFoundError,
    TimeoutError,
    worth_retrying,
)
from ..base.validate import MAX_I64, check_int, check_number
from .codec import partition_stream_name
from .consumer import RETRY_WAIT
from .errors import NoSuchPartitionError
from .meta import Metadata, PartitionInfo, StreamInfo, partition_from_info

if TYPE_CHECKING:
    from . import Client

log = logging.getLogger("jssync")
T = TypeVar("T")

#: Attempts of one resilient request when no deadline bounds it (the Go client's 10).
MAX_ATTEMPTS = 10


class Routing:
    """The open check, deadlines, the resilient retry and the partition lookups of one client.

    Stateless but for its client: the rooms of the client (stream admin, publishing) are
    made of it, and the client keeps one for its own calls (subscribe, fetch_metadata).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._conn = client._conn
        self._js = client._js
        self._meta = client._meta

    @property
    def timeout(self) -> float:
        """The client's default wait (seconds)."""
        return self._client.timeout

    def _check_open(self) -> None:
        if self._client._closed:
            raise ConnectionClosedError("the liftbridge client is closed")
        self._conn.internal.check_open()

    def _deadline(self, timeout: float | None | Default) -> Deadline:
        return Deadline(resolve_timeout(timeout, self.timeout))

    @property
    def _attempt_timeout(self) -> float:
        return max(1.0, self.timeout / 2)

    def _retry(self, what: str, fn: Callable[[Deadline], T], deadline: Deadline) -> T:
        """Run an idempotent request, retrying while JetStream is unavailable (the resilient RPC).

        Retries on timeouts and the transient errors of :func:`jssync.base.errors.retriable`
        (no responders, 503, a leader election, a server failing over); a permanent refusal
        (e.g. a 500 "replicas > 1 not supported") is raised at once with jittered waits of 10-500 ms until ``deadline``
        (at most 10 attempts when there is none). The NATS connection moves to another
        known server by itself when its server goes away.
        """
        def once(_failures: int) -> T:
            self._check_open()
            rem = deadline.remaining()
            return fn(Deadline(self._attempt_timeout if rem is None
                               else max(min(rem, self._attempt_timeout), 0.001)))

        def give_up(last: Exception) -> BaseException:
            if isinstance(last, TimeoutError) or deadline.expired():
                return TimeoutError(f"{what} did not succeed within {deadline.timeout}s (last error: {last})")
            return last

        return retry(once, RETRY_WAIT, deadline,
                     worth_retrying=lambda exc: isinstance(exc, Error) and worth_retrying(exc, timeouts=True),
                     max_attempts=MAX_ATTEMPTS if deadline.timeout is None else None, give_up=give_up,
                     on_retry=lambda last: log.debug("jssync.liftbridge: %s failed (%s); retrying", what, last))

    def _metadata_for_subject(self, subject: str, deadline: Deadline) -> Metadata:
        """The cached metadata when it knows ``subject`` and is fresh; else refreshed first (the guide:
        "make sure we have metadata for the stream and, if not, update it")."""
        cur = self._meta.current
        if cur is not None and cur.has_subject(subject) and cur.age() <= self._meta.max_age:
            return cur
        return self._retry("fetching metadata", self._meta.update, deadline)

    def _partition_info(self, stream: str, partition: int, deadline: Deadline) -> PartitionInfo:
        meta = self._meta.current
        s: StreamInfo | None = None
        for fresh in (False, True):
            if meta is None or fresh:
                meta = self._retry("fetching metadata", self._meta.update, deadline)
            s = meta.get_stream(stream)
            p = s.get_partition(partition) if s is not None else None
            if p is not None:
                return p
        # not in the metadata: ask for the partition stream itself (authoritative)
        js_name = partition_stream_name(stream, partition)

        def _info(d: Deadline) -> dict[str, Any] | None:
            try:
                return self._js._api(f"STREAM.INFO.{js_name}", None, _rem(d))
            except StreamNotFoundError:
                return None

        item = self._retry(f"looking up stream {js_name!r}", _info, deadline)
        if item is not None:
            found = partition_from_info(item, self._conn.server_info.get("server_name"))
            if found is not None and found.stream == stream and found.id == partition:
                return found
        if s is None:
            raise NoSuchPartitionError(404, 10059, f"no such stream: {stream!r}")
        raise NoSuchPartitionError(
            404, 10059, f"no such partition: stream {stream!r} has no partition {partition} "
            f"(partitions: {sorted(s.partitions)})"
        )


def _rem(deadline: Deadline) -> float | None:
    rem = deadline.remaining()
    return None if rem is None else max(rem, 0.001)


def _positive(v: Any, what: str) -> float:
    return check_number(v, what)


def _non_negative(v: Any, what: str) -> float:
    return check_number(v, what, above=None, minimum=0)


def _positive_int(v: Any, what: str) -> int:
    return check_int(v, what, maximum=MAX_I64, open_ended=True)
