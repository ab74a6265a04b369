"""Reliable sourcing and mirroring of work-queue and interest streams (ADR-60; nats-server 2.14+).

A stream that sources or mirrors a work-queue or interest stream makes the server use a
durable consumer on the origin that acks by flow control: nothing to do in a client, the
ordinary ``sources=[StreamSource(name=...)]`` config does it. Two things are new in the
config, both checked here before anything is sent:

* the ``flow_control`` ack policy of a consumer (``AckFlowControl`` in the ADR): a push
  consumer whose flow control replies acknowledge what was stored; the server requires
  ``flow_control`` (its default), a 1 s ``idle_heartbeat`` (its default), no ``ack_wait``,
  no ``backoff``, no ``max_deliver`` above 0 and a positive ``max_ack_pending`` (0 or unset
  is its default of 1000);
* durable sourcing: a source or mirror naming a pre-created ``flow_control`` consumer on the
  origin (``StreamConsumerSource(name, deliver_subject)`` as the source's ``consumer``).
  Start sequence, start time and filter are then the consumer's, not the source's.

nats-py 2.16 models both (``AckPolicy.FLOW_CONTROL``, ``StreamSource.consumer``); on older
nats-py the string ``"flow_control"`` is accepted, :class:`StreamConsumerSource` is jssync's
own, a source given as a mapping keeps its ``consumer``, and the ``consumer`` of a source
read back from the server is put back on it (the way :mod:`.priority` keeps ADR-42 fields).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nats.js import api

from ..base.errors import ValidationError
from ..base.validate import validate_subject

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "FLOW_CONTROL",
    "StreamConsumerSource",
    "StreamSource",
    "check_flow_control_consumer",
    "is_flow_control",
    "normalize_sources",
    "put_back_consumers",
    "source_consumers",
    "source_consumer",
    "stream_wire",
    "uses_durable_sourcing",
]

#: The ack policy value (``AckPolicy.FLOW_CONTROL`` on nats-py 2.16+).
FLOW_CONTROL = "flow_control"
#: The one idle heartbeat the server allows with it (seconds).
FLOW_CONTROL_HEARTBEAT = 1.0

#: nats-py models ``StreamSource.consumer`` (2.16+)
_NATSPY_HAS_CONSUMER = "consumer" in {f.name for f in dataclasses.fields(api.StreamSource)}

if hasattr(api, "StreamConsumerSource"):
    StreamConsumerSource = api.StreamConsumerSource
else:  # nats-py < 2.16

    @dataclasses.dataclass
    class StreamConsumerSource(api.Base):  # type: ignore[no-redef]
        """The pre-created durable consumer a source or mirror reads through (ADR-60).

        ``name``: the consumer on the origin stream (ack policy ``flow_control``);
        ``deliver_subject``: its deliver subject.
        """

        name: str
        deliver_subject: str


if _NATSPY_HAS_CONSUMER:
    StreamSource = api.StreamSource
else:  # nats-py < 2.16

    @dataclasses.dataclass
    class StreamSource(api.StreamSource):  # type: ignore[no-redef]
        """nats-py's StreamSource with ``consumer``: the pre-created consumer to source through (ADR-60)."""

        consumer: StreamConsumerSource | None = None


def is_flow_control(policy: Any) -> bool:
    """True if ``policy`` (an AckPolicy member or its string) is the flow control ack policy."""
    return str(getattr(policy, "value", policy)) == FLOW_CONTROL


def check_flow_control_consumer(config: api.ConsumerConfig) -> None:
    """Refuse a ``flow_control`` consumer config the server would refuse (pure; no-op for others).

    Raises:
        jssync.ValidationError: naming the option and why (no deliver subject, flow control
            off, a heartbeat other than 1 s, ack_wait or backoff set, max_deliver above 0,
            a negative max_ack_pending).
    """
    if not is_flow_control(config.ack_policy):
        return
    what = "ack_policy 'flow_control'"
    if not config.deliver_subject:
        raise ValidationError(f"{what} needs a push consumer: set deliver_subject (the subject the sourcing "
                              "stream's server reads from)")
    if config.flow_control is False:
        raise ValidationError(f"{what} needs flow control: leave flow_control unset or True, got False")
    hb = config.idle_heartbeat
    if hb is not None and hb != 0 and hb != FLOW_CONTROL_HEARTBEAT:
        raise ValidationError(f"{what} needs idle_heartbeat of 1 s (or unset: the server sets it), got {hb!r}")
    if config.ack_wait is not None and config.ack_wait != 0:
        raise ValidationError(f"{what} acks by flow control: ack_wait must be unset, got {config.ack_wait!r}")
    if config.backoff:
        raise ValidationError(f"{what} acks by flow control: backoff must be unset, got {config.backoff!r}")
    if config.max_deliver is not None and config.max_deliver > 0:
        raise ValidationError(f"{what} redelivers without limit: max_deliver must be unset or -1, "
                              f"got {config.max_deliver!r}")
    if config.max_ack_pending is not None and config.max_ack_pending < 0:
        raise ValidationError(f"{what} needs max_ack_pending > 0 (or unset: the server's default), "
                              f"got {config.max_ack_pending!r}")


