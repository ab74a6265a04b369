"""Stream admin for the Liftbridge client: creating and deleting partitioned streams.

A stream ``name`` with ``n`` partitions is ``n`` JetStream streams ``name-0`` ...
``name-(n-1)`` (see :mod:`jssync.liftbridge`). :class:`StreamAdmin` checks the options,
makes the partition streams (rolling back on failure), spreads the partition leaders over
the servers, and deletes them again. :class:`jssync.liftbridge.Client` documents and
forwards ``create_stream`` and ``delete_stream`` here.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections import Counter
from typing import Any

from nats.js import api

from ..base.deadline import Deadline, Default
from ..base.errors import (
    APIError,
    Error,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from ..base.validate import MAX_I64, check_int, validate_subject
from ..jetstream.params import validate_name
from .codec import (
    META_PARTITION,
    META_PARTITIONS,
    META_STREAM,
    META_SUBJECT,
    partition_stream_name,
    partition_subject,
)
from .consumer import _sleep
from .creating import create_error, partition_config
from .errors import LiftbridgeNotSupportedError as NotSupportedError
from .errors import NoSuchPartitionError, StreamExistsError
from .meta import StreamInfo, build_streams
from .routing import Routing, _positive, _positive_int, _rem

log = logging.getLogger("jssync")

#: JetStream's largest replication factor.
MAX_REPLICAS = 5
_STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}


class StreamAdmin(Routing):
    """Creates and deletes the partition streams of a client's Liftbridge streams."""

    def create_stream(
        self,
        subject: str,
        name: str,
        *,
        group: str | None,
        replication_factor: int,
        max_replication: bool,
        partitions: int,
        storage: str,
        retention_max_age: float | None,
        retention_max_bytes: int | None,
        retention_max_messages: int | None,
        timeout: float | None | Default,
    ) -> StreamInfo:
        """:meth:`jssync.liftbridge.Client.create_stream` (documented there)."""
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

    def delete_stream(self, name: str, *, timeout: float | None | Default) -> None:
        """:meth:`jssync.liftbridge.Client.delete_stream` (documented there)."""
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
