"""The consumer-configuration checks of push subscriptions (ADR-15): pure, no I/O.

:func:`check_consumer` runs the ADR-15 checks of an existing consumer against the
subscription asked for (filter subject, pull or push, deliver group, queue options, the
fields the user set); ``_user_config`` builds the configuration the user asked for and
names the fields they set. :func:`jssync.jetstream.push.subscribe` calls both before it
binds to a consumer or creates one.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from nats.js import api

from ..base.errors import (
    ConsumerConfigMismatchError,
    ConsumerIsPullBasedError,
    ConsumerIsPushBasedError,
    DeliverGroupError,
    DuplicateSubscriptionError,
    PushSubscribeError,
    QueueGroupOptionError,
    SubjectMismatchError,
    ValidationError,
)
from ..base.times import server_time_or_none
from ..base.validate import check_number

__all__ = ["check_consumer"]




# -- configuration --------------------------------------------------------------------------

#: Fields the ADR-15 config comparison leaves out: names are looked up by, the deliver
#: subject may change, and groups and filters have checks of their own.
_NOT_COMPARED = frozenset({
    "name", "durable_name", "deliver_subject", "deliver_group", "filter_subject", "filter_subjects",
    "pause_until",
})


def _num(v: Any, what: str) -> float:
    return check_number(v, what, unit="seconds")


_DEFAULTS = api.ConsumerConfig()


def _set_fields(config: api.ConsumerConfig) -> set[str]:
    """The fields of ``config`` that differ from a plain ``ConsumerConfig()`` (which has a few
    defaults: deliver all, ack explicit, replay instant)."""
    return {f.name for f in dataclasses.fields(config)
            if getattr(config, f.name) is not None and getattr(config, f.name) != getattr(_DEFAULTS, f.name)}


def _user_config(config: api.ConsumerConfig | None, options: dict[str, Any], idle_heartbeat: float | None,
                 flow_control: bool) -> tuple[api.ConsumerConfig, set[str]]:
    """The configuration the user asked for, and the names of the fields they set."""
    from .params import _consumer_config

    given = _set_fields(config) if config is not None else set()
    given |= {k for k, v in options.items() if v is not None}
    cfg = _consumer_config(config, options)
    cfg = cfg.evolve()  # a copy: never change the caller's object
    if idle_heartbeat is not None:
        hb = _num(idle_heartbeat, "idle_heartbeat")
        if cfg.idle_heartbeat is not None and cfg.idle_heartbeat != hb:
            raise ValidationError(f"idle_heartbeat={idle_heartbeat!r} differs from config.idle_heartbeat="
                             f"{cfg.idle_heartbeat!r}")
        cfg.idle_heartbeat = hb
        given.add("idle_heartbeat")
    elif cfg.idle_heartbeat is not None:
        _num(cfg.idle_heartbeat, "idle_heartbeat")
    if not isinstance(flow_control, bool):
        raise TypeError(f"flow_control must be a bool, got {flow_control!r}")
    if flow_control:
        cfg.flow_control = True
        given.add("flow_control")
    if cfg.flow_control and not cfg.idle_heartbeat:
        raise ValidationError("flow_control needs idle_heartbeat: the server requires heartbeats with flow control")
    if cfg.ack_policy is not None and str(_wire(cfg.ack_policy)) == "flow_control":
        raise ValidationError(_FLOW_CONTROL_ACKS.format(what="ack_policy 'flow_control'"))
    if cfg.ack_policy is not None and str(_wire(cfg.ack_policy)) not in ("none", "all", "explicit"):
        raise ValidationError(f"invalid ack_policy {cfg.ack_policy!r}")
    return cfg, given


_FLOW_CONTROL_ACKS = ("{what} is acknowledged by the flow control replies of a stream sourcing or mirroring "
                      "it (ADR-60), not by a client subscription, which would acknowledge nothing")


def _wire(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def _parse_time(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=_dt.UTC)
    if isinstance(v, str):
        return server_time_or_none(v) or v
    return v


def _same(field: str, want: Any, have: Any) -> bool:
    want = _wire(want)
    have = _wire(have)
    if field == "opt_start_time":
        return bool(_parse_time(want) == _parse_time(have))
    if field == "metadata":
        mine = {k: v for k, v in (have or {}).items() if not k.startswith("_nats")}
        return bool((want or {}) == mine)
    if field == "sample_freq":
        return str(want or "").rstrip("%") == str(have or "").rstrip("%")
    if field == "num_replicas" and not have:
        return True  # 0: the consumer follows the stream's replicas
    if not want and not have:
        return True  # False / 0 / empty and an omitted field
    if isinstance(want, list) and isinstance(have, list):
        return [_wire(x) for x in want] == [_wire(x) for x in have]
    return bool(want == have)


def _config_mismatch(user: api.ConsumerConfig, server: dict[str, Any],
                     given: set[str]) -> tuple[str, Any, Any] | None:
    """The first field in ``given`` that the user set to a value other than the consumer's, or None."""
    wire = user.as_dict()
    for field, want in wire.items():
        if field not in given or getattr(user, field, None) is None or field in _NOT_COMPARED:
            continue  # not set by the user (as_dict turns unset durations into 0)
        have = server.get(field)
        if not _same(field, want, have):
            return field, _wire(want), have
    return None


