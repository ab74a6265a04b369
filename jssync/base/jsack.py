"""Pure parsing of JetStream ack subjects (ADR-15 "JSAck"): no I/O."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from .errors import NotJSMessageError

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


@dataclass(frozen=True)
class SequencePair:
    """Stream and consumer sequence of a delivered message."""

    stream: int
    consumer: int


@dataclass(frozen=True)
class MsgMetadata:
    """What the ack subject of a JetStream message tells about it."""

    sequence: SequencePair
    num_delivered: int
    num_pending: int
    timestamp: _dt.datetime
    stream: str
    consumer: str
    domain: str | None = None
    account_hash: str | None = None


def parse_ack_subject(reply: str) -> MsgMetadata:
    """Parse ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (v1, 9
    tokens) or ``$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>...]``
    (v2, 11 or more tokens). A v2 domain of ``_`` means no domain.

    Raises:
        NotJSMessageError: the subject is not an ack subject of either form.
    """
    tokens = reply.split(".")
    n = len(tokens)
    if n < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        raise NotJSMessageError(f"not a JetStream ack subject: {reply!r}")
    if n == 9:
        domain = None
        acc = None
        rest = tokens[2:]
    elif n >= 11:
        domain = None if tokens[2] == "_" else tokens[2]
        acc = tokens[3]
        rest = tokens[4:11]
    else:
        raise NotJSMessageError(f"not a JetStream ack subject: {reply!r}")
    stream, consumer = rest[0], rest[1]
    nums = rest[2:7]
    # ADR-15: the number tokens are unsigned decimal integers; anything else is an error
    # (int() alone would accept "+1", "1_0" or non-ASCII digits).
    if not stream or not consumer or not all(x.isascii() and x.isdigit() for x in nums):
        raise NotJSMessageError(f"malformed JetStream ack subject: {reply!r}")
    delivered, sseq, cseq, ts, pending = (int(x) for x in nums)
    secs, nanos = divmod(ts, 1_000_000_000)
    try:
        timestamp = _EPOCH + _dt.timedelta(seconds=secs, microseconds=nanos // 1000)
    except OverflowError:  # past year 9999: not a timestamp a server sends
        raise NotJSMessageError(f"malformed JetStream ack subject (timestamp out of range): {reply!r}") from None
    return MsgMetadata(
        sequence=SequencePair(sseq, cseq),
        num_delivered=delivered,
        num_pending=pending,
        timestamp=timestamp,
        stream=stream,
        consumer=consumer,
        domain=domain,
        account_hash=acc,
    )