def source_consumer(source: Any) -> Any:
    """The ``consumer`` of a source (a StreamConsumerSource), or None."""
    return getattr(source, "consumer", None)


def _consumer_of(value: Any, where: str, check_name: Callable[[Any, str], Any]) -> Any:
    """``value`` as a StreamConsumerSource (a mapping is converted), checked like the server does."""
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "deliver_subject"}
        if unknown:
            raise ValidationError(f"{where}.consumer: unknown field(s) {sorted(unknown)!r}; "
                                  "it takes name and deliver_subject")
        fields: dict[str, Any] = {"name": None, "deliver_subject": None, **value}
        value = StreamConsumerSource(**fields)
    elif not isinstance(value, StreamConsumerSource):
        raise TypeError(f"{where}.consumer must be a jssync.StreamConsumerSource or a mapping, "
                        f"got {type(value).__name__}")
    check_name(value.name, f"{where}.consumer name")
    if not isinstance(value.deliver_subject, str) or not value.deliver_subject:
        raise ValidationError(f"{where}.consumer needs the consumer's deliver_subject, got "
                              f"{value.deliver_subject!r}")
    validate_subject(value.deliver_subject, f"{where}.consumer deliver_subject", wildcards=False)
    return value


def _model_of(cls: type[Any], fields: Mapping[str, Any], where: str) -> Any:
    """``cls(**fields)``; a ValidationError naming ``where`` for a missing or unknown field."""
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def _source_of(value: Any, where: str, check_name: Callable[[Any, str], Any]) -> api.StreamSource:
    """``value`` as an api.StreamSource (a mapping is converted); its ``consumer`` checked."""
    consumer: Any = None
    if isinstance(value, Mapping):
        raw = dict(value)
        consumer = raw.pop("consumer", None)
        known = {f.name for f in dataclasses.fields(api.StreamSource)}
        unknown = set(raw) - known
        if unknown:
            raise ValidationError(f"{where}: unknown field(s) {sorted(unknown)!r}")
        ext = raw.get("external")
        if isinstance(ext, Mapping):
            raw["external"] = _model_of(api.ExternalStream, ext, f"{where}.external")
        transforms = raw.get("subject_transforms")
        if isinstance(transforms, list | tuple):
            raw["subject_transforms"] = [
                _model_of(api.SubjectTransform, t, f"{where}.subject_transforms[{i}]") if isinstance(t, Mapping)
                else t for i, t in enumerate(transforms)]
        value = _model_of(api.StreamSource, raw, where)
    elif not isinstance(value, api.StreamSource):
        raise TypeError(f"{where} must be a StreamSource or a mapping, got {type(value).__name__}")
    else:
        consumer = source_consumer(value)
    if consumer is None:
        return value  # type: ignore[no-any-return]
    consumer = _consumer_of(consumer, where, check_name)
    if value.opt_start_seq or value.opt_start_time is not None:
        raise ValidationError(f"{where}: with a consumer the start is the consumer's (its opt_start_seq / "
                              "opt_start_time), not the source's: unset opt_start_seq and opt_start_time")
    if value.filter_subject:
        raise ValidationError(f"{where}: with a consumer the filter is the consumer's (its filter_subject), "
                              f"not the source's: unset filter_subject {value.filter_subject!r}")
    value = dataclasses.replace(value) if source_consumer(value) is not consumer else value
    # nats-py < 2.16: an attribute beside the fields (sent by stream_wire)
    object.__setattr__(value, "consumer", consumer)
    return value  # type: ignore[no-any-return]


