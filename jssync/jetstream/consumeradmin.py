"""The JetStream context's consumer room: create, update, look up, list, pause, reset and delete consumers.

:class:`ConsumerAdmin` is one of the rooms :class:`jssync.JetStream` is made of (see
jetstream/context.py); like the stream room it sends every request through the context's API
layer (:class:`~jssync.jetstream.apicalls.APIRoom`), so unit tests drive it with recorded
server replies.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Unpack

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout
from ..base.errors import (
    ConsumerNotFoundError,
    JetStreamNotEnabledError,
    RequestTimeoutError,
    ServiceUnavailableError,
    TimeoutError,
    ValidationError,
)
from ..base.validate import check_int
from ..core import natspy as _natspy
from . import priority as _priority
from .apicalls import APIRoom, int_field, level
from .model import (
    CONSUMER_FIELDS,
    attach_fields,
    field_names,
    fields_from_reply,
    fields_wire,
    keep_extra,
    required_level,
    to_wire,
)
from .params import ConsumerParams, _consumer_config, validate_name
from .replies import _model
from .sourcing import is_flow_control

if TYPE_CHECKING:
    from .consumers import Consumer


def consumer_wire(config: api.ConsumerConfig) -> dict[str, Any]:
    """``config`` as sent: nats-py's fields plus the ADR-42 fields params._consumer_config sets and
    the pull request limits (model.CONSUMER_FIELDS), plus the keys of the reply it was read from
    that nats-py does not model (sent back unchanged)."""
    body = to_wire(config)
    body.update(_priority.wire_fields(_priority.of_config(config)))
    body.update(fields_wire(config, CONSUMER_FIELDS))
    return body


def consumer_model(resp: Any, what: str = "consumer info") -> api.ConsumerInfo:
    """A ConsumerInfo from a reply, with the ADR-42 fields nats-py drops put back on it.

    ``info.config.priority_policy`` / ``priority_groups`` / ``priority_timeout`` (seconds)
    and ``info.priority_groups`` (the server's per-group state: ``group``,
    ``pinned_client_id``, ``pinned_ts``), read with ``getattr``; the pull request limits
    ``info.config.max_batch`` / ``max_expires`` (seconds) / ``max_bytes`` (None when unset).
    """
    raw = resp.get("config") if isinstance(resp, dict) else None
    prio = _priority.from_reply(raw)
    state = resp.get("priority_groups") if isinstance(resp, dict) else None
    info: api.ConsumerInfo = _model(api.ConsumerInfo, resp, what)
    _priority.attach(info, prio, state)
    cfg = getattr(info, "config", None)
    attach_fields(cfg, fields_from_reply(raw, CONSUMER_FIELDS), CONSUMER_FIELDS)
    keep_extra(cfg, raw, _priority.CONFIG_FIELDS + field_names(CONSUMER_FIELDS))
    return info


_NAME_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def ephemeral_name() -> str:
    """A name for an ephemeral consumer the application did not name: 8 random letters and digits
    (as nats.go chooses them), valid on any subject and in any permission pattern."""
    return "".join(secrets.choice(_NAME_CHARS) for _ in range(8))


class ConsumerAdmin(APIRoom):
    """Consumer management of a JetStream context (a room of :class:`jssync.JetStream`)."""

    def _upsert_consumer(self, stream: str, config: api.ConsumerConfig, action: str,
                         timeout: float | None | Default) -> Consumer:
        from .consumers import Consumer

        validate_name(stream)
        name = config.name or config.durable_name
        if not name:
            # an ephemeral: a name of the client's choosing, on the named-create subject (ADR-37,
            # as nats.go), so permissions written for that form accept it
            name = ephemeral_name()
            config = copy.copy(config)  # (the caller's stays as it was; attached fields come along)
            config.name = name
        prio = _priority.of_config(config)
        if prio.policy is not None:
            from .features import require

            require(self._context, "prioritized priority policy" if prio.policy == "prioritized" else "priority groups",
                    timeout=timeout)
        feature = None
        need = required_level({f.name: getattr(config, f.name, None) for f in CONSUMER_FIELDS}, CONSUMER_FIELDS)
        if need:
            from .features import require_level

            feature = require_level(self._context, need, "consumer options "
                                    + ", ".join(f.name for f in CONSUMER_FIELDS if f.api_level == need),
                                    timeout=timeout)
        if is_flow_control(config.ack_policy):
            from .features import require

            feature = ("flow control ack policy", require(self._context, "flow control ack policy", timeout=timeout))
        req: dict[str, Any] = {"stream_name": stream, "config": consumer_wire(config)}
        if action:
            req["action"] = action
        if name:
            subject = f"CONSUMER.CREATE.{stream}.{name}"
            if config.filter_subject and not config.filter_subjects:
                subject += f".{config.filter_subject}"
        else:
            subject = f"CONSUMER.CREATE.{stream}"
        resp = self._api(subject, req, timeout, **level(feature))
        return Consumer(self._context, stream, consumer_model(resp))

    def create_consumer(self, stream: str, config: api.ConsumerConfig | None = None, *,
                        timeout: float | None | Default = DEFAULT, **params: Unpack[ConsumerParams]) -> Consumer:
        """Create a consumer on ``stream``: durable with ``durable_name``, else ephemeral (named
        ``name``, or 8 random letters and digits jssync chooses), on the named-create subject
        ``$JS.API.CONSUMER.CREATE.<stream>.<name>``. Blocks for one request, up to ``timeout``.

        Raises:
            ValueError, TypeError: invalid name, filter or option (nothing is sent).
            jssync.ConsumerExistsError: it exists with a different configuration.
            jssync.StreamNotFoundError.
        """
        return self._upsert_consumer(stream, _consumer_config(config, params), "create", timeout)

    def update_consumer(self, stream: str, config: api.ConsumerConfig | None = None, *,
                        timeout: float | None | Default = DEFAULT, **params: Unpack[ConsumerParams]) -> Consumer:
        """Update an existing consumer.

        With keyword fields only (``update_consumer(s, durable_name="D", description="x")``)
        the fields given are set on top of the consumer's current configuration, read first
        with one consumer info request (as :meth:`update_stream` does); fields jssync does not
        model are sent back as the server holds them. With a ``config`` object that object is
        the whole new configuration: every field it leaves at its default goes back to the
        default (fields of the reply it was read from that nats-py does not model are kept).
        Blocks for one or two requests, each up to ``timeout``.

        Raises:
            jssync.ValidationError: no name, unknown option or bad value (nothing is sent).
            jssync.ConsumerNotFoundError: it does not exist.
        """
        if config is None and params:
            name = params.get("name") or params.get("durable_name")
            if not name:
                raise ValidationError("update_consumer needs the consumer's name (name= or durable_name=)")
            _consumer_config(None, params, "update_consumer")  # validate before anything is sent
            current = self._consumer_info(stream, str(name), timeout).config
            fields = {k: v for k, v in params.items() if not (k == "name" and not current.name)}
            cfg = _consumer_config(current, fields, "update_consumer")
        else:
            cfg = _consumer_config(config, params, "update_consumer")
        if not (cfg.name or cfg.durable_name):
            raise ValidationError("update_consumer needs the consumer's name (name= or durable_name=)")
        return self._upsert_consumer(stream, cfg, "update", timeout)

    def create_or_update_consumer(self, stream: str, config: api.ConsumerConfig | None = None, *,
                                  timeout: float | None | Default = DEFAULT,
                                  **params: Unpack[ConsumerParams]) -> Consumer:
        """Create the consumer, or update it if it exists."""
        return self._upsert_consumer(stream, _consumer_config(config, params, "create_or_update_consumer"), "",
                                     timeout)

    def consumer(self, stream: str, name: str, *, timeout: float | None | Default = DEFAULT) -> Consumer:
        """Look up a consumer.

        Raises:
            jssync.ConsumerNotFoundError, jssync.StreamNotFoundError.
        """
        from .consumers import Consumer

        return Consumer(self._context, stream, self._consumer_info(stream, name, timeout))

    def _consumer_info(self, stream: str, name: str, timeout: float | None | Default = DEFAULT) -> api.ConsumerInfo:
        validate_name(stream)
        validate_name(name, "consumer name")
        return consumer_model(self._api(f"CONSUMER.INFO.{stream}.{name}", None, timeout))

    def delete_consumer(self, stream: str, name: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete a consumer.

        Raises:
            jssync.ConsumerNotFoundError, jssync.StreamNotFoundError.
        """
        validate_name(stream)
        validate_name(name, "consumer name")
        return bool(self._api(f"CONSUMER.DELETE.{stream}.{name}", None, timeout).get("success", False))

    def consumers(self, stream: str, *, timeout: float | None | Default = DEFAULT) -> Iterator[api.ConsumerInfo]:
        """Iterate over the info of every consumer of ``stream`` (all pages)."""
        validate_name(stream)
        for item in self._paged(f"CONSUMER.LIST.{stream}", "consumers", {}, timeout):
            yield consumer_model(item)

    def consumer_names(self, stream: str, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over the names of every consumer of ``stream`` (all pages)."""
        validate_name(stream)
        for item in self._paged(f"CONSUMER.NAMES.{stream}", "consumers", {}, timeout):
            yield str(item)

    def pause_consumer(self, stream: str, name: str, until: Any, *, timeout: float | None | Default = DEFAULT) -> Any:
        """Pause delivery of a consumer until ``until`` (an aware datetime). Needs nats-server 2.11+.

        Returns the server's pause state (``paused``, ``pause_until``).

        Raises:
            jssync.NotSupportedError: the server is older than 2.11 (nothing is sent).
        """
        import datetime as _dt

        validate_name(stream)
        validate_name(name, "consumer name")
        if not isinstance(until, _dt.datetime):
            raise TypeError("until must be a datetime")
        from .features import require

        require(self._context, "consumer pause", timeout=timeout)
        body = {"pause_until": _natspy.to_utc_iso(until)}
        return self._api(f"CONSUMER.PAUSE.{stream}.{name}", body, timeout)

    def unpin_consumer(self, stream: str, name: str, group: str, *, timeout: float | None | Default = DEFAULT) -> None:
        """Unpin the client pinned to ``group`` of a ``pinned_client`` consumer (ADR-42; 2.11+).

        The server picks a new pinned client among the waiting pulls of the group (a pull
        that still carries the old pin id is answered with 423).

        Raises:
            ValueError: an invalid stream, consumer or group name (nothing is sent).
            jssync.NotSupportedError: the server is older than 2.11 (nothing is sent).
            jssync.APIError: the consumer has no such group; jssync.ConsumerNotFoundError.
        """
        validate_name(stream)
        validate_name(name, "consumer name")
        _priority.validate_group(group, "group")
        from .features import require

        require(self._context, "priority groups", timeout=timeout)
        self._api(f"CONSUMER.UNPIN.{stream}.{name}", {"group": group}, timeout)

    def resume_consumer(self, stream: str, name: str, *, timeout: float | None | Default = DEFAULT) -> Any:
        """Resume a paused consumer. Needs nats-server 2.11+."""
        validate_name(stream)
        validate_name(name, "consumer name")
        return self._api(f"CONSUMER.PAUSE.{stream}.{name}", {}, timeout)

    def reset_consumer(self, stream: str, name: str, seq: int | None = None, *,
                       timeout: float | None | Default = DEFAULT) -> int:
        """Reset a consumer's delivery state (ADR-60); returns the stream sequence delivery restarts at.

        Pending and redelivered messages are forgotten and the delivered and ack floor
        sequences are reset, as if the consumer had been created anew: with ``seq``, the
        next message delivered is the first at or after stream sequence ``seq`` (forwards
        or backwards); without it, delivery restarts just above the ack floor, so messages
        delivered but not acknowledged come again. Needs nats-server 2.14+ (API level 4);
        only consumers with deliver policy ``all``, ``by_start_sequence`` or
        ``by_start_time`` can be reset to a ``seq`` (not before their start).

        Blocks for one request (and one API level request the first time; one consumer info
        request when the reset gets no answer), at most ``timeout`` in all.

        Raises:
            ValueError: bad stream or consumer name, or ``seq`` not an int >= 1 (nothing is sent).
            jssync.NotSupportedError: the server is older than 2.14 (nothing is sent).
            jssync.ConsumerNotFoundError, jssync.StreamNotFoundError: no such consumer.
            jssync.APIError: the server refused the reset (e.g. err_code 10204, a ``seq``
                before the consumer's start).
        """
        return self._reset_consumer(stream, name, seq, timeout)[0]

    def _reset_consumer(self, stream: str, name: str, seq: int | None,
                        timeout: float | None | Default) -> tuple[int, api.ConsumerInfo]:
        from .features import require

        validate_name(stream)
        validate_name(name, "consumer name")
        if seq is not None:
            check_int(seq, "seq (or None for the ack floor)")
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        need = require(self._context, "consumer reset", timeout=deadline.left())
        suffix = f"CONSUMER.RESET.{stream}.{name}"
        body = None if seq is None else {"seq": seq}
        # the consumer answers the reset itself: no consumer, no answer; a share of the time is
        # kept for the lookup that tells a missing consumer from a slow one (no limit: the
        # reset is asked again after each lookup that found the consumer). ADR-44: the server
        # also refuses it when it is below the level (412, err_code 10185: NotSupportedError)
        while True:
            remaining = deadline.remaining()
            if remaining is None:
                remaining = self.timeout
            reserve = min(0.5, remaining / 4)
            try:
                resp = self._api(suffix, body, max(0.001, remaining - reserve), feature=("consumer reset", need))
                break
            except (TimeoutError, ServiceUnavailableError) as exc:
                if isinstance(exc, JetStreamNotEnabledError):
                    raise
                try:
                    self._consumer_info(stream, name, timeout=deadline.left())
                except ConsumerNotFoundError as nf:
                    raise ConsumerNotFoundError(nf.code, nf.err_code,
                                                f"consumer {name!r} not found on stream {stream!r}") from None
                if deadline.timeout is not None:
                    raise RequestTimeoutError(f"no reply to the reset of consumer {name!r} on stream {stream!r} "
                                              f"within {deadline.timeout}s", subject=f"{self.prefix}.{suffix}",
                                              ) from None
        return int_field(resp, "reset_seq"), consumer_model(resp, "consumer reset")
