"""Partitioned consumer group configs: the JSON stored in KV, validation, partition maps. No I/O.

The format is the one orbit.go's ``pcgroups`` package (and its Java and .NET ports) keeps in
the KV buckets ``static-consumer-groups`` and ``elastic-consumer-groups`` under the key
``<stream>.<group>``, so a group made by any of them can be joined from here and the other
way round. Field names, which fields are left out when empty, and ``null`` versus ``[]`` for
lists that are always written are kept exactly: the other clients compare configs field by
field when a watch tells them the value changed, and a list that turned from ``null`` into
``[]`` would look like a change to them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..base.errors import ValidationError
from ..base.validate import validate_subject
from .errors import ConsumerGroupConfigError

STATIC_BUCKET = "static-consumer-groups"
ELASTIC_BUCKET = "elastic-consumer-groups"
#: The priority group every member consumer serves (pinned_client: one instance per member).
PRIORITY_GROUP = "PCG"
#: ack_wait when the consume call does not set one (seconds); it also sets the pin TTL,
#: the pull expiry and (elastic) the consumers' inactive threshold.
DEFAULT_ACK_WAIT = 5.0
MIN_PIN_TTL = 1.0

# a name that is one KV key token and one consumer/stream name token
_NAME_RE = re.compile(r"[A-Za-z0-9_\-=]+")


def validate_group_name(name: Any, what: str = "consumer group name") -> str:
    """Return ``name`` if it can be a group or member name, else raise ValidationError naming it.

    Names become KV key tokens (``<stream>.<group>``), stream names (``<stream>-<group>``)
    and consumer names, so they are letters, digits, ``-``, ``_`` and ``=`` only.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValidationError(f"invalid {what} {name!r}: use letters, digits, '-', '_' and '=' only")
    return name


def config_key(stream: str, group: str) -> str:
    """The KV key of a group's config: ``<stream>.<group>``."""
    return f"{stream}.{group}"


def elastic_stream_name(stream: str, group: str) -> str:
    """The work-queue stream an elastic group consumes from: ``<stream>-<group>``."""
    return f"{stream}-{group}"


def static_consumer_name(group: str, member: str) -> str:
    """The durable consumer a static group's member consumes from: ``<group>-<member>``."""
    return f"{group}-{member}"


@dataclasses.dataclass
class MemberMapping:
    """A member and the partitions (0 .. max_members - 1) assigned to it."""

    member: str
    partitions: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"member": self.member, "partitions": self.partitions}


@dataclasses.dataclass
class PartitioningFilter:
    """An elastic group's subject filter and the ``*`` wildcards (1-based) the partition is computed from.

    With no ``partitioning_wildcards`` the whole subject is the partitioning key.
    ``None`` and ``[]`` mean the same; which one was read is kept so it is written back alike.
    """

    filter: str
    partitioning_wildcards: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"filter": self.filter, "partitioning_wildcards": self.partitioning_wildcards}


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConsumerGroupConfigError(f"{what} must be an integer, got {v!r}")
    return v


def _str_list(v: Any, what: str) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ConsumerGroupConfigError(f"{what} must be a list of strings, got {v!r}")
    return list(v)


def _mappings(v: Any) -> list[MemberMapping] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise ConsumerGroupConfigError(f"member_mappings must be a list, got {v!r}")
    out = []
    for m in v:
        if isinstance(m, MemberMapping):
            out.append(MemberMapping(m.member, None if m.partitions is None else list(m.partitions)))
            continue
        if not isinstance(m, dict) or not isinstance(m.get("member"), str):
            raise ConsumerGroupConfigError(f"a member mapping needs a member name, got {m!r}")
        parts = m.get("partitions")
        if parts is not None and (not isinstance(parts, list)
                                  or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts)):
            raise ConsumerGroupConfigError(f"partitions of member {m['member']!r} must be a list of integers")
        out.append(MemberMapping(m["member"], parts))
    return out


