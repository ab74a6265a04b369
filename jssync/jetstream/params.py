"""The keyword arguments of stream and consumer configs, typed so a type checker catches a typo.

``js.create_stream(name="S", storag="memory")`` and ``storage="memroy"`` are mypy errors
(``**params: Unpack[StreamParams]``); at run time :func:`check_choices` refuses an unknown
enum value before anything is sent, listing the valid ones.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import enum
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from nats.js import api

from ..base.durations import seconds
from ..base.errors import UnknownOptionError, ValidationError
from ..base.validate import MAX_I64, MAX_U64, check_int, validate_subject
from . import model as _model
from . import priority as _priority

if TYPE_CHECKING:  # (evaluated by type checkers only: older nats-py lacks some of these enums)
    from typing import TypeAlias

    Retention: TypeAlias = api.RetentionPolicy | Literal["limits", "interest", "workqueue"]
    Discard: TypeAlias = api.DiscardPolicy | Literal["old", "new"]
    Storage: TypeAlias = api.StorageType | Literal["file", "memory"]
    Compression: TypeAlias = api.StoreCompression | Literal["none", "s2"]
    Persist: TypeAlias = api.PersistMode | Literal["default", "async"]
    Ack: TypeAlias = api.AckPolicy | Literal["none", "all", "explicit", "flow_control"]
    Deliver: TypeAlias = (api.DeliverPolicy | Literal["all", "last", "new", "by_start_sequence", "by_start_time",
                                                      "last_per_subject"])
    Replay: TypeAlias = api.ReplayPolicy | Literal["instant", "original"]


class StreamParams(TypedDict, total=False):
    """The fields of :class:`jssync.StreamConfig`, as keywords of ``create_stream`` and friends."""

    name: str
    description: str | None
    subjects: list[str] | None
    retention: Retention | None
    max_consumers: int | None
    max_msgs: int | None
    max_bytes: int | None
    discard: Discard | None
    discard_new_per_subject: bool
    max_age: float | None
    max_msgs_per_subject: int
    max_msg_size: int | None
    storage: Storage | None
    num_replicas: int | None
    no_ack: bool
    template_owner: str | None
    duplicate_window: float
    placement: api.Placement | None
    mirror: api.StreamSource | None
    sources: list[api.StreamSource] | None
    sealed: bool
    deny_delete: bool
    deny_purge: bool
    allow_rollup_hdrs: bool
    first_seq: int | None
    republish: api.RePublish | None
    subject_transform: api.SubjectTransform | None
    allow_direct: bool | None
    mirror_direct: bool | None
    compression: Compression | None
    allow_msg_ttl: bool | None
    allow_msg_schedules: bool | None
    allow_atomic: bool | None
    allow_batched: bool | None
    allow_msg_counter: bool | None
    persist_mode: Persist | None
    metadata: dict[str, str] | None
    consumer_limits: api.StreamConsumerLimits | None
    subject_delete_marker_ttl: float | None


class ConsumerParams(TypedDict, total=False):
    """The fields of :class:`jssync.ConsumerConfig`, as keywords of ``create_consumer`` and friends."""

    name: str | None
    durable_name: str | None
    description: str | None
    deliver_policy: Deliver | None
    opt_start_seq: int | None
    opt_start_time: datetime.datetime | None
    ack_policy: Ack | None
    ack_wait: float | None
    max_deliver: int | None
    backoff: list[float] | None
    filter_subject: str | None
    filter_subjects: list[str] | None
    replay_policy: Replay | None
    rate_limit_bps: int | None
    sample_freq: str | None
    max_waiting: int | None
    max_ack_pending: int | None
    flow_control: bool | None
    idle_heartbeat: float | None
    headers_only: bool | None
    deliver_subject: str | None
    deliver_group: str | None
    inactive_threshold: float | None
    num_replicas: int | None
    mem_storage: bool | None
    metadata: dict[str, str] | None
    pause_until: str | None
    # the rows of model.CONSUMER_FIELDS (written out for type checkers; a unit test checks they agree)
    max_batch: int | None
    max_expires: float | None
    max_bytes: int | None


class KeyValueParams(TypedDict, total=False):
    """The fields of :class:`jssync.KeyValueConfig` and the extra options of ``create_key_value``."""

    bucket: str
    description: str | None
    max_value_size: int | None
    history: int
    ttl: float | None
    max_bytes: int | None
    storage: Storage | None
    replicas: int
    placement: api.Placement | None
    republish: api.RePublish | None
    direct: bool | None
    limit_marker_ttl: float | None
    compression: bool
    metadata: dict[str, str] | None
    allow_msg_ttl: bool
    timeout: float | None


class ObjectStoreParams(TypedDict, total=False):
    """The fields of :class:`jssync.ObjectStoreConfig` and the extra options of ``create_object_store``."""

    bucket: str | None
    description: str | None
    ttl: float | None
    max_bytes: int | None
    storage: Storage | None
    replicas: int
    placement: api.Placement | None
    compression: bool
    metadata: dict[str, str] | None
    timeout: float | None


_C = TypeVar("_C")

#: field -> the enum whose values it takes (a member or its string value)
STREAM_CHOICES: dict[str, type[enum.Enum]] = {
    field: kind for field, kind in (
        ("retention", getattr(api, "RetentionPolicy", None)),
        ("discard", getattr(api, "DiscardPolicy", None)),
        ("storage", getattr(api, "StorageType", None)),
        ("compression", getattr(api, "StoreCompression", None)),
        ("persist_mode", getattr(api, "PersistMode", None)),
    ) if kind is not None
}
CONSUMER_CHOICES: dict[str, type[enum.Enum]] = {
    "deliver_policy": api.DeliverPolicy,
    "ack_policy": api.AckPolicy,
    "replay_policy": api.ReplayPolicy,
}
#: field -> string values accepted beside the enum's own: ones older nats-py enums lack
#: (``AckPolicy.FLOW_CONTROL`` came with nats-py 2.16; ADR-60)
EXTRA_CHOICES: dict[str, tuple[str, ...]] = {"ack_policy": ("flow_control",)}


def check_choices(config: Any, choices: dict[str, type[enum.Enum]]) -> None:
    """Raise :class:`jssync.ValidationError` for an enum-like field set to an unknown value.

    A member of the enum or its string value (``"memory"``) is accepted; the error lists
    the valid values, e.g. ``storage must be one of 'file', 'memory', got 'memroy'``.
    """
    for field, kind in choices.items():
        value = getattr(config, field, None)
        if value is None or isinstance(value, kind):
            continue
        valid = [m.value for m in kind]
        valid += [v for v in EXTRA_CHOICES.get(field, ()) if v not in valid]
        if isinstance(value, str) and value in valid:
            continue
        raise ValidationError(
            f"{field} must be one of {', '.join(repr(v) for v in valid)} (or jssync.{kind.__name__}), got {value!r}"
        )


def check_options(params: Iterable[str], valid: Iterable[str], call: str) -> None:
    """Raise :class:`jssync.UnknownOptionError` for the first name in ``params`` not in ``valid``.

    The message names ``call`` and the closest valid option (``unknown option 'subject' for
    create_stream; did you mean 'subjects'?``).
    """
    names = list(valid)
    known = set(names)
    for key in params:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownOptionError(f"unknown option {key!r} for {call}{hint}")


#: the keyword options of the stream and consumer config calls (nats-py's fields, ADR-42's priority ones)
STREAM_OPTIONS = tuple(f.name for f in dataclasses.fields(api.StreamConfig))
CONSUMER_OPTIONS = (tuple(f.name for f in dataclasses.fields(api.ConsumerConfig)) + _priority.CONFIG_FIELDS
                    + _model.field_names(_model.CONSUMER_FIELDS))


_DURATION_TYPES = ("float", "Optional[float]")
_DURATION_LIST_TYPES = ("Optional[List[float]]", "List[float]")
_INT_TYPES = ("int", "Optional[int]")


def _field_kinds(cls: type) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The duration, duration-list and int fields of nats-py config dataclass ``cls`` (by annotation).

    Every ``float`` field of nats-py's configs is a duration in seconds (``max_age``, ``ack_wait``,
    ``ttl``, ...), every ``List[float]`` one a list of them (``backoff``).
    """
    fields = [(f.name, str(f.type)) for f in dataclasses.fields(cls)]
    return (tuple(n for n, t in fields if t in _DURATION_TYPES),
            tuple(n for n, t in fields if t in _DURATION_LIST_TYPES),
            tuple(n for n, t in fields if t in _INT_TYPES))


