"""Partitioned streams: the Liftbridge client interface on JetStream.

Code written to the Liftbridge client guide runs on JetStream with this module::

    from jssync.liftbridge import Client, PartitionByKey, AckPolicy, StartPosition

    client = Client(["nats://127.0.0.1:4222"])            # or Client(connection=nc)
    client.create_stream("foo", "foo-stream", partitions=3)
    ack = client.publish("foo", b"value", key=b"k", partition_by=PartitionByKey())
    for msg in client.subscribe("foo-stream", partition=ack.partition,
                                start_at=StartPosition.EARLIEST):
        print(msg.offset, msg.value)
        break
    client.close()

How it maps (see ``docs/liftbridge.md``): a stream ``name`` with base subject ``foo`` and
``n`` partitions is ``n`` JetStream streams ``name-0`` ... ``name-(n-1)``; partition ``p``
captures exactly ``foo`` (p = 0) or ``foo.p``, has its own leader, and its offsets are the
JetStream sequences minus one (dense from 0 while nothing is deleted from the middle).
Stream metadata (``liftbridge.stream``, ``liftbridge.subject``, ``liftbridge.partition``,
``liftbridge.partitions``) lets :meth:`Client.fetch_metadata` rebuild the partition map.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import logging
import math
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout
from ..base.errors import (
    APIError,
    ConnectionClosedError,
    Error,
    NoRespondersError,
    RequestTimeoutError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
    worth_retrying,
)
from ..base.validate import (
    MAX_I64,
    check_int,
    check_number,
    validate_subject,
)
from ..core.connection import Connection, connect
from ..jetstream.context import JetStream
from ..jetstream.params import validate_name
from ..jetstream.replies import PubAck, _parse_pub_ack
from .codec import (
    HDR_ACK_INBOX,
    HDR_ACK_POLICY,
    HDR_CORRELATION_ID,
    HDR_KEY,
    META_PARTITION,
    META_PARTITIONS,
    META_STREAM,
    META_SUBJECT,
    MSG_ID_PREFIX,
    Ack,
    AckPolicy,
    Message,
    NatsMessage,
    OutgoingMessage,
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
    RoundRobinCounters,
    StartPosition,
    check_ack_inbox,
    check_ack_policy,
    check_bytes,
    check_correlation_id,
    check_partition,
    envelope_headers,
    forwarded_ack,
    new_message,
    new_nats_message,
    parse_partition_stream_name,
    partition_count,
    partition_stream_name,
    partition_subject,
    run_partitioner,
    unmarshal_ack,
    unmarshal_message,
    user_headers,
)
from .creating import create_error, partition_config
from .errors import (
    InvalidAckError,
    NoSuchPartitionError,
    StreamExistsError,
)
from .errors import LiftbridgeNotSupportedError as NotSupportedError
from .meta import (
    BrokerInfo,
    Metadata,
    MetadataCache,
    PartitionInfo,
    StreamInfo,
    build_streams,
    partition_from_info,
    replica_active_seconds,
    replica_states,
)
from .sub import RETRY_MAX, RETRY_MIN, Handler, Subscription, _sleep, resolve_start

__all__ = [
    "Ack",
    "AckPolicy",
    "BrokerInfo",
    "Client",
    "HDR_ACK_INBOX",
    "HDR_ACK_POLICY",
    "HDR_CORRELATION_ID",
    "HDR_KEY",
    "InvalidAckError",
    "Message",
    "Metadata",
    "NatsMessage",
    "NoSuchPartitionError",
    "NotSupportedError",
    "OutgoingMessage",
    "PartitionByKey",
    "PartitionByRoundRobin",
    "PartitionInfo",
    "Partitioner",
    "StartPosition",
    "StreamExistsError",
    "StreamInfo",
    "Subscription",
    "new_message",
    "new_nats_message",
    "partition_stream_name",
    "partition_subject",
    "unmarshal_ack",
    "unmarshal_message",
]

log = logging.getLogger("jssync")
T = TypeVar("T")

#: Attempts of one resilient request when no deadline bounds it (the Go client's 10).
MAX_ATTEMPTS = 10
#: JetStream's largest replication factor.
MAX_REPLICAS = 5
_STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}


class Client:
    """A Liftbridge-style client for partitioned streams on JetStream.

    Args:
        servers: one URL, a comma-separated string or a list of URLs (default
            ``$NATS_URL``, else ``nats://127.0.0.1:4222``). Ignored with ``connection``.
        connection: an open :class:`jssync.Connection` to use instead of connecting;
            :meth:`close` leaves it open.
        timeout: the default wait of every call, in seconds (default 5).
        resubscribe_wait_time: how long a subscription keeps trying to resubscribe after
            a failure before it ends with an error (default 30 s, as the guide suggests).
        metadata_max_age: cached metadata older than this is refreshed before use (s).
        replica_max_lag_time: for ack policy ALL, a replica not seen caught up with the
            partition leader for longer than this (or that JetStream reports offline) is
            out of the in-sync set and is not waited for (Liftbridge's
            ``replica.max.lag.time``; default 5 s).
        domain: the JetStream domain, or None.
        **connect_options: passed to :func:`jssync.connect` (``name``, ``user``, ``tls`` ...).

    Blocks until connected (``connect_options["timeout"]``, default 2 s).
    Thread-safe: one client can be shared by every thread.

    Raises:
        jssync.NoServersError, jssync.AuthorizationError: could not connect.
    """

    def __init__(
        self,
        servers: str | Sequence[str] | None = None,
        *,
        connection: Connection | None = None,
        timeout: float = 5.0,
        resubscribe_wait_time: float = 30.0,
        metadata_max_age: float = 30.0,
        replica_max_lag_time: float = 5.0,
        domain: str | None = None,
        **connect_options: Any,
    ) -> None:
        _positive(timeout, "timeout")
        _non_negative(resubscribe_wait_time, "resubscribe_wait_time")
        _non_negative(metadata_max_age, "metadata_max_age")
        _positive(replica_max_lag_time, "replica_max_lag_time")
        if connection is not None:
            if not isinstance(connection, Connection):
                raise TypeError(f"connection must be a jssync.Connection, got {type(connection).__name__}")
            if connect_options or servers is not None:
                raise ValidationError("give servers (and connect options) or connection, not both")
            self._conn = connection
            self._own = False
            seeds: list[str] = list(connection.internal.urls)
        else:
            self._conn = connect(servers, **connect_options)
            self._own = True
            seeds = list(self._conn.internal.urls)
        self.timeout = float(timeout)
        self.resubscribe_wait_time = float(resubscribe_wait_time)
        self.replica_max_lag_time = float(replica_max_lag_time)
        self._js: JetStream = self._conn.jetstream(domain=domain, timeout=self.timeout)
        self._meta = MetadataCache(self._conn, self._js, seeds, metadata_max_age)
        self._lock = threading.Lock()
        self._closed = False
        self._subs: set[Subscription] = set()
        #: (JetStream stream, replica) -> when it was last seen caught up (ack policy ALL's in-sync set)
        self._replica_ok: dict[tuple[str, str], float] = {}
        #: round-robin partitioning: one counter per subject, whichever way the option is spelled
        self._round_robin = RoundRobinCounters()

    def __repr__(self) -> str:
        return f"<jssync.liftbridge.Client {self._conn!r}{' closed' if self._closed else ''}>"

    @property
    def connection(self) -> Connection:
        """The NATS connection the client uses."""
        return self._conn

    @property
    def jetstream(self) -> JetStream:
        """The JetStream context the client uses."""
        return self._js

    # -- helpers -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
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
        last: BaseException | None = None
        attempt = 0
        while True:
            if attempt:
                if deadline.timeout is None and attempt >= MAX_ATTEMPTS:
                    break
                _sleep(random.uniform(RETRY_MIN, RETRY_MAX), deadline)
                if deadline.expired():
                    break
            attempt += 1
            self._check_open()
            rem = deadline.remaining()
            att = Deadline(self._attempt_timeout if rem is None else max(min(rem, self._attempt_timeout), 0.001))
            try:
                return fn(att)
            except Error as exc:
                if not worth_retrying(exc, timeouts=True):
                    raise
                last = exc
            if deadline.expired():
                break
            log.debug("jssync.liftbridge: %s failed (%s); retrying", what, last)
        if isinstance(last, TimeoutError) or deadline.expired():
            raise TimeoutError(f"{what} did not succeed within {deadline.timeout}s (last error: {last})") from last
        assert last is not None
        raise last

    # -- CreateStream --------------------------------------------------------------------------

    def create_stream(
        self,
        subject: str,
        name: str,
        *,
        group: str | None = None,
        replication_factor: int = 1,
        max_replication: bool = False,
        partitions: int = 1,
        storage: str = "file",
        retention_max_age: float | None = None,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        timeout: float | None | Default = DEFAULT,
    ) -> StreamInfo:
        """Create a stream attached to ``subject`` (the Liftbridge ``CreateStream``).

        Makes one JetStream stream per partition (``name-0``, ``name-1`` ...) capturing
        ``subject`` (partition 0) or ``subject.n``; each has its own leader, and for
        replicated streams the leaders are spread over the servers (best effort).

        Args:
            subject: the base NATS subject (wildcards ``*`` allowed; ``>`` only with one
                partition).
            name: the stream name, unique in the account.
            group: load-balance groups are not supported (JetStream streams cannot share
                a subject); anything but None raises :class:`NotSupportedError`.
            replication_factor: replicas per partition (1-5); -1 means the cluster size.
            max_replication: replicate to every server (the cluster size, at most 5).
            partitions: the number of partitions (>= 1).
            storage: ``"file"`` (default) or ``"memory"``.
            retention_max_age: drop messages older than this many seconds (per partition).
            retention_max_bytes: keep at most this many bytes per partition.
            retention_max_messages: keep at most this many messages per partition.
            timeout: seconds for the whole call (default: the client's).

        Returns:
            The new stream's :class:`StreamInfo`.

        Blocks until every partition exists (retrying while JetStream is unavailable).

        Raises:
            StreamExistsError: a stream of that name (or one of its partition streams) exists.
            NotSupportedError: ``group`` was given.
            ValueError, TypeError, jssync.BadSubjectError: a bad argument (nothing is sent).
            jssync.APIError: JetStream refused (e.g. err_code 10065: a partition subject is
                already captured by another stream).
            jssync.TimeoutError.
        """
        if not isinstance(subject, str):
            raise TypeError(f"subject must be a str, got {type(subject).__name__}")
        validate_subject(subject, "subject")
        validate_name(name, "stream name")
        if group is not None:
            raise NotSupportedError(
                f"group={group!r}: load-balance groups are not supported on JetStream (streams cannot share a "
                "subject); use one stream and a queue of consumers instead"
            )
        check_int(partitions, "partitions", maximum=MAX_I64, open_ended=True)
        if partitions > 1 and subject.split(".")[-1] == ">":
            raise ValidationError(
                f"subject {subject!r} ends with '>': partition subjects ({subject}.1) would be invalid")
        validate_name(partition_stream_name(name, partitions - 1), "stream name")
        if not isinstance(replication_factor, int) or isinstance(replication_factor, bool) or \
                not (replication_factor == -1 or 1 <= replication_factor <= MAX_REPLICAS):
            raise ValidationError(f"replication_factor must be -1 or 1 to {MAX_REPLICAS}, got {replication_factor!r}")
        if storage not in _STORAGE:
            raise ValidationError(f"storage must be 'file' or 'memory', got {storage!r}")
        limits: dict[str, Any] = {}
        if retention_max_age is not None:
            limits["max_age"] = _positive(retention_max_age, "retention_max_age")
        if retention_max_bytes is not None:
            limits["max_bytes"] = _positive_int(retention_max_bytes, "retention_max_bytes")
        if retention_max_messages is not None:
            limits["max_msgs"] = _positive_int(retention_max_messages, "retention_max_messages")
        self._check_open()
        deadline = self._deadline(timeout)
        if max_replication or replication_factor == -1:
            meta = self._retry("fetching metadata", self._meta.update, deadline)
            replication_factor = min(MAX_REPLICAS, max(1, len({b.id for b in meta.brokers()})))
        names = [partition_stream_name(name, p) for p in range(partitions)]
        for js_name in names:

            def _lookup(d: Deadline, n: str = js_name) -> bool:
                return self._exists(n, d)

            if self._retry(f"looking up stream {js_name!r}", _lookup, deadline):
                raise StreamExistsError(400, 10058, f"stream {name!r} already exists (JetStream stream {js_name!r})")
        token = uuid.uuid4().hex
        created: list[str] = []
        try:
            for p, js_name in enumerate(names):
                cfg = partition_config(name, subject, p, partitions, js_name=js_name, storage=storage,
                                       replication_factor=replication_factor, limits=limits, token=token)

                def _create(d: Deadline, c: api.StreamConfig = cfg) -> None:
                    self._js.create_stream(c, timeout=_rem(d))

                try:
                    self._retry(f"creating stream {js_name!r}", _create, deadline)
                except APIError as exc:
                    if (mapped := create_error(exc, name, js_name, subject, p)) is exc:
                        raise
                    raise mapped from exc
                created.append(js_name)
        except BaseException:
            for js_name in created:
                try:
                    self._js.delete_stream(js_name, timeout=1.0)
                except Error:
                    log.warning("jssync.liftbridge: could not roll back JetStream stream %r", js_name)
            raise
        if replication_factor > 1 and partitions > 1:
            try:
                self._spread_leaders(names, deadline)
            except Error as exc:
                log.debug("jssync.liftbridge: could not spread partition leaders: %s", exc)
        try:
            meta = self._retry("fetching metadata", self._meta.update, deadline)
            info = meta.get_stream(name)
        except TimeoutError:
            info = None
        if info is None:  # the metadata did not come back in time: describe what we made
            items = [{"config": {"name": n, "subjects": [partition_subject(subject, p)],
                                 "num_replicas": replication_factor,
                                 "metadata": {META_STREAM: name, META_SUBJECT: subject, META_PARTITION: str(p),
                                              META_PARTITIONS: str(partitions)}}}
                     for p, n in enumerate(names)]
            info = build_streams(items, None)[name]
        return info

    def _exists(self, js_name: str, deadline: Deadline) -> bool:
        try:
            self._js._api(f"STREAM.INFO.{js_name}", None, _rem(deadline))
        except StreamNotFoundError:
            return False
        return True

    def _spread_leaders(self, names: list[str], deadline: Deadline) -> None:
        """Move partition leaders so that no server leads more than its share (best effort).

        Uses the leader step-down request with a preferred server (nats-server 2.11+).
        Waits (at most 5 s of ``deadline``) for the moves to happen.
        """
        infos = {n: self._js._api(f"STREAM.INFO.{n}", None, _rem(deadline)) for n in names}
        peers: dict[str, list[str]] = {}
        leaders: dict[str, str | None] = {}
        for n, info in infos.items():
            cl = info.get("cluster") or {}
            leaders[n] = cl.get("leader")
            peers[n] = [x for x in [cl.get("leader")] + [r.get("name") for r in cl.get("replicas") or []] if x]
        servers = sorted({s for ps in peers.values() for s in ps})
        if len(servers) < 2:
            return
        counts = Counter({s: 0 for s in servers})
        counts.update(x for x in leaders.values() if x)
        share = math.ceil(len(names) / len(servers))
        moves: dict[str, str] = {}
        for n in names:
            cur = leaders[n]
            if cur is not None and counts[cur] <= share:
                continue
            cands = [s for s in peers[n] if s != cur and counts[s] < share]
            if not cands:
                continue
            best = min(cands, key=lambda s: (counts[s], s))
            try:
                self._js._api(f"STREAM.LEADER.STEPDOWN.{n}", {"placement": {"preferred": best}}, _rem(deadline))
            except Error as exc:
                log.debug("jssync.liftbridge: leader step-down of %r failed: %s", n, exc)
                continue
            if cur is not None:
                counts[cur] -= 1
            counts[best] += 1
            moves[n] = best
        rem = deadline.remaining()
        wait = Deadline(5.0 if rem is None else min(5.0, rem))
        while moves and not wait.expired():
            for n in list(moves):
                try:
                    cl = self._js._api(f"STREAM.INFO.{n}", None, max(min(wait.remaining() or 0.1, 0.5), 0.1),
                                       ).get("cluster")
                except Error:
                    continue
                if (cl or {}).get("leader") == moves[n]:
                    del moves[n]
            if moves:
                _sleep(0.05, wait)

    def delete_stream(self, name: str, *, timeout: float | None | Default = DEFAULT) -> None:
        """Delete a stream: every partition and its messages (not in the guide; later Liftbridge has it).

        Raises:
            NoSuchPartitionError: there is no stream of that name.
            jssync.TimeoutError.
        """
        validate_name(name, "stream name")
        self._check_open()
        deadline = self._deadline(timeout)
        meta = self._retry("fetching metadata", self._meta.update, deadline)
        info = meta.get_stream(name)
        if info is None:
            raise NoSuchPartitionError(404, 10059, f"no such stream: {name!r}")
        for p in sorted(info.partitions.values(), key=lambda p: p.id):

            def _delete(d: Deadline, js_name: str = p.jetstream_stream) -> None:
                try:
                    self._js.delete_stream(js_name, timeout=_rem(d))
                except StreamNotFoundError:
                    pass  # a retried delete whose first attempt went through

            self._retry(f"deleting stream {p.jetstream_stream!r}", _delete, deadline)
        self._meta.invalidate()

    # -- Publish -------------------------------------------------------------------------------

    def publish(
        self,
        subject: str,
        value: bytes = b"",
        *,
        key: bytes | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        ack_policy: AckPolicy | str = AckPolicy.LEADER,
        partition_by: Partitioner | type[Partitioner] | Callable[[OutgoingMessage, Metadata], int] | None = None,
        to_partition: int | None = None,
        timeout: float | None | Default = DEFAULT,
    ) -> Ack | None:
        """Publish ``value`` to a partition of the stream(s) on ``subject`` (the Liftbridge ``Publish``).

        The partition: ``to_partition`` if given, else ``partition_by`` (a
        :class:`Partitioner` or ``fn(message, metadata) -> int``; :class:`PartitionByKey`,
        :class:`PartitionByRoundRobin`, each also as the class itself) with the cached
        metadata (refreshed first when it does not know ``subject``), else 0. Round robin
        uses the client's counter for the subject, however the option is spelled. The message goes
        to ``subject`` (partition 0) or ``subject.<partition>``; key, headers, ack inbox,
        correlation id and ack policy travel as NATS headers (``Lift-Key`` ...).

        Ack policies: LEADER (default) returns when the JetStream PubAck arrives (for a
        replicated partition JetStream sends it once a quorum stored the message); ALL
        also waits until every in-sync replica confirmed it; NONE publishes without an
        ack and returns None at once. ``timeout=None`` also returns None as soon as the
        message is published, as the guide says (no ack is awaited). With ``ack_inbox``
        the ack is also published to exactly that subject, as Liftbridge does (also with
        ``timeout=None``, once it arrives); its body carries the correlation id (any
        str); decode it with :func:`unmarshal_ack`.

        A ``Nats-Msg-Id`` header makes retries safe: the user's own when given (it is
        JetStream's de-duplication key: a second publish with the same id returns the
        first one's offset, ``ack.duplicate`` True), else a unique one. While JetStream is
        unavailable (no responders, a leader election) or an ack is late, the publish is
        retried within ``timeout`` and JetStream drops duplicates (within the stream's
        2-minute window). Header values are opaque bytes (a str means its UTF-8).

        Blocks until acked, up to ``timeout`` (left out: the client's timeout). ``timeout=None``
        is the one exception to jssync's timeout rule: it is the Liftbridge guide's "timeout not
        set", so it does not wait for the ack at all.

        Returns:
            The :class:`Ack`, or None with ack policy NONE or ``timeout=None``.

        Raises:
            jssync.TimeoutError: no ack within ``timeout`` (the Liftbridge DeadlineExceeded).
            NoSuchPartitionError: no stream captures the partition subject.
            ValueError, TypeError, jssync.BadSubjectError, jssync.BadHeaderError,
            jssync.MaxPayloadError: a bad argument (nothing is sent).
            jssync.APIError: JetStream refused the message (e.g. a limit).
        """
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

    def _metadata_for_subject(self, subject: str, deadline: Deadline) -> Metadata:
        """The cached metadata when it knows ``subject`` and is fresh; else refreshed first (the guide:
        "make sure we have metadata for the stream and, if not, update it")."""
        cur = self._meta.current
        if cur is not None and cur.has_subject(subject) and cur.age() <= self._meta.max_age:
            return cur
        return self._retry("fetching metadata", self._meta.update, deadline)

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
            _sleep(random.uniform(RETRY_MIN, RETRY_MAX), deadline)

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
        delay = 0.002
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
            _sleep(delay, deadline)
            delay = min(delay * 2, 0.05)

    # -- Subscribe -----------------------------------------------------------------------------

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start_at: StartPosition | int | Any = None,
        start_at_offset: int | None = None,
        start_at_time: Any = None,
        start_at_time_delta: Any = None,
        resubscribe_wait_time: float | None = None,
        idle_heartbeat: float = 5.0,
        timeout: float | None | Default = DEFAULT,
    ) -> Subscription:
        """Subscribe to one partition of ``stream`` (the Liftbridge ``Subscribe``).

        Starts at the position given, then waits for new messages. Start positions:
        ``start_at=StartPosition.NEW_ONLY`` (default: messages published from now on),
        ``EARLIEST``, ``LATEST`` (the last message), an offset (``start_at_offset=`` or
        ``start_at=42``: the first message with an offset >= it), a time
        (``start_at_time=`` an aware datetime, or ``start_at=`` one) or a time delta
        (``start_at_time_delta=`` seconds or a timedelta: now - delta).

        Without ``handler`` the returned :class:`Subscription` is an iterator; with it,
        ``handler(msg, None)`` runs for each message on the connection's worker pool, one
        at a time, in order, and ``handler(None, err)`` once when the subscription ends
        with an error. Transient failures (a gap, missed heartbeats, a reconnect, a lost
        consumer) resubscribe from the last offset + 1, waiting 10-500 ms (jittered)
        between attempts, for up to ``resubscribe_wait_time`` (default: the client's,
        30 s); each message is delivered once, in order. ``idle_heartbeat`` (seconds)
        is how often an idle server proves it is alive; three missed ones resubscribe.

        Blocks until the consumer is created (default: the client's timeout).

        Raises:
            NoSuchPartitionError: the stream or the partition does not exist.
            ValueError, TypeError: a bad argument (nothing is sent).
            jssync.TimeoutError.
        """
        validate_name(stream, "stream name")
        check_partition(partition)
        if handler is not None and not callable(handler):
            raise TypeError(f"handler must be callable (handler(msg, err)), got {handler!r}")
        start = resolve_start(start_at, start_at_offset, start_at_time, start_at_time_delta)
        wait = self.resubscribe_wait_time if resubscribe_wait_time is None else \
            _non_negative(resubscribe_wait_time, "resubscribe_wait_time")
        hb = _positive(idle_heartbeat, "idle_heartbeat")
        if not 0.1 <= hb <= 30:
            raise ValidationError(f"idle_heartbeat must be between 0.1 and 30 seconds, got {idle_heartbeat!r}")
        self._check_open()
        deadline = self._deadline(timeout)
        info = self._partition_info(stream, partition, deadline)
        sub = Subscription(self._js, stream=stream, partition=partition, jetstream_stream=info.jetstream_stream,
                           start=start, handler=handler, resubscribe_wait_time=wait, idle_heartbeat=hb,
                           on_close=self._forget)
        with self._lock:
            if self._closed:
                raise ConnectionClosedError("the liftbridge client is closed")
            self._subs.add(sub)
        try:
            sub._begin(deadline)
        except BaseException:
            with self._lock:
                self._subs.discard(sub)
            raise
        return sub

    def _forget(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)

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

    # -- FetchMetadata -------------------------------------------------------------------------

    def fetch_metadata(self, *, timeout: float | None | Default = DEFAULT) -> Metadata:
        """Fetch the cluster metadata from the server (the Liftbridge ``FetchMetadata``).

        Always goes to the server (and refreshes the client's cache): the streams with
        their partitions, leaders and replicas (``STREAM.LIST``), and the brokers (the
        server INFO, its ``connect_urls``, and the servers named in stream placements).

        Raises:
            jssync.TimeoutError.
        """
        self._check_open()
        return self._retry("fetching metadata", self._meta.update, self._deadline(timeout))

    # -- Close ---------------------------------------------------------------------------------

    def close(self, timeout: float | None = 5.0) -> None:
        """Close every subscription, then the connection if the client opened it. Idempotent.

        Blocks up to ``timeout`` seconds (None: no limit); never raises for a closed client.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subs = list(self._subs)
        deadline = Deadline(timeout)
        for sub in subs:
            sub.close(timeout=_at_least(deadline, 0.5))
        if self._own:
            self._conn.close(timeout=_at_least(deadline, 0.5))

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- small helpers -----------------------------------------------------------------------------


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _at_least(deadline: Deadline, floor: float) -> float | None:
    """What is left of ``deadline``, but at least ``floor``; None for no limit."""
    rem = deadline.remaining()
    return None if rem is None else max(rem, floor)


def _rem(deadline: Deadline) -> float | None:
    rem = deadline.remaining()
    return None if rem is None else max(rem, 0.001)


def _positive(v: Any, what: str) -> float:
    return check_number(v, what)


def _non_negative(v: Any, what: str) -> float:
    return check_number(v, what, above=None, minimum=0)


def _positive_int(v: Any, what: str) -> int:
    return check_int(v, what, maximum=MAX_I64, open_ended=True)
