"""Pull consumer priority groups (ADR-42): config fields, pull options and the pinned id. No I/O.

A consumer with ``priority_policy`` (``overflow``, ``pinned_client`` or ``prioritized``)
and ``priority_groups`` serves only pull requests that name one of its groups. nats-py's
``ConsumerConfig`` has no such fields: jssync sends them beside it and puts them back on
the config it returns (``info.config.priority_policy`` / ``priority_groups`` /
``priority_timeout``, read with ``getattr``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..base.durations import seconds
from ..base.errors import ValidationError
from ..base.validate import MAX_I64, check_int

POLICIES = ("overflow", "pinned_client", "prioritized")
#: ADR-42: a group name is ADR-6's ``limited-term`` (A-Z a-z 0-9 - _ / =), at most 16 characters.
_GROUP_RE = re.compile(r"[A-Za-z0-9\-_/=]{1,16}")
MAX_PRIORITY = 9
HDR_PIN_ID = "Nats-Pin-Id"
_NS = 1_000_000_000
CONFIG_FIELDS = ("priority_policy", "priority_groups", "priority_timeout")


def validate_group(name: Any, what: str = "priority group") -> str:
    """Return ``name`` if it is a valid priority group name, else raise ValueError naming it."""
    if not isinstance(name, str) or not _GROUP_RE.fullmatch(name):
        raise ValidationError(
            f"invalid {what} {name!r}: a group name is 1 to 16 characters of A-Z a-z 0-9 - _ / = (ADR-42)"
        )
    return name


class PriorityConfig(NamedTuple):
    """A consumer's priority settings (all None for a consumer without priority groups)."""

    policy: str | None
    groups: tuple[str, ...] | None
    #: pinned_client only: seconds without a pull from the pinned client before the server re-pins.
    timeout: float | None


NO_PRIORITY = PriorityConfig(None, None, None)


def config_fields(config: Any, params: dict[str, Any]) -> PriorityConfig:
    """Take the priority fields out of ``params`` (else from ``config``'s attributes); validate them.

    Raises ValueError / TypeError naming the bad value (nothing is sent).
    """
    vals = {}
    for key in CONFIG_FIELDS:
        vals[key] = params.pop(key) if key in params else getattr(config, key, None)
    policy, groups, timeout = vals["priority_policy"], vals["priority_groups"], vals["priority_timeout"]
    if policy is None or policy == "none":
        if groups:
            raise ValidationError(
                "priority_groups needs a priority_policy ('overflow', 'pinned_client' or 'prioritized')")
        if timeout is not None:
            raise ValidationError("priority_timeout goes with priority_policy='pinned_client'")
        return NO_PRIORITY
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ValidationError(f"unknown priority_policy {policy!r}: use one of {', '.join(POLICIES)}")
    if groups is None or isinstance(groups, str | bytes) or not hasattr(groups, "__iter__"):
        if groups is None:
            raise ValidationError(f"priority_policy {policy!r} needs priority_groups (a list of group names)")
        raise TypeError(f"priority_groups must be a list of group names, got {groups!r}")
    glist = [validate_group(g) for g in groups]
    if not glist:
        raise ValidationError(f"priority_policy {policy!r} needs at least one priority group")
    if len(set(glist)) != len(glist):
        raise ValidationError(f"priority_groups has a name twice: {glist!r}")
    if timeout is not None:
        if policy != "pinned_client":
            raise ValidationError(f"priority_timeout goes with priority_policy='pinned_client', not {policy!r}")
        timeout = seconds(timeout, "priority_timeout")
        if not timeout > 0:
            raise ValidationError(f"priority_timeout must be a duration > 0, got {vals['priority_timeout']!r}")
    return PriorityConfig(policy, tuple(glist), timeout)


def wire_fields(prio: PriorityConfig) -> dict[str, Any]:
    """The JSON fields of a consumer config for ``prio`` (none without a policy)."""
    if prio.policy is None:
        return {}
    out: dict[str, Any] = {"priority_policy": prio.policy, "priority_groups": list(prio.groups or ())}
    if prio.timeout is not None:
        out["priority_timeout"] = int(prio.timeout * _NS)
    return out


def from_reply(raw_config: Any) -> PriorityConfig:
    """The priority settings in a consumer config as the server sent it (lenient)."""
    if not isinstance(raw_config, Mapping):
        return NO_PRIORITY
    policy = raw_config.get("priority_policy")
    if not isinstance(policy, str) or policy in ("", "none"):
        return NO_PRIORITY
    groups = raw_config.get("priority_groups")
    tgroups = tuple(str(g) for g in groups) if isinstance(groups, list) else None
    t = raw_config.get("priority_timeout")
    timeout = t / _NS if isinstance(t, int | float) and not isinstance(t, bool) and t > 0 else None
    return PriorityConfig(policy, tgroups, timeout)


