"""The JetStream API layer of the context: request in, parsed reply or jssync error out.

:class:`APIRoom` is the base of the JetStream context's rooms (stream management,
consumer management, the factories; see jetstream/context.py): ``_api`` builds the request
(JSON body, the ADR-44 API level header), sends it through the context's
:class:`~jssync.jetstream.transport.APITransport` and turns the reply into a dict or the
matching :class:`jssync.APIError`; ``_paged`` walks the pages of a list or names request.
Pure apart from the transport: unit tests drive it with recorded server replies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from ..base.deadline import DEFAULT, Deadline, Default, no_wait, resolve_timeout
from ..base.errors import APIError, Error, NotFoundError, check_api_response, name_missing
from ..base.validate import validate_subject
from .transport import send_nowait

if TYPE_CHECKING:
    from ..core.connection import Connection
    from .context import JetStream
    from .transport import APITransport

log = logging.getLogger("jssync")

#: The header that makes a server below the API level refuse a request (ADR-44).
HDR_REQUIRED_API_LEVEL = "Nats-Required-Api-Level"


class APIRoom:
    """What every room of the JetStream context shares: its API prefix, timeout and transport.

    The attributes are set by :class:`jssync.JetStream`'s ``__init__``.
    """

    #: the API subject prefix (``$JS.API``, ``$JS.<domain>.API`` or the ``api_prefix`` given)
    prefix: str
    #: the context's default timeout (seconds)
    timeout: float
    _conn: Connection
    _api_transport: APITransport

    @property
    def _context(self) -> JetStream:
        """This object as the :class:`jssync.JetStream` it is a room of (for the helpers that take one)."""
        return cast("JetStream", self)

    def _api(self, suffix: str, payload: dict[str, Any] | bytes | None = None,
             timeout: float | None | Default = DEFAULT, *, feature: tuple[str, int] | None = None) -> dict[str, Any]:
        """Send one JetStream API request (``<prefix>.<suffix>``) and return the parsed reply.

        ``feature`` (name, API level): the request carries ``Nats-Required-Api-Level`` (ADR-44),
        so a server below that level (2.12+) refuses it instead of ignoring what it lacks.
        Blocks for one request, at most ``timeout`` (default: the context's; None: no limit).

        Raises:
            jssync.NotSupportedError: with ``feature``, the server refused it for its level (10185).
            jssync.APIError (and subclasses): the server answered with an error; a not-found
                error names the stream (and consumer) of ``suffix``; a subjects overlap (10065)
                names the stream holding them.
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
        headers = None if feature is None else {HDR_REQUIRED_API_LEVEL: str(feature[1])}
        wait = resolve_timeout(timeout, self.timeout)
        no_wait(wait, f"the JetStream API request {self.prefix}.{suffix}")
        reply = self._api_transport.request(f"{self.prefix}.{suffix}", data, headers, wait)
        try:
            return check_api_response(reply)
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

    def _api_nowait(self, suffix: str) -> None:
        """Send an empty API request (``<prefix>.<suffix>``) without waiting for its reply (never blocks)."""
        send_nowait(self._conn, f"{self.prefix}.{suffix}")

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

    def _paged(self, suffix: str, key: str, req: dict[str, Any], timeout: float | None | Default,
               ) -> Iterator[Any]:
        """The items under ``key`` of every page of a list/names request (one request per page,
        made as the iteration reaches it).

        Raises:
            jssync.APIError: a malformed page (``key`` not a list, ``total`` not an integer).
        """
        offset = 0
        while True:
            body = dict(req, offset=offset)
            resp = self._api(suffix, body, timeout)
            items = resp.get(key) or []
            if not isinstance(items, list):
                raise APIError(None, None, f"malformed {suffix} reply: {key!r} is {type(items).__name__}, not a list")
            total = int_field(resp, "total")
            yield from items
            offset += len(items)
            if not items or offset >= total:
                return


def level(feature: tuple[str, int] | None) -> dict[str, Any]:
    """``_api``'s ``feature=`` keyword when a request needs an API level, else nothing."""
    return {} if feature is None else {"feature": feature}


def int_field(resp: dict[str, Any], key: str) -> int:
    """``resp[key]`` (0 when absent); APIError unless it is an integer."""
    value = resp.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise APIError(None, None, f"malformed API reply: {key!r} is {value!r}, not an integer")
    return value


def subject_filter(subject: str | None) -> dict[str, Any]:
    """The request body of a stream listing by ``subject`` (None or "": all streams)."""
    if not subject:
        return {}
    validate_subject(subject, "subject filter")
    return {"subject": subject}
