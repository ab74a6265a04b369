"""The config codec: nats-py's dataclasses to and from the server's JSON, losing nothing. No I/O.

nats-py's config dataclasses (``StreamConfig``, ``ConsumerConfig``, ...) model only the
fields nats-py knows; a server newer than nats-py holds more. Two rules keep what the server
holds through a read-modify-write:

- :func:`from_reply` reads a config from a reply and keeps the keys its dataclass lacks on
  the object (:data:`EXTRA_ATTR`); :func:`to_wire` sends the dataclass's fields plus those
  keys, unchanged. A config read from the server and sent back keeps every field.
- Fields jssync does model beside nats-py (the consumer's pull request limits) are one row
  each in a table of :class:`ServerField`: the row gives the keyword option (validated,
  durations in seconds), the attribute on the config ``info()`` returns, the JSON on the
  wire (durations in nanoseconds), the API level that has it and the CLI flag.

To add a server field nats-py lacks: add a :class:`ServerField` row to the table of its
config (e.g. :data:`CONSUMER_FIELDS`) and its keyword to the TypedDict in params.py (a type
checker needs it written out; a unit test checks the two agree).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from ..base.durations import seconds
from ..base.errors import ValidationError
from ..base.validate import MAX_I64, check_int

#: the attribute of a config read from a reply that holds the keys its dataclass lacks
EXTRA_ATTR = "_jssync_extra"
_NS = 1_000_000_000

_T = TypeVar("_T")


class ServerField(NamedTuple):
    """One server config field jssync models beside nats-py's dataclass."""

    #: the server's JSON key, also the keyword option, the config attribute and (with - for _) the CLI flag
    name: str
    #: the Python type of the value: ``int``, ``float`` (a duration when ``duration``), ``bool`` or ``str``
    kind: type
    #: seconds in Python (a number, ``timedelta`` or ``"5s"``), nanoseconds on the wire
    duration: bool
    #: the JetStream API level of the first server that has it (0: every server jssync supports)
    api_level: int
    #: one line for the docs and the CLI's --help
    help: str


#: The consumer config fields nats-py's ConsumerConfig lacks. Set on create / update, read back
#: as ``info().config.<name>`` (None when the server holds none), flags of ``consumer add/edit``.
CONSUMER_FIELDS: tuple[ServerField, ...] = (
    ServerField("max_batch", int, False, 0, "the largest batch one pull request may ask for"),
    ServerField("max_expires", float, True, 0, "the longest expiry one pull request may ask for"),
    ServerField("max_bytes", int, False, 0, "the largest max_bytes one pull request may ask for"),
)


def field_names(table: Iterable[ServerField]) -> tuple[str, ...]:
    """The names of the rows of ``table``."""
    return tuple(f.name for f in table)