def attach_config(cfg: Any, prio: PriorityConfig) -> None:
    """Put the priority settings on a nats-py ConsumerConfig (fields its dataclass lacks)."""
    cfg.priority_policy = prio.policy
    cfg.priority_groups = list(prio.groups) if prio.groups is not None else None
    cfg.priority_timeout = prio.timeout


def attach(info: Any, prio: PriorityConfig, state: Any) -> None:
    """Put the priority settings (and the per-group state) on a nats-py ConsumerInfo."""
    cfg = getattr(info, "config", None)
    if cfg is not None:
        attach_config(cfg, prio)
    info.priority_groups = state if isinstance(state, list) else None


def of(info: Any) -> PriorityConfig:
    """The priority settings attached to a ConsumerInfo by :func:`attach`."""
    return of_config(getattr(info, "config", None))


def of_config(cfg: Any) -> PriorityConfig:
    """The priority settings attached to a ConsumerConfig by :func:`attach_config`."""
    policy = getattr(cfg, "priority_policy", None)
    if not policy:
        return NO_PRIORITY
    groups = getattr(cfg, "priority_groups", None)
    return PriorityConfig(policy, tuple(groups) if groups else None, getattr(cfg, "priority_timeout", None))


class PullPriority(NamedTuple):
    """Validated priority options of a pull (fetch, next, consume)."""

    group: str
    min_pending: int
    min_ack_pending: int
    priority: int
    pinned: bool


def _non_neg(v: Any, what: str) -> int:
    return check_int(v, what, minimum=0, maximum=MAX_I64, open_ended=True)


def pull_options(prio: PriorityConfig, consumer: str, group: str | None, min_pending: int | None,
                 min_ack_pending: int | None, priority: int | None) -> PullPriority | None:
    """Check a pull's priority options against the consumer's settings (ValueError, nothing sent)."""
    if group is None:
        if prio.policy is not None:
            raise ValidationError(
                f"consumer {consumer!r} has priority groups {list(prio.groups or ())!r}: "
                "pass group= (one of them) to every pull"
            )
        for what, v in (("min_pending", min_pending), ("min_ack_pending", min_ack_pending),
                        ("priority", priority)):
            if v is not None:
                raise ValidationError(f"{what} needs group= (a consumer with priority groups)")
        return None
    validate_group(group, "group")
    if prio.policy is None:
        raise ValidationError(f"group={group!r}: consumer {consumer!r} has no priority groups (no priority_policy)")
    if prio.groups is not None and group not in prio.groups:
        raise ValidationError(
            f"group={group!r} is not one of consumer {consumer!r}'s priority groups {list(prio.groups)!r}")
    mp = 0 if min_pending is None else _non_neg(min_pending, "min_pending")
    map_ = 0 if min_ack_pending is None else _non_neg(min_ack_pending, "min_ack_pending")
    if (min_pending is not None or min_ack_pending is not None) and prio.policy != "overflow":
        raise ValidationError(
            f"min_pending/min_ack_pending go with priority_policy 'overflow'; consumer {consumer!r} has {prio.policy!r}"
        )
    pr = 0
    if priority is not None:
        check_int(priority, "priority", minimum=0, maximum=MAX_PRIORITY)
        if prio.policy != "prioritized":
            raise ValidationError(f"priority goes with priority_policy 'prioritized'; consumer {consumer!r} has "
                             f"{prio.policy!r}")
        pr = priority
    return PullPriority(group, mp, map_, pr, prio.policy == "pinned_client")


class Pins:
    """The pin ids the server gave one consumer handle, per group (pinned_client). Thread-safe."""

    __slots__ = ("_ids", "_lock")

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, group: str) -> str | None:
        return self._ids.get(group)

    def seen(self, group: str, headers: Mapping[str, str] | None) -> None:
        """A message arrived for a pull of ``group``: keep the ``Nats-Pin-Id`` it carries."""
        if headers is None:
            return
        pin = headers.get(HDR_PIN_ID)
        if pin and self._ids.get(group) != pin:
            with self._lock:
                self._ids[group] = pin

    def lost(self, group: str, sent: str | None) -> bool:
        """A pull sent with pin id ``sent`` got 423: forget that id (not a newer one). True if forgotten."""
        with self._lock:
            if sent is not None and self._ids.get(group) == sent:
                del self._ids[group]
                return True
            return False

    def clear(self, group: str) -> None:
        with self._lock:
            self._ids.pop(group, None)