def _raw_info(info: dict[str, Any] | api.ConsumerInfo) -> tuple[dict[str, Any], bool]:
    if isinstance(info, api.ConsumerInfo):
        cfg = info.config.as_dict() if info.config is not None else {}
        return {k: v for k, v in cfg.items() if v is not None}, bool(info.push_bound)
    return dict(info.get("config") or {}), bool(info.get("push_bound"))


def check_consumer(
    info: dict[str, Any] | api.ConsumerInfo,
    *,
    subject: str | None,
    queue: str | None = None,
    pull: bool = False,
    config: api.ConsumerConfig | None = None,
    compare: set[str] | None = None,
) -> None:
    """Run the ADR-15 checks of an existing consumer against the subscription asked for.

    Pure (no I/O). ``info`` is the consumer's info: the raw JSON reply of
    ``CONSUMER.INFO`` or a :class:`ConsumerInfo`. ``config`` is the configuration asked
    for; ``compare`` names the fields the user set (default: those of ``config`` that
    differ from a plain ``ConsumerConfig()``). Only those are compared.

    Raises:
        SubjectMismatchError: ``subject`` is not the consumer's filter subject.
        ConsumerIsPullBasedError: a push subscription for a pull consumer.
        jssync.ConsumerIsPushBasedError: a pull subscription for a push consumer.
        PushSubscribeError: the consumer's ack policy is ``flow_control`` (ADR-60: only a
            sourcing stream acknowledges it).
        DuplicateSubscriptionError: the consumer is push bound and has no deliver group,
            and this is not a queue subscription.
        DeliverGroupError: queue group and deliver group do not agree.
        QueueGroupOptionError: a queue subscription for a consumer with flow control or
            idle heartbeats.
        ConsumerConfigMismatchError: a field of ``config`` differs from the consumer's.
    """
    cfg, push_bound = _raw_info(info)
    name = (info.get("name") or cfg.get("durable_name")) if isinstance(info, dict) else info.name
    if subject:
        filt = cfg.get("filter_subject") or ""
        filts = cfg.get("filter_subjects") or []
        if filt and filt != subject:
            raise SubjectMismatchError(
                f"subject {subject!r} does not match the filter subject {filt!r} of consumer {name!r}",
                subject, filt)
        if filts and subject not in filts:
            raise SubjectMismatchError(
                f"subject {subject!r} is not one of the filter subjects {filts!r} of consumer {name!r}",
                subject, list(filts))
    if str(_wire(cfg.get("ack_policy"))) == "flow_control":
        raise PushSubscribeError(_FLOW_CONTROL_ACKS.format(what=f"consumer {name!r} has ack policy 'flow_control': it"))
    deliver = cfg.get("deliver_subject") or ""
    if pull:
        if deliver:
            raise ConsumerIsPushBasedError(
                f"cannot make a pull subscription for push consumer {name!r} (deliver subject {deliver!r})")
    else:
        if not deliver:
            raise ConsumerIsPullBasedError(
                f"consumer {name!r} is a pull consumer (no deliver subject): a pull subscription is required")
        group = cfg.get("deliver_group") or None
        if queue is None:
            if group:
                raise DeliverGroupError(
                    f"cannot make a non queue subscription for consumer {name!r}: it was created for "
                    f"queue group {group!r}", queue, group)
            if push_bound:
                raise DuplicateSubscriptionError(
                    f"duplicate subscription: consumer {name!r} is already bound to a subscription on "
                    f"{deliver!r}")
        else:
            if not group:
                raise DeliverGroupError(
                    f"cannot make a queue subscription in group {queue!r} for consumer {name!r}: it was "
                    "created without a deliver group", queue, None)
            if group != queue:
                raise DeliverGroupError(
                    f"cannot make a queue subscription in group {queue!r} for consumer {name!r}: it was "
                    f"created for queue group {group!r}", queue, group)
            if cfg.get("flow_control"):
                raise QueueGroupOptionError(
                    f"consumer {name!r} has flow control, which is not supported with queue groups")
            if cfg.get("idle_heartbeat"):
                raise QueueGroupOptionError(
                    f"consumer {name!r} has idle heartbeats, which are not supported with queue groups")
    if config is not None:
        diff = _config_mismatch(config, cfg, _set_fields(config) if compare is None else compare)
        if diff is not None:
            raise ConsumerConfigMismatchError(*diff)
