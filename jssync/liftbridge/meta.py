"""Cluster metadata for the Liftbridge client: brokers, streams, partitions, and the cache.

:class:`Metadata` is immutable; :class:`MetadataCache` refreshes it from the server
(``STREAM.LIST`` plus the connection's INFO) and hands out the current one.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..base.deadline import Deadline
from ..base.errors import Error
from ..core import natspy
from .codec import (
    META_PARTITION,
    META_PARTITIONS,
    META_STREAM,
    META_SUBJECT,
    public,
)

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..jetstream.context import JetStream

log = logging.getLogger("jssync")

_NS = 1_000_000_000
#: Seconds before a server whose name could not be read is probed again.
PROBE_RETRY = 30.0


@dataclass(frozen=True)
class BrokerInfo:
    """One server of the cluster (the Liftbridge ``BrokerInfo``).

    Attributes:
        id: the server name (what partition leaders and replicas are named by), or
            ``host:port`` when the name is not known.
        name: the server name, or None when not known.
        server_id: the NATS server id, when known.
        host: its client host, or None when not known.
        port: its client port, or None.
    """

    id: str
    name: str | None
    server_id: str | None
    host: str | None
    port: int | None

    def addr(self) -> str | None:
        """``host:port``, or None when the address is not known."""
        if self.host is None or self.port is None:
            return None
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a stream (the Liftbridge ``PartitionInfo``).

    Attributes:
        id: the partition number.
        stream: the Liftbridge stream name.
        subject: the NATS subject the partition captures (``foo``, ``foo.1`` ...).
        jetstream_stream: the JetStream stream holding it.
        leader: the server name of its leader, or None while there is none.
        replicas: every server holding it, leader first.
        isr: the in-sync replicas: the leader and the replicas JetStream reports current.
        replication_factor: its number of replicas.
        messages: messages kept.
        first_offset: offset of the oldest message kept (the next offset when empty).
        newest_offset: offset of the newest message, -1 when nothing was ever stored.
    """

    id: int
    stream: str
    subject: str
    jetstream_stream: str
    leader: str | None
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    replication_factor: int
    messages: int
    first_offset: int
    newest_offset: int

    @property
    def high_watermark(self) -> int:
        """The newest offset (every stored message is committed on JetStream)."""
        return self.newest_offset


@dataclass(frozen=True)
class StreamInfo:
    """One Liftbridge stream (the Liftbridge ``StreamInfo``).

    Attributes:
        name: the stream name.
        subject: its base subject.
        partitions: the partitions found, by number (read-only mapping).
        partition_count: the number of partitions it was created with.
        replication_factor: its replication factor.
    """

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo]
    partition_count: int
    replication_factor: int

    def get_partition(self, partition: int) -> PartitionInfo | None:
        """The partition, or None when it does not exist."""
        return self.partitions.get(partition)


class Metadata:
    """An immutable snapshot of the cluster: brokers and Liftbridge streams.

    Made by :meth:`Client.fetch_metadata`; also what a :class:`Partitioner` receives.
    """

    def __init__(self, brokers: Iterable[BrokerInfo], addrs: Iterable[str], streams: Mapping[str, StreamInfo],
                 last_updated: _dt.datetime) -> None:
        self._brokers = tuple(brokers)
        self._addrs = tuple(addrs)
        self._streams = MappingProxyType(dict(streams))
        self._by_subject: dict[str, list[StreamInfo]] = {}
        for s in self._streams.values():
            self._by_subject.setdefault(s.subject, []).append(s)
        for lst in self._by_subject.values():
            lst.sort(key=lambda s: s.name)
        self._last_updated = last_updated
        self._born = time.monotonic()

    def __repr__(self) -> str:
        return f"<jssync.liftbridge.Metadata brokers={len(self._brokers)} streams={len(self._streams)}>"

    def last_updated(self) -> _dt.datetime:
        """When this metadata was fetched from the server (aware UTC)."""
        return self._last_updated

    def brokers(self) -> list[BrokerInfo]:
        """The cluster's servers."""
        return list(self._brokers)

    def addrs(self) -> list[str]:
        """Every known server address (``host:port``)."""
        return list(self._addrs)

    def get_stream(self, name: str) -> StreamInfo | None:
        """The stream named ``name``, or None when unknown."""
        return self._streams.get(name)

    def get_streams(self, subject: str) -> list[StreamInfo]:
        """The streams whose base subject is ``subject`` (literal match: no wildcard matching)."""
        return list(self._by_subject.get(subject, ()))

    def streams(self) -> list[StreamInfo]:
        """Every Liftbridge stream, by name."""
        return [self._streams[n] for n in sorted(self._streams)]

    def partition_counts_for_subject(self, subject: str) -> dict[str, int]:
        """``{stream name: partition count}`` for the streams on ``subject`` (literal match)."""
        return {s.name: s.partition_count for s in self._by_subject.get(subject, ())}

    def partition_by_jetstream_name(self, js_name: str) -> tuple[PartitionInfo, str, int] | None:
        """``(partition, base subject, partition count)`` of the partition held by ``js_name``."""
        for s in self._streams.values():
            for p in s.partitions.values():
                if p.jetstream_stream == js_name:
                    return p, s.subject, s.partition_count
        return None

    def has_subject(self, subject: str) -> bool:
        return subject in self._by_subject

    def age(self) -> float:
        """Seconds since this snapshot was fetched."""
        return time.monotonic() - self._born


