"""Stream: one stream's info, its messages, and its consumers."""

from __future__ import annotations

import base64
import datetime as _dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Unpack

from nats.js import api

from ..base.deadline import DEFAULT, Default
from ..base.errors import MessageNotFoundError, ValidationError
from ..base.reprs import Rows, SummaryRepr
from ..base.times import server_time_or_none
from ..base.validate import check_int, validate_subject
from .direct import direct_get, direct_get_batch, direct_get_last_for
from .ordered import OrderedConsumer
from .replies import StoredMsg
from .reprs import stream_rows

if TYPE_CHECKING:
    from .consumers import Consumer
    from .context import JetStream
    from .direct import DirectBatch
    from .ordered import OrderedConsumer
    from .params import ConsumerParams


def parse_header_block(raw: bytes) -> dict[str, str] | None:
    """Parse a ``NATS/1.0`` header block (as stored) into a dict; None when empty."""
    if not raw:
        return None
    lines = raw.decode("utf-8", "replace").split("\r\n")
    out: dict[str, str] = {}
    first = lines[0] if lines else ""
    if first.startswith("NATS/1.0"):
        rest = first[len("NATS/1.0"):].strip()
        if rest:
            code, _, desc = rest.partition(" ")
            out["Status"] = code
            if desc:
                out["Description"] = desc
        lines = lines[1:]
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out or None


#: A server time, or None when missing or unreadable (the one parser: base/times.py).
parse_time = server_time_or_none


