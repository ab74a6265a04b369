"""The JetStream context (ADR-37): stream and consumer management, and publishing."""

from __future__ import annotations

import base64  # noqa: F401  (re-used by sibling modules through this one)
import concurrent.futures
import datetime as _dt
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Unpack, overload

from nats.js import api

from ..base.cpython import LeanFuture
from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout
from ..base.errors import (
    APIError,
    ConnectionClosedError,
    Error,
    JetStreamError,
    NoAckStreamError,
    NoRespondersError,
    NotFoundError,
    ReconnectBufferExceededError,
    RequestTimeoutError,
    TimeoutError,
    ValidationError,
    check_api_response,
    name_missing,
    worth_retrying,
)
from ..base.status import is_no_responders
from ..base.validate import (
    _check_data,
    _headers_size,
    check_int,
    check_number,
    validate_headers,
    validate_subject,
)
from ..core import hooks as _core_hooks
from ..core import natspy as _natspy
from ..core.hooks import HOOKS as _CORE
from ..core.request_errors import cancelled, jetstream_unavailable, no_responders
from . import priority as _priority
from .hooks import HOOKS
from .params import (  # (names of the context too: validate_name, HDR_*, _consumer_config)
    HDR_EXPECTED_LAST_MSG_ID,
    HDR_EXPECTED_LAST_SEQ,
    HDR_EXPECTED_LAST_SUBJECT_SEQ,
    HDR_EXPECTED_STREAM,
    HDR_MSG_ID,
    STREAM_CHOICES,
    STREAM_OPTIONS,
    ConsumerParams,
    KeyValueParams,
    ObjectStoreParams,
    StreamParams,
    _consumer_config,
    check_choices,
    check_options,
    normalize_config,
    validate_name,
)
from .replies import PubAck, _model, _parse_pub_ack
from .sourcing import is_flow_control, normalize_sources, put_back_consumers, source_consumers, stream_wire

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.msg import Msg
    from ..kv.codecs import CodecKeyValue, KeyCodec, ValueCodec
    from ..kv.keyvalue import KeyValue, KeyValueStatus
    from ..objectstore.objectstore import ObjectStore, ObjectStoreStatus
    from .consumers import Consumer
    from .direct import DirectBatch
    from .fastpublish import FastPublisher
    from .msgfeatures import BatchPublisher, Counter
    from .push import JetStreamSubscription
    from .replies import StoredMsg
    from .streams import Stream

log = logging.getLogger("jssync")

def _stream_config(config: api.StreamConfig | None, params: Mapping[str, Any],
                   call: str = "create_stream") -> api.StreamConfig:
    if config is None:
        config = api.StreamConfig()
    elif not isinstance(config, api.StreamConfig):
        raise TypeError(f"config must be a StreamConfig, got {type(config).__name__}")
    if params:
        check_options(params, STREAM_OPTIONS, call)
        config = config.evolve(**params)
    validate_name(config.name, "stream name")
    check_choices(config, STREAM_CHOICES)
    config = normalize_config(config)
    config = normalize_sources(config, validate_name)
    marker_ttl = config.subject_delete_marker_ttl
    if marker_ttl is not None and marker_ttl != 0:
        # ADR-43: at least 1 s (the server refuses less); nats-py would silently drop a negative one
        from .msgfeatures import go_duration

        go_duration(marker_ttl, "subject_delete_marker_ttl")
    if config.subjects is not None:
        if isinstance(config.subjects, str):
            raise TypeError("subjects must be a list of subjects, not a str")
        from ..base.validate import validate_subject

        for s in config.subjects:
            validate_subject(s, "stream subject")
    return config


def _consumer_wire(config: api.ConsumerConfig) -> dict[str, Any]:
    """``config`` as sent: nats-py's fields plus the ADR-42 fields :func:`_consumer_config` set."""
    body = config.as_dict()
    body.update(_priority.wire_fields(_priority.of_config(config)))
    return body


def _consumer_model(resp: Any, what: str = "consumer info") -> api.ConsumerInfo:
    """A ConsumerInfo from a reply, with the ADR-42 fields nats-py drops put back on it.

    ``info.config.priority_policy`` / ``priority_groups`` / ``priority_timeout`` (seconds)
    and ``info.priority_groups`` (the server's per-group state: ``group``,
    ``pinned_client_id``, ``pinned_ts``), read with ``getattr``.
    """
    raw = resp.get("config") if isinstance(resp, dict) else None
    prio = _priority.from_reply(raw)
    state = resp.get("priority_groups") if isinstance(resp, dict) else None
    info: api.ConsumerInfo = _model(api.ConsumerInfo, resp, what)
    _priority.attach(info, prio, state)
    return info