public(BrokerInfo, PartitionInfo, StreamInfo, Metadata)


# -- building ----------------------------------------------------------------------------------


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def partition_from_info(item: Mapping[str, Any], default_leader: str | None) -> PartitionInfo | None:
    """A :class:`PartitionInfo` from a raw JetStream stream info; None for other streams."""
    cfg = item.get("config") or {}
    meta = cfg.get("metadata") or {}
    name = meta.get(META_STREAM)
    subject = meta.get(META_SUBJECT)
    if not name or subject is None or META_PARTITION not in meta:
        return None
    pid = _int(meta.get(META_PARTITION), -1)
    if pid < 0:
        return None
    cluster = item.get("cluster") or {}
    leader = cluster.get("leader") or (default_leader if not cluster.get("replicas") else None)
    replicas: list[str] = [leader] if leader else []
    isr: list[str] = [leader] if leader else []
    for r in cluster.get("replicas") or []:
        rname = r.get("name")
        if not rname:
            continue
        replicas.append(rname)
        if r.get("current") and not r.get("offline"):
            isr.append(rname)
    state = item.get("state") or {}
    first_seq = _int(state.get("first_seq"))
    last_seq = _int(state.get("last_seq"))
    msgs = _int(state.get("messages"))
    psubjects = cfg.get("subjects") or []
    return PartitionInfo(
        id=pid,
        stream=name,
        subject=psubjects[0] if psubjects else subject,
        jetstream_stream=str(cfg.get("name", "")),
        leader=leader,
        replicas=tuple(replicas),
        isr=tuple(isr),
        replication_factor=_int(cfg.get("num_replicas"), 1) or 1,
        messages=msgs,
        first_offset=max(first_seq - 1, 0) if msgs else last_seq,
        newest_offset=last_seq - 1,
    )


def build_streams(items: Iterable[Mapping[str, Any]], default_leader: str | None,
                  carried: Iterable[tuple[PartitionInfo, str, int]] = ()) -> dict[str, StreamInfo]:
    """Group raw JetStream stream infos into Liftbridge streams (others are ignored).

    ``carried`` adds partitions known from earlier metadata, as ``(partition, base
    subject, partition count)`` (streams that did not answer this time).
    """
    parts: dict[str, list[PartitionInfo]] = {}
    declared: dict[str, tuple[str, int]] = {}

    def add(p: PartitionInfo, subject: str, count: int) -> None:
        parts.setdefault(p.stream, []).append(p)
        prev = declared.get(p.stream)
        declared[p.stream] = (subject, max(count, prev[1] if prev else 0))

    for item in items:
        p = partition_from_info(item, default_leader)
        if p is None:
            continue
        meta = (item.get("config") or {}).get("metadata") or {}
        add(p, str(meta.get(META_SUBJECT)), _int(meta.get(META_PARTITIONS), 0))
    for p, subject, count in carried:
        add(p, subject, count)
    out: dict[str, StreamInfo] = {}
    for name, plist in parts.items():
        subject, count = declared[name]
        by_id = {p.id: p for p in sorted(plist, key=lambda p: p.id)}
        count = max(count, max(by_id) + 1)
        rf = by_id[min(by_id)].replication_factor
        out[name] = StreamInfo(name=name, subject=subject, partitions=MappingProxyType(by_id),
                               partition_count=count, replication_factor=rf)
    return out


