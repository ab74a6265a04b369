"""Partitioned consumer groups: administration and the member runner (blocking API).

A member instance (:func:`static_consume` / :func:`elastic_consume`) is a
:class:`ConsumerGroupContext`: one control thread per instance watches the group's config
key, creates the member's consumer (pinned_client priority group ``PCG``, so of several
instances of a member only one gets messages) and runs a jssync ``consume`` on it. The
handler gets each message with the partition token taken off its subject.

Rebalancing (elastic): when the member's partitions change, the pinned instance pauses its
consumer, stops its consume (the handler that runs finishes; buffered messages are nak'ed),
waits until the server confirmed a progress ack sent after the handler's last ack (the
consumer applies acks in order), then deletes its consumer and creates one with its new
filters. The work-queue stream refuses a consumer whose filters overlap
another one's, so a member that gains a partition only gets a consumer once the previous
owner let go of it (it tries again every ``RETRY_INTERVAL`` seconds): a message acked
after processing is never delivered to a second member.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default
from ..base.durations import optional_seconds
from ..base.errors import (
    APIError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    Error,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from ..core.msg import Msg
from ..jetstream.context import JetStream
from ..jetstream.features import require
from ..jetstream.params import validate_name
from ..jetstream.priority import PriorityConfig, attach_config
from ..kv.errors import BucketNotFoundError, KeyNotFoundError
from ..kv.keyvalue import Entry, KeyValue, KeyValueOp
from .config import (
    DEFAULT_ACK_WAIT,
    ELASTIC_BUCKET,
    MIN_PIN_TTL,
    PRIORITY_GROUP,
    STATIC_BUCKET,
    ElasticConsumerGroupConfig,
    MemberMapping,
    PartitioningFilter,
    StaticConsumerGroupConfig,
    config_key,
    elastic_stream_name,
    static_consumer_name,
    strip_partition,
    validate_group_name,
)
from .errors import (
    ConsumerGroupChangedError,
    ConsumerGroupConfigError,
    ConsumerGroupNotFoundError,
    NotAMemberError,
)

log = logging.getLogger("jssync")

#: seconds between attempts to create the member's consumer while another one holds its partitions
RETRY_INTERVAL = 0.25
#: err_code: a work-queue stream refuses a consumer whose filters overlap another consumer's
_WQ_NOT_UNIQUE = 10100

Timeout = float | None | Default


# -- administration ------------------------------------------------------------------------


def _names(stream: str, group: str) -> None:
    validate_name(stream)
    validate_group_name(group)


def _bucket(js: JetStream, bucket: str, timeout: Timeout, what: str) -> KeyValue:
    try:
        return js.key_value(bucket, timeout=timeout)
    except BucketNotFoundError:
        raise ConsumerGroupNotFoundError(
            f"no {what} consumer groups: the KV bucket {bucket!r} does not exist") from None


def _get_entry(kv: KeyValue, stream: str, group: str, what: str, timeout: Timeout) -> Entry:
    try:
        return kv.get(config_key(stream, group), timeout=timeout)
    except KeyNotFoundError:
        raise ConsumerGroupNotFoundError(
            f"no {what} consumer group {group!r} on stream {stream!r} (key {config_key(stream, group)!r} "
            f"in bucket {kv.bucket!r})") from None


def static_config(js: JetStream, stream: str, group: str, *, timeout: Timeout = DEFAULT) -> StaticConsumerGroupConfig:
    """Read a static group's config from the ``static-consumer-groups`` bucket.

    Blocks for the KV lookups (the context's timeout by default).

    Raises:
        jssync.ConsumerGroupNotFoundError: no such group (or no bucket).
        jssync.ConsumerGroupConfigError: the stored value is not a valid config.
        ValueError: an invalid stream or group name (nothing is sent).
    """
    _names(stream, group)
    kv = _bucket(js, STATIC_BUCKET, timeout, "static")
    return StaticConsumerGroupConfig.from_json(_get_entry(kv, stream, group, "static", timeout).value)


def elastic_config(js: JetStream, stream: str, group: str, *,
                   timeout: Timeout = DEFAULT) -> ElasticConsumerGroupConfig:
    """Read an elastic group's config (with its KV ``revision``) from ``elastic-consumer-groups``.

    Raises: as :func:`static_config`.
    """
    _names(stream, group)
    kv = _bucket(js, ELASTIC_BUCKET, timeout, "elastic")
    entry = _get_entry(kv, stream, group, "elastic", timeout)
    return ElasticConsumerGroupConfig.from_json(entry.value, entry.revision)


def _members_arg(members: Iterable[str] | None, what: str = "members") -> list[str] | None:
    if members is None:
        return None
    if isinstance(members, str | bytes):
        raise TypeError(f"{what} must be a list of member names, got {members!r}")
    out = list(members)
    for m in out:
        validate_group_name(m, "member name")
    return out


def _mappings_arg(mappings: Iterable[MemberMapping | tuple[str, Sequence[int]]] | dict[str, Sequence[int]] | None
                  ) -> list[MemberMapping] | None:
    if mappings is None:
        return None
    if isinstance(mappings, dict):
        mappings = list(mappings.items())
    out = []
    for m in mappings:
        mm = m if isinstance(m, MemberMapping) else MemberMapping(m[0], list(m[1]))
        validate_group_name(mm.member, "member name")
        out.append(MemberMapping(mm.member, None if mm.partitions is None else list(mm.partitions)))
    return out


def _kv_for_create(js: JetStream, bucket: str, replicas: int, timeout: Timeout) -> KeyValue:
    try:
        return js.key_value(bucket, timeout=timeout)
    except BucketNotFoundError:
        if isinstance(timeout, Default):
            return js.create_key_value(bucket=bucket, replicas=replicas, storage="file")
        return js.create_key_value(bucket=bucket, replicas=replicas, storage="file", timeout=timeout)


def create_static(js: JetStream, stream: str, group: str, max_members: int, *, filters: Sequence[str] | None = None,
                  members: Iterable[str] | None = None,
                  member_mappings: Iterable[MemberMapping | tuple[str, Sequence[int]]] | dict[str, Sequence[int]]
                  | None = None, timeout: Timeout = DEFAULT) -> StaticConsumerGroupConfig:
    """Create a static group on ``stream`` (whose subjects start with the partition number).

    Stores the config under ``<stream>.<group>`` in ``static-consumer-groups`` (made, with
    the stream's replicas, if missing). Creating a group that exists with the same config
    returns it. ``member_mappings``: ``[MemberMapping(name, [partitions])]``, pairs, or a dict.

    Blocks for the stream lookup and the KV calls (the context's timeout each).

    Raises:
        jssync.ConsumerGroupConfigError: a bad config (nothing is sent), or the group exists
            with another config.
        ValueError, TypeError: an invalid stream, group or member name (nothing is sent).
        jssync.StreamNotFoundError.
    """
    _names(stream, group)
    cfg = StaticConsumerGroupConfig(max_members, list(filters) if filters else None, _members_arg(members),
                                    _mappings_arg(member_mappings)).validate()
    info = js.stream(stream, timeout=timeout).info(timeout=timeout)
    kv = _kv_for_create(js, STATIC_BUCKET, info.config.num_replicas or 1, timeout)
    key = config_key(stream, group)
    try:
        existing = kv.get(key, timeout=timeout)
    except KeyNotFoundError:
        try:
            kv.create(key, cfg.to_json(), timeout=timeout)
            return cfg
        except Error:  # made by someone else meanwhile: compare with theirs
            existing = kv.get(key, timeout=timeout)
    have = StaticConsumerGroupConfig.from_json(existing.value)
    if not have.same_as(cfg):
        raise ConsumerGroupConfigError(
            f"static consumer group {group!r} on stream {stream!r} exists with another config: {have}")
    return have


def create_elastic(js: JetStream, stream: str, group: str, max_members: int, *,
                   partitioning_filters: Sequence[PartitioningFilter | tuple[str, Sequence[int]] | str] | None = None,
                   max_buffered_msgs: int = 0, max_buffered_bytes: int = 0,
                   timeout: Timeout = DEFAULT) -> ElasticConsumerGroupConfig:
    """Create an elastic group on ``stream``: its config (no members yet) and its work-queue stream.

    ``partitioning_filters``: ``PartitioningFilter("orders.*", [1])``, pairs, or plain filter
    strings (the whole subject is the key); none means every subject, keyed on all of it.
    The work-queue stream ``<stream>-<group>`` sources ``stream`` with the partition number
    put in front of each subject, has the stream's replicas and storage, and holds at most
    ``max_buffered_msgs`` / ``max_buffered_bytes`` (0: no limit; discard new, so sourcing
    pauses while it is full). Creating a group that exists with the same shape returns it.

    Blocks for the stream lookups and creations (the context's timeout each).

    Raises:
        jssync.ConsumerGroupConfigError: a bad config (nothing is sent), or the group exists
            with another shape.
        ValueError: an invalid stream or group name (nothing is sent).
        jssync.StreamNotFoundError.
    """
    _names(stream, group)
    pfs: list[PartitioningFilter] | None = None
    if partitioning_filters is not None:
        if isinstance(partitioning_filters, str | bytes):
            raise TypeError(f"partitioning_filters must be a list, got {partitioning_filters!r}")
        pfs = []
        for pf in partitioning_filters:
            if isinstance(pf, str):
                pfs.append(PartitioningFilter(pf, []))
            elif isinstance(pf, PartitioningFilter):
                pfs.append(PartitioningFilter(pf.filter, list(pf.partitioning_wildcards or [])))
            else:
                pfs.append(PartitioningFilter(pf[0], list(pf[1])))
    cfg = ElasticConsumerGroupConfig(max_members, pfs, max_buffered_msgs, max_buffered_bytes).validate()
    info = js.stream(stream, timeout=timeout).info(timeout=timeout)
    kv = _kv_for_create(js, ELASTIC_BUCKET, info.config.num_replicas or 1, timeout)
    key = config_key(stream, group)
    try:
        entry = kv.get(key, timeout=timeout)
        have = ElasticConsumerGroupConfig.from_json(entry.value, entry.revision)
        if not have.same_shape(cfg):
            raise ConsumerGroupConfigError(
                f"elastic consumer group {group!r} on stream {stream!r} exists with another config: {have}; "
                "delete it first")
        cfg = have
    except KeyNotFoundError:
        cfg.revision = kv.create(key, cfg.to_json(), timeout=timeout)
    sources = [api.StreamSource(name=stream, subject_transforms=[
        api.SubjectTransform(src=t["src"], dest=t["dest"]) for t in cfg.subject_transforms()])]
    js.create_stream(name=elastic_stream_name(stream, group), retention="workqueue",
                     num_replicas=info.config.num_replicas or 1, storage=info.config.storage,
                     max_msgs=cfg.max_buffered_msgs or -1, max_bytes=cfg.max_buffered_bytes or -1,
                     discard="new", sources=sources, allow_direct=True, timeout=timeout)
    return cfg


def delete_static(js: JetStream, stream: str, group: str, *, timeout: Timeout = DEFAULT) -> None:
    """Delete a static group: its config entry (members stop), then its member consumers.

    Raises:
        jssync.StreamNotFoundError; jssync.ConsumerGroupNotFoundError: no bucket.
    """
    _names(stream, group)
    st = js.stream(stream, timeout=timeout)
    kv = _bucket(js, STATIC_BUCKET, timeout, "static")
    try:
        kv.delete(config_key(stream, group), timeout=timeout)
    except KeyNotFoundError:
        pass
    for name in list(st.consumer_names(timeout=timeout)):
        if name.startswith(group + "-"):
            try:
                st.delete_consumer(name, timeout=timeout)
            except ConsumerNotFoundError:
                pass


def delete_elastic(js: JetStream, stream: str, group: str, *, timeout: Timeout = DEFAULT) -> None:
    """Delete an elastic group: its config entry (members stop), then its work-queue stream.

    Raises:
        jssync.ConsumerGroupNotFoundError: no bucket; jssync.StreamNotFoundError: no work-queue stream.
    """
    _names(stream, group)
    kv = _bucket(js, ELASTIC_BUCKET, timeout, "elastic")
    try:
        kv.delete(config_key(stream, group), timeout=timeout)
    except KeyNotFoundError:
        pass
    js.delete_stream(elastic_stream_name(stream, group), timeout=timeout)


def _list(js: JetStream, bucket: str, stream: str, timeout: Timeout) -> list[str]:
    validate_name(stream)
    kv = _bucket(js, bucket, timeout, bucket.split("-")[0])
    try:
        keys = kv.keys(f"{stream}.*", timeout=timeout)
    except KeyNotFoundError:
        return []
    return [k.split(".", 1)[1] for k in keys]


def list_static(js: JetStream, stream: str, *, timeout: Timeout = DEFAULT) -> list[str]:
    """The names of the static groups of ``stream``. Raises jssync.ConsumerGroupNotFoundError: no bucket."""
    return _list(js, STATIC_BUCKET, stream, timeout)


def list_elastic(js: JetStream, stream: str, *, timeout: Timeout = DEFAULT) -> list[str]:
    """The names of the elastic groups of ``stream``. Raises jssync.ConsumerGroupNotFoundError: no bucket."""
    return _list(js, ELASTIC_BUCKET, stream, timeout)


def _config_members(cfg: StaticConsumerGroupConfig | ElasticConsumerGroupConfig) -> list[str]:
    return list(cfg.members or []) or [m.member for m in cfg.member_mappings or ()]


def static_active_members(js: JetStream, stream: str, group: str, *, timeout: Timeout = DEFAULT) -> list[str]:
    """The members of a static group that have a consumer with a waiting pull (someone consumes)."""
    cfg = static_config(js, stream, group, timeout=timeout)
    names = {static_consumer_name(group, m): m for m in _config_members(cfg)}
    return [names[i.name] for i in js.consumers(stream, timeout=timeout)
            if i.name in names and (i.num_waiting or 0) > 0]


def elastic_active_members(js: JetStream, stream: str, group: str, *, timeout: Timeout = DEFAULT) -> list[str]:
    """The members of an elastic group that have a consumer on its work-queue stream."""
    cfg = elastic_config(js, stream, group, timeout=timeout)
    members = set(_config_members(cfg))
    return [n for n in js.consumer_names(elastic_stream_name(stream, group), timeout=timeout) if n in members]


def static_step_down(js: JetStream, stream: str, group: str, member: str, *, timeout: Timeout = DEFAULT) -> None:
    """Unpin the active instance of ``member``: the server pins another waiting instance (2.11+)."""
    _names(stream, group)
    validate_group_name(member, "member name")
    js.unpin_consumer(stream, static_consumer_name(group, member), PRIORITY_GROUP, timeout=timeout)


def elastic_step_down(js: JetStream, stream: str, group: str, member: str, *, timeout: Timeout = DEFAULT) -> None:
    """Unpin the active instance of ``member`` of an elastic group (2.11+)."""
    _names(stream, group)
    validate_group_name(member, "member name")
    js.unpin_consumer(elastic_stream_name(stream, group), member, PRIORITY_GROUP, timeout=timeout)


def _update_elastic(js: JetStream, stream: str, group: str, change: Callable[[ElasticConsumerGroupConfig], None],
                    timeout: Timeout) -> ElasticConsumerGroupConfig:
    """Read, change and write back an elastic config (compare-and-set on the KV revision; retried)."""
    _names(stream, group)
    kv = _bucket(js, ELASTIC_BUCKET, timeout, "elastic")
    for _ in range(10):
        entry = _get_entry(kv, stream, group, "elastic", timeout)
        cfg = ElasticConsumerGroupConfig.from_json(entry.value, entry.revision)
        change(cfg)
        cfg.validate()
        try:
            cfg.revision = kv.update(config_key(stream, group), cfg.to_json(), entry.revision, timeout=timeout)
            return cfg
        except APIError as exc:
            if exc.err_code != 10071:  # someone else wrote it meanwhile: read it again
                raise
    raise ConsumerGroupConfigError(f"elastic consumer group {group!r} on stream {stream!r} kept changing; "
                                   "the update was not made")


def add_members(js: JetStream, stream: str, group: str, members: Iterable[str], *,
                timeout: Timeout = DEFAULT) -> list[str]:
    """Add members to an elastic group; returns the new member list. Running members rebalance.

    Raises:
        jssync.ConsumerGroupConfigError: the group uses member mappings, or no names given.
        ValueError, TypeError: an invalid member name (nothing is sent).
        jssync.ConsumerGroupNotFoundError.
    """
    new = _members_arg(members) or []
    if not new:
        raise ValidationError("add_members needs at least one member name")

    def change(cfg: ElasticConsumerGroupConfig) -> None:
        if cfg.member_mappings:
            raise ConsumerGroupConfigError(f"elastic consumer group {group!r} uses member mappings: "
                                           "set them with set_member_mappings")
        cfg.members = list(dict.fromkeys([*(cfg.members or []), *new]))

    return list(_update_elastic(js, stream, group, change, timeout).members or [])


def delete_members(js: JetStream, stream: str, group: str, members: Iterable[str], *,
                   timeout: Timeout = DEFAULT) -> list[str]:
    """Drop members from an elastic group; returns the remaining member list.

    Raises: as :func:`add_members`.
    """
    gone = set(_members_arg(members) or [])
    if not gone:
        raise ValidationError("delete_members needs at least one member name")

    def change(cfg: ElasticConsumerGroupConfig) -> None:
        if cfg.member_mappings:
            raise ConsumerGroupConfigError(f"elastic consumer group {group!r} uses member mappings: "
                                           "set them with set_member_mappings")
        cfg.members = [m for m in cfg.members or [] if m not in gone] or None

    return list(_update_elastic(js, stream, group, change, timeout).members or [])


def set_member_mappings(js: JetStream, stream: str, group: str,
                        mappings: Iterable[MemberMapping | tuple[str, Sequence[int]]] | dict[str, Sequence[int]], *,
                        timeout: Timeout = DEFAULT) -> ElasticConsumerGroupConfig:
    """Assign partitions to members by hand (replaces the member list). Every partition once.

    Raises:
        jssync.ConsumerGroupConfigError: the mappings do not cover each partition exactly once.
    """
    mm = _mappings_arg(mappings) or []
    if not mm:
        raise ValidationError("set_member_mappings needs at least one mapping")

    def change(cfg: ElasticConsumerGroupConfig) -> None:
        cfg.members = None
        cfg.member_mappings = mm

    return _update_elastic(js, stream, group, change, timeout)


def delete_member_mappings(js: JetStream, stream: str, group: str, *,
                           timeout: Timeout = DEFAULT) -> ElasticConsumerGroupConfig:
    """Remove an elastic group's member mappings (no member has partitions until members are added)."""
    def change(cfg: ElasticConsumerGroupConfig) -> None:
        cfg.member_mappings = None

    return _update_elastic(js, stream, group, change, timeout)


# -- the member runner ---------------------------------------------------------------------


_CONSUME_OPTS = frozenset({"max_messages", "max_bytes", "threshold_messages", "threshold_bytes", "idle_heartbeat"})


class ConsumerGroupContext:
    """One running member instance of a partitioned consumer group.

    Made by :func:`static_consume` / :func:`elastic_consume`. A control thread follows the
    group's config and keeps the member's consumer and consume in step with it; the handler
    runs on the connection's worker pool, one message at a time. :meth:`stop` ends it (the
    running handler finishes, buffered messages are nak'ed for redelivery), :meth:`wait`
    blocks until it ended; :attr:`error` says why it ended on its own (None: stopped, or the
    group was deleted). Thread-safe.
    """

    def __init__(self, js: JetStream, kind: str, stream: str, group: str, member: str,
                 callback: Callable[[Msg], Any], error_cb: Callable[[BaseException], Any] | None,
                 template: api.ConsumerConfig, consume_opts: dict[str, Any], ack_wait: float) -> None:
        self._js = js
        self.kind = kind
        self.stream = stream
        self.group = group
        self.member = member
        self._cb = callback
        self._error_cb = error_cb
        self._template = template
        self._opts = consume_opts
        self._ack_wait = ack_wait
        self._pin_ttl = max(ack_wait, MIN_PIN_TTL)
        self._expires = max(ack_wait / 2, MIN_PIN_TTL)
        if kind == "static":
            self._cons_stream = stream
            self._cons_name = static_consumer_name(group, member)
            self._kv = _bucket(js, STATIC_BUCKET, DEFAULT, "static")
        else:
            self._cons_stream = elastic_stream_name(stream, group)
            self._cons_name = member
            self._kv = _bucket(js, ELASTIC_BUCKET, DEFAULT, "elastic")
        self._config: Any = None
        self._consumer: Any = None
        self._cc: Any = None
        self._filters: list[str] = []
        self._retry_at = 0.0
        self._exists_since: float | None = None
        self._stop = threading.Event()
        self._drain = False
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._cb_threads: set[int] = set()
        self._last_msg: Msg | None = None  # the last message handed to the handler (handover)
        self._watcher: Any = None
        self._thread: threading.Thread | None = None

    # -- start ---------------------------------------------------------------------------

    def _start(self) -> ConsumerGroupContext:
        # pinned_client priority groups and consumer pause: nats-server 2.11+ (NotSupportedError)
        require(self._js, "priority groups")
        key = config_key(self.stream, self.group)
        self._config = self._read(_get_entry(self._kv, self.stream, self.group, self.kind, DEFAULT))
        if self.kind == "static" and not self._config.is_in_membership(self.member):
            raise NotAMemberError(f"{self.member!r} is not a member of static consumer group {self.group!r} "
                                  f"on stream {self.stream!r} (members: {_config_members(self._config)})")
        if self.kind == "elastic":
            self._js.stream(self._cons_stream)  # raises StreamNotFoundError before anything runs
        # watch before joining so no change made meanwhile is missed (the current value comes first)
        self._watcher = self._kv.watch(key)
        try:
            if self.kind == "static":
                self._join(raise_errors=True)
            else:
                self._join(raise_errors=False)
        except BaseException:
            self._watcher.stop()
            raise
        self._thread = threading.Thread(target=self._run, name=f"jssync-pcg-{self.group}-{self.member}", daemon=True)
        self._thread.start()
        return self

    def _read(self, entry: Entry) -> Any:
        if self.kind == "static":
            return StaticConsumerGroupConfig.from_json(entry.value)
        return ElasticConsumerGroupConfig.from_json(entry.value, entry.revision)

    # -- the control thread ----------------------------------------------------------------

    def _run(self) -> None:
        err: BaseException | None = None
        try:
            while not self._stop.is_set():
                try:
                    entry = self._watcher.next(timeout=0.1)
                except TimeoutError:
                    entry = None
                except StopIteration:
                    if self._stop.is_set() or self._js.conn.is_closed:
                        break
                    raise ConsumerGroupChangedError(
                        f"the config watch of consumer group {self.group!r} ended") from None
                if entry is not None and self._on_entry(entry):
                    break
                self._check_consume()
        except BaseException as exc:  # noqa: BLE001 - reported on .error / error_cb
            err = exc
        finally:
            self._finish(err)

    def _on_entry(self, entry: Entry) -> bool:
        """A config update; True when the member must end."""
        if entry.operation is not KeyValueOp.PUT:  # the group was deleted
            self._retire(delete=self.kind == "static", quiet=True)
            return True
        new = self._read(entry)  # a bad config raises ConsumerGroupConfigError: the member ends
        if self.kind == "static":
            if not new.same_as(self._config):
                self._retire(delete=True, quiet=True)
                raise ConsumerGroupChangedError(
                    f"static consumer group {self.group!r} on stream {self.stream!r} changed; a static group "
                    "cannot change: delete and create it again")
            return False
        if not new.same_shape(self._config):
            self._retire(delete=False, quiet=True)
            raise ConsumerGroupChangedError(
                f"elastic consumer group {self.group!r} on stream {self.stream!r} changed its partitions, "
                "filters or buffer limits; delete and create it again")
        self._config = new
        self._rebalance()
        return False

    def _rebalance(self) -> None:
        filters = self._config.partition_filters(self.member)
        if self._cc is not None and filters == self._filters and not self._cc.closed:
            return  # this member's partitions did not change
        if self._cc is not None:
            pin = self._pin_state()
            # the pinned instance moves the consumer; with nobody pinned, any instance may
            self._retire(delete=pin != "other")
            if pin == "other":  # let the pinned instance move first
                self._stop.wait(random.uniform(0.4, 0.5))
        self._retry_at = 0.0
        self._join(raise_errors=False)

    def _check_consume(self) -> None:
        cc = self._cc
        if cc is not None and cc.closed:  # the consumer went away (deleted, idle): make it again
            log.info("consumer group %s member %s: consume ended (%s); joining again", self.group, self.member,
                     cc.error)
            self._cc = None
            self._consumer = None
            self._filters = []
            self._retry_at = time.monotonic() + RETRY_INTERVAL
        if self._cc is None and time.monotonic() >= self._retry_at and self._config.is_in_membership(self.member):
            self._join(raise_errors=False)

    def _pin_state(self) -> str:
        """Who the server pinned for the member's consumer: ``me``, ``other`` or ``none``."""
        c = self._consumer
        if c is None:
            return "other"
        pin = c.pin_id(PRIORITY_GROUP)
        try:
            info = self._js.consumer(self._cons_stream, self._cons_name, timeout=self._ack_wait).cached_info
        except Error:
            return "other"
        for st in getattr(info, "priority_groups", None) or ():
            if isinstance(st, dict) and st.get("group") == PRIORITY_GROUP:
                current = st.get("pinned_client_id")
                if not current:
                    return "none"
                return "me" if current == pin else "other"
        return "none"

    def _consumer_config(self, filters: list[str]) -> api.ConsumerConfig:
        cfg = dataclasses.replace(self._template, filter_subject=None, filter_subjects=filters,
                                  ack_wait=self._ack_wait)
        if self.kind == "static":
            cfg.durable_name = self._cons_name
            cfg.name = None
        else:
            cfg.durable_name = None
            cfg.name = self._cons_name
            cfg.inactive_threshold = self._ack_wait
        # the priority fields nats-py's dataclass lacks ride on it as attributes
        attach_config(cfg, PriorityConfig("pinned_client", (PRIORITY_GROUP,), self._pin_ttl))
        return cfg

    def _join(self, *, raise_errors: bool) -> None:
        """Create the member's consumer for its current partitions and consume it."""
        filters = self._config.partition_filters(self.member)
        if not filters:
            return
        cfg = self._consumer_config(filters)
        try:
            consumer = self._js.create_consumer(self._cons_stream, cfg, timeout=self._ack_wait)
            self._exists_since = None
        except ConsumerExistsError:
            # another view of the membership: its pinned instance is moving to the new filters
            # (or it idles out after ack_wait); after twice that, remove it here
            if raise_errors:
                raise
            log.debug("consumer group %s member %s: its consumer exists with other filters; waiting", self.group,
                      self.member)
            now = time.monotonic()
            if self._exists_since is None:
                self._exists_since = now
            elif now - self._exists_since > 2 * self._ack_wait + self._pin_ttl:
                log.warning("consumer group %s: consumer %s kept stale filters; deleting it", self.group,
                            self._cons_name)
                self._exists_since = None
                try:
                    self._js.delete_consumer(self._cons_stream, self._cons_name, timeout=self._ack_wait)
                except Error:
                    pass
            self._retry_at = now + RETRY_INTERVAL
            return
        except APIError as exc:
            if raise_errors:
                raise
            log.debug("consumer group %s member %s: cannot create its consumer yet: %s", self.group, self.member,
                      exc)
            if exc.err_code != _WQ_NOT_UNIQUE:
                log.warning("consumer group %s member %s: cannot create its consumer: %s", self.group,
                            self.member, exc)
            self._retry_at = time.monotonic() + RETRY_INTERVAL
            return
        except (TimeoutError, Error) as exc:
            if raise_errors:
                raise
            log.warning("consumer group %s member %s: cannot create its consumer: %s", self.group, self.member, exc)
            self._retry_at = time.monotonic() + RETRY_INTERVAL
            return
        self._consumer = consumer
        self._filters = filters
        self._last_msg = None
        log.debug("consumer group %s member %s: consuming %s", self.group, self.member, filters)
        self._cc = consumer.consume(self._on_msg, error_cb=self._error_cb, expires=self._expires,
                                    group=PRIORITY_GROUP, **self._opts)

    def _retire(self, *, delete: bool, quiet: bool = False) -> None:
        """Stop consuming; with ``delete``, once the handler's acks are applied, delete the consumer."""
        cc, self._cc = self._cc, None
        self._consumer = None
        self._filters = []
        limit = 2 * self._ack_wait
        if cc is not None and delete:
            # pause first: the pulls still open get nothing more (each delivery would count
            # towards max_deliver for a message nobody reads)
            try:
                until = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=limit)
                self._js.pause_consumer(self._cons_stream, self._cons_name, until, timeout=self._ack_wait)
            except Error as exc:
                log.debug("consumer group %s member %s: cannot pause its consumer: %s", self.group, self.member, exc)
        if cc is not None:
            cc.stop()
            try:
                cc.wait(limit)
            except TimeoutError:
                log.warning("consumer group %s member %s: the handler still runs after %.1fs", self.group,
                            self.member, limit)
        log.debug("consumer group %s member %s: stopped consuming (delete=%s)", self.group, self.member, delete)
        if not delete:
            return
        last, self._last_msg = self._last_msg, None
        if last is not None and last.reply:
            # the consumer handles acks in the order they come: once it answered this one
            # (a progress ack on the last message the handler had), every ack the handler
            # sent before is applied, and deleting the consumer loses none of them
            try:
                self._js.conn.flush(timeout=self._ack_wait)
                self._js.conn.request(last.reply, b"+WPI", timeout=self._ack_wait)
            except Error as exc:
                log.debug("consumer group %s member %s: acks not confirmed: %s", self.group, self.member, exc)
        try:
            self._js.delete_consumer(self._cons_stream, self._cons_name, timeout=self._ack_wait)
        except ConsumerNotFoundError:
            pass
        except StreamNotFoundError:
            pass
        except Error as exc:
            if not quiet:
                log.warning("consumer group %s member %s: cannot delete its consumer: %s", self.group,
                            self.member, exc)

    def _on_msg(self, msg: Msg) -> None:
        msg.subject = strip_partition(msg.subject)
        tid = threading.get_ident()
        self._cb_threads.add(tid)
        try:
            self._cb(msg)
        finally:
            self._cb_threads.discard(tid)
            self._last_msg = msg

    def _finish(self, err: BaseException | None) -> None:
        if err is not None:
            self.error = err
            log.warning("consumer group %s member %s stopped: %s", self.group, self.member, err)
        cc, self._cc = self._cc, None
        if cc is not None:
            pinned = self._pin_state() == "me"
            if self._drain:
                cc.drain()
            else:
                cc.stop()
            try:
                cc.wait(2 * self._ack_wait)
            except (TimeoutError, RuntimeError):
                pass
            if pinned and not self._js.conn.is_closed:  # let a standby instance take over at once
                try:
                    self._js.unpin_consumer(self._cons_stream, self._cons_name, PRIORITY_GROUP,
                                            timeout=self._ack_wait)
                except Error:
                    pass
        self._consumer = None
        if self._watcher is not None:
            try:
                self._watcher.stop()
            except Error:
                pass
        self._done.set()
        if err is not None and self._error_cb is not None:
            try:
                self._error_cb(err)
            except Exception:  # noqa: BLE001 - a failing error callback must not hide the end
                log.exception("consumer group error callback raised")

    # -- the handle ------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True while this instance has a consumer (it gets messages when it is the pinned one)."""
        return self._cc is not None and not self._cc.closed

    @property
    def partition_filters(self) -> list[str]:
        """The filter subjects of the member's consumer as this instance last made it."""
        return list(self._filters)

    @property
    def closed(self) -> bool:
        """True once the instance ended (stopped, drained, group deleted or an error)."""
        return self._done.is_set()

    def stop(self) -> None:
        """Stop: the running handler finishes, buffered messages are nak'ed. Returns at once; idempotent."""
        self._stop.set()

    def drain(self, timeout: float | None | Default = DEFAULT) -> None:
        """Stop pulling and hand over what the server already sent, then end.

        Without ``timeout`` it returns at once (use :meth:`wait`); with one it blocks like
        :meth:`wait`.
        """
        self._drain = True
        self._stop.set()
        if not isinstance(timeout, Default):
            self.wait(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the instance ended, at most ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: still running after ``timeout``.
            RuntimeError: called from this instance's own handler (it would never return).
        """
        if threading.get_ident() in self._cb_threads and not self._done.is_set():
            raise RuntimeError("wait() was called from the consumer group's own handler: it would never return")
        deadline = Deadline(timeout)
        while not self._done.wait(deadline.slice()):
            if deadline.expired():
                raise TimeoutError(f"consumer group {self.group!r} member {self.member!r} still running "
                                   f"after {timeout}s")
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(deadline.slice(1.0) if timeout is not None else None)

    def __enter__(self) -> ConsumerGroupContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.wait(None)

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("active" if self.active else "waiting")
        return (f"<ConsumerGroupContext {self.kind} stream={self.stream!r} group={self.group!r} "
                f"member={self.member!r} {state}>")


def _prepare(js: JetStream, stream: str, group: str, member: str, callback: Any,
             config: api.ConsumerConfig | None, fields: dict[str, Any], elastic: bool
             ) -> tuple[api.ConsumerConfig, dict[str, Any], float]:
    _names(stream, group)
    validate_group_name(member, "member name")
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}")
    opts = {k: fields.pop(k) for k in list(fields) if k in _CONSUME_OPTS}
    for k in ("durable_name", "name", "filter_subject", "filter_subjects", "deliver_subject",
              "priority_policy", "priority_groups", "priority_timeout"):
        if k in fields or (config is not None and getattr(config, k, None)):
            raise ValidationError(f"{k} is set by the consumer group; leave it out of the consumer config")
    template = dataclasses.replace(config) if config is not None else api.ConsumerConfig()
    names = {f.name for f in dataclasses.fields(api.ConsumerConfig)}
    for k, v in fields.items():
        if k not in names:
            raise ValidationError(f"unknown consumer option {k!r}")
        setattr(template, k, v)
    ack = template.ack_policy
    ack_s = getattr(ack, "value", ack)
    if elastic and ack_s not in (None, "explicit"):
        raise ValidationError(f"an elastic consumer group needs ack_policy='explicit', got {ack_s!r}")
    if ack_s is None:
        template.ack_policy = api.AckPolicy.EXPLICIT
    elif isinstance(ack, str):
        template.ack_policy = api.AckPolicy(ack)
    ack_wait = optional_seconds(template.ack_wait, "ack_wait") or DEFAULT_ACK_WAIT
    for k in ("deliver_policy", "replay_policy"):
        v = getattr(template, k)
        if isinstance(v, str):
            setattr(template, k, api.DeliverPolicy(v) if k == "deliver_policy" else api.ReplayPolicy(v))
    return template, opts, ack_wait


def static_consume(js: JetStream, stream: str, group: str, member: str, callback: Callable[[Msg], Any], *,
                   config: api.ConsumerConfig | None = None, error_cb: Callable[[BaseException], Any] | None = None,
                   **fields: Any) -> ConsumerGroupContext:
    """Join a static group as ``member`` and consume its partitions with ``callback``.

    The member's consumer is the durable ``<group>-<member>`` on ``stream`` with the
    member's partition filters and the ``pinned_client`` priority group ``PCG``: of several
    instances of a member, the pinned one gets the messages, the others stand by.
    ``config`` (or keyword fields such as ``ack_wait``, ``max_ack_pending``,
    ``deliver_policy``) is the template of that consumer; ``ack_wait`` (default 5 s) also
    sets the pin TTL and the pull expiry. ``max_messages`` / ``max_bytes`` /
    ``threshold_*`` / ``idle_heartbeat`` go to the consume. ``callback(msg)`` gets each
    message with the partition token taken off ``msg.subject``; ack it after processing.

    Blocks while the config is read and the consumer is created (the context's timeout).
    The group's config must not change while it runs: any change, or its deletion, ends
    every member (deleting their consumers).

    Raises:
        jssync.NotSupportedError: the server is older than 2.11 (nothing is created).
        jssync.NotAMemberError: ``member`` is not in the group's membership.
        jssync.ConsumerGroupNotFoundError: no such group.
        ValueError, TypeError: invalid names or options (nothing is sent).
        jssync.ConsumerExistsError: the member's consumer exists with another config.
    """
    template, opts, ack_wait = _prepare(js, stream, group, member, callback, config, fields, elastic=False)
    return ConsumerGroupContext(js, "static", stream, group, member, callback, error_cb, template, opts,
                                ack_wait)._start()


def elastic_consume(js: JetStream, stream: str, group: str, member: str, callback: Callable[[Msg], Any], *,
                    config: api.ConsumerConfig | None = None, error_cb: Callable[[BaseException], Any] | None = None,
                    **fields: Any) -> ConsumerGroupContext:
    """Join an elastic group as ``member`` and consume its partitions whenever it is in the membership.

    The instance runs until stopped, whether or not ``member`` is in the membership now:
    it starts consuming when the member is added, rebalances when members come and go
    (module docstring), and stops consuming when it is dropped. The member's consumer is
    ``member`` on the work-queue stream ``<stream>-<group>`` (inactive threshold:
    ``ack_wait``, default 5 s). Acks must be explicit. Options as :func:`static_consume`.

    Blocks while the config is read and the consumer is created (the context's timeout).

    Raises:
        jssync.NotSupportedError: the server is older than 2.11 (nothing is created).
        jssync.ConsumerGroupNotFoundError: no such group.
        jssync.StreamNotFoundError: the group's work-queue stream is missing.
        ValueError, TypeError: invalid names, an ack policy other than explicit (nothing is sent).
    """
    template, opts, ack_wait = _prepare(js, stream, group, member, callback, config, fields, elastic=True)
    return ConsumerGroupContext(js, "elastic", stream, group, member, callback, error_cb, template, opts,
                                ack_wait)._start()