class JetStream:
    """A JetStream context: streams, consumers and publishing on one connection.

    Made with :meth:`jssync.Connection.jetstream`. Every blocking call takes ``timeout``
    (default: the context's) and raises :class:`jssync.TimeoutError` when it runs out.
    Thread-safe.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        domain: str | None = None,
        api_prefix: str | None = None,
        timeout: float = 5.0,
        max_pending: int = 4000,
    ) -> None:
        if domain is not None and api_prefix is not None:
            raise ValidationError("set domain or api_prefix, not both")
        if domain is not None:
            validate_name(domain, "domain")
            self.prefix = f"$JS.{domain}.API"
        elif api_prefix is not None:
            if not api_prefix or " " in api_prefix:
                raise ValidationError(f"invalid api_prefix {api_prefix!r}")
            self.prefix = api_prefix.rstrip(".")
        else:
            self.prefix = "$JS.API"
        if timeout <= 0:
            raise ValidationError(f"timeout must be > 0, got {timeout!r}")
        if max_pending < 1:
            raise ValidationError(f"max_pending must be >= 1, got {max_pending!r}")
        self.domain = domain
        self._conn = conn
        self.timeout = timeout
        self.max_pending = max_pending
        self._async = _AsyncPublisher(self)
        #: subject -> stream name, for subjects found to be captured by a ``no_ack`` stream
        self._no_ack: dict[str, str] = {}
        self._no_ack_looking: set[str] = set()

    def __repr__(self) -> str:
        return f"<jssync.JetStream prefix={self.prefix!r}>"

    @property
    def conn(self) -> Connection:
        """The :class:`jssync.Connection` this context was made from (no I/O).

        A context owns no connection of its own: to shut down, close this one
        (``js.conn.close()``; see docs/frameworks.md, rule 4), which also ends every consumer,
        subscription and pending publish of the context.
        """
        return self._conn

    # -- API requests -----------------------------------------------------------------------

    def _api(self, suffix: str, payload: dict[str, Any] | bytes | None = None,
             timeout: float | None | Default = DEFAULT, *, feature: tuple[str, int] | None = None) -> dict[str, Any]:
        """Send one JetStream API request and return the parsed reply.

        ``feature`` (name, API level): the request carries ``Nats-Required-Api-Level`` (ADR-44),
        so a server below that level (2.12+) refuses it instead of ignoring what it lacks.

        Raises:
            jssync.NotSupportedError: with ``feature``, the server refused it for its level (10185).
            jssync.APIError (and subclasses): the server answered with an error.
            jssync.ServiceUnavailableError: no JetStream answered (no leader, restarting; retriable),
                jssync.JetStreamNotEnabledError (a ServiceUnavailableError): the server runs
                without JetStream (not retriable).
            jssync.RequestTimeoutError (a jssync.TimeoutError): no reply in time.
            jssync.RequestCancelledError (a ConnectionClosedError): closed or drained meanwhile.
        """
        if payload is None:
            data = b""
        elif isinstance(payload, bytes):
            data = payload
        else:
            data = json.dumps(payload).encode()
        subject = f"{self.prefix}.{suffix}"
        headers = None if feature is None else {"Nats-Required-Api-Level": str(feature[1])}
        try:
            msg = self.conn.internal.request(subject, data, headers, resolve_timeout(timeout, self.timeout))
        except NoRespondersError as exc:
            raise jetstream_unavailable(self.conn, subject) from exc
        try:
            return check_api_response(msg.data)
        except NotFoundError as exc:
            name_missing(exc, suffix)
            err: APIError = exc
        except APIError as exc:
            if exc.err_code == 10185 and feature is not None:
                from .features import not_supported

                raise not_supported(feature[0], exc) from exc
            if exc.err_code != 10065 or not isinstance(payload, dict):
                raise
            err = exc
            self._name_overlap(err, payload)
        raise err

    def _name_overlap(self, err: APIError, config: dict[str, Any]) -> None:
        """Say which stream holds the subjects a stream create/update overlaps (err_code 10065).

        The server only says "subjects overlap with an existing stream"; one STREAM.NAMES
        request per subject (at most 1 s in all) finds the holder. Best effort: on any
        failure the server's text stays as it is.
        """
        held: list[str] = []
        deadline = Deadline(1.0)
        try:
            for subj in config.get("subjects") or []:
                resp = self._api("STREAM.NAMES", {"subject": subj}, max(deadline.remaining() or 0.0, 0.05))
                for other in resp.get("streams") or []:
                    if other != config.get("name"):
                        held.append(f"stream {other!r} holds subjects that overlap {subj!r}")
        except Error as exc:
            log.debug("could not find the overlapping stream: %s", exc)
        if held:
            err.args = (f"{err.args[0]}: {'; '.join(held)}",)

    def account_info(self, timeout: float | None | Default = DEFAULT) -> api.AccountInfo:
        """Return the account's JetStream usage and limits."""
        return _model(api.AccountInfo, self._api("INFO", None, timeout), "account info")

    # -- server feature level (ADR-44; implemented in jetstream/features.py) ---------------------------

    def api_level(self, *, refresh: bool = False, timeout: float | None | Default = DEFAULT) -> int:
        """The JetStream API level of the server(s) behind this context (ADR-44).

        0 before nats-server 2.11, 1 for 2.11, 2 for 2.12, 4 for 2.14, 5 for 2.15. Read
        from the ``$JS.API.INFO`` reply once per connection and API prefix (again after
        the connection moved to another server, or with ``refresh=True``); later calls do
        no I/O. Calls that need a newer server check it and raise
        :class:`jssync.NotSupportedError` before sending anything.
        """
        from .features import api_level

        return api_level(self, refresh=refresh, timeout=timeout)

    def _require_stream_features(self, cfg: api.StreamConfig,
                                 timeout: float | None | Default) -> tuple[str, int] | None:
        """NotSupportedError if ``cfg`` uses a feature the server's API level lacks (no I/O without one).

        Returns the feature the request must carry the API level of (durable sourcing: a
        server before it would ignore the source's consumer), or None.
        """
        from .features import require, stream_features

        header: tuple[str, int] | None = None
        for feature in stream_features(cfg):
            level = require(self, feature, timeout=timeout)
            if feature == "durable sourcing":
                header = (feature, level)
        return header

    # -- streams ---------------------------------------------------------------------------

    def create_stream(self, config: api.StreamConfig | None = None, *, timeout: float | None | Default = DEFAULT,
                      **params: Unpack[StreamParams]) -> Stream:
        """Create a stream from ``config`` or keyword fields (``name=``, ``subjects=``, ...).

        Creating a stream that exists with the same config returns it. While the cluster
        reports a peer it needs as offline for a moment ("no suitable peers for placement,
        peer offline", e.g. just after a node started), the create is tried again every
        0.25 s within ``timeout``.

        Raises:
            ValueError, TypeError: invalid name, subject or option (nothing is sent).
            jssync.StreamNameInUseError: it exists with a different configuration.
            jssync.APIError: e.g. placement still impossible when ``timeout`` runs out.
        """
        from .streams import Stream

        cfg = _stream_config(config, params)
        feature = self._require_stream_features(cfg, timeout)
        body = stream_wire(cfg)
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        while True:
            try:
                resp = self._api(f"STREAM.CREATE.{cfg.name}", body, deadline.left(), **_level(feature))
                break
            except APIError as exc:
                # a transient view of the meta leader (a peer's route just reconnected)
                if (exc.err_code != 10005 or "offline" not in (exc.description or "")
                        or (left := deadline.remaining()) is not None and left < 0.5):
                    raise
                log.debug("stream %r: %s; trying again", cfg.name, exc.description)
                time.sleep(0.25)
        return Stream(self, _stream_model(resp))

    def update_stream(self, config: api.StreamConfig | None = None, *, timeout: float | None | Default = DEFAULT,
                      **params: Unpack[StreamParams]) -> Stream:
        """Update an existing stream.

        With keyword fields only (``update_stream(name="S", max_msgs=10)``) the fields given
        are set on top of the stream's current configuration, read first with one stream
        info request (what ``nats stream edit`` does); a concurrent update between that read
        and the write is overwritten. With a ``config`` object that object is the whole new
        configuration (keyword fields set on it first): every field it leaves at its default
        goes back to the default.

        Raises:
            ValueError, TypeError: no or invalid name, unknown option (nothing is sent).
            jssync.NotSupportedError: the config uses a feature the server's API level lacks.
            jssync.StreamNotFoundError: there is no such stream.
        """
        from .streams import Stream

        if config is not None or not params:
            cfg = _stream_config(config, params, "update_stream")
            body = stream_wire(cfg)
        else:
            cfg, body = self._edited_stream_config(dict(params), timeout)
        feature = self._require_stream_features(cfg, timeout)
        resp = self._api(f"STREAM.UPDATE.{cfg.name}", body, timeout, **_level(feature))
        return Stream(self, _stream_model(resp))

    def _edited_stream_config(self, params: dict[str, Any], timeout: float | None | Default,
                              ) -> tuple[api.StreamConfig, dict[str, Any]]:
        """The stream's current config with the fields in ``params`` set (``name`` names the stream).

        The fields given replace those of the config as the server sent it; everything
        else is sent back as it came (fields nats-py does not model included).
        """
        params = dict(params)
        name = params.pop("name", None)
        if name is None:
            raise ValidationError("update_stream needs the stream's name (name=) or a StreamConfig")
        check_options(params, STREAM_OPTIONS, "update_stream")
        validate_name(name)
        resp = self._api(f"STREAM.INFO.{name}", None, timeout)
        raw = resp.get("config")
        if not isinstance(raw, dict):
            raise APIError(None, None, "malformed stream info reply: no config object")
        raw = json.loads(json.dumps(raw))  # a deep copy: parsing resp turns its nested dicts into objects
        current = _stream_model(resp).config
        cfg = _stream_config(current, params, "update_stream")
        fields = stream_wire(cfg)
        for key in params:
            if key in fields:
                raw[key] = fields[key]
            else:  # set to None: back to the server's default
                raw.pop(key, None)
        # server-computed metadata (_nats.*) is set again by the server on every update
        md = raw.get("metadata")
        if isinstance(md, dict):
            raw["metadata"] = {k: v for k, v in md.items() if not str(k).startswith("_nats.")}
        return cfg, raw

    def create_or_update_stream(self, config: api.StreamConfig | None = None, *,
                                timeout: float | None | Default = DEFAULT,
                                **params: Unpack[StreamParams]) -> Stream:
        """Update the stream, or create it if it does not exist.

        As with :meth:`update_stream`, keyword fields alone update only those fields of an
        existing stream; a ``config`` object is the whole configuration.
        """
        from ..base.errors import StreamNotFoundError

        cfg = _stream_config(config, params, "create_or_update_stream")
        try:
            if config is None and params:
                return self.update_stream(timeout=timeout, **params)
            return self.update_stream(cfg, timeout=timeout)
        except StreamNotFoundError:
            return self.create_stream(cfg, timeout=timeout)

    def stream(self, name: str, *, timeout: float | None | Default = DEFAULT) -> Stream:
        """Look up a stream.

        Raises:
            jssync.StreamNotFoundError: there is no such stream.
        """
        from .streams import Stream

        validate_name(name)
        return Stream(self, self._stream_info(name, timeout=timeout))

    def _stream_info(self, name: str, *, deleted_details: bool = False, subjects_filter: str | None = None,
                     timeout: float | None | Default = DEFAULT) -> api.StreamInfo:
        req: dict[str, Any] = {}
        if deleted_details:
            req["deleted_details"] = True
        if subjects_filter:
            validate_subject(subjects_filter, "subjects_filter")
            req["subjects_filter"] = subjects_filter
        if not subjects_filter:
            resp = self._api(f"STREAM.INFO.{name}", req or None, timeout)
            return _stream_model(resp)
        # subjects come in pages: gather them all
        subjects: dict[str, int] = {}
        offset = 0
        while True:
            req["offset"] = offset
            resp = self._api(f"STREAM.INFO.{name}", req, timeout)
            state = resp.get("state") or {}
            page = (state.get("subjects") if isinstance(state, dict) else None) or {}
            if not isinstance(page, dict):
                raise APIError(None, None, f"malformed stream info reply: subjects is {type(page).__name__}")
            subjects.update(page)
            total = _int_field(resp, "total")
            limit = _int_field(resp, "limit")
            offset += len(page)
            if not page or not limit or offset >= total:
                break
        resp["state"] = dict(state if isinstance(state, dict) else {}, subjects=subjects)
        return _stream_model(resp)

    def delete_stream(self, name: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete a stream and its messages.

        Raises:
            jssync.StreamNotFoundError: there is no such stream.
        """
        validate_name(name)
        resp = self._api(f"STREAM.DELETE.{name}", None, timeout)
        return bool(resp.get("success", False))

    def streams(self, subject: str | None = None, *,
                timeout: float | None | Default = DEFAULT) -> Iterator[api.StreamInfo]:
        """Iterate over every stream's info (all pages), optionally those listening on ``subject``.

        Each page is one request, made as the iteration reaches it (blocking up to ``timeout``).

        Raises:
            jssync.BadSubjectError: ``subject`` is not a valid subject filter (at once,
                before anything is sent).
        """
        req = _subject_filter(subject)
        return (_stream_model(item) for item in self._paged("STREAM.LIST", "streams", req, timeout))

    def stream_names(self, subject: str | None = None, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over every stream name (all pages), optionally those listening on ``subject``.

        Each page is one request, made as the iteration reaches it (blocking up to ``timeout``).

        Raises:
            jssync.BadSubjectError: ``subject`` is not a valid subject filter (at once,
                before anything is sent).
        """
        req = _subject_filter(subject)
        return (str(item) for item in self._paged("STREAM.NAMES", "streams", req, timeout))

    # -- Direct Get (ADR-31; implemented in jetstream/direct.py) -------------------------------------

    def direct_get(self, stream: str, seq: int | None = None, *, last_by_subject: str | None = None,
                   next_by_subject: str | None = None, start_time: _dt.datetime | None = None,
                   timeout: float | None | Default = DEFAULT) -> StoredMsg:
        """Read one message of ``stream`` with Direct Get, without a stream handle.

        Sends the Direct Get request and nothing else (no STREAM.INFO), so it works while
        the stream has no leader or, for a mirror with ``mirror_direct``, while the
        upstream is down. Selectors as in :meth:`jssync.Stream.direct_get`.

        Raises:
            ValueError, TypeError: bad name or selectors (nothing is sent).
            jssync.MessageNotFoundError: no such message.
            jssync.DirectGetNotAllowedError, jssync.StreamNotFoundError: nobody answered
                because the stream does not allow direct gets or does not exist.
            jssync.NoRespondersError: no replica or mirror answered.
            jssync.TimeoutError.
        """
        from .direct import direct_get

        validate_name(stream)
        return direct_get(self, stream, seq=seq, last_by_subject=last_by_subject, next_by_subject=next_by_subject,
                          start_time=start_time, timeout=timeout)

    def direct_get_batch(self, stream: str, subject: str, batch: int, *, seq: int | None = None,
                         start_time: _dt.datetime | None = None, max_bytes: int | None = None,
                         timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """:meth:`jssync.Stream.direct_get_batch` without a stream handle (no STREAM.INFO is sent)."""
        from .direct import direct_get_batch

        validate_name(stream)
        return direct_get_batch(self, stream, subject, batch, seq=seq, start_time=start_time,
                                max_bytes=max_bytes, timeout=timeout)

    def direct_get_last_for(self, stream: str, subjects: list[str], *, up_to_seq: int | None = None,
                            up_to_time: _dt.datetime | None = None, batch: int | None = None,
                            timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """:meth:`jssync.Stream.direct_get_last_for` without a stream handle (no STREAM.INFO is sent)."""
        from .direct import direct_get_last_for

        validate_name(stream)
        return direct_get_last_for(self, stream, subjects, up_to_seq=up_to_seq, up_to_time=up_to_time,
                                   batch=batch, timeout=timeout)

    def find_stream_name_by_subject(self, subject: str, *, timeout: float | None | Default = DEFAULT) -> str:
        """Return the name of the one stream that captures ``subject``.

        One STREAM.NAMES request (per page), blocking up to ``timeout``.

        Raises:
            jssync.BadSubjectError: ``subject`` is not a valid subject (nothing is sent).
            jssync.StreamNotFoundError: no stream captures it.
            jssync.JetStreamError: more than one does.
        """
        from ..base.errors import StreamNotFoundError

        names = list(self.stream_names(subject, timeout=timeout))
        if not names:
            raise StreamNotFoundError(404, 10059, f"no stream matches subject {subject!r}")
        if len(names) > 1:
            raise JetStreamError(f"more than one stream matches subject {subject!r}: {names}")
        return names[0]

    def _paged(self, suffix: str, key: str, req: dict[str, Any], timeout: float | None | Default,
               ) -> Iterator[Any]:
        offset = 0
        while True:
            body = dict(req, offset=offset)
            resp = self._api(suffix, body, timeout)
            items = resp.get(key) or []
            if not isinstance(items, list):
                raise APIError(None, None, f"malformed {suffix} reply: {key!r} is {type(items).__name__}, not a list")
            total = _int_field(resp, "total")
            yield from items
            offset += len(items)
            if not items or offset >= total:
                return

    # -- consumers -------------------------------------------------------------------------

    def _upsert_consumer(self, stream: str, config: api.ConsumerConfig, action: str,
                         timeout: float | None | Default) -> Consumer:
        from .consumers import Consumer

        validate_name(stream)
        name = config.name or config.durable_name
        prio = _priority.of_config(config)
        if prio.policy is not None:
            from .features import require

            require(self, "prioritized priority policy" if prio.policy == "prioritized" else "priority groups",
                    timeout=timeout)
        feature = None
        if is_flow_control(config.ack_policy):
            from .features import require

            feature = ("flow control ack policy", require(self, "flow control ack policy", timeout=timeout))
        req: dict[str, Any] = {"stream_name": stream, "config": _consumer_wire(config)}
        if action:
            req["action"] = action
        if name:
            subject = f"CONSUMER.CREATE.{stream}.{name}"
            if config.filter_subject and not config.filter_subjects:
                subject += f".{config.filter_subject}"
        else:
            subject = f"CONSUMER.CREATE.{stream}"
        resp = self._api(subject, req, timeout, **_level(feature))
        return Consumer(self, stream, _consumer_model(resp))

    def create_consumer(self, stream: str, config: api.ConsumerConfig | None = None, *,
                        timeout: float | None | Default = DEFAULT, **params: Unpack[ConsumerParams]) -> Consumer:
        """Create a consumer on ``stream`` (durable with ``durable_name``/``name``, else ephemeral).

        Raises:
            ValueError, TypeError: invalid name, filter or option (nothing is sent).
            jssync.ConsumerExistsError: it exists with a different configuration.
            jssync.StreamNotFoundError.
        """
        return self._upsert_consumer(stream, _consumer_config(config, params), "create", timeout)

    def update_consumer(self, stream: str, config: api.ConsumerConfig | None = None, *,
                        timeout: float | None | Default = DEFAULT, **params: Unpack[ConsumerParams]) -> Consumer:
        """Update an existing consumer.

        Raises:
            jssync.ConsumerNotFoundError: it does not exist.
        """
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

        return Consumer(self, stream, self._consumer_info(stream, name, timeout))

    def _consumer_info(self, stream: str, name: str, timeout: float | None | Default = DEFAULT) -> api.ConsumerInfo:
        validate_name(stream)
        validate_name(name, "consumer name")
        return _consumer_model(self._api(f"CONSUMER.INFO.{stream}.{name}", None, timeout))

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
            yield _consumer_model(item)

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

        require(self, "consumer pause", timeout=timeout)
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

        require(self, "priority groups", timeout=timeout)
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
        from ..base.errors import ConsumerNotFoundError
        from .features import require

        validate_name(stream)
        validate_name(name, "consumer name")
        if seq is not None:
            check_int(seq, "seq (or None for the ack floor)")
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        level = require(self, "consumer reset", timeout=deadline.left())
        subject = f"{self.prefix}.CONSUMER.RESET.{stream}.{name}"
        data = b"" if seq is None else json.dumps({"seq": seq}).encode()
        # ADR-44: the server also refuses it when it is below the level (412, err_code 10185)
        headers = {"Nats-Required-Api-Level": str(level)}
        # the consumer answers the reset itself: no consumer, no answer; a share of the time is
        # kept for the lookup that tells a missing consumer from a slow one (no limit: the
        # reset is asked again after each lookup that found the consumer)
        while True:
            remaining = deadline.remaining()
            if remaining is None:
                remaining = self.timeout
            reserve = min(0.5, remaining / 4)
            try:
                msg = self.conn.internal.request(subject, data, headers, max(0.001, remaining - reserve))
                break
            except (TimeoutError, NoRespondersError):
                try:
                    self._consumer_info(stream, name, timeout=deadline.left())
                except ConsumerNotFoundError as exc:
                    raise ConsumerNotFoundError(exc.code, exc.err_code,
                                                f"consumer {name!r} not found on stream {stream!r}") from None
                if deadline.timeout is not None:
                    raise RequestTimeoutError(f"no reply to the reset of consumer {name!r} on stream {stream!r} "
                                              f"within {deadline.timeout}s", subject=subject) from None
        try:
            resp = check_api_response(msg.data)
        except APIError as exc:
            if exc.err_code == 10185:
                from ..base.errors import NotSupportedError

                raise NotSupportedError(f"consumer reset: {exc.description}", feature="consumer reset",
                                        required_level=level, required_version="2.14") from exc
            raise
        return _int_field(resp, "reset_seq"), _consumer_model(resp, "consumer reset")

    # -- publishing ------------------------------------------------------------------------

    def _pub_headers(self, headers: dict[str, str] | None, msg_id: str | None, expected_stream: str | None,
                     expected_last_seq: int | None, expected_last_subject_seq: int | None,
                     expected_last_msg_id: str | None, ttl: float | str | None = None) -> dict[str, str] | None:
        if msg_id is None and expected_stream is None and expected_last_seq is None and \
                expected_last_subject_seq is None and expected_last_msg_id is None and ttl is None:
            return headers
        h = dict(headers) if headers else {}
        if ttl is not None:
            from .msgfeatures import HDR_TTL, ttl_header

            h[HDR_TTL] = ttl_header(ttl)
        if msg_id is not None:
            if not isinstance(msg_id, str) or not msg_id:
                raise ValidationError(f"msg_id must be a non-empty str, got {msg_id!r}")
            h[HDR_MSG_ID] = msg_id
        if expected_stream is not None:
            h[HDR_EXPECTED_STREAM] = validate_name(expected_stream, "expected_stream")
        if expected_last_seq is not None:
            h[HDR_EXPECTED_LAST_SEQ] = str(_nonneg(expected_last_seq, "expected_last_seq"))
        if expected_last_subject_seq is not None:
            h[HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(_nonneg(expected_last_subject_seq, "expected_last_subject_seq"))
        if expected_last_msg_id is not None:
            h[HDR_EXPECTED_LAST_MSG_ID] = expected_last_msg_id
        return h

    def _prepare_publish(self, subject: str, data: bytes, headers: dict[str, str] | None, msg_id: str | None,
                         expected_stream: str | None, expected_last_seq: int | None,
                         expected_last_subject_seq: int | None,
                         expected_last_msg_id: str | None,
                         ttl: float | str | None = None) -> tuple[bytes, dict[str, str] | None]:
        """Validate a JetStream publish before anything is sent; return the payload and headers.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError, ValueError, TypeError.
            jssync.MaxPayloadError: payload plus header block over the server's max_payload
            (the server would close the connection).
        """
        validate_subject(subject, wildcards=False)
        if msg_id is None and expected_stream is None and expected_last_seq is None and \
                expected_last_subject_seq is None and expected_last_msg_id is None and ttl is None:
            h = headers  # (what _pub_headers returns then, without the call)
        else:
            h = self._pub_headers(headers, msg_id, expected_stream, expected_last_seq,
                                  expected_last_subject_seq, expected_last_msg_id, ttl)
        if h is not None:
            validate_headers(h)
        if data.__class__ is not bytes:  # (bytes pass without the call)
            data = _check_data(data)
        size = len(data) if h is None else len(data) + _headers_size(h)
        max_payload = self._conn.max_payload
        if size > max_payload:
            from ..base.errors import MaxPayloadError

            raise MaxPayloadError(
                f"payload of {size} bytes (headers included) on {subject!r} is over the server's max_payload "
                f"of {max_payload} bytes"
            )
        return data, h

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: Literal[True] = True,
    ) -> PubAck: ...

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: Literal[False],
    ) -> None: ...

    @overload
    def publish(
        self, subject: str, data: bytes = b"", *, headers: dict[str, str] | None = None,
        msg_id: str | None = None, expected_stream: str | None = None, expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None, expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT, retry_attempts: int = 2, retry_wait: float = 0.25,
        ack: bool,
    ) -> PubAck | None: ...

    def publish(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT,
        retry_attempts: int = 2,
        retry_wait: float = 0.25,
        ack: bool = True,
    ) -> PubAck | None:
        """Publish to a stream and wait for its acknowledgement.

        ``msg_id`` sets ``Nats-Msg-Id`` for de-duplication (a duplicate within the stream's
        duplicate window returns a PubAck with ``duplicate=True``); the ``expected_*``
        options make the publish conditional. ``ttl`` (seconds, >= 1, or ``"never"``) sets
        ``Nats-TTL``: the stream removes the message that long after storing it (ADR-43; the
        stream needs ``allow_msg_ttl=True``, else the publish fails with an APIError,
        err_code 10166). While no stream answers (503 / no
        responders, e.g. during a leader election) the publish is retried up to
        ``retry_attempts`` times with growing waits, within ``timeout``.

        Blocks until the PubAck arrives (default timeout: the context's).

        ``ack=False`` is for streams configured with ``no_ack``, which store messages
        without ever answering: the message is published like :meth:`Connection.publish`
        (buffered, returns None at once, nothing confirms it was stored; ``conn.flush()``
        waits until the server has it). The ``expected_*`` checks need a PubAck to report
        a failure, so they are refused with ``ack=False``.

        Raises:
            jssync.NoRespondersError: no stream captures ``subject``.
            jssync.WrongLastSequenceError, jssync.WrongLastMsgIdError,
            jssync.StreamNotMatchError: an expectation failed.
            jssync.NoAckStreamError: no PubAck came in time and the stream capturing
                ``subject`` has ``no_ack`` (it never sends one; the message was sent). Known
                from a background lookup started by an earlier timeout on ``subject``.
            jssync.TimeoutError, jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError.
            ValueError: e.g. ``ttl`` not a number >= 1 or ``"never"`` (nothing is sent).
        """
        tracer = _CORE.tracer  # jssync.otel: a send span, trace context in the headers (None: off)
        if tracer is not None and tracer.wants():
            return tracer.js_publish(self, subject, data, headers, dict(
                msg_id=msg_id, expected_stream=expected_stream, expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq, expected_last_msg_id=expected_last_msg_id,
                ttl=ttl, timeout=timeout, retry_attempts=retry_attempts, retry_wait=retry_wait, ack=ack))
        data, h = self._prepare_publish(subject, data, headers, msg_id, expected_stream, expected_last_seq,
                                        expected_last_subject_seq, expected_last_msg_id, ttl)
        if not ack:
            if expected_stream is not None or expected_last_seq is not None or \
                    expected_last_subject_seq is not None or expected_last_msg_id is not None:
                raise ValidationError("the expected_* checks are reported in the PubAck: they need ack=True")
            self.conn.publish(subject, data, headers=h)
            return None
        if not (retry_attempts.__class__ is int and retry_wait.__class__ is float
                and 0 <= retry_attempts <= 1_000_000 and 0.0 <= retry_wait < math.inf):
            _check_retry(retry_attempts, retry_wait)  # (the usual values pass without the call)
        deadline = Deadline(self.timeout if timeout is DEFAULT else resolve_timeout(timeout, self.timeout))
        request = self._conn.internal.request
        attempt = 0
        while True:
            failed: BaseException | None = None
            try:
                # _prepare_publish validated everything request() would
                msg = request(subject, data, h, deadline.left())
            except TimeoutError:
                failed = self._no_pub_ack(subject, deadline.timeout)
            except Error as exc:
                if not worth_retrying(exc):
                    raise
                left = deadline.remaining()
                if attempt < retry_attempts and (left is None or left > retry_wait * (attempt + 1)):
                    attempt += 1
                elif isinstance(exc, NoRespondersError):
                    failed = no_responders(
                        subject, f"no stream responded to the publish on {subject!r} (no stream captures it, "
                        "or its leader is not elected)"
                    )
                else:
                    raise
            else:
                return _parse_pub_ack(msg)
            if failed is not None:  # raised outside the handler: no internal context
                raise failed
            time.sleep(retry_wait * attempt)

    def _no_pub_ack(self, subject: str, waited: float | None) -> BaseException:
        """The error for a publish whose PubAck did not come in time (never blocks).

        :class:`NoAckStreamError` when ``subject`` is known to be captured by a ``no_ack``
        stream (it never answers), else :class:`TimeoutError`. A subject not looked at yet is
        looked up in the background on the worker pool (stream for the subject, its info),
        so the caller's timeout is kept: the first timed-out publish to a ``no_ack`` stream
        raises TimeoutError (with a hint) and logs a warning naming the stream once the
        lookup has answered; later ones raise NoAckStreamError. While the connection is not
        connected the TimeoutError says so instead (reconnecting: to which server, which
        attempt; or closed: why), and nothing is looked up.
        """
        state = self.conn.internal.link_state()
        if state is not None:  # not the stream's fault: no PubAck can come while disconnected
            return RequestTimeoutError(f"no PubAck for the publish on {subject!r} within {waited}s: {state}",
                                       subject=subject, disconnected=True)
        name = self._no_ack.get(subject)
        if name is not None:
            return NoAckStreamError(
                name, subject,
                f"stream {name!r} is configured with no_ack: it never sends a PubAck, so none came for the "
                f"publish on {subject!r} within {waited}s; the message was sent and is stored unless a limit "
                "refused it; publish to this stream with ack=False")
        if subject not in self._no_ack_looking and len(self._no_ack_looking) < 64:
            self._no_ack_looking.add(subject)
            try:
                self.conn.internal.pool.submit(self._look_for_no_ack, subject)
            except Exception:  # the pool is gone: the connection is closing
                self._no_ack_looking.discard(subject)
        return RequestTimeoutError(
            f"no PubAck for the publish on {subject!r} within {waited}s (if its stream has no_ack, "
            "publish with ack=False)", subject=subject)

    def _look_for_no_ack(self, subject: str) -> None:
        """Worker pool: remember ``subject`` when the stream capturing it has ``no_ack``."""
        try:
            t = min(self.timeout, 2.0)
            name = self.find_stream_name_by_subject(subject, timeout=t)
            if self._stream_info(name, timeout=t).config.no_ack:
                self._no_ack[subject] = name
                log.warning("stream %r has no_ack: publishes on %r never get a PubAck (the messages are "
                            "stored); publish to it with ack=False", name, subject)
        except Error:
            pass
        finally:
            self._no_ack_looking.discard(subject)

    def publish_async(
        self,
        subject: str,
        data: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        ttl: float | str | None = None,
        timeout: float | None | Default = DEFAULT,
        retry_attempts: int = 2,
        retry_wait: float = 0.25,
    ) -> concurrent.futures.Future[PubAck]:
        """Publish without waiting; the returned Future resolves to the PubAck.

        The options are :meth:`publish`'s (``ttl=`` included).
        Blocks (never drops) while ``max_pending`` PubAcks are outstanding. While no
        stream answers (503 / no responders, e.g. during a leader election) the message is
        sent again up to ``retry_attempts`` times after growing waits (``retry_wait``,
        2 x ``retry_wait``, ...), within ``timeout``; the Future then fails with
        :class:`jssync.NoRespondersError`. A resent message is stored after messages
        published later that did not need a resend: pass ``retry_attempts=0`` when the
        order in the stream matters (or chain ``expected_last_seq``). A PubAck that
        does not arrive within ``timeout`` (default: the context's) fails its Future with
        :class:`jssync.TimeoutError`; closing the connection fails the Futures still
        waiting with :class:`jssync.ConnectionClosedError`, and ``Connection.drain()``
        waits for them first. While disconnected the message waits for the reconnect in
        the connection's publish queue (a message whose Future failed meanwhile is not
        sent); with the connection's ``reconnect_buffer_size`` used up the Future fails at
        once with :class:`jssync.ReconnectBufferExceededError`. Done-callbacks added to
        the Future run on the worker pool (or at once, on the caller's thread, when the
        Future is already done), never on the I/O thread.

        Raises:
            jssync.BadSubjectError, jssync.BadHeaderError, jssync.MaxPayloadError (before sending).
            jssync.ConnectionClosedError: the connection is closed.
        """
        tracer = _CORE.tracer  # jssync.otel: a send span ended by the PubAck (None: off)
        if tracer is not None and tracer.wants():
            return tracer.js_publish_async(self, subject, data, headers, dict(
                msg_id=msg_id, expected_stream=expected_stream, expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq, expected_last_msg_id=expected_last_msg_id,
                ttl=ttl, timeout=timeout, retry_attempts=retry_attempts, retry_wait=retry_wait))
        data, h = self._prepare_publish(subject, data, headers, msg_id, expected_stream, expected_last_seq,
                                        expected_last_subject_seq, expected_last_msg_id, ttl)
        _check_retry(retry_attempts, retry_wait)
        t = resolve_timeout(timeout, self.timeout)
        return self._async.publish(subject, data, h, math.inf if t is None else t,  # inf: no limit
                                   retry_attempts, float(retry_wait))

    def publish_async_pending(self) -> int:
        """PubAcks outstanding."""
        return self._async.pending

    def publish_async_completed(self, timeout: float | None = 30.0) -> None:
        """Wait until every outstanding publish_async has its PubAck (or failed).

        Blocks up to ``timeout`` seconds (None: no limit).

        Raises:
            jssync.TimeoutError: some are still outstanding after ``timeout``.
        """
        self._async.wait_all(Deadline(timeout))

    # -- counters, atomic batches, schedules (ADR-49/50/51; implemented in jetstream/msgfeatures.py) -------

    def counter(self, subject: str, *, stream: str | None = None) -> Counter:
        """A distributed counter on ``subject`` (ADR-49; the stream needs ``allow_msg_counter=True``).

        ``counter.add(n)`` returns the new total, ``counter.get()`` reads it; ``stream`` saves
        looking up the stream that captures ``subject`` on the first read.
        """
        from .msgfeatures import Counter

        return Counter(self, subject, stream)

    def batch_publish(self, *, batch_id: str | None = None,
                      timeout: float | None | Default = DEFAULT) -> BatchPublisher:
        """An atomic batch (ADR-50; the stream needs ``allow_atomic=True``): all stored or none.

        ``with js.batch_publish() as batch: batch.add(subject, data, ...)`` commits when the
        block ends normally and sends nothing when it ends with an exception; see
        :class:`jssync.BatchPublisher`.
        """
        from .msgfeatures import BatchPublisher

        return BatchPublisher(self, batch_id=batch_id, timeout=timeout)

    def fast_publisher(self, *, gap: str = "fail", flow: int = 100, max_outstanding_acks: int = 2,
                       timeout: float | None | Default = DEFAULT,
                       error_cb: Callable[[BaseException], Any] | None = None) -> FastPublisher:
        """A fast-ingest batch (ADR-50; nats-server 2.14+, the stream needs ``allow_batched=True``).

        ``with js.fast_publisher() as fp: fp.add(subject, data, ...)`` sends each message
        at once, paced by the server's flow acks, and ends the batch when the block ends
        (``fp.ack`` is then its PubAck); see :class:`jssync.FastPublisher`. Nothing is sent
        here.

        Args:
            gap: ``"fail"`` (the batch ends at the first lost message: what is stored has
                no gaps) or ``"ok"`` (the batch goes on; gaps are reported to ``error_cb``).
            flow: ask for a flow ack every this many messages (1-65535; the server may
                lower it).
            max_outstanding_acks: how many flow acks may be outstanding before ``add``
                waits (1-3).
            timeout: the default wait of ``add``, ``flush`` and ``close`` (default: the
                context's timeout).
            error_cb: called on the worker pool with each gap (gap="ok") and error report.

        Raises:
            jssync.ValidationError: a bad option.
        """
        from .fastpublish import FastPublisher

        return FastPublisher(self, gap=gap, flow=flow, max_outstanding_acks=max_outstanding_acks,
                             timeout=timeout, error_cb=error_cb)

    def publish_scheduled(
        self,
        subject: str,
        data: bytes = b"",
        *,
        target: str,
        at: Any = None,
        every: Any = None,
        cron: str | None = None,
        ttl: float | str | None = None,
        time_zone: str | None = None,
        source: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None | Default = DEFAULT,
    ) -> api.PubAck:
        """Store a schedule on ``subject`` that publishes ``data`` to ``target`` (ADR-51).

        Exactly one of: ``at`` (an aware datetime: once, then the schedule is removed),
        ``every`` (seconds or a timedelta, >= 1) or ``cron`` (6 fields, seconds first, or
        ``@hourly``/``@daily``/...; UTC unless ``time_zone``, e.g. ``"Europe/Amsterdam"``).
        ``ttl`` sets the TTL of each message produced (needs ``allow_msg_ttl`` too);
        ``source`` publishes the last message on that subject instead of ``data``. The
        stream needs ``allow_msg_schedules=True`` and must capture ``target``; one schedule
        per subject (publishing another on the subject replaces it; purging the subject
        stops it). Other ``headers`` are copied to the produced messages.

        Raises:
            ValueError: no or several of at/every/cron, a naive ``at``, ``every`` < 1 s, a
                cron expression without 6 fields, ``target`` equal to ``subject`` (nothing is sent).
            jssync.APIError: the server refused the schedule (err_code 10188: schedules not
                allowed on the stream; 10189: invalid pattern; 10190: invalid target).
        """
        from .msgfeatures import schedule_headers

        validate_subject(subject, wildcards=False)
        h = schedule_headers(subject, target, at, every, cron, ttl, time_zone, source, headers)
        return self.publish(subject, data, headers=h, timeout=timeout)

    # -- push subscribe (ADR-15; implemented in jetstream/push.py) -----------------------------------

    def subscribe(
        self,
        subject: str,
        durable: str | None = None,
        queue: str | None = None,
        stream: str | None = None,
        consumer: str | None = None,
        callback: Any = None,
        manual_ack: bool = False,
        ordered: bool = False,
        idle_heartbeat: float | None = None,
        flow_control: bool = False,
        config: api.ConsumerConfig | None = None,
        **options: Any,
    ) -> JetStreamSubscription:
        """Subscribe with a push consumer, following the ADR-15 workflow (see :mod:`jssync.jetstream.push`)."""
        from .push import subscribe

        return subscribe(self, subject, durable=durable, queue=queue, stream=stream, consumer=consumer,
                         callback=callback, manual_ack=manual_ack, ordered=ordered,
                         idle_heartbeat=idle_heartbeat, flow_control=flow_control, config=config, **options)

    # -- key-value store (ADR-8; implemented in kv/keyvalue.py) -------------------------------------

    def create_key_value(self, config: Any = None, **params: Unpack[KeyValueParams]) -> KeyValue:
        """Create a key-value bucket (``bucket=``, ``history=``, ``ttl=``, ...)."""
        return HOOKS.create_key_value(self, config, **params)

    @overload
    def key_value(self, bucket: str, *, key_codec: None = None, value_codec: None = None,
                  timeout: float | None | Default = DEFAULT) -> KeyValue: ...

    @overload
    def key_value(self, bucket: str, *, key_codec: KeyCodec, value_codec: ValueCodec | None = None,
                  timeout: float | None | Default = DEFAULT) -> CodecKeyValue: ...

    @overload
    def key_value(self, bucket: str, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec,
                  timeout: float | None | Default = DEFAULT) -> CodecKeyValue: ...

    def key_value(self, bucket: str, *, key_codec: KeyCodec | None = None, value_codec: ValueCodec | None = None,
                  timeout: float | None | Default = DEFAULT) -> KeyValue | CodecKeyValue:
        """Open an existing key-value bucket (raises jssync.BucketNotFoundError).

        With ``key_codec`` and/or ``value_codec`` (NATS ADR-54; see :mod:`jssync.kv.codecs`),
        returns a :class:`jssync.CodecKeyValue` whose keys and values go through them.
        """
        return HOOKS.key_value(self, bucket, key_codec=key_codec, value_codec=value_codec, timeout=timeout)

    def delete_key_value(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete a key-value bucket and its stream."""
        return HOOKS.delete_key_value(self, bucket, timeout=timeout)

    def update_key_value(self, config: Any = None, **params: Any) -> KeyValue:
        """Update a bucket's whole configuration (``bucket=``, ``history=``, ...), built as on create.

        Options left out go back to their defaults. Raises jssync.BucketNotFoundError.
        """
        return HOOKS.update_key_value(self, config, **params)

    def create_or_update_key_value(self, config: Any = None, **params: Any) -> KeyValue:
        """Update the bucket, or create it if it does not exist."""
        return HOOKS.create_or_update_key_value(self, config, **params)

    def key_value_store_names(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over the name of every key-value bucket (mirrors included; all pages)."""
        return HOOKS.key_value_store_names(self, timeout=timeout)

    def key_value_stores(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[KeyValueStatus]:
        """Iterate over the :class:`jssync.KeyValueStatus` of every key-value bucket (all pages)."""
        return HOOKS.key_value_stores(self, timeout=timeout)

    # -- object store (ADR-20; implemented in objectstore/objectstore.py) -------------------------------

    def create_object_store(self, config: Any = None, **params: Unpack[ObjectStoreParams]) -> ObjectStore:
        """Create an object store (``bucket=``, ``ttl=``, ``storage=``, ...)."""
        return HOOKS.create_object_store(self, config, **params)

    def object_store(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> ObjectStore:
        """Open an existing object store (raises jssync.BucketNotFoundError)."""
        return HOOKS.object_store(self, bucket, timeout=timeout)

    def delete_object_store(self, bucket: str, *, timeout: float | None | Default = DEFAULT) -> bool:
        """Delete an object store and every object in it."""
        return HOOKS.delete_object_store(self, bucket, timeout=timeout)

    def object_store_names(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over the name of every object store (all pages)."""
        return HOOKS.object_store_names(self, timeout=timeout)

    def object_stores(self, *, timeout: float | None | Default = DEFAULT) -> Iterator[ObjectStoreStatus]:
        """Iterate over the status of every object store (all pages)."""
        return HOOKS.object_stores(self, timeout=timeout)


def _subject_filter(subject: str | None) -> dict[str, Any]:
    """The request body of a stream listing by ``subject`` (None or "": all streams)."""
    if not subject:
        return {}
    validate_subject(subject, "subject filter")
    return {"subject": subject}


def _level(feature: tuple[str, int] | None) -> dict[str, Any]:
    """``_api``'s ``feature=`` keyword when a request needs an API level, else nothing."""
    return {} if feature is None else {"feature": feature}


def _nonneg(v: Any, what: str) -> int:
    return check_int(v, what, minimum=0)  # an expected sequence: uint64


def _stream_model(resp: Any) -> api.StreamInfo:
    """A StreamInfo from a reply; APIError unless it has a config with a name."""
    found = source_consumers(resp.get("config")) if isinstance(resp, dict) else None
    info: api.StreamInfo = _model(api.StreamInfo, resp, "stream info")
    cfg = getattr(info, "config", None)
    if not isinstance(cfg, api.StreamConfig) or not isinstance(cfg.name, str) or not cfg.name:
        raise APIError(None, None, "malformed stream info reply: no stream config with a name")
    put_back_consumers(cfg, found)  # (nats-py < 2.16 drops a source's consumer)
    return info


def _int_field(resp: dict[str, Any], key: str) -> int:
    value = resp.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(None, None, f"malformed API reply: {key!r} is {value!r}, not an integer")
    return value


def _check_retry(attempts: Any, wait: Any) -> None:
    """Raise ValueError for a retry count or wait a publish cannot use."""
    check_int(attempts, "retry_attempts", minimum=0, open_ended=True)
    check_number(wait, "retry_wait", above=None, minimum=0)


#: A resend needs at least this long before the publish's deadline for its reply to arrive.
_RESEND_MARGIN = 0.05


class _PubAckFuture(LeanFuture["PubAck"]):
    """The Future of a publish_async: its done-callbacks never run on the I/O thread.

    The PubAck is handled on the connection's I/O thread, where a plain Future would run
    the callbacks; a slow or blocking callback there would stall the whole connection
    (and a blocking jssync call in it would fail). Here a callback that would run on the
    I/O thread runs on the worker pool instead; elsewhere (a callback added to a Future
    that is already done, or completed by ``close()``) it runs at once, as usual. The
    Futures of one publisher share a Condition (see :class:`jssync.base.cpython.LeanFuture`).
    """

    def __init__(self, conn: Connection, condition: threading.Condition) -> None:
        super().__init__(condition)
        self._conn = conn

    def new_deadline(self, timeout: float | None) -> Deadline:
        return Deadline(timeout)

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[PubAck]], object]) -> None:
        conn = self._conn

        def call(fut: concurrent.futures.Future[PubAck]) -> None:
            pool = conn.internal.pool
            if conn.internal.loop.in_loop_thread() and not pool._closed:
                pool.submit(fn, fut)
            else:
                fn(fut)

        super().add_done_callback(call)


def _resolve(fut: concurrent.futures.Future[PubAck], result: PubAck | None,
             exc: BaseException | None) -> None:
    """Complete ``fut`` unless it is done already (never raises InvalidStateError)."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        elif result is not None:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


_Entry = tuple["concurrent.futures.Future[PubAck]", float, str, bytes, "dict[str, str] | None", int, float]


class _AsyncPublisher:
    """Outstanding publish_async Futures, completed on the I/O thread as PubAcks arrive.

    The table of outstanding Futures is shared: user threads add to it, the I/O thread
    takes from it (PubAcks, the timeout sweep) and ``close()`` fails what is left. Whoever
    pops an entry completes its Future. A publish adds its entry without a lock (see
    ``publish``); arming the sweep, its snapshot and the registration with the
    connection are under ``_lock`` (never held while waiting).

    While it has Futures outstanding the publisher is registered with the connection
    like a subscription, so ``Connection.drain()`` waits for the PubAcks and ``close()``
    fails the Futures still waiting with :class:`jssync.ConnectionClosedError` (the I/O
    loop stops, so no sweep would ever fail them).
    """

    def __init__(self, js: JetStream) -> None:
        self._js = js
        self._cond = threading.Condition()
        self._lock = threading.Lock()
        # token -> (Future, deadline, subject, data, headers, retry_attempts, retry_wait):
        # what the reply handler needs, so that one bound method serves every publish
        self._inflight: dict[str, _Entry] = {}
        self._on_reply = self._handle_reply
        self._sweeping = False
        self._registered = False
        self._ended = False
        self._waiters = 0  # publishers blocked on max_pending (waiting on _room)
        # Publishers blocked on max_pending wait on their own Condition and are woken one
        # at a time: at 3/4 of the limit one, and one more each time another quarter of
        # the window drains while some still wait (the level is _kick_at). Waking them all
        # at once made 16 publishers runnable together, and the I/O thread, which needs
        # the GIL to send and to handle the PubAcks, got it only after all of them.
        self._room = threading.Condition()
        self._kick_at = -1
        self._all_waiters = 0  # threads in wait_all (publish_async_completed, drain)
        self._retries: dict[str, int] = {}  # token -> resends after a 503 (I/O thread; _end clears it)
        # one Condition shared by this publisher's Futures (see _PubAckFuture)
        self._fcond = threading.Condition()

    def __repr__(self) -> str:
        return f"<jssync publish_async pending={len(self._inflight)}>"

    @property
    def pending(self) -> int:
        return len(self._inflight)

    def publish(self, subject: str, data: bytes, headers: dict[str, str] | None,
                timeout: float, retry_attempts: int = 2,
                retry_wait: float = 0.25) -> concurrent.futures.Future[PubAck]:
        conn = self._js.conn
        conn.internal.check_open()
        limit = self._js.max_pending
        if len(self._inflight) >= limit:
            deadline = Deadline(None)
            room = self._room
            low = limit - max(1, limit // 4)
            woken = False
            with room:
                self._waiters += 1
                try:
                    while True:
                        n = len(self._inflight)
                        if n > low:
                            # about to wait: wake one at 3/4. Set before looking at the count
                            # again, so a PubAck that missed this level was counted in it.
                            # (Not only when full: a publisher that found the window full,
                            # then one PubAck short of it here, waited on a level that an
                            # earlier kick had lowered, and the 16-thread runs stalled for
                            # its 0.1 s wait slice while the window drained.)
                            self._kick_at = low
                            n = len(self._inflight)
                        # Go when woken, or when the window drained below 3/4 anyway; a
                        # waiter whose wait slice ran out while the woken publisher refills
                        # the window waits on (they would all become runnable together).
                        if n < limit and (woken or n <= low):
                            break
                        conn.internal.check_open()
                        woken = room.wait(deadline.slice())
                finally:
                    self._waiters -= 1
        fut: concurrent.futures.Future[PubAck] = _PubAckFuture(conn, self._fcond)
        if conn.internal.offline_limit is not None and not conn.internal.nc.is_connected:
            try:
                size = len(data) if headers is None else len(data) + _headers_size(headers)
                conn.internal.offline_check(size, subject)
            except ReconnectBufferExceededError as exc:
                fut.set_exception(exc)  # failed at once; nothing was queued
                return fut
        pending = self._inflight

        prefix = conn.internal.mux_prefix or conn.internal.start_mux(Deadline(self._js.timeout))
        token = str(next(conn.internal.tokens))
        # No lock on this path: a thread preempted while holding one made the other
        # publishers queue behind it, a convoy of context switches (16 threads: one
        # switch per one or two messages). Each dict operation is atomic; the orderings
        # below close the races with _end() and the sweep (see there).
        # No reply closure per publish: it referred to itself (a reference cycle that only
        # the cyclic GC freed, and with thousands in flight the collector took ~40 % of the
        # CPU); the entry carries what the shared handler needs.
        pending[token] = (fut, time.monotonic() + timeout, subject, data, headers, retry_attempts, retry_wait)
        conn.internal.replies[token] = self._on_reply
        if self._ended:  # _end() sets it before it collects the entries: it may not see ours
            if pending.pop(token, None) is not None:
                conn.internal.replies.pop(token, None)
            raise ConnectionClosedError("the connection is closed")
        arm = False
        if not self._sweeping:  # read after adding: the sweep clears it before it looks
            with self._lock:
                arm = not self._sweeping
                self._sweeping = True
                if not self._registered:
                    self._registered = True
                    with conn.internal.subs_lock:
                        conn.internal.subs.add(self)  # type: ignore[arg-type]  # drained/ended with the connection
        if conn.internal.closed:
            # the connection closed while this was added; its close may not have seen us
            self._end()
            raise ConnectionClosedError("the connection is closed")
        conn.internal.enqueue((subject, data, prefix + token, headers))
        if arm:
            try:
                conn.internal.loop.call_soon(self._arm_sweep)
            except Error:
                self._end()
                raise
        return fut

    def _handle_reply(self, msg: Msg) -> None:
        """On the I/O thread: the reply to one publish (the multiplexer's handler)."""
        pending = self._inflight
        tok = msg.subject.rsplit(".", 1)[-1]
        hdrs = msg.headers
        if hdrs and not msg.data and is_no_responders(hdrs, msg.data):
            entry = pending.get(tok)
            if entry is not None and entry[5] and self._resend(tok, entry, msg.subject):
                return
        entry = pending.pop(tok, None)
        if entry is None:
            return
        if self._retries:
            self._retries.pop(tok, None)
        try:
            ack = _parse_pub_ack(msg)
        except BaseException as exc:  # noqa: BLE001
            _resolve(entry[0], None, exc)
        else:
            _resolve(entry[0], ack, None)
        left = len(pending)
        if self._waiters and left <= self._kick_at:
            # wake one publisher blocked on max_pending once there is room for a
            # burst (not on every PubAck: that would ping-pong between the threads),
            # and one more for each further quarter of the window drained
            self._kick_at = left - max(1, self._js.max_pending // 4)
            with self._room:
                self._room.notify()
        if self._all_waiters and not left:
            with self._cond:  # wait_all only at the end
                self._cond.notify_all()

    def _resend(self, tok: str, entry: _Entry, reply: str) -> bool:
        """On the I/O thread: after a 503, send the message again later; False when out of tries."""
        attempts, wait = entry[5], entry[6]
        n = self._retries.get(tok, 0)
        delay = wait * (n + 1)
        if n >= attempts or time.monotonic() + delay + _RESEND_MARGIN >= entry[1]:
            return False
        self._retries[tok] = n + 1
        conn = self._js.conn
        conn.internal.replies[tok] = self._on_reply  # the multiplexer dropped it when the 503 came
        pending = self._inflight
        item = (entry[2], entry[3], reply, entry[4])

        def fire() -> None:
            # not when the sweep (timeout) or close() has failed the Future meanwhile: a
            # message sent after its Future reported failure could be stored twice
            if tok in pending:
                conn.internal.enqueue(item)

        conn.internal.loop.loop.call_later(delay, fire)
        return True

    def _arm_sweep(self) -> None:
        self._js.conn.internal.loop.loop.call_later(0.25, self._sweep)

    def _sweep(self) -> None:
        # on the I/O thread: fail Futures whose PubAck is overdue
        now = time.monotonic()
        conn = self._js.conn
        with self._lock:
            snapshot = self._inflight.copy()
        expired = [t for t, entry in snapshot.items() if entry[1] <= now]
        for t in expired:
            item = self._inflight.pop(t, None)
            conn.internal.replies.pop(t, None)
            self._retries.pop(t, None)
            if item is not None:
                state = conn.internal.link_state()
                _resolve(item[0], None, RequestTimeoutError(
                    f"no PubAck for the publish on {item[2]!r} within the publish timeout"
                    + (f": {state}" if state else " (a stream with no_ack never sends one: "
                       "publish to it with publish(..., ack=False))"), subject=item[2], disconnected=state is not None))
        if expired:
            self._wake_all()
        with self._lock:
            # cleared before looking: a publisher that adds an entry after this look
            # then finds it cleared and arms the sweep again itself
            self._sweeping = False
            if self._inflight and not conn.internal.closed:
                self._sweeping = True
                self._arm_sweep()
                return
            if self._registered:
                self._registered = False
                with conn.internal.subs_lock:
                    conn.internal.subs.discard(self)

    def _end(self, error: Error | None = None) -> None:
        """The connection closed (any thread): fail every Future still waiting. Idempotent.

        ``error``: why it closed by itself (it gave up reconnecting), named by the Futures' error.
        """
        conn = self._js.conn
        why = f": {error}" if error is not None else ""
        with self._lock:
            self._ended = True
            self._registered = False
            tokens = list(self._inflight)
            self._retries.clear()
        for t in tokens:
            item = self._inflight.pop(t, None)
            conn.internal.replies.pop(t, None)
            if item is not None:
                _resolve(item[0], None, cancelled(conn, item[2],
                                                  f"the connection closed before the PubAck arrived{why}"))
        self._wake_all()

    def _wake_all(self) -> None:
        with self._room:
            self._room.notify_all()
        with self._cond:
            self._cond.notify_all()

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the outstanding PubAcks (``Connection.drain``), at most ``timeout`` seconds.

        Raises:
            jssync.TimeoutError: some are still outstanding after ``timeout``.
        """
        self.wait_all(Deadline(timeout))

    def wait_all(self, deadline: Deadline) -> None:
        with self._cond:
            self._all_waiters += 1
            try:
                while self._inflight:
                    self._js.conn.internal.check_open()
                    self._cond.wait(deadline.slice())
                    if self._inflight and deadline.expired():
                        raise TimeoutError(
                            f"{len(self._inflight)} publish_async PubAck(s) still outstanding "
                            f"after {deadline.timeout}s"
                        )
            finally:
                self._all_waiters -= 1


# Connection.jetstream() (core) builds the context through its hook: core does not import this layer.
_core_hooks.HOOKS.jetstream = JetStream