def normalize_sources(config: api.StreamConfig, check_name: Callable[[Any, str], Any]) -> api.StreamConfig:
    """``config`` with ``mirror`` / ``sources`` as StreamSource objects, their consumers checked.

    ``check_name(name, what)`` raises for an invalid consumer name (params.validate_name).

    A mapping (``{"name": "WQ", "consumer": {"name": "C", "deliver_subject": "d"}}``) is
    converted. Returns ``config`` itself when nothing changes, else a copy.

    Raises:
        jssync.ValidationError: a consumer without a valid name or literal deliver subject,
            a source with a consumer and its own start or filter, one consumer of one
            origin used by two sources.
        TypeError: a source that is not a StreamSource or a mapping.
    """
    changes: dict[str, Any] = {}
    if config.mirror is not None:
        mirror = _source_of(config.mirror, "mirror", check_name)
        if mirror is not config.mirror:
            changes["mirror"] = mirror
    if config.sources is not None:
        if isinstance(config.sources, str | bytes | Mapping) or not isinstance(config.sources, list | tuple):
            raise TypeError(f"sources must be a list of StreamSource, got {type(config.sources).__name__}")
        sources = [_source_of(s, f"sources[{i}]", check_name) for i, s in enumerate(config.sources)]
        seen: dict[tuple[str, str, str], int] = {}
        for i, s in enumerate(sources):
            c = source_consumer(s)
            if c is None:
                continue
            ext = getattr(s.external, "api", "") if s.external is not None else ""
            key = (s.name, ext or "", c.name)
            if key in seen:
                raise ValidationError(f"sources[{i}] and sources[{seen[key]}] both read stream {s.name!r} "
                                      f"through consumer {c.name!r}: one consumer serves one source")
            seen[key] = i
        if any(a is not b for a, b in zip(sources, config.sources, strict=True)) or isinstance(config.sources,
                                                                                              tuple):
            changes["sources"] = sources
    if not changes:
        return config
    return dataclasses.replace(config, **changes)


def uses_durable_sourcing(config: api.StreamConfig) -> bool:
    """True if the mirror or a source of ``config`` names a consumer."""
    if config.mirror is not None and source_consumer(config.mirror) is not None:
        return True
    return any(source_consumer(s) is not None for s in config.sources or [])


def _source_wire(source: api.StreamSource, body: dict[str, Any]) -> dict[str, Any]:
    c = source_consumer(source)
    if c is not None and "consumer" not in body:
        body = dict(body)
        body["consumer"] = {"name": c.name, "deliver_subject": c.deliver_subject}
    return body


def stream_wire(config: api.StreamConfig) -> dict[str, Any]:
    """``config`` as sent (model.to_wire: the keys of the reply it was read from that nats-py does
    not model go back unchanged), with each source's ``consumer`` in it (nats-py < 2.16 drops it)."""
    from .model import to_wire

    body: dict[str, Any] = to_wire(config)
    if _NATSPY_HAS_CONSUMER:
        return body
    mirror = body.get("mirror")
    if config.mirror is not None and isinstance(mirror, dict):
        body["mirror"] = _source_wire(config.mirror, mirror)
    sources = body.get("sources")
    if config.sources and isinstance(sources, list):
        body["sources"] = [_source_wire(s, b) if isinstance(b, dict) else b
                           for s, b in zip(config.sources, sources, strict=False)]
    return body


def source_consumers(raw: Any) -> tuple[Any, list[Any]] | None:
    """The ``consumer`` objects of the mirror and sources of a reply's raw config, read before
    nats-py parses (and replaces) it; None on nats-py 2.16+ (it keeps them) or when there are none."""
    if _NATSPY_HAS_CONSUMER or not isinstance(raw, dict):
        return None

    def of(src: Any) -> Any:
        c = src.get("consumer") if isinstance(src, dict) else None
        return dict(c) if isinstance(c, dict) else None

    sources = raw.get("sources")
    found = (of(raw.get("mirror")), [of(s) for s in sources] if isinstance(sources, list) else [])
    return found if found[0] is not None or any(c is not None for c in found[1]) else None


def put_back_consumers(config: Any, found: tuple[Any, list[Any]] | None) -> None:
    """Set ``consumer`` on the mirror/sources of a parsed config from :func:`source_consumers`.

    A no-op on nats-py 2.16+, which parses it; older nats-py drops the field.
    """
    if found is None or config is None:
        return

    def put(source: Any, c: Any) -> None:
        if source is not None and c is not None:
            value = StreamConsumerSource(name=c.get("name", ""), deliver_subject=c.get("deliver_subject", ""))
            object.__setattr__(source, "consumer", value)

    put(getattr(config, "mirror", None), found[0])
    for s, c in zip(getattr(config, "sources", None) or [], found[1], strict=False):
        put(s, c)