class Stream(SummaryRepr):
    """A handle on one stream. Made by :meth:`JetStream.stream` / ``create_stream``. Thread-safe.

    In a notebook it shows its cached info as a table (``_repr_html_``, ``_repr_pretty_``; no I/O).
    """

    def __init__(self, js: JetStream, info: api.StreamInfo) -> None:
        self._js = js
        self._info = info
        assert info.config.name is not None
        self.name: str = info.config.name

    def __repr__(self) -> str:
        return f"<jssync.Stream {self.name!r}>"

    _repr_pretty_ = SummaryRepr._repr_pretty_  # here, not only inherited: IPython takes the nearest __repr__

    def _summary(self) -> tuple[str, Rows]:
        return f"jssync.Stream {self.name!r} (cached info)", stream_rows(self._info)

    @property
    def cached_info(self) -> api.StreamInfo:
        """The info from when this handle was made or last refreshed (no I/O)."""
        return self._info

    def info(self, *, deleted_details: bool = False, subjects_filter: str | None = None,
             timeout: float | None | Default = DEFAULT) -> api.StreamInfo:
        """Fetch the stream's info (refreshes :attr:`cached_info`).

        ``subjects_filter`` (e.g. ``">"``) adds per-subject counts (all pages);
        ``deleted_details`` lists deleted sequences.

        Raises:
            jssync.StreamNotFoundError.
        """
        self._info = self._js._stream_info(self.name, deleted_details=deleted_details,
                                           subjects_filter=subjects_filter, timeout=timeout)
        return self._info

    def purge(self, subject: str | None = None, seq: int | None = None, keep: int | None = None, *,
              timeout: float | None | Default = DEFAULT) -> int:
        """Remove messages: all, those on ``subject``, those below ``seq``, or all but the last ``keep``.

        Returns the number purged.

        Raises:
            ValueError: ``seq`` and ``keep`` together.
        """
        if seq is not None and keep is not None:
            raise ValidationError("purge takes seq or keep, not both")
        req: dict[str, Any] = {}
        if subject is not None:
            validate_subject(subject, "purge subject")
            req["filter"] = subject
        if seq is not None:
            if seq < 1:
                raise ValidationError(f"purge seq must be >= 1, got {seq!r}")
            req["seq"] = seq
        if keep is not None:
            if keep < 0:
                raise ValidationError(f"purge keep must be >= 0, got {keep!r}")
            req["keep"] = keep
        resp = self._js._api(f"STREAM.PURGE.{self.name}", req or None, timeout)
        return int(resp.get("purged", 0))

    def get_msg(self, seq: int | None = None, *, last_by_subject: str | None = None,
                next_by_subject: str | None = None, timeout: float | None | Default = DEFAULT) -> StoredMsg:
        """Read one stored message through the stream leader (STREAM.MSG.GET).

        By ``seq``; by ``last_by_subject``; or the first message at or after ``seq``
        (default 1) on ``next_by_subject``.

        Raises:
            jssync.MessageNotFoundError: no such message.
            ValueError: no or conflicting selectors.
        """
        req: dict[str, Any] = {}
        if last_by_subject is not None:
            if seq is not None or next_by_subject is not None:
                raise ValidationError("last_by_subject cannot be combined with seq or next_by_subject")
            validate_subject(last_by_subject, "last_by_subject")
            req["last_by_subj"] = last_by_subject
        elif next_by_subject is not None:
            validate_subject(next_by_subject, "next_by_subject")
            req["next_by_subj"] = next_by_subject
            req["seq"] = 1 if seq is None else seq
        elif seq is not None:
            req["seq"] = seq
        else:
            raise ValidationError("get_msg needs seq, last_by_subject or next_by_subject")
        if "seq" in req:
            check_int(req["seq"], "seq", minimum=0)
        resp = self._js._api(f"STREAM.MSG.GET.{self.name}", req, timeout)
        m = resp.get("message") or {}
        if not m:
            raise MessageNotFoundError(404, 10037, "no message found")
        data = base64.b64decode(m["data"]) if m.get("data") else b""
        hdrs = parse_header_block(base64.b64decode(m["hdrs"])) if m.get("hdrs") else None
        return StoredMsg(subject=m.get("subject", ""), seq=int(m.get("seq", 0)), data=data, headers=hdrs,
                         time=parse_time(m.get("time")))

    def delete_msg(self, seq: int, *, erase: bool = False, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete the message at ``seq``; ``erase=True`` overwrites its data on disk.

        Raises:
            jssync.MessageNotFoundError (or APIError): no such message.
        """
        req: dict[str, Any] = {"seq": check_int(seq, "seq")}
        if not erase:
            req["no_erase"] = True
        return bool(self._js._api(f"STREAM.MSG.DELETE.{self.name}", req, timeout).get("success", False))

    # -- consumers -------------------------------------------------------------------------

    def consumer(self, name: str, *, timeout: float | None | Default = DEFAULT) -> Consumer:
        """Look up a consumer of this stream (raises jssync.ConsumerNotFoundError)."""
        return self._js.consumer(self.name, name, timeout=timeout)

    def create_consumer(self, config: api.ConsumerConfig | None = None, *, timeout: float | None | Default = DEFAULT,
                        **params: Unpack[ConsumerParams]) -> Consumer:
        """See :meth:`JetStream.create_consumer`."""
        return self._js.create_consumer(self.name, config, timeout=timeout, **params)

    def update_consumer(self, config: api.ConsumerConfig | None = None, *, timeout: float | None | Default = DEFAULT,
                        **params: Unpack[ConsumerParams]) -> Consumer:
        """See :meth:`JetStream.update_consumer`."""
        return self._js.update_consumer(self.name, config, timeout=timeout, **params)

    def create_or_update_consumer(self, config: api.ConsumerConfig | None = None, *,
                                  timeout: float | None | Default = DEFAULT,
                                  **params: Unpack[ConsumerParams]) -> Consumer:
        """See :meth:`JetStream.create_or_update_consumer`."""
        return self._js.create_or_update_consumer(self.name, config, timeout=timeout, **params)

    def delete_consumer(self, name: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """See :meth:`JetStream.delete_consumer`."""
        return self._js.delete_consumer(self.name, name, timeout=timeout)

    def consumers(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[api.ConsumerInfo]:
        return self._js.consumers(self.name, timeout=timeout)

    def consumer_names(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        return self._js.consumer_names(self.name, timeout=timeout)

    # -- ordered consumer (ADR-17; implemented in jetstream/ordered.py) ------------------------------

    def ordered_consumer(self, **options: Any) -> OrderedConsumer:
        """Return an ordered consumer on this stream (see :class:`jssync.OrderedConsumer`).

        Options: ``filter_subjects``, ``deliver_policy``, ``opt_start_seq``,
        ``opt_start_time``, ``replay_policy``, ``inactive_threshold``, ``headers_only``.
        """
        return OrderedConsumer(self._js, self.name, **options)

    # -- Direct Get (ADR-31; implemented in jetstream/direct.py) -------------------------------------

    def direct_get(self, seq: int | None = None, *, last_by_subject: str | None = None,
                   next_by_subject: str | None = None, start_time: _dt.datetime | None = None,
                   timeout: float | None | Default = DEFAULT) -> StoredMsg:
        """Read one message with Direct Get (served by any replica or mirror with allow_direct).

        Sends only the Direct Get request (see :meth:`JetStream.direct_get`).

        Raises:
            jssync.MessageNotFoundError: no such message.
            jssync.DirectGetNotAllowedError: the stream does not allow direct gets.
        """
        return direct_get(self._js, self.name, seq=seq, last_by_subject=last_by_subject,
                          next_by_subject=next_by_subject, start_time=start_time, timeout=timeout)

    def direct_get_batch(self, subject: str, batch: int, *, seq: int | None = None,
                         start_time: _dt.datetime | None = None, max_bytes: int | None = None,
                         timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """Read up to ``batch`` messages on ``subject`` from ``seq`` (or ``start_time``) in one request.

        Returns an iterator of :class:`StoredMsg` that ends at the server's end-of-batch marker.
        """
        return direct_get_batch(self._js, self.name, subject, batch, seq=seq, start_time=start_time,
                                max_bytes=max_bytes, timeout=timeout)

    def direct_get_last_for(self, subjects: list[str], *, up_to_seq: int | None = None,
                            up_to_time: _dt.datetime | None = None, batch: int | None = None,
                            timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """Read the last message of each of ``subjects`` (multi_last), as of ``up_to_seq``/``up_to_time``."""
        return direct_get_last_for(self._js, self.name, subjects, up_to_seq=up_to_seq, up_to_time=up_to_time,
                                   batch=batch, timeout=timeout)
