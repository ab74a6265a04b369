"""The JetStream context's stream room: create, update, look up, list and delete streams.

:class:`StreamAdmin` is one of the rooms :class:`jssync.JetStream` is made of (see
jetstream/context.py): its methods build the requests, send them through the context's API
layer (:class:`~jssync.jetstream.apicalls.APIRoom`, one transport call each) and read the
replies into nats-py's models, so unit tests drive them with recorded server replies.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from nats.js import api

from ..base.deadline import DEFAULT, Deadline, Default, resolve_timeout
from ..base.errors import APIError, JetStreamError, ValidationError
from ..base.validate import validate_subject
from . import model as _model_codec
from .apicalls import APIRoom, int_field, level, subject_filter
from .params import (
    STREAM_CHOICES,
    STREAM_OPTIONS,
    StreamParams,
    check_choices,
    check_options,
    normalize_config,
    validate_name,
)
from .replies import _model
from .sourcing import normalize_sources, put_back_consumers, source_consumers, stream_wire

if TYPE_CHECKING:
    from .direct import DirectBatch
    from .replies import StoredMsg
    from .streams import Stream

log = logging.getLogger("jssync")


def stream_config(config: api.StreamConfig | None, params: Mapping[str, Any],
                   call: str = "create_stream") -> api.StreamConfig:
    if config is None:
        config = api.StreamConfig()
    elif not isinstance(config, api.StreamConfig):
        raise TypeError(f"config must be a StreamConfig, got {type(config).__name__}")
    source = config
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
        for s in config.subjects:
            validate_subject(s, "stream subject")
    return _model_codec.carry_extra(source, config)  # the keys of the reply it was read from nats-py lacks


class StreamAdmin(APIRoom):
    """Stream management of a JetStream context (a room of :class:`jssync.JetStream`)."""

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

        return api_level(self._context, refresh=refresh, timeout=timeout)

    def _require_stream_features(self, cfg: api.StreamConfig,
                                 timeout: float | None | Default) -> tuple[str, int] | None:
        """NotSupportedError if ``cfg`` uses a feature the server's API level lacks (no I/O without one).

        Returns the feature the request must carry the API level of (durable sourcing: a
        server before it would ignore the source's consumer), or None.
        """
        from .features import require, stream_features

        header: tuple[str, int] | None = None
        for feature in stream_features(cfg):
            level = require(self._context, feature, timeout=timeout)
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

        cfg = stream_config(config, params)
        feature = self._require_stream_features(cfg, timeout)
        body = stream_wire(cfg)
        deadline = Deadline(resolve_timeout(timeout, self.timeout))
        while True:
            try:
                resp = self._api(f"STREAM.CREATE.{cfg.name}", body, deadline.left(), **level(feature))
                break
            except APIError as exc:
                # a transient view of the meta leader (a peer's route just reconnected)
                if (exc.err_code != 10005 or "offline" not in (exc.description or "")
                        or (left := deadline.remaining()) is not None and left < 0.5):
                    raise
                log.debug("stream %r: %s; trying again", cfg.name, exc.description)
                time.sleep(0.25)
        return Stream(self._context, stream_model(resp))

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
            cfg = stream_config(config, params, "update_stream")
            body = stream_wire(cfg)
        else:
            cfg, body = self._editedstream_config(dict(params), timeout)
        feature = self._require_stream_features(cfg, timeout)
        resp = self._api(f"STREAM.UPDATE.{cfg.name}", body, timeout, **level(feature))
        return Stream(self._context, stream_model(resp))

    def _editedstream_config(self, params: dict[str, Any], timeout: float | None | Default,
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
        current = stream_model(resp).config
        cfg = stream_config(current, params, "update_stream")
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

        cfg = stream_config(config, params, "create_or_update_stream")
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
        return Stream(self._context, self._stream_info(name, timeout=timeout))

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
            return stream_model(resp)
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
            total = int_field(resp, "total")
            limit = int_field(resp, "limit")
            offset += len(page)
            if not page or not limit or offset >= total:
                break
        resp["state"] = dict(state if isinstance(state, dict) else {}, subjects=subjects)
        return stream_model(resp)

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
        req = subject_filter(subject)
        return (stream_model(item) for item in self._paged("STREAM.LIST", "streams", req, timeout))

    def stream_names(self, subject: str | None = None, *, timeout: float | None | Default = DEFAULT) -> Iterator[str]:
        """Iterate over every stream name (all pages), optionally those listening on ``subject``.

        Each page is one request, made as the iteration reaches it (blocking up to ``timeout``).

        Raises:
            jssync.BadSubjectError: ``subject`` is not a valid subject filter (at once,
                before anything is sent).
        """
        req = subject_filter(subject)
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
        return direct_get(self._context, stream, seq=seq, last_by_subject=last_by_subject,
                          next_by_subject=next_by_subject, start_time=start_time, timeout=timeout)

    def direct_get_batch(self, stream: str, subject: str, batch: int, *, seq: int | None = None,
                         start_time: _dt.datetime | None = None, max_bytes: int | None = None,
                         timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """:meth:`jssync.Stream.direct_get_batch` without a stream handle (no STREAM.INFO is sent)."""
        from .direct import direct_get_batch

        validate_name(stream)
        return direct_get_batch(self._context, stream, subject, batch, seq=seq, start_time=start_time,
                                max_bytes=max_bytes, timeout=timeout)

    def direct_get_last_for(self, stream: str, subjects: list[str], *, up_to_seq: int | None = None,
                            up_to_time: _dt.datetime | None = None, batch: int | None = None,
                            timeout: float | None | Default = DEFAULT) -> DirectBatch:
        """:meth:`jssync.Stream.direct_get_last_for` without a stream handle (no STREAM.INFO is sent)."""
        from .direct import direct_get_last_for

        validate_name(stream)
        return direct_get_last_for(self._context, stream, subjects, up_to_seq=up_to_seq, up_to_time=up_to_time,
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


def stream_model(resp: Any) -> api.StreamInfo:
    """A StreamInfo from a reply; APIError unless it has a config with a name."""
    raw = resp.get("config") if isinstance(resp, dict) else None
    found = source_consumers(raw)
    extra = _model_codec.unknown_keys(api.StreamConfig, raw)  # before nats-py parses (and replaces) it
    info: api.StreamInfo = _model(api.StreamInfo, resp, "stream info")
    cfg = getattr(info, "config", None)
    if not isinstance(cfg, api.StreamConfig) or not isinstance(cfg.name, str) or not cfg.name:
        raise APIError(None, None, "malformed stream info reply: no stream config with a name")
    put_back_consumers(cfg, found)  # (nats-py < 2.16 drops a source's consumer)
    _model_codec.set_extra(cfg, extra)  # the keys nats-py does not model: sent back by stream_wire
    return info
