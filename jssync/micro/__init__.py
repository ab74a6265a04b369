"""Micro services (ADR-32), synchronous: endpoints, groups, discovery and stats.

::

    svc = jssync.micro.add_service(nc, name="calc", version="1.0.0")
    svc.add_endpoint("add", lambda req: req.respond(b"..."))

Handlers run on the connection's callback worker pool (never on the I/O thread), one
request at a time per endpoint, in order. Every endpoint subscribes in the queue group
``q`` unless told otherwise, so starting more instances spreads the load. The service
answers ``$SRV.PING``, ``$SRV.INFO`` and ``$SRV.STATS`` (also ``.<name>`` and
``.<name>.<id>``) with the ADR's ``io.nats.micro.v1.*_response`` JSON documents.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from ..base.deadline import DEFAULT, Deadline, Default
from ..base.errors import BadSubjectError, ConnectionClosedError, Error, ServiceError, ValidationError
from ..base.validate import validate_headers, validate_subject
from ..core.connection import Connection
from ..core.msg import Msg
from ..core.subscription import Subscription

__all__ = [
    "API_PREFIX",
    "DEFAULT_QUEUE_GROUP",
    "ERROR_CODE_HEADER",
    "ERROR_HEADER",
    "Endpoint",
    "Group",
    "INFO_RESPONSE_TYPE",
    "PING_RESPONSE_TYPE",
    "Request",
    "STATS_RESPONSE_TYPE",
    "Service",
    "ServiceError",
    "add_service",
    "check_response",
    "control_subject",
    "error_headers",
]

log = logging.getLogger("jssync")

API_PREFIX = "$SRV"
DEFAULT_QUEUE_GROUP = "q"
ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
PING_RESPONSE_TYPE = "io.nats.micro.v1.ping_response"
INFO_RESPONSE_TYPE = "io.nats.micro.v1.info_response"
STATS_RESPONSE_TYPE = "io.nats.micro.v1.stats_response"
_VERBS = ("PING", "INFO", "STATS")

_NAME = re.compile(r"^[A-Za-z0-9_-]+\Z")
#: The official semver regular expression (https://semver.org), as ADR-32 asks.
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?\Z"
)
_QUEUE_BAD = re.compile(r"[\s\x00-\x1f\x7f]")

Handler = Callable[["Request"], Any]
QueueGroup = str | None | Default


def _check_error(code: Any, description: Any) -> tuple[str, str]:
    if isinstance(code, bool) or not isinstance(code, int | str) or not str(code).lstrip("-").isdigit():
        raise ValidationError(f"a service error code must be a number (int or digits), got {code!r}")
    if not isinstance(description, str) or not description:
        raise ValidationError(f"a service error description must be a non-empty str, got {description!r}")
    if "\r" in description or "\n" in description:
        raise ValidationError(f"a service error description may not contain CR or LF: {description!r}")
    return str(code), description


def error_headers(code: int | str, description: str) -> dict[str, str]:
    """The headers that mark a reply as a service error (``Nats-Service-Error(-Code)``)."""
    c, d = _check_error(code, description)
    return {ERROR_HEADER: d, ERROR_CODE_HEADER: c}


def check_response(msg: Msg) -> Msg:
    """Return ``msg``, or raise :class:`ServiceError` if it is a service error reply."""
    hdrs = msg.headers
    if hdrs and ERROR_CODE_HEADER in hdrs:
        raise ServiceError(hdrs[ERROR_CODE_HEADER], hdrs.get(ERROR_HEADER, ""), msg.data)
    return msg


def control_subject(verb: str, name: str | None = None, id: str | None = None,  # noqa: A002
                    *, api_prefix: str = API_PREFIX) -> str:
    """``$SRV.<VERB>``, ``$SRV.<VERB>.<name>`` or ``$SRV.<VERB>.<name>.<id>``."""
    v = verb.upper() if isinstance(verb, str) else verb
    if v not in _VERBS:
        raise ValidationError(f"verb must be one of {', '.join(_VERBS)}, got {verb!r}")
    if id is not None and name is None:
        raise ValidationError(f"a service id ({id!r}) needs a service name")
    parts = [api_prefix, v] + [p for p in (name, id) if p is not None]
    return ".".join(parts)


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValidationError(f"{what} must be a non-empty str of A-Z, a-z, 0-9, '-' and '_', got {value!r}")
    return value


def _check_metadata(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict of str to str, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{what} must map str to str, got {k!r}: {v!r}")
    return dict(value)


def _check_queue(value: Any, what: str) -> None:
    if value is None or isinstance(value, Default):
        return
    if not isinstance(value, str) or not value or _QUEUE_BAD.search(value):
        raise ValidationError(f"{what} must be a non-empty str without whitespace, or None for no queue group, "
                         f"got {value!r}")


def _resolve(queue_group: QueueGroup, parent: str | None) -> str | None:
    return parent if isinstance(queue_group, Default) else queue_group


def _check_group_name(value: Any) -> str:
    if not isinstance(value, str):
        raise BadSubjectError(f"group name must be a str, got {type(value).__name__}")
    if value:
        validate_subject(value, "group name")
        if ">" in value.split("."):
            raise BadSubjectError(f"group name may not contain the '>' wildcard: {value!r}")
    return value


def _json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Request:
    """One request to an endpoint; what a handler receives.

    Attributes:
        msg: the request message (``subject``, ``reply``, ``data``, ``headers``).
    """

    __slots__ = ("msg", "_endpoint", "_responded", "_errored")

    def __init__(self, msg: Msg, endpoint: Endpoint) -> None:
        self.msg = msg
        self._endpoint = endpoint
        self._responded = False
        self._errored = False

    def __repr__(self) -> str:
        return f"<jssync.micro.Request subject={self.msg.subject!r} endpoint={self._endpoint.name!r}>"

    @property
    def subject(self) -> str:
        return self.msg.subject

    @property
    def reply(self) -> str:
        return self.msg.reply

    @property
    def data(self) -> bytes:
        return self.msg.data

    @property
    def headers(self) -> dict[str, str] | None:
        return self.msg.headers

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    def respond(self, data: bytes = b"", *, headers: dict[str, str] | None = None) -> None:
        """Publish the reply (buffered, returns at once).

        Raises:
            jssync.Error: the request has no reply subject.
            jssync.BadHeaderError, jssync.MaxPayloadError.
        """
        self.msg.respond(data, headers=headers)
        self._responded = True

    def respond_json(self, obj: Any, *, headers: dict[str, str] | None = None) -> None:
        """Reply with ``obj`` encoded as JSON."""
        self.respond(json.dumps(obj).encode(), headers=headers)

    def respond_error(self, code: int | str, description: str, data: bytes = b"", *,
                      headers: dict[str, str] | None = None) -> None:
        """Reply with a service error (the ``Nats-Service-Error`` headers); counted in the stats.

        Raises:
            ValueError: ``code`` is not a number or ``description`` is empty or has CR/LF.
            jssync.Error: the request has no reply subject.
        """
        hdrs = dict(headers) if headers else {}
        validate_headers(hdrs)
        hdrs.update(error_headers(code, description))
        self.respond(data, headers=hdrs)
        if not self._errored:
            self._errored = True
            self._endpoint._service._count_error(self._endpoint, f"{code}:{description}")


class Endpoint:
    """A service endpoint: a (queue) subscription whose requests go to a handler.

    Attributes:
        name, subject, queue_group (None: no queue group), metadata.
    """

    def __init__(self, service: Service, name: str, subject: str, queue_group: str | None,
                 metadata: dict[str, str], handler: Handler) -> None:
        self._service = service
        self.name = name
        self.subject = subject
        self.queue_group = queue_group
        self._metadata = metadata
        self._handler = handler
        self._sub: Subscription | None = None
        self.num_requests = 0
        self.num_errors = 0
        self.last_error = ""
        self.processing_time = 0  # nanoseconds

    def __repr__(self) -> str:
        return f"<jssync.micro.Endpoint name={self.name!r} subject={self.subject!r}>"

    @property
    def metadata(self) -> dict[str, str]:
        """A copy of the endpoint's metadata (immutable once set)."""
        return dict(self._metadata)

    def _info(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "queue_group": self.queue_group or "",
                "metadata": dict(self._metadata)}

    def _stats(self) -> dict[str, Any]:
        n = self.num_requests
        return {
            "name": self.name,
            "subject": self.subject,
            "queue_group": self.queue_group or "",
            "num_requests": n,
            "num_errors": self.num_errors,
            "last_error": self.last_error,
            "processing_time": self.processing_time,
            "average_processing_time": self.processing_time // n if n else 0,
        }

    def _reset(self) -> None:
        self.num_requests = self.num_errors = self.processing_time = 0
        self.last_error = ""

    def _on_msg(self, msg: Msg) -> None:
        """On a worker thread: run the handler, answer an exception with a service error."""
        req = Request(msg, self)
        start = time.monotonic_ns()
        err: tuple[str, str] | None = None
        try:
            self._handler(req)
        except ServiceError as exc:
            err = (exc.code, exc.description or "service error")
        except Exception as exc:  # noqa: BLE001 - answered with a 500 and counted
            log.exception("jssync.micro: handler of endpoint %r failed", self.name)
            err = ("500", str(exc) or type(exc).__name__)
        elapsed = time.monotonic_ns() - start
        if err is not None:
            code, desc = err
            desc = " ".join(desc.splitlines()) or "error"
            if not req._responded and msg.reply:
                try:
                    req.respond_error(code if code.lstrip("-").isdigit() else "500", desc)
                except Exception:  # noqa: BLE001 - closed connection or too big: counted below
                    log.debug("jssync.micro: could not send the error reply", exc_info=True)
            if not req._errored:
                req._errored = True
                self._service._count_error(self, f"{code}:{desc}")
        with self._service._lock:
            self.num_requests += 1
            self.processing_time += elapsed