def check_value(field: ServerField, value: Any) -> Any:
    """``value`` for ``field`` as jssync holds it (durations as float seconds), or None.

    Raises:
        jssync.ValidationError: naming the option and the bad value.
    """
    if value is None:
        return None
    if field.duration:
        secs = seconds(value, field.name)
        if secs < 0:
            raise ValidationError(f"{field.name} must be a duration >= 0, got {value!r}")
        return secs
    if field.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{field.name} must be an int, got {type(value).__name__} {value!r}")
        check_int(value, field.name, minimum=0, maximum=MAX_I64)
        return value
    if not isinstance(value, field.kind):
        raise ValidationError(f"{field.name} must be a {field.kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def take_fields(config: Any, params: dict[str, Any], table: Iterable[ServerField]) -> dict[str, Any]:
    """The values of ``table``'s fields: popped from ``params``, else ``config``'s attributes; validated.

    Raises:
        jssync.ValidationError: a bad value, naming the option (nothing is sent).
    """
    out: dict[str, Any] = {}
    for field in table:
        value = params.pop(field.name) if field.name in params else getattr(config, field.name, None)
        out[field.name] = check_value(field, value)
    return out


def attach_fields(config: Any, values: Mapping[str, Any], table: Iterable[ServerField]) -> None:
    """Set every field of ``table`` on ``config`` as an attribute (None when not in ``values``)."""
    if config is None:
        return
    for field in table:
        setattr(config, field.name, values.get(field.name))


def fields_wire(config: Any, table: Iterable[ServerField]) -> dict[str, Any]:
    """The JSON of ``table``'s fields set on ``config`` (durations in nanoseconds; None left out)."""
    out: dict[str, Any] = {}
    for field in table:
        value = getattr(config, field.name, None)
        if value is None:
            continue
        out[field.name] = int(round(value * _NS)) if field.duration else value
    return out


def fields_from_reply(raw: Any, table: Iterable[ServerField]) -> dict[str, Any]:
    """The values of ``table``'s fields in a config as the server sent it (lenient: a bad value is None)."""
    out: dict[str, Any] = {}
    if not isinstance(raw, Mapping):
        return out
    for field in table:
        value = raw.get(field.name)
        if field.duration:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            out[field.name] = value / _NS if ok and value else None
        elif field.kind is int:
            out[field.name] = value if isinstance(value, int) and not isinstance(value, bool) and value else None
        else:
            out[field.name] = value if isinstance(value, field.kind) else None
    return out


def required_level(values: Mapping[str, Any], table: Iterable[ServerField]) -> int:
    """The API level a config with ``values`` set needs (the highest of the fields set)."""
    return max((f.api_level for f in table if values.get(f.name) is not None), default=0)


# -- the keys a dataclass lacks ------------------------------------------------------------------


def extra_fields(config: Any) -> dict[str, Any]:
    """The keys of the reply ``config`` was read from that its dataclass does not model (a copy)."""
    extra = getattr(config, EXTRA_ATTR, None)
    return dict(extra) if isinstance(extra, dict) else {}


def keep_extra(config: Any, raw: Any, known: Iterable[str] = ()) -> None:
    """Attach to ``config`` the keys of its raw reply object ``raw`` that are not its fields nor in ``known``."""
    if config is None or not isinstance(raw, dict):
        return
    names = {f.name for f in dataclasses.fields(config)} | set(known)
    extra = {k: json.loads(json.dumps(v)) for k, v in raw.items() if k not in names}
    setattr(config, EXTRA_ATTR, extra)


def unknown_keys(cls: type, raw: Any, known: Iterable[str] = ()) -> dict[str, Any] | None:
    """A deep copy of the keys of the raw reply object ``raw`` that dataclass ``cls`` lacks (None: no object).

    For a config nested in a reply (a stream info's ``config``): read before nats-py parses
    the reply, which replaces the nested object; put on the parsed config with :func:`set_extra`.
    """
    if not isinstance(raw, dict):
        return None
    names = {f.name for f in dataclasses.fields(cls)} | set(known)
    return {k: json.loads(json.dumps(v)) for k, v in raw.items() if k not in names}


def set_extra(config: Any, extra: dict[str, Any] | None) -> None:
    """Put ``extra`` (from :func:`unknown_keys`) on ``config``, to be sent back by :func:`to_wire`."""
    if config is not None and extra is not None:
        setattr(config, EXTRA_ATTR, extra)


def carry_extra(source: Any, target: _T) -> _T:
    """``target`` with the kept keys of ``source`` (a copy of ``target`` when it lacks them)."""
    extra = getattr(source, EXTRA_ATTR, None)
    if not isinstance(extra, dict) or getattr(target, EXTRA_ATTR, None) is extra:
        return target
    target = copy.copy(target)
    setattr(target, EXTRA_ATTR, dict(extra))
    return target


def from_reply(cls: type[_T], raw: Any, known: Iterable[str] = ()) -> _T:
    """``cls.from_response(raw)``, keeping the keys of ``raw`` the dataclass lacks (see :func:`to_wire`).

    ``known``: keys read by other means (not kept as extra). Raises what ``from_response`` raises.
    """
    obj: _T = cls.from_response(dict(raw))  # type: ignore[attr-defined]
    keep_extra(obj, raw, known)
    return obj


def to_wire(obj: Any) -> dict[str, Any]:
    """``obj.as_dict()`` plus the keys kept by :func:`from_reply`, unchanged (the dataclass's fields win)."""
    body: dict[str, Any] = obj.as_dict()
    for key, value in extra_fields(obj).items():
        body.setdefault(key, value)
    return body
