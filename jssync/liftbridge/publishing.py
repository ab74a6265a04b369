"""Publishing for the Liftbridge client: the partition, the request, and the ack.

:class:`Publisher` picks the partition (``to_partition``, a partitioner, or 0), sends the
message with the Liftbridge envelope headers as a JetStream publish, retried while
JetStream is unavailable (a ``Nats-Msg-Id`` makes the retries safe), and builds the
:class:`Ack`. Ack policy ALL also waits for the partition's in-sync replicas; an ack inbox
gets the ack too. :class:`jssync.liftbridge.Client` documents and forwards ``publish`` here.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..base.backoff import Backoff
from ..base.deadline import Deadline, Default
from ..base.errors import (
    Error,
    NoRespondersError,
    RequestTimeoutError,
    TimeoutError,
    worth_retrying,
)
from ..base.validate import validate_subject
from ..jetstream.replies import PubAck, _parse_pub_ack
from .codec import (
    MSG_ID_PREFIX,
    Ack,
    AckPolicy,
    OutgoingMessage,
    PartitionByRoundRobin,
    Partitioner,
    RoundRobinCounters,
    check_ack_inbox,
    check_ack_policy,
    check_bytes,
    check_correlation_id,
    check_partition,
    envelope_headers,
    forwarded_ack,
    parse_partition_stream_name,
    partition_count,
    partition_subject,
    run_partitioner,
    user_headers,
)
from .consumer import RETRY_WAIT
from .errors import NoSuchPartitionError
from .meta import Metadata, replica_active_seconds, replica_states
from .routing import MAX_ATTEMPTS, Routing

if TYPE_CHECKING:
    from . import Client

log = logging.getLogger("jssync")

#: ack policy ALL: how often the replicas' state is polled (2 ms, doubling up to 50 ms)
_REPLICA_POLL = Backoff(0.002, 0.05)


class Publisher(Routing):
    """Publishes a client's messages to partitions and turns the PubAcks into acks."""

    def __init__(self, client: Client) -> None:
        super().__init__(client)
        #: (JetStream stream, replica) -> when it was last seen caught up (ack policy ALL's in-sync set)
        self._replica_ok: dict[tuple[str, str], float] = {}
        #: round-robin partitioning: one counter per subject, whichever way the option is spelled
        self._round_robin = RoundRobinCounters()

    @property
    def replica_max_lag_time(self) -> float:
        """The client's ``replica_max_lag_time`` (seconds)."""
        return self._client.replica_max_lag_time

    def publish(
        self,
        subject: str,
        value: bytes,
        *,
        key: bytes | None,
        headers: Mapping[str, str | bytes] | None,
        ack_inbox: str | None,
        correlation_id: str | None,
        ack_policy: AckPolicy | str,
        partition_by: Partitioner | type[Partitioner] | Callable[[OutgoingMessage, Metadata], int] | None,
        to_partition: int | None,
        timeout: float | None | Default,
    ) -> Ack | None:
        """:meth:`jssync.liftbridge.Client.publish` (documented there)."""
        validate_subject(subject, wildcards=False)
        data = check_bytes(value, "value")
        assert data is not None
        k = check_bytes(key, "key", optional=True)
        pol = check_ack_policy(ack_policy)
        cid = check_correlation_id(correlation_id)
        inbox = check_ack_inbox(ack_inbox)
        uh = user_headers(headers)
        if to_partition is not None:
            check_partition(to_partition, "to_partition")
        round_robin = False
        chosen: Partitioner | Callable[[OutgoingMessage, Metadata], int] | None = None
        if partition_by is PartitionByRoundRobin or (
                isinstance(partition_by, PartitionByRoundRobin)
                and type(partition_by).partition is PartitionByRoundRobin.partition):
            round_robin = True  # the client's counters, however the option is spelled
        elif isinstance(partition_by, type):
            if not issubclass(partition_by, Partitioner):
                raise TypeError(f"partition_by must be a Partitioner or a callable, got the class {partition_by!r}")
            chosen = partition_by()
        elif partition_by is not None:
            if not (isinstance(partition_by, Partitioner) or callable(partition_by)):
                raise TypeError(f"partition_by must be a Partitioner or a callable, got {partition_by!r}")
            chosen = partition_by
        self._check_open()
        deadline = self._deadline(timeout)
        if to_partition is not None:
            partition = to_partition
        elif round_robin:
            meta = self._metadata_for_subject(subject, deadline)
            partition = self._round_robin.next(subject, partition_count(subject, meta))
        elif chosen is not None:
            out = OutgoingMessage(subject=subject, value=data, key=k, headers=headers, ack_inbox=inbox,
                                  correlation_id=cid, ack_policy=pol)
            partition = run_partitioner(chosen, out, self._metadata_for_subject(subject, deadline))
        else:
            partition = 0
        psubject = partition_subject(subject, partition)
        msg_id = None if pol is AckPolicy.NONE else MSG_ID_PREFIX + uuid.uuid4().hex
        h = envelope_headers(key=k, headers=uh, ack_inbox=inbox, correlation_id=cid, ack_policy=pol,
                             msg_id=msg_id)
        if pol is AckPolicy.NONE:
            self._conn.publish(psubject, data, headers=h)
            return None
        if timeout is None:
            # no deadline: return once published, as the guide says; an ack inbox still gets the ack
            if inbox is None:
                self._conn.publish(psubject, data, headers=h)
            else:
                fut = self._js.publish_async(psubject, data, headers=h, timeout=self.timeout)

                def _forward(f: concurrent.futures.Future[PubAck]) -> None:
                    self._forward_later(f, inbox, partition, psubject, subject, k, cid, pol)

                fut.add_done_callback(_forward)
            return None
        pub = self._publish_request(psubject, data, h, deadline)
        if pol is AckPolicy.ALL:
            self._confirm_all(pub.stream, pub.seq, deadline)
        ack = self._make_ack(pub, partition, psubject, subject, k, inbox, cid, pol)
        if inbox is not None:
            self._conn.publish(inbox, forwarded_ack(ack))
        return ack

    @staticmethod
    def _make_ack(pub: PubAck, partition: int, psubject: str, subject: str, key: bytes | None,
                  inbox: str | None, cid: str | None, pol: AckPolicy) -> Ack:
        parsed = parse_partition_stream_name(pub.stream)
        return Ack(
            stream=parsed[0] if parsed else pub.stream, partition=partition, partition_subject=psubject,
            msg_subject=subject, offset=pub.seq - 1, key=key, ack_inbox=inbox, correlation_id=cid,
            ack_policy=pol, commit_timestamp=_now(), jetstream_stream=pub.stream, sequence=pub.seq,
            duplicate=bool(pub.duplicate),
        )

    def _forward_later(self, fut: concurrent.futures.Future[PubAck], inbox: str, partition: int,
                       psubject: str, subject: str, key: bytes | None, cid: str | None, pol: AckPolicy) -> None:
        """Send the ack of a ``timeout=None`` publish to its ack inbox (on the worker pool)."""
        try:
            pub = fut.result()
            if pol is AckPolicy.ALL:
                self._confirm_all(pub.stream, pub.seq, Deadline(self.timeout))
            self._conn.publish(inbox, forwarded_ack(self._make_ack(pub, partition, psubject, subject, key,
                                                                   inbox, cid, pol)))
        except Exception as exc:  # noqa: BLE001 - on the worker pool: report, never raise
            log.warning("jssync.liftbridge: no ack sent to %r for the publish to %r: %s", inbox, psubject, exc)

    def _publish_request(self, psubject: str, data: bytes, headers: dict[str, str],
                         deadline: Deadline) -> PubAck:
        checked = False
        last: BaseException | None = None
        attempt = 0
        while True:
            rem = deadline.remaining()
            t = self._attempt_timeout if rem is None else min(rem, self._attempt_timeout)
            try:
                msg = self._conn.request(psubject, data, headers=headers, timeout=max(t, 0.001))
                return _parse_pub_ack(msg)
            except Error as exc:
                if not worth_retrying(exc, timeouts=True):
                    raise
                last = exc
            if isinstance(last, NoRespondersError) and not checked:
                checked = True
                if not self._captured(psubject, deadline):  # raised outside the handler: no context
                    raise NoSuchPartitionError(
                        404, 10059, f"no stream captures subject {psubject!r} (no such stream or partition)")
            attempt += 1
            if deadline.expired() or (deadline.timeout is None and attempt >= MAX_ATTEMPTS):
                raise RequestTimeoutError(
                    f"no ack for the publish to {psubject!r} within {deadline.timeout}s (last error: {last})",
                    subject=psubject, disconnected=self._conn.internal.link_state() is not None,
                ) from last
            log.debug("jssync.liftbridge: publish to %s: %s; retrying", psubject, last)
            RETRY_WAIT.sleep(0, deadline)

    def _captured(self, psubject: str, deadline: Deadline) -> bool:
        """True unless JetStream says for sure that no stream captures ``psubject``."""
        rem = deadline.remaining()
        try:
            return bool(list(self._js.stream_names(psubject, timeout=1.0 if rem is None else max(min(rem, 1.0),
                                                                                                 0.05))))
        except Error:
            return True  # cannot tell (JetStream unavailable): keep retrying

    def _confirm_all(self, js_stream: str, seq: int, deadline: Deadline) -> None:
        """Wait until every in-sync replica of ``js_stream`` stored sequence ``seq`` (ack policy ALL).

        The PubAck already means the leader and a quorum stored it. A replica counts as
        having it once the leader reports it current with no lag (its last stored Raft
        entry is at or past the commit index, which covers ``seq``) in an info taken
        after the PubAck. As in Liftbridge, a replica that has not been seen caught up
        for ``replica_max_lag_time`` seconds (or that JetStream reports offline) is out
        of the in-sync set and is not waited for; it is back in once seen caught up.
        """
        cur = self._meta.current
        if cur is not None:
            parsed = parse_partition_stream_name(js_stream)
            s = cur.get_stream(parsed[0]) if parsed else None
            p = s.get_partition(parsed[1]) if (s is not None and parsed) else None
            if p is not None and p.jetstream_stream == js_stream and p.replication_factor == 1:
                return
        confirmed: set[str] = set()
        waiting: list[str] = []
        polls = 0
        while True:
            rem = deadline.remaining()
            try:
                info = self._js._api(f"STREAM.INFO.{js_stream}", None,
                                     1.0 if rem is None else max(min(rem, 1.0), 0.01))
            except Error as exc:
                if not worth_retrying(exc, timeouts=True):
                    raise
                info = None
            if info is not None:
                replicas = replica_states(info)
                if not replicas:
                    return
                last_seq = int((info.get("state") or {}).get("last_seq") or 0)
                now = time.monotonic()
                waiting = []
                for r in replicas:
                    name = str(r.get("name"))
                    key = (js_stream, name)
                    caught_up = bool(r.get("current")) and not r.get("lag")
                    if caught_up:
                        self._replica_ok[key] = now
                        if last_seq >= seq:
                            confirmed.add(name)
                    if name in confirmed:
                        continue
                    since = self._replica_ok.setdefault(key, now)
                    out = bool(r.get("offline")) or now - since > self.replica_max_lag_time \
                        or replica_active_seconds(r) > self.replica_max_lag_time
                    if not out:
                        waiting.append(name)
                if last_seq >= seq and not waiting:
                    return
            if deadline.expired():
                raise TimeoutError(
                    f"ack policy ALL: offset {seq - 1} of {js_stream!r} not confirmed by replica(s) "
                    f"{', '.join(waiting) or '?'} within {deadline.timeout}s (the leader and a quorum have it)"
                )
            _REPLICA_POLL.sleep(polls, deadline)
            polls += 1


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)