def _validate_membership(max_members: int, members: list[str] | None,
                         mappings: list[MemberMapping] | None) -> None:
    if max_members < 1:
        raise ConsumerGroupConfigError(f"max_members must be >= 1, got {max_members}")
    if members and mappings:
        raise ConsumerGroupConfigError("give either members or member_mappings, not both")
    if not mappings:
        return
    if len(mappings) > max_members:
        raise ConsumerGroupConfigError(
            f"{len(mappings)} member mappings for max_members={max_members}: at most one mapping per partition")
    seen_members: set[str] = set()
    seen_parts: set[int] = set()
    for mm in mappings:
        if mm.member in seen_members:
            raise ConsumerGroupConfigError(f"member {mm.member!r} has two mappings")
        seen_members.add(mm.member)
        for p in mm.partitions or ():
            if p in seen_parts:
                raise ConsumerGroupConfigError(f"partition {p} is mapped twice")
            if not 0 <= p < max_members:
                raise ConsumerGroupConfigError(f"partition {p} is out of range 0..{max_members - 1}")
            seen_parts.add(p)
    if len(seen_parts) != max_members:
        missing = sorted(set(range(max_members)) - seen_parts)
        raise ConsumerGroupConfigError(f"the member mappings leave partitions {missing} unassigned")


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _load(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise ConsumerGroupConfigError(f"the {what} consumer group config is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConsumerGroupConfigError(f"the {what} consumer group config is not a JSON object: {obj!r}")
    return obj


@dataclasses.dataclass
class StaticConsumerGroupConfig:
    """A static group: the stream's subjects already start with the partition number.

    ``max_members`` is the number of partitions; ``filters`` (optional) narrow the subjects
    after the partition token; the members are a list of names (the partitions are spread
    over them) or ``member_mappings`` (the partitions of each member, set by hand).
    """

    max_members: int
    filters: list[str] | None = None
    members: list[str] | None = None
    member_mappings: list[MemberMapping] | None = None

    def validate(self) -> StaticConsumerGroupConfig:
        """Raise :class:`ConsumerGroupConfigError` naming what is wrong; return self."""
        _int(self.max_members, "max_members")
        for f in self.filters or ():
            try:
                validate_subject(f, "filter")
            except ValidationError as exc:
                raise ConsumerGroupConfigError(str(exc)) from None
        _validate_membership(self.max_members, self.members, self.member_mappings)
        return self

    def is_in_membership(self, member: str) -> bool:
        """True if ``member`` is one of the members (or has a mapping)."""
        return member in (self.members or ()) or any(m.member == member for m in self.member_mappings or ())

    def partition_filters(self, member: str) -> list[str]:
        """The consumer filter subjects of ``member`` (empty when it has no partition)."""
        out: list[str] = []
        for f in self.filters or [">"]:
            out.extend(partition_filters(self.members, self.max_members, self.member_mappings, member, f))
        return _dedupe(out)

    def to_json(self) -> bytes:
        """The JSON stored in the KV bucket (empty lists left out)."""
        obj: dict[str, Any] = {"max_members": self.max_members}
        if self.filters:
            obj["filters"] = self.filters
        if self.members:
            obj["members"] = self.members
        if self.member_mappings:
            obj["member_mappings"] = [m.to_json() for m in self.member_mappings]
        return _dump(obj)

    @classmethod
    def from_json(cls, data: bytes | str) -> StaticConsumerGroupConfig:
        """Parse and validate a stored config. Raises :class:`ConsumerGroupConfigError`."""
        obj = _load(data, "static")
        return cls(
            max_members=_int(obj.get("max_members", 0), "max_members"),
            filters=_str_list(obj.get("filters"), "filters"),
            members=_str_list(obj.get("members"), "members"),
            member_mappings=_mappings(obj.get("member_mappings")),
        ).validate()

    def same_as(self, other: StaticConsumerGroupConfig) -> bool:
        """True if both configs assign the same things (empty and missing lists are alike)."""
        return (self.max_members == other.max_members and (self.filters or []) == (other.filters or [])
                and (self.members or []) == (other.members or [])
                and _norm_mappings(self.member_mappings) == _norm_mappings(other.member_mappings))


def _norm_mappings(m: list[MemberMapping] | None) -> list[tuple[str, list[int]]]:
    return [(x.member, list(x.partitions or [])) for x in m or ()]


@dataclasses.dataclass
class ElasticConsumerGroupConfig:
    """An elastic group: members can be added and dropped at any time.

    The group consumes from a work-queue stream ``<stream>-<group>`` that sources the stream
    and puts the partition number in front of each subject, computed by the server from the
    ``partitioning_filters`` (or from the whole subject when there are none).
    ``max_buffered_msgs`` / ``max_buffered_bytes`` (0: no limit) cap that stream.
    """

    max_members: int
    partitioning_filters: list[PartitioningFilter] | None = None
    max_buffered_msgs: int = 0
    max_buffered_bytes: int = 0
    members: list[str] | None = None
    member_mappings: list[MemberMapping] | None = None
    #: the KV revision the config was read at (not stored; used for compare-and-set updates)
    revision: int = dataclasses.field(default=0, compare=False)

    def validate(self) -> ElasticConsumerGroupConfig:
        """Raise :class:`ConsumerGroupConfigError` naming what is wrong; return self."""
        _int(self.max_members, "max_members")
        _int(self.max_buffered_msgs, "max_buffered_msgs")
        _int(self.max_buffered_bytes, "max_buffered_bytes")
        if self.max_buffered_msgs < 0 or self.max_buffered_bytes < 0:
            raise ConsumerGroupConfigError("max_buffered_msgs and max_buffered_bytes must be >= 0")
        for pf in self.partitioning_filters or ():
            _validate_partitioning_filter(pf)
        _validate_membership(self.max_members, self.members, self.member_mappings)
        return self

    def is_in_membership(self, member: str) -> bool:
        """True if ``member`` is one of the members (or has a mapping)."""
        return member in (self.members or ()) or any(m.member == member for m in self.member_mappings or ())

    def partition_filters(self, member: str) -> list[str]:
        """The filter subjects of ``member``'s consumer on the group's work-queue stream."""
        out: list[str] = []
        for f in [pf.filter for pf in self.partitioning_filters or ()] or [">"]:
            out.extend(partition_filters(self.members, self.max_members, self.member_mappings, member, f))
        return _dedupe(out)

    def subject_transforms(self) -> list[dict[str, str]]:
        """The source's subject transforms of the work-queue stream (``src`` / ``dest``)."""
        pfs = self.partitioning_filters or [PartitioningFilter(">", [])]
        return [{"src": pf.filter, "dest": partition_transform(pf, self.max_members)} for pf in pfs]

    def to_json(self) -> bytes:
        """The JSON stored in the KV bucket."""
        obj: dict[str, Any] = {
            "max_members": self.max_members,
            "partitioning_filters": (None if self.partitioning_filters is None
                                     else [pf.to_json() for pf in self.partitioning_filters]),
        }
        if self.max_buffered_msgs:
            obj["max_buffered_msg"] = self.max_buffered_msgs  # sic: the stored name is singular
        if self.max_buffered_bytes:
            obj["max_buffered_bytes"] = self.max_buffered_bytes
        if self.members:
            obj["members"] = self.members
        if self.member_mappings:
            obj["member_mappings"] = [m.to_json() for m in self.member_mappings]
        return _dump(obj)

    @classmethod
    def from_json(cls, data: bytes | str, revision: int = 0) -> ElasticConsumerGroupConfig:
        """Parse and validate a stored config. Raises :class:`ConsumerGroupConfigError`."""
        obj = _load(data, "elastic")
        raw_pfs = obj.get("partitioning_filters")
        pfs: list[PartitioningFilter] | None = None
        if raw_pfs is not None:
            if not isinstance(raw_pfs, list):
                raise ConsumerGroupConfigError(f"partitioning_filters must be a list, got {raw_pfs!r}")
            pfs = []
            for pf in raw_pfs:
                if not isinstance(pf, dict) or not isinstance(pf.get("filter", ""), str):
                    raise ConsumerGroupConfigError(f"a partitioning filter must be an object, got {pf!r}")
                wc = pf.get("partitioning_wildcards")
                if wc is not None and (not isinstance(wc, list)
                                       or not all(isinstance(i, int) and not isinstance(i, bool) for i in wc)):
                    raise ConsumerGroupConfigError(f"partitioning_wildcards must be a list of integers, got {wc!r}")
                pfs.append(PartitioningFilter(pf.get("filter", ""), wc))
        return cls(
            max_members=_int(obj.get("max_members", 0), "max_members"),
            partitioning_filters=pfs,
            max_buffered_msgs=_int(obj.get("max_buffered_msg", 0), "max_buffered_msg"),
            max_buffered_bytes=_int(obj.get("max_buffered_bytes", 0), "max_buffered_bytes"),
            members=_str_list(obj.get("members"), "members"),
            member_mappings=_mappings(obj.get("member_mappings")),
            revision=revision,
        ).validate()

    def same_shape(self, other: ElasticConsumerGroupConfig) -> bool:
        """True if the parts that cannot change (partitions, filters, buffer limits) are equal."""
        return (self.max_members == other.max_members and self.max_buffered_msgs == other.max_buffered_msgs
                and self.max_buffered_bytes == other.max_buffered_bytes
                and _norm_pfs(self.partitioning_filters) == _norm_pfs(other.partitioning_filters))


def _norm_pfs(pfs: list[PartitioningFilter] | None) -> list[tuple[str, list[int]]]:
    return [(p.filter, list(p.partitioning_wildcards or [])) for p in pfs or ()]


def _validate_partitioning_filter(pf: PartitioningFilter) -> None:
    if not pf.filter:
        raise ConsumerGroupConfigError("a partitioning filter needs a non-empty filter subject")
    try:
        validate_subject(pf.filter, "partitioning filter")
    except ValidationError as exc:
        raise ConsumerGroupConfigError(str(exc)) from None
    tokens = pf.filter.split(".")
    stars = tokens.count("*")
    if stars == 0 and tokens[-1] != ">":
        raise ConsumerGroupConfigError(
            f"partitioning filter {pf.filter!r} needs at least one '*' wildcard or a trailing '>'")
    wcs = pf.partitioning_wildcards or []
    if len(wcs) > stars:
        raise ConsumerGroupConfigError(
            f"partitioning filter {pf.filter!r} has {stars} '*' wildcards, fewer than the {len(wcs)} "
            "partitioning wildcards")
    if len(set(wcs)) != len(wcs):
        raise ConsumerGroupConfigError(f"partitioning wildcards of {pf.filter!r} repeat an index: {wcs}")
    for i in wcs:
        if not 1 <= i <= stars:
            raise ConsumerGroupConfigError(
                f"partitioning wildcard {i} of {pf.filter!r} is out of range 1..{stars}")


def partition_transform(pf: PartitioningFilter, max_members: int) -> str:
    """The subject transform destination putting the partition number in front of the subject.

    ``foo.*.*`` with wildcards ``[2]`` over 4 partitions gives
    ``{{Partition(4,2)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}``.
    """
    tokens = pf.filter.split(".")
    n = 0
    for i, t in enumerate(tokens):
        if t == "*":
            n += 1
            tokens[i] = "{{Wildcard(" + str(n) + ")}}"
    args = "".join(f",{i}" for i in pf.partitioning_wildcards or ())
    return "{{Partition(" + str(max_members) + args + ")}}." + ".".join(tokens)


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def balanced_assignment(members: Sequence[str], max_members: int) -> list[str]:
    """The member owning each partition when ``members`` share ``max_members`` partitions.

    The names are de-duplicated, sorted and capped at ``max_members``; each member gets
    an equal run of consecutive partitions, and the remainder goes round-robin from the
    first member. Every client of the format computes the same, so members agree without
    talking to each other.
    """
    names = sorted(_dedupe(members))[:max_members]
    if not names:
        return []
    per = max_members // len(names)
    full = per * len(names)
    return [names[p // per] if p < full else names[(p - full) % len(names)] for p in range(max_members)]


def partition_filters(members: Sequence[str] | None, max_members: int,
                      member_mappings: Sequence[MemberMapping] | None, member: str, filter: str) -> list[str]:  # noqa: A002
    """The filter subjects (``<partition>.<filter>``) of ``member``'s consumer.

    With a member list the partitions are spread by :func:`balanced_assignment`; with
    mappings each mapped partition ``p`` gives ``p.>`` (the mapping names partitions, not
    subjects, as the other clients of the format do).
    """
    if members:
        owners = balanced_assignment(members, max_members)
        return [f"{p}.{filter}" for p, owner in enumerate(owners) if owner == member]
    out: list[str] = []
    for mm in member_mappings or ():
        if mm.member == member:
            out.extend(f"{p}.>" for p in mm.partitions or ())
    return out


def strip_partition(subject: str) -> str:
    """The subject without its first token (the partition number)."""
    _, dot, rest = subject.partition(".")
    return rest if dot else subject
