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

The package, one job per module: :class:`Client` here is the facade (the public calls and
their documentation, the subscriptions it made, close); it hands its work to
:mod:`.routing` (open check, deadlines, the resilient retry, partition lookups),
:mod:`.admin` (creating and deleting streams) and :mod:`.publishing` (publishing and acks).
:mod:`.sub` reads a partition (with :mod:`.consumer`, which makes and remakes its
consumer, and :mod:`.start`, the start positions); :mod:`.codec` has the headers, messages
and partitioners, :mod:`.meta` the cluster metadata.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..base.deadline import DEFAULT, Deadline, Default
from ..base.errors import (
    ConnectionClosedError,
    ValidationError,
)
from ..core.connection import Connection, connect
from ..jetstream.context import JetStream
from ..jetstream.params import validate_name
from .admin import StreamAdmin
from .codec import (
    HDR_ACK_INBOX,
    HDR_ACK_POLICY,
    HDR_CORRELATION_ID,
    HDR_KEY,
    Ack,
    AckPolicy,
    Message,
    NatsMessage,
    OutgoingMessage,
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
    StartPosition,
    check_partition,
    new_message,
    new_nats_message,
    partition_stream_name,
    partition_subject,
    unmarshal_ack,
    unmarshal_message,
)
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
)
from .publishing import Publisher
from .routing import Routing, _non_negative, _positive
from .sub import Handler, Subscription, resolve_start

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
        # the rooms, one job each: checks, retries and partition lookups; stream admin; publishing
        self._routing = Routing(self)
        self._admin = StreamAdmin(self)
        self._publisher = Publisher(self)

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
        return self._admin.create_stream(
            subject, name, group=group, replication_factor=replication_factor, max_replication=max_replication,
            partitions=partitions, storage=storage, retention_max_age=retention_max_age,
            retention_max_bytes=retention_max_bytes, retention_max_messages=retention_max_messages, timeout=timeout,
        )

    def delete_stream(self, name: str, *, timeout: float | None | Default = DEFAULT) -> None:
        """Delete a stream: every partition and its messages (not in the guide; later Liftbridge has it).

        Raises:
            NoSuchPartitionError: there is no stream of that name.
            jssync.TimeoutError.
        """
        self._admin.delete_stream(name, timeout=timeout)

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
        return self._publisher.publish(
            subject, value, key=key, headers=headers, ack_inbox=ack_inbox, correlation_id=correlation_id,
            ack_policy=ack_policy, partition_by=partition_by, to_partition=to_partition, timeout=timeout,
        )

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
        self._routing._check_open()
        deadline = self._routing._deadline(timeout)
        info = self._routing._partition_info(stream, partition, deadline)
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

    # -- FetchMetadata -------------------------------------------------------------------------

    def fetch_metadata(self, *, timeout: float | None | Default = DEFAULT) -> Metadata:
        """Fetch the cluster metadata from the server (the Liftbridge ``FetchMetadata``).

        Always goes to the server (and refreshes the client's cache): the streams with
        their partitions, leaders and replicas (``STREAM.LIST``), and the brokers (the
        server INFO, its ``connect_urls``, and the servers named in stream placements).

        Raises:
            jssync.TimeoutError.
        """
        routing = self._routing
        routing._check_open()
        return routing._retry("fetching metadata", self._meta.update, routing._deadline(timeout))

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


def _at_least(deadline: Deadline, floor: float) -> float | None:
    """What is left of ``deadline``, but at least ``floor``; None for no limit."""
    rem = deadline.remaining()
    return None if rem is None else max(rem, floor)

