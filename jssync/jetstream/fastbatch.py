"""The pure part of a fast-ingest batch (ADR-50): reply subjects, the server's replies, the
flow window, and the batch's bookkeeping.

:class:`~jssync.jetstream.fastpublish.FastPublisher` does the I/O (the inbox, sending,
waiting, pinging) on top of :class:`FastBatch`, which keeps the batch's state: the
highest sequence sent and acknowledged, the server's flow, pings answered, the gap and
error reports, and how the batch ended. Nothing here blocks, locks or sends: the
publisher calls it under its lock.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from nats.js import api

from ..base.errors import (
    APIError,
    FastPublishGapError,
    JetStreamError,
    NoRespondersError,
    NotSupportedError,
    ValidationError,
    api_error,
)
from ..base.status import NO_RESPONDERS, classify
from .replies import PubAck, _model

#: The operations of ADR-50's reply subject.
OP_START, OP_APPEND, OP_COMMIT, OP_EOB, OP_PING = 0, 1, 2, 3, 4

#: Gap modes: "ok" goes on past lost messages, "fail" ends the batch at the first one.
GAP_MODES = ("ok", "fail")

#: Defaults: ask for a flow ack every 100 messages and allow 2 of them outstanding (ADR-50
#: calls 2 "generally optimal"); the server may lower the flow for this batch at any time.
DEFAULT_FLOW = 100
DEFAULT_MAX_OUTSTANDING_ACKS = 2
#: ADR-50 keeps the outstanding acks to 1-3 (each stands for ``flow`` messages).
MAX_OUTSTANDING_ACKS = 3
#: The flow is a uint16 on the server.
MAX_FLOW = 65535


def reply_subject(prefix: str, seq: int, op: int) -> str:
    """The reply subject of batch message ``seq`` with operation ``op``.

    ``prefix`` is ``<inbox>.<initial flow>.<gap>.`` (fixed for the batch: the server reads
    the initial flow and gap mode from every message, for followers that missed the first).
    """
    return f"{prefix}{seq}.{op}.$FI"



class FlowAck(NamedTuple):
    seq: int
    msgs: int


class Gap(NamedTuple):
    """Messages ``first_missing`` .. ``seq - 1`` of the batch were lost (a gap report)."""

    first_missing: int
    seq: int


class FlowError(NamedTuple):
    """Batch message ``seq`` was refused (an error report), e.g. a failed ``expected_*`` check."""

    seq: int
    error: APIError


class Final(NamedTuple):
    """The batch is over: its PubAck, or the error that ended it."""

    ack: api.PubAck | None
    error: BaseException | None


def parse_reply(data: bytes, headers: dict[str, str] | None) -> FlowAck | Gap | FlowError | Final:
    """Sort one message the server sent to the batch's inbox (pure).

    A status message (503: no stream captures the subject) and an error reply become a
    :class:`Final` with the error; anything unreadable too (the batch cannot go on safely).
    """
    if headers and not data:
        st = classify(headers, data, "")
        if st is not None:
            if st.code == NO_RESPONDERS:
                return Final(None, NoRespondersError("no stream captures the fast batch's subject"))
            return Final(None, api_error(st.code or None, None, st.description or f"status {st.code}"))
    try:
        resp = json.loads(data)
    except (ValueError, TypeError, RecursionError):
        resp = None
    if not isinstance(resp, dict):
        return Final(None, APIError(None, None, f"malformed fast batch reply: {bytes(data[:100])!r}"))
    kind = resp.get("type")
    if kind == "ack":
        seq, msgs = resp.get("seq", -1), resp.get("msgs", -1)
        if _uint(seq) and _uint(msgs) and msgs > 0:
            return FlowAck(seq, msgs)
    elif kind == "gap":
        first, seq = resp.get("last_seq", -1), resp.get("seq", -1)
        if _uint(first) and _uint(seq):
            return Gap(first, seq)
    elif kind == "err":
        seq, err = resp.get("seq", -1), resp.get("error")
        if _uint(seq) and isinstance(err, dict):
            return FlowError(seq, _api_error(err))
    elif kind is None:
        err = resp.get("error")
        if isinstance(err, dict):
            return Final(None, _api_error(err))
        try:
            return Final(_model(PubAck, resp, "PubAck"), None)
        except APIError as exc:
            return Final(None, exc)
    return Final(None, APIError(None, None, f"malformed fast batch reply: {bytes(data[:100])!r}"))


def _uint(v: Any) -> bool:
    return type(v) is int and v >= 0


def _api_error(err: dict[str, Any]) -> APIError:
    code, err_code = err.get("code"), err.get("err_code")
    return api_error(code if type(code) is int else None, err_code if type(err_code) is int else None,
                     str(err.get("description") or "fast batch publish failed"))


def window_open(next_seq: int, acked: int, flow: int, max_outstanding_acks: int) -> bool:
    """May batch message ``next_seq`` be sent, with the server's last flow ack at ``acked``?

    At most ``flow x max_outstanding_acks`` messages beyond the last ack are in flight
    (ADR-50: wait once ``acked + flow x max_outstanding_acks <= seq`` after sending ``seq``).
    """
    return next_seq - acked <= flow * max_outstanding_acks


def check_options(gap: Any, flow: Any, max_outstanding_acks: Any) -> None:
    """Raise ValidationError for a bad ``gap``, ``flow`` or ``max_outstanding_acks`` (pure)."""
    if gap not in GAP_MODES or not isinstance(gap, str):
        raise ValidationError(f"gap must be 'ok' (go on past lost messages) or 'fail' (end the batch at the "
                              f"first lost message), got {gap!r}")
    if isinstance(flow, bool) or not isinstance(flow, int) or not 1 <= flow <= MAX_FLOW:
        raise ValidationError(f"flow must be an int from 1 to {MAX_FLOW} (a flow ack every that many "
                              f"messages), got {flow!r}")
    if (isinstance(max_outstanding_acks, bool) or not isinstance(max_outstanding_acks, int)
            or not 1 <= max_outstanding_acks <= MAX_OUTSTANDING_ACKS):
        raise ValidationError(f"max_outstanding_acks must be 1, 2 or 3 (ADR-50), got {max_outstanding_acks!r}")


_START, _EOB, _PING = str(OP_START), str(OP_EOB), str(OP_PING)


class FastBatch:
    """The bookkeeping of one fast batch (pure; the owner holds its lock around every call).

    The states: ``new`` (nothing sent) -> ``open`` -> ``closing`` (the end-of-batch marker
    sent) -> ``closed`` | ``failed``, or ``abandoned`` from any of them (the owner's doing).
    """

    def __init__(self, batch_id: str, gap: str, flow: int, max_outstanding_acks: int) -> None:
        self.batch_id = batch_id
        self.gap = gap
        self._initial_flow = flow
        self._max_acks = max_outstanding_acks
        self._state = "new"  # new -> open -> closing -> closed | failed | abandoned
        self._flow = flow
        self._sent = 0  # the highest batch sequence sent
        self._acked = 0  # the highest batch sequence the server acknowledged
        self._first_reply = False
        self._pings = 0  # pings sent
        self._pongs = 0  # replies to pings received
        self._gap_seen: Gap | None = None
        self._no_responders = 0  # messages no stream took (a 503 status), after the first
        self._eob_lost = False  # the end-of-batch marker got a 503: close sends it again
        self._error: BaseException | None = None  # what ended the batch (raised by the next call)
        self.ack: api.PubAck | None = None
        self.gaps: list[Gap] = []
        self.errors: list[FlowError] = []
        self.stalls = 0

    def _fits(self) -> bool:
        """The next message may go: the window is open and no gap ends the batch."""
        if self._gap_seen is not None:  # gap="fail": the server's final PubAck is on its way
            return False
        return window_open(self._sent + 1, self._acked, self._flow, self._max_acks)

    def _raise_if_over_locked(self) -> None:
        if self._error is not None:
            raise self._error
        if self._state in ("closing", "closed", "abandoned", "failed"):
            raise ValidationError(f"fast batch {self.batch_id} is {self._state}: nothing more can be added")

    def _take(self, op: str, r: FlowAck | Gap | FlowError | Final) -> tuple[bool, BaseException | None]:
        """One server message ``r``, answering a message with operation ``op`` (its digit).

        Returns (the batch is over: the inbox can go, the report for ``error_cb`` or None).
        """
        if isinstance(r, Final) and isinstance(r.error, NoRespondersError) and op != _START:
            # no stream leader took this message (e.g. during a leader election): it is lost like
            # any other, and the leader that takes the next one reports the gap; not the end
            self._no_responders += 1
            if op == _EOB:
                self._eob_lost = True
            return False, None
        if op == _PING:
            if isinstance(r, Final) and r.error is not None and self._state == "closing":
                # a ping that reached the stream after the end-of-batch marker finds no
                # batch; on a replicated stream that answer can come before the PubAck,
                # which is what close waits for
                return False, None
            self._pongs += 1
        report: BaseException | None = None
        if isinstance(r, FlowAck):
            self._first_reply = True
            if r.seq > self._acked:  # cumulative: an ack covers every earlier one, lost or not
                self._acked = r.seq
            self._flow = min(r.msgs, self._initial_flow)
        elif isinstance(r, Gap):
            self.gaps.append(r)
            if self.gap == "fail":
                if self._gap_seen is None:
                    self._gap_seen = r
            else:
                report = FastPublishGapError(
                    f"fast batch {self.batch_id}: messages {r.first_missing} to {r.seq - 1} were lost "
                    "(gap='ok': the batch goes on)", first_missing=r.first_missing, seq=r.seq)
        elif isinstance(r, FlowError):
            e = r.error
            r = FlowError(r.seq, api_error(e.code, e.err_code,
                                           f"fast batch {self.batch_id} message {r.seq}: {e.description}"))
            self.errors.append(r)
            report = r.error
            if self.gap == "fail" and self._error is None:
                self._error = r.error
        else:
            self._first_reply = True
            self._finish(r)
            return True, None
        return False, report

    def _finish(self, r: Final) -> None:
        """The batch is over: keep its PubAck, and the error that ended it."""
        if self._state in ("closed", "failed"):
            return
        ack, err = r.ack, r.error
        if ack is not None:
            self.ack = ack
        if self._error is not None:  # an error report already ended it (gap="fail")
            pass
        elif self._gap_seen is not None:  # gap="fail": the server ended the batch at the gap
            g = self._gap_seen
            stored = (f"{ack.batch_size} messages are stored, the last at stream sequence {ack.seq}"
                      if ack is not None else "the final PubAck was lost")
            self._error = FastPublishGapError(
                f"fast batch {self.batch_id}: message {g.first_missing} was lost and the server ended the batch "
                f"(gap='fail'); {stored}", first_missing=g.first_missing, seq=g.seq, ack=ack)
        elif ack is not None and ack.batch_id is None and self._sent <= 1:
            # a plain PubAck for the first message: the server did not take it as a fast batch
            self._error = NotSupportedError(
                "fast batch publish needs nats-server 2.14+ (JetStream API level 4): the server stored "
                "the first message as an ordinary publish", feature="fast batch publish",
                required_level=4, required_version="2.14")
        elif isinstance(err, APIError) and err.err_code == 10205:
            self._error = api_error(err.code, err.err_code,
                                    f"{err.description}: the stream needs allow_batched=True for fast batch publish")
        elif err is not None:
            self._error = err
        elif self._state != "closing":
            self._error = JetStreamError(f"fast batch {self.batch_id} was ended by the server after "
                                         f"{ack.batch_size if ack else '?'} messages")
        self._state = "failed" if self._error is not None else "closed"