def _split_addr(addr: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(addr if "://" in addr else "nats://" + addr)
        if parts.hostname is None or parts.port is None:
            return None
        return parts.hostname, parts.port
    except ValueError:
        return None


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def probe_server_name(host: str, port: int, timeout: float) -> tuple[str | None, str | None]:
    """Read the INFO line a server sends on connect; return ``(server_name, server_id)``.

    Opens a plain TCP connection and closes it after the first line (no NATS session is
    made). ``(None, None)`` when the server cannot be reached in ``timeout`` seconds.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            buf = b""
            while b"\r\n" not in buf and len(buf) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
    except OSError:
        return None, None
    line = buf.split(b"\r\n", 1)[0]
    if not line.startswith(b"INFO"):
        return None, None
    try:
        info = json.loads(line[4:].strip())
    except ValueError:
        return None, None
    return info.get("server_name") or None, info.get("server_id") or None


# -- the cache ---------------------------------------------------------------------------------


class MetadataCache:
    """The client's metadata: fetched on demand, refreshed when stale. Thread-safe.

    ``update`` always goes to the server; concurrent updates share one request.
    """

    def __init__(self, conn: Connection, js: JetStream, seeds: Iterable[str], max_age: float) -> None:
        self._conn = conn
        self._js = js
        self._seeds = list(seeds)
        self.max_age = max_age
        self._lock = threading.Lock()
        self._current: Metadata | None = None
        self._generation = 0
        #: "host:port" -> (server name, server id, when probed); failed probes are retried after a while
        self._names: dict[str, tuple[str | None, str | None, float]] = {}

    @property
    def current(self) -> Metadata | None:
        return self._current

    def get(self, deadline: Deadline, *, max_age: float | None = None) -> Metadata:
        """The cached metadata, refreshed first when missing or older than ``max_age``."""
        cur = self._current
        limit = self.max_age if max_age is None else max_age
        if cur is not None and cur.age() <= limit:
            return cur
        return self.update(deadline)

    def update(self, deadline: Deadline) -> Metadata:
        """Fetch fresh metadata from the server (concurrent callers share one fetch).

        Raises:
            jssync.TimeoutError, jssync.ServiceUnavailableError and other API errors.
        """
        gen = self._generation
        while not self._lock.acquire(timeout=deadline.slice()):
            deadline.check("fetching metadata")
        try:
            if self._generation != gen and self._current is not None:
                return self._current  # someone fetched while we waited
            meta = self._fetch(deadline)
            self._current = meta
            self._generation += 1
            return meta
        finally:
            self._lock.release()

    def invalidate(self) -> None:
        self._current = None

    def _fetch(self, deadline: Deadline) -> Metadata:
        info = self._conn.server_info
        own_name = info.get("server_name") or None
        items: list[Mapping[str, Any]] = []
        missing: list[str] = []
        offset = 0
        while True:
            resp = self._js._api("STREAM.LIST", {"offset": offset}, _rem(deadline))
            page = resp.get("streams") or []
            gone = [str(n) for n in resp.get("missing") or []]
            items.extend(page)
            missing.extend(gone)
            offset += len(page) + len(gone)
            if not (page or gone) or offset >= int(resp.get("total", 0) or 0):
                break
        carried: list[tuple[PartitionInfo, str, int]] = []
        prev = self._current
        for js_name in missing:
            # no leader answered for it (an election): keep what we knew, leaderless
            known = prev.partition_by_jetstream_name(js_name) if prev is not None else None
            if known is not None:
                p, subject, count = known
                carried.append((replace(p, leader=None, isr=()), subject, count))
                continue
            try:
                items.append(self._js._api(f"STREAM.INFO.{js_name}", None, min(0.5, _rem(deadline) or 0.5)))
            except Error as exc:
                log.debug("jssync.liftbridge: no info for stream %r during a metadata fetch: %s", js_name, exc)
        streams = build_streams(items, own_name, carried)
        seen: set[str] = set()
        for s in streams.values():
            for part in s.partitions.values():
                seen.update(part.replicas)
        brokers, addrs = self._brokers(info, seen, deadline)
        return Metadata(brokers, addrs, streams, _dt.datetime.now(_dt.UTC))

    def _known_addrs(self, info: Mapping[str, Any]) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []

        def add(a: str) -> None:
            hp = _split_addr(a)
            if hp is not None and hp not in found:
                found.append(hp)

        for a in info.get("connect_urls") or []:
            add(str(a))
        for uri in natspy.server_uris(self._conn.client):
            if uri.hostname and uri.port:
                add(_fmt(uri.hostname, uri.port))
        for a in self._seeds:
            add(a)
        return found

    def _brokers(self, info: Mapping[str, Any], seen: set[str],
                 deadline: Deadline) -> tuple[list[BrokerInfo], list[str]]:
        own_name = info.get("server_name") or None
        own_id = info.get("server_id") or None
        connected = self._conn.connected_url
        own_addr = _split_addr(connected) if connected else None
        if own_addr is not None and own_name:
            self._names[_fmt(*own_addr)] = (own_name, own_id, time.monotonic())
        addrs = self._known_addrs(info)
        if own_addr is not None and own_addr not in addrs:
            addrs.insert(0, own_addr)
        brokers: dict[str, BrokerInfo] = {}
        for host, port in addrs:
            key = _fmt(host, port)
            known = self._names.get(key)
            if known is None or (known[0] is None and time.monotonic() - known[2] > PROBE_RETRY):
                rem = deadline.remaining()
                if rem is None or rem >= 0.2:
                    name, sid = probe_server_name(host, port, min(0.5, rem if rem is not None else 0.5))
                    self._names[key] = (name, sid, time.monotonic())
            name, sid, _ = self._names.get(key, (None, None, 0.0))
            bid = name or key
            if bid in brokers:
                continue
            brokers[bid] = BrokerInfo(id=bid, name=name, server_id=sid, host=host, port=port)
        for name in sorted(seen):
            if name not in brokers:
                brokers[name] = BrokerInfo(id=name, name=name, server_id=None, host=None, port=None)
        ordered = sorted(brokers.values(), key=lambda b: b.id)
        return ordered, [_fmt(h, p) for h, p in addrs]

def _rem(deadline: Deadline) -> float | None:
    rem = deadline.remaining()
    return None if rem is None else max(rem, 0.001)


def replica_states(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``cluster.replicas`` list of a raw stream info (empty for R1 or a single server)."""
    return list((info.get("cluster") or {}).get("replicas") or [])


def replica_active_seconds(replica: Mapping[str, Any]) -> float:
    return _int(replica.get("active")) / _NS