_KINDS: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {}

#: Config ints the server does not read as a Go int64: sequences (uint64), max_msg_size (int32).
_INT_RANGES: dict[str, tuple[int, int]] = {
    "first_seq": (0, MAX_U64),
    "opt_start_seq": (0, MAX_U64),
    "max_msg_size": (-(2**31), 2**31 - 1),
}


def normalize_config(config: _C) -> _C:
    """``config`` with every duration field as float seconds; refuses bad durations and non-int counts.

    A duration field takes seconds (int or float), a ``datetime.timedelta`` or a Go duration
    string (``"30s"``, ``"1h30m"``); see :func:`jssync.base.durations.seconds`. An int field
    (``max_msgs``, ``max_deliver``, ...) refuses a bool, a float or a str. Nested configs
    (``consumer_limits``) are normalized too. Returns ``config`` itself when nothing changes,
    else a copy (the caller's object is left as it was; attributes set beside the dataclass's
    fields are kept).

    Raises:
        jssync.ValidationError: naming the option and the bad value (nothing is sent).
    """
    cls = type(config)
    kinds = _KINDS.get(cls)
    if kinds is None:
        kinds = _KINDS[cls] = _field_kinds(cls)
    durations, duration_lists, ints = kinds
    changes: dict[str, Any] = {}
    for name in durations:
        value = getattr(config, name, None)
        if value is None:
            continue
        secs = seconds(value, name)
        if type(value) is not float or secs != value:
            changes[name] = secs
    for name in duration_lists:
        value = getattr(config, name, None)
        if value is None:
            continue
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise ValidationError(f"{name} must be a list of durations, got {value!r}")
        changes[name] = [seconds(v, f"{name}[{i}]") for i, v in enumerate(value)]
    for name in ints:
        value = getattr(config, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValidationError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value is not None:
            lo, hi = _INT_RANGES.get(name, (-MAX_I64 - 1, MAX_I64))  # Go int / int64
            check_int(value, name, minimum=lo, maximum=hi)
    limits = getattr(config, "consumer_limits", None)
    if limits is not None and dataclasses.is_dataclass(limits) and not isinstance(limits, type):
        fixed = normalize_config(limits)
        if fixed is not limits:
            changes["consumer_limits"] = fixed
    if not changes:
        return config
    config = copy.copy(config)
    for name, value in changes.items():
        setattr(config, name, value)
    return config


# -- names, headers and consumer configs (moved down from context.py: push and ordered use them) --

_NAME_BAD = re.compile(r"[.*>\s/\\]")

HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_STREAM = "Nats-Expected-Stream"
HDR_EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
HDR_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
HDR_EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"


def validate_name(name: Any, what: str = "stream name") -> str:
    """Raise ``ValueError`` naming ``name`` if it is not a valid stream or consumer name."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{what} must be a non-empty string, got {name!r}")
    if _NAME_BAD.search(name):
        raise ValidationError(f"invalid {what} {name!r}: it may not contain '.', '*', '>', whitespace, '/' or '\\'")
    if len(name) > 255:
        raise ValidationError(f"invalid {what} {name[:20]!r}...: longer than 255 characters")
    return name


def _consumer_config(config: api.ConsumerConfig | None, params: Mapping[str, Any],
                     call: str = "create_consumer") -> api.ConsumerConfig:
    if config is None:
        config = api.ConsumerConfig()
    elif not isinstance(config, api.ConsumerConfig):
        raise TypeError(f"config must be a ConsumerConfig, got {type(config).__name__}")
    # ADR-42 fields nats-py's dataclass lacks: keyword options, or attributes of a config
    # that came back from the server (info.config); sent beside the dataclass's own fields
    params = dict(params)
    check_options(params, CONSUMER_OPTIONS, call)
    # keys of the reply ``config`` was read from that nats-py does not model: sent back as they came
    source = config
    prio = _priority.config_fields(config, params)
    limits = _model.take_fields(config, params, _model.CONSUMER_FIELDS)
    if params:
        config = config.evolve(**params)
    check_choices(config, CONSUMER_CHOICES)
    config = normalize_config(config)
    if config.name is not None:
        validate_name(config.name, "consumer name")
    if config.durable_name is not None:
        validate_name(config.durable_name, "durable name")
    if config.name and config.durable_name and config.name != config.durable_name:
        raise ValidationError(
            f"consumer name {config.name!r} and durable_name {config.durable_name!r} differ: set one, or both equal"
        )

    if config.filter_subject:
        validate_subject(config.filter_subject, "filter subject")
    for fs in config.filter_subjects or []:
        validate_subject(fs, "filter subject")
    if config.filter_subject and config.filter_subjects:
        raise ValidationError("set filter_subject or filter_subjects, not both")
    if prio.policy is not None and config.deliver_subject:
        raise ValidationError("priority groups are for pull consumers only: this config has a deliver_subject")
    from .sourcing import check_flow_control_consumer

    check_flow_control_consumer(config)
    if prio.policy is not None or _priority.of_config(config).policy is not None:
        config = dataclasses.replace(config)  # a copy: the caller's object is left as it was
        _priority.attach_config(config, prio)
    if any(getattr(config, k, None) != v for k, v in limits.items()):
        if config is source:
            config = copy.copy(config)  # the caller's object is left as it was
        _model.attach_fields(config, limits, _model.CONSUMER_FIELDS)
    return _model.carry_extra(source, config)