class Group:
    """A subject prefix (and default queue group) for endpoints; see :meth:`Service.add_group`."""

    def __init__(self, service: Service, prefix: str, queue_group: str | None) -> None:
        self._service = service
        self.prefix = prefix
        self.queue_group = queue_group

    def __repr__(self) -> str:
        return f"<jssync.micro.Group prefix={self.prefix!r}>"

    def add_endpoint(self, name: str, handler: Handler, *, subject: str | None = None,
                     queue_group: QueueGroup = DEFAULT, metadata: Mapping[str, str] | None = None) -> Endpoint:
        """Add an endpoint on ``<prefix>.<subject or name>`` (see :meth:`Service.add_endpoint`)."""
        return self._service._add_endpoint(self.prefix, self.queue_group, name, handler, subject, queue_group,
                                           metadata)

    def add_group(self, name: str, *, queue_group: QueueGroup = DEFAULT) -> Group:
        """A nested group on ``<prefix>.<name>``."""
        _check_group_name(name)
        _check_queue(queue_group, "queue_group")
        prefix = f"{self.prefix}.{name}" if self.prefix and name else self.prefix or name
        return Group(self._service, prefix, _resolve(queue_group, self.queue_group))


class Service:
    """A running service; made by :func:`add_service`. Thread-safe.

    Attributes:
        id: this instance's unique id. name, version, description: as configured.
    """

    def __init__(self, nc: Connection, name: str, version: str, description: str, metadata: dict[str, str],
                 queue_group: str | None, stats_handler: Callable[[Endpoint], Any] | None,
                 api_prefix: str) -> None:
        self._nc = nc
        self.id = uuid.uuid4().hex
        self.name = name
        self.version = version
        self.description = description
        self._metadata = metadata
        self.queue_group = queue_group
        self._stats_handler = stats_handler
        self.api_prefix = api_prefix
        self._lock = threading.Lock()
        self._endpoints: list[Endpoint] = []
        self._verb_subs: list[Subscription] = []
        self._started = _now()
        self._stopping = False
        self._stopped = threading.Event()

    def __repr__(self) -> str:
        return f"<jssync.micro.Service name={self.name!r} id={self.id!r} stopped={self.stopped}>"

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def metadata(self) -> dict[str, str]:
        """A copy of the service's metadata (immutable once set)."""
        return dict(self._metadata)

    @property
    def endpoints(self) -> list[Endpoint]:
        with self._lock:
            return list(self._endpoints)

    @property
    def stopped(self) -> bool:
        """True after :meth:`stop` or :meth:`drain`, or once the connection is closed."""
        if not self._stopped.is_set() and self._nc.is_closed:
            self._stopped.set()
        return self._stopped.is_set()

    # -- endpoints -----------------------------------------------------------------------

    def add_endpoint(self, name: str, handler: Handler, *, subject: str | None = None,
                     queue_group: QueueGroup = DEFAULT, metadata: Mapping[str, str] | None = None) -> Endpoint:
        """Add an endpoint: requests on ``subject`` (default: ``name``) go to ``handler(req)``.

        The handler runs on the connection's worker pool, one request at a time for this
        endpoint; an exception it raises is answered with a service error (500, or the
        code of a :class:`ServiceError`) and counted. Blocks until the server confirmed
        the subscription.

        Args:
            name: A-Z, a-z, 0-9, ``-`` and ``_``.
            subject: the subject (wildcards allowed), prefixed by the group if any.
            queue_group: the queue group; default: the group's or the service's (``q``);
                None: a plain subscription (every instance gets every request).
            metadata: str to str, reported by INFO.

        Raises:
            ValueError, TypeError, jssync.BadSubjectError: bad arguments (nothing sent).
            jssync.Error: the service is stopped.
        """
        return self._add_endpoint("", self.queue_group, name, handler, subject, queue_group, metadata)

    def add_group(self, name: str, *, queue_group: QueueGroup = DEFAULT) -> Group:
        """A group: endpoints added to it listen on ``<name>.<subject>``.

        ``name`` is a subject without ``>`` (or ``""``); ``queue_group`` is the default
        for its endpoints (None: no queue group).
        """
        _check_group_name(name)
        _check_queue(queue_group, "queue_group")
        return Group(self, name, _resolve(queue_group, self.queue_group))

    def _add_endpoint(self, prefix: str, parent_queue: str | None, name: str, handler: Handler,
                      subject: str | None, queue_group: QueueGroup,
                      metadata: Mapping[str, str] | None) -> Endpoint:
        _check_name(name, "endpoint name")
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if subject is None:
            subject = name
        elif not isinstance(subject, str):
            raise BadSubjectError(f"endpoint subject must be a str, got {type(subject).__name__}")
        validate_subject(subject, "endpoint subject")
        full = f"{prefix}.{subject}" if prefix else subject
        validate_subject(full, "endpoint subject")
        _check_queue(queue_group, "queue_group")
        md = _check_metadata(metadata, "endpoint metadata")
        qg = _resolve(queue_group, parent_queue)
        if self._stopping:
            raise Error(f"service {self.name!r} is stopped")
        ep = Endpoint(self, name, full, qg, md, handler)
        ep._sub = self._nc.subscribe(full, queue=qg, callback=ep._on_msg)
        with self._lock:
            if self._stopping:
                ep._sub.unsubscribe()
                raise Error(f"service {self.name!r} is stopped")
            self._endpoints.append(ep)
        return ep

    def _count_error(self, ep: Endpoint, text: str) -> None:
        with self._lock:
            ep.num_errors += 1
            ep.last_error = text

    # -- discovery and stats ---------------------------------------------------------------

    def _identity(self, kind: str) -> dict[str, Any]:
        return {"type": kind, "name": self.name, "id": self.id, "version": self.version,
                "metadata": dict(self._metadata)}

    def ping(self) -> dict[str, Any]:
        """The ``io.nats.micro.v1.ping_response`` document this service answers PING with."""
        return self._identity(PING_RESPONSE_TYPE)

    def info(self) -> dict[str, Any]:
        """The ``io.nats.micro.v1.info_response`` document (no I/O)."""
        doc = self._identity(INFO_RESPONSE_TYPE)
        doc["description"] = self.description
        with self._lock:
            doc["endpoints"] = [ep._info() for ep in self._endpoints]
        return doc

    def stats(self) -> dict[str, Any]:
        """The ``io.nats.micro.v1.stats_response`` document (no I/O).

        Times are integer nanoseconds; ``started`` is an ISO 8601 UTC timestamp. With a
        ``stats_handler``, each endpoint also has ``data``: what it returned for that endpoint.
        """
        doc = self._identity(STATS_RESPONSE_TYPE)
        with self._lock:
            eps = [(ep, ep._stats()) for ep in self._endpoints]
            doc["started"] = self._started
        if self._stats_handler is not None:
            for ep, st in eps:
                try:
                    st["data"] = json.loads(json.dumps(self._stats_handler(ep)))
                except Exception:  # noqa: BLE001 - stats still answer, without data
                    log.exception("jssync.micro: stats_handler failed for endpoint %r", ep.name)
        doc["endpoints"] = [st for _, st in eps]
        return doc

    def reset(self) -> None:
        """Set every endpoint's counters to zero and ``started`` to now."""
        with self._lock:
            for ep in self._endpoints:
                ep._reset()
            self._started = _now()

    def _on_verb(self, verb: str, msg: Msg) -> None:
        if not msg.reply:
            return
        doc = self.ping() if verb == "PING" else self.info() if verb == "INFO" else self.stats()
        try:
            msg.respond(_json(doc))
        except ConnectionClosedError:
            pass

    def _start(self) -> None:
        try:
            for verb in _VERBS:
                for subj in (control_subject(verb, api_prefix=self.api_prefix),
                             control_subject(verb, self.name, api_prefix=self.api_prefix),
                             control_subject(verb, self.name, self.id, api_prefix=self.api_prefix)):
                    self._verb_subs.append(self._nc.subscribe(subj, callback=partial(self._on_verb, verb)))
        except BaseException:
            self.stop()
            raise

    # -- stopping ------------------------------------------------------------------------

    def _take_subs(self) -> tuple[list[Endpoint], list[Subscription]] | None:
        with self._lock:
            if self._stopping:
                return None
            self._stopping = True
            verbs, self._verb_subs = self._verb_subs, []
            return list(self._endpoints), verbs

    def stop(self, timeout: float | None = 5.0) -> None:
        """Unsubscribe every endpoint and the discovery subjects. Idempotent.

        Requests already received still run. Blocks until the unsubscribes are handed to
        the I/O thread (at most ``timeout`` in all; None: no limit); never raises for a
        closed connection.
        """
        taken = self._take_subs()
        if taken is None:
            return
        eps, verbs = taken
        deadline = Deadline(timeout)
        try:
            for sub in [ep._sub for ep in eps if ep._sub is not None] + verbs:
                try:
                    sub.unsubscribe(timeout=deadline.remaining())
                except Error:  # closed connection, or out of time: hand it over without waiting
                    sub._unsubscribe_soon()
        finally:
            self._stopped.set()

    def drain(self, timeout: float | None = 30.0) -> None:
        """Stop taking requests, finish those received, then stop. Idempotent.

        Blocks until the endpoints' queued requests were handled (at most ``timeout``;
        None: no limit).

        Raises:
            jssync.TimeoutError: the endpoints did not finish in time (the service is stopped anyway).
        """
        taken = self._take_subs()
        if taken is None:
            return
        eps, verbs = taken
        deadline = Deadline(timeout)
        try:
            for ep in eps:
                if ep._sub is not None:
                    try:
                        ep._sub.drain(timeout=deadline.remaining())
                    except ConnectionClosedError:
                        ep._sub._unsubscribe_soon()
        finally:
            for sub in verbs:
                sub._unsubscribe_soon()
            self._stopped.set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the service is stopped (by another thread, or the connection closed).

        Waits up to ``timeout`` seconds (None: no limit), in slices of 0.1 s (Ctrl-C gets through).

        Raises:
            jssync.TimeoutError: still running after ``timeout`` seconds.
        """
        deadline = Deadline(timeout)
        while not self.stopped:
            self._stopped.wait(deadline.slice())
            if not self.stopped:
                deadline.check(f"waiting for service {self.name!r} to stop")


def add_service(
    nc: Connection,
    *,
    name: str,
    version: str,
    description: str = "",
    metadata: Mapping[str, str] | None = None,
    queue_group: str | None = DEFAULT_QUEUE_GROUP,
    stats_handler: Callable[[Endpoint], Any] | None = None,
    api_prefix: str = API_PREFIX,
) -> Service:
    """Start a service on ``nc``: it answers PING/INFO/STATS at once; add endpoints next.

    Blocks until the server confirmed the nine discovery subscriptions.

    Args:
        name: the kind of service: A-Z, a-z, 0-9, ``-`` and ``_``.
        version: a SemVer 2.0 string (``1.0.0``, ``2.1.0-rc.1+build.5``).
        description: free text, reported by INFO.
        metadata: str to str, reported by every response; copied (immutable once set).
        queue_group: the endpoints' default queue group; None: plain subscriptions.
        stats_handler: ``stats_handler(endpoint)`` returns JSON-serializable ``data`` for STATS.
        api_prefix: the discovery prefix (``$SRV``).

    Raises:
        ValueError, TypeError, jssync.BadSubjectError: a bad argument, named (nothing sent).
        jssync.ConnectionClosedError, jssync.PermissionDeniedError.
    """
    if not isinstance(nc, Connection):
        raise TypeError(f"nc must be a jssync.Connection, got {type(nc).__name__}")
    _check_name(name, "service name")
    if not isinstance(version, str) or not _SEMVER.match(version):
        raise ValidationError(f"service version must be a SemVer string such as '1.0.0', got {version!r}")
    if not isinstance(description, str):
        raise TypeError(f"description must be a str, got {type(description).__name__}")
    md = _check_metadata(metadata, "service metadata")
    if isinstance(queue_group, Default):
        queue_group = DEFAULT_QUEUE_GROUP
    _check_queue(queue_group, "queue_group")
    if stats_handler is not None and not callable(stats_handler):
        raise TypeError(f"stats_handler must be callable or None, got {stats_handler!r}")
    if not isinstance(api_prefix, str):
        raise BadSubjectError(f"api_prefix must be a str, got {type(api_prefix).__name__}")
    validate_subject(api_prefix, "api_prefix", wildcards=False)
    svc = Service(nc, name, version, description, md, queue_group, stats_handler, api_prefix)
    svc._start()
    return svc
