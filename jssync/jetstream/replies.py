"""JetStream API replies: a reply as a nats-py model, the PubAck, and a message read from a stream.

Below the JetStream context in the layers: the context, streams, Direct Get and the message
features (batches, counters) all parse replies with these.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
from typing import TYPE_CHECKING, Any, TypeVar

from nats.js import api

from ..base.errors import APIError, NoRespondersError, api_error, check_api_response
from ..base.status import NO_RESPONDERS, classify

if TYPE_CHECKING:
    from ..core.msg import Msg

_M = TypeVar("_M")


def _model(cls: type[_M], resp: Any, what: str) -> _M:
    """``cls.from_response(resp)``; a reply with missing or mistyped fields raises APIError."""
    if not isinstance(resp, dict):
        raise APIError(None, None, f"malformed {what} reply: a JSON {type(resp).__name__}, not an object")
    try:
        out: _M = cls.from_response(resp)  # type: ignore[attr-defined]
        return out
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise APIError(None, None, f"malformed {what} reply from the server ({type(exc).__name__}: {exc})") from exc


_PLAIN_ACK_KEYS = frozenset(("stream", "seq", "domain", "duplicate"))


@dataclasses.dataclass
class PubAck(api.PubAck):
    """The server's acknowledgement of a JetStream publish: ``stream``, ``seq``, ``domain``,
    ``duplicate`` (always a bool: True when the message ID was seen within the stream's
    duplicate window, so nothing new was stored); for a batch (ADR-50) ``batch_id`` and
    ``batch_size`` (the server's ``batch`` and ``count``), on every nats-py in range (2.15
    has no such fields)."""

    duplicate: bool = False
    batch_id: str | None = None
    batch_size: int | None = None
    val: str | None = None

    def __post_init__(self) -> None:
        self.duplicate = bool(self.duplicate)

    @classmethod
    def from_response(cls, resp: dict[str, Any]) -> PubAck:
        resp = dict(resp)
        if "batch" in resp and "batch_id" not in resp:
            resp["batch_id"] = resp.pop("batch")
        if "count" in resp and "batch_size" not in resp:
            resp["batch_size"] = resp.pop("count")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in resp.items() if k in names})


#: The server's usual PubAck, byte for byte (a name with an escaped character takes the JSON path).
#: (One regular expression: bytes methods doing the same checks cost more instructions, 17k
#: against 12k per PubAck with the build below, measured with callgrind.)
_PLAIN_ACK = re.compile(rb'\{"stream":"([^"\\]+)","seq":(\d+)(,"duplicate":true)?\}\Z')


_ACK_FIELDS = {f.name: f.default for f in dataclasses.fields(PubAck) if f.name not in ("stream", "seq")}
#: Every field but ``stream`` and ``seq`` has a plain default (so :func:`_plain_ack` may fill them in).
_ACK_FAST = all(v is not dataclasses.MISSING for v in _ACK_FIELDS.values())
_new = object.__new__


def _plain_ack(stream: str, seq: int, duplicate: bool) -> PubAck:
    """``PubAck(stream, seq, None, duplicate)``, every other field its default (built without
    the dataclass's ``__init__`` and ``__post_init__``: two Python calls fewer per publish)."""
    if not _ACK_FAST:  # pragma: no cover - a nats-py whose PubAck has a field without a default
        return PubAck(stream, seq, None, duplicate)
    ack: PubAck = _new(PubAck)
    d = ack.__dict__
    d["stream"] = stream
    d["seq"] = seq
    d.update(_ACK_FIELDS)
    d["duplicate"] = duplicate
    return ack


def _parse_pub_ack(msg: Msg) -> PubAck:
    """The PubAck in a publish reply; raises the matching error for an error reply or status."""
    hdrs = msg.headers
    if not hdrs:
        m = _PLAIN_ACK.match(msg.data)
        if m is not None:
            if not _ACK_FAST:  # pragma: no cover - a nats-py whose PubAck has a field without a default
                return PubAck(m[1].decode(), int(m[2]), None, m[3] is not None)
            # (_plain_ack written out: one call fewer per publish)
            ack: PubAck = _new(PubAck)
            d = ack.__dict__
            d["stream"] = m[1].decode()
            d["seq"] = int(m[2])
            d.update(_ACK_FIELDS)
            d["duplicate"] = m[3] is not None
            return ack
        # other plain replies (a domain, an escaped name, another key order): decoded, then
        # built directly, without nats-py's field-by-field dataclass introspection
        try:
            resp = json.loads(msg.data)
        except (ValueError, TypeError, RecursionError):
            resp = None
        if type(resp) is dict and resp.keys() <= _PLAIN_ACK_KEYS:
            stream = resp.get("stream")
            seq = resp.get("seq")
            if type(stream) is str and type(seq) is int:
                return PubAck(stream, seq, resp.get("domain"), resp.get("duplicate") is True)
    st = classify(hdrs, msg.data, msg.reply) if hdrs and not msg.data else None
    if st is not None:
        if st.code == NO_RESPONDERS:
            raise NoRespondersError("no stream responded to the publish")
        raise api_error(st.code or None, None, st.description or f"status {st.code} in reply to a publish")
    resp = check_api_response(msg.data)
    if "stream" not in resp or "seq" not in resp:
        raise APIError(None, None, f"malformed PubAck: {msg.data[:100]!r}")
    return _model(PubAck, resp, "PubAck")


@dataclasses.dataclass
class StoredMsg:
    """A message read from a stream by sequence or subject.

    Attributes:
        subject: the subject it was published on.
        seq: its stream sequence.
        data: the payload.
        headers: its headers, or None.
        time: when the stream stored it (aware UTC datetime), or None.
    """

    subject: str
    seq: int
    data: bytes
    headers: dict[str, str] | None
    time: _dt.datetime | None

    def __repr__(self) -> str:
        return f"StoredMsg(subject={self.subject!r}, seq={self.seq}, data={self.data[:32]!r}, time={self.time})"
