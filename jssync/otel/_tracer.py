"""The tracer behind :mod:`jssync.otel`: spans for send, receive, process and settle.

Imported only by :func:`jssync.otel.instrument` (it imports ``opentelemetry``). One object of
:class:`MessageTracer` sits in ``jssync.core.hooks.HOOKS.tracer`` while tracing is on; the call
sites in core and jetstream hand it the operation to run (see
:class:`jssync.core.hooks.MessageTracer`). Span names, kinds and attributes follow the
OpenTelemetry messaging semantic conventions (operation types ``send``, ``receive``,
``process``, ``settle``); NATS-only facts go under ``messaging.nats.*``. docs/tracing.md
lists them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from .. import __version__

if TYPE_CHECKING:
    import concurrent.futures

    from ..core.connection import Connection
    from ..core.msg import Msg

#: the version of the semantic conventions the attribute names come from
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"

SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
TEMPORARY = "messaging.destination.temporary"
BODY_SIZE = "messaging.message.body.size"
BATCH_COUNT = "messaging.batch.message_count"
MESSAGE_ID = "messaging.message.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
# NATS-only attributes (the messaging.nats.* namespace; reply_to as nats.net names it)
REPLY_TO = "messaging.nats.message.reply_to"
STREAM = "messaging.nats.stream.name"
CONSUMER = "messaging.nats.consumer.name"
STREAM_SEQ = "messaging.nats.message.stream_sequence"
CONSUMER_SEQ = "messaging.nats.message.consumer_sequence"
DELIVERY_COUNT = "messaging.nats.message.delivery_count"
DUPLICATE = "messaging.nats.message.duplicate"

_JS_ACK_PREFIX = "$JS.ACK."
_JS_PREFIX = "$JS."  # the JetStream API (any domain) and acks: no messaging operations of their own
_INBOX_PREFIX = "_INBOX."
_MSG_ID_HEADER = "Nats-Msg-Id"

#: ack payload -> messaging.operation.name of its settle span
_SETTLE_NAMES = ((b"+ACK", "ack"), (b"-NAK", "nak"), (b"+WPI", "in_progress"), (b"+TERM", "term"))


class _HeaderGetter(Getter[dict[str, str]]):
    """Reads propagation fields from NATS headers; names match in any case (``Traceparent``
    from a Go client's canonical header names as well as ``traceparent``)."""

    def get(self, carrier: dict[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            low = key.lower()
            for k, v in carrier.items():
                if k.lower() == low:
                    value = v
                    break
            else:
                return None
        return [value]

    def keys(self, carrier: dict[str, str]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()

#: per thread: ``busy`` while a tracer runs an operation it traces. One for every tracer, so that
#: an ``instrument()`` that replaces the tracer meanwhile does not trace that operation twice.
_LOCAL = threading.local()


def _has_header(headers: dict[str, str], name: str) -> bool:
    return _GETTER.get(headers, name) is not None


def _server(conn: Connection, attrs: dict[str, Any]) -> None:
    try:
        url = conn.connected_url
    except Exception:  # noqa: BLE001 - a closed connection: no address
        return
    if not url:
        return
    parts = urlsplit(url)
    if parts.hostname:
        attrs[SERVER_ADDRESS] = parts.hostname
    if parts.port:
        attrs[SERVER_PORT] = parts.port


def _base(op_type: str, op_name: str, destination: str | None, conn: Connection) -> tuple[str, dict[str, Any]]:
    """The span name and the attributes every span has."""
    attrs: dict[str, Any] = {SYSTEM: "nats", OPERATION_TYPE: op_type, OPERATION_NAME: op_name}
    name = op_name
    if destination:
        attrs[DESTINATION] = destination
        if destination.startswith(_INBOX_PREFIX):
            attrs[TEMPORARY] = True  # a reply inbox: not in the span name (high cardinality)
        else:
            name = f"{op_name} {destination}"
    _server(conn, attrs)
    return name, attrs


def _body_size(data: Any) -> int | None:
    try:
        return len(data)
    except TypeError:
        return None


def _msg_attrs(op_type: str, op_name: str, msg: Msg, conn: Connection) -> tuple[str, dict[str, Any]]:
    """Name and attributes of a span about one received message (JetStream metadata included)."""
    name, attrs = _base(op_type, op_name, msg.subject, conn)
    attrs[BODY_SIZE] = len(msg.data)
    reply = msg.reply
    if reply.startswith(_JS_ACK_PREFIX):
        try:
            md = msg.metadata
        except Exception:  # noqa: BLE001 - an ack subject jssync cannot read: no metadata
            md = None
        if md is not None:
            attrs[STREAM] = md.stream
            attrs[CONSUMER] = md.consumer
            attrs[CONSUMER_GROUP] = md.consumer
            attrs[STREAM_SEQ] = md.sequence.stream
            attrs[CONSUMER_SEQ] = md.sequence.consumer
            attrs[DELIVERY_COUNT] = md.num_delivered
    elif reply:
        attrs[REPLY_TO] = reply
    headers = msg.headers
    if headers:
        mid = headers.get(_MSG_ID_HEADER)
        if mid:
            attrs[MESSAGE_ID] = mid
    return name, attrs


def _fail(span: trace.Span, exc: BaseException) -> None:
    """Record ``exc`` on ``span``: status ERROR, an ``exception`` event and ``error.type``."""
    if not span.is_recording():
        return
    cls = type(exc)
    span.set_attribute(ERROR_TYPE, cls.__qualname__ if cls.__module__ == "builtins"
                       else f"{cls.__module__}.{cls.__qualname__}")
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{cls.__name__}: {exc}"))


class MessageTracer:
    """Makes the spans; installed in ``HOOKS.tracer`` by :func:`jssync.otel.instrument`. Thread-safe.

    Each wrapping method runs the wrapped operation (the same public method, called again:
    its call site sees :meth:`wants` False on this thread while the tracer runs it, so the
    second call runs untraced).
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("jssync.otel", __version__, tracer_provider, schema_url=SCHEMA_URL)

    # -- the re-entry guard ------------------------------------------------------------------

    def wants(self) -> bool:
        """False while this thread runs an operation this tracer already traces."""
        return not getattr(_LOCAL, "busy", False)

    def _quiet(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        before = getattr(_LOCAL, "busy", False)
        _LOCAL.busy = True
        try:
            return fn(*args, **kwargs)
        finally:
            _LOCAL.busy = before

    # -- context propagation -----------------------------------------------------------------

    @staticmethod
    def _extract(msg: Msg) -> tuple[otel_context.Context | None, list[Link]]:
        """The context a message carries (None when it carries none) and a link to it."""
        headers = msg.headers
        if not headers:
            return None, []
        ctx = propagate.extract(headers, getter=_GETTER)
        sc = trace.get_current_span(ctx).get_span_context()
        if not sc.is_valid:
            return None, []
        return ctx, [Link(sc)]

    # -- send --------------------------------------------------------------------------------

    def _send_span(self, conn: Connection, subject: str, data: Any, headers: dict[str, str] | None,
                   msg_id: str | None = None, op_name: str = "publish",
                   links: list[Link] | None = None) -> tuple[trace.Span, dict[str, str]]:
        """Start a PRODUCER span; return it and a copy of ``headers`` that carries its context.

        The context goes in through the global propagator (W3C ``traceparent``/``tracestate``
        and ``baggage`` by default). A message that already carries a ``traceparent`` keeps
        it (the caller's own creation context, left unchanged); the span links to it.
        """
        name, attrs = _base("send", op_name, subject, conn)
        size = _body_size(data)
        if size is not None:
            attrs[BODY_SIZE] = size
        if msg_id:
            attrs[MESSAGE_ID] = msg_id
        out = dict(headers) if headers else {}
        own = _has_header(out, "traceparent")
        links = list(links) if links else []
        if own:
            sc = trace.get_current_span(propagate.extract(out, getter=_GETTER)).get_span_context()
            if sc.is_valid and all(link.context.span_id != sc.span_id for link in links):
                links.append(Link(sc))
        span = self._tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attrs, links=links)
        if not own:
            propagate.inject(out, context=trace.set_span_in_context(span))
        return span, out

    def publish(self, conn: Connection, subject: str, data: bytes, reply: str | None,
                headers: dict[str, str] | None) -> None:
        """``Connection.publish`` in a PRODUCER span whose context goes into the headers.

        A publish to a ``$JS.`` subject (a JetStream API request with its own reply subject,
        such as a Direct Get batch of ``object_store.get``) is no messaging operation: it runs
        untraced, as :meth:`request` does."""
        if subject.startswith(_JS_PREFIX):
            self._quiet(conn.publish, subject, data, reply=reply, headers=headers)
            return
        span, h = self._send_span(conn, subject, data, headers)
        if reply:
            span.set_attribute(REPLY_TO, reply)
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                self._quiet(conn.publish, subject, data, reply=reply, headers=h)
            except BaseException as exc:
                _fail(span, exc)
                raise

    def respond(self, conn: Connection, msg: Msg, data: bytes, headers: dict[str, str] | None) -> None:
        """``Msg.respond`` in a PRODUCER span (a publish to the reply subject) that links to the
        request's creation context, so a reply sent outside a callback is tied to its request."""
        _ctx, links = self._extract(msg)
        span, h = self._send_span(conn, msg.reply, data, headers, links=links)
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                self._quiet(msg.respond, data, headers=h)
            except BaseException as exc:
                _fail(span, exc)
                raise

    def request(self, conn: Connection, subject: str, data: bytes, headers: dict[str, str] | None,
                timeout: float | None) -> Msg:
        """``Connection.request`` in a PRODUCER span (``request {subject}``) from the call until
        the reply (or the error): the send of the request with its reply, as nats.net traces it.
        The request carries the span's context; the span links to the reply's creation context
        when the reply carries one (the responder's send span). A request to a ``$JS.``
        subject (the JetStream API: a Direct Get, ``kv.get``; an ack sent as a request) is
        no messaging operation: it runs untraced, like jssync's own JetStream API requests."""
        if subject.startswith(_JS_PREFIX):
            plain: Msg = self._quiet(conn.request, subject, data, headers=headers, timeout=timeout)
            return plain
        span, h = self._send_span(conn, subject, data, headers, op_name="request")
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                reply: Msg = self._quiet(conn.request, subject, data, headers=h, timeout=timeout)
            except BaseException as exc:
                _fail(span, exc)
                raise
            _ctx, links = self._extract(reply)
            own = span.get_span_context().span_id
            for link in links:
                if link.context.span_id != own:  # (a responder that echoes the request's headers)
                    span.add_link(link.context)
            return reply

    def request_many(self, conn: Connection, subject: str, data: bytes, headers: dict[str, str] | None,
                     options: dict[str, Any]) -> Any:
        """``Connection.request_many`` in a PRODUCER span (``request {subject}``) around sending
        the request (the call returns once it is handed over; each reply the iterator yields
        is a receive span of its own, see :meth:`receive`). A ``$JS.`` subject: untraced, as
        for :meth:`request`."""
        if subject.startswith(_JS_PREFIX):
            return self._quiet(conn.request_many, subject, data, headers=headers, **options)
        span, h = self._send_span(conn, subject, data, headers, op_name="request")
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                return self._quiet(conn.request_many, subject, data, headers=h, **options)
            except BaseException as exc:
                _fail(span, exc)
                raise

    def js_publish(self, js: Any, subject: str, data: bytes, headers: dict[str, str] | None,
                   options: dict[str, Any]) -> Any:
        """``JetStream.publish`` in a PRODUCER span that ends with the PubAck."""
        span, h = self._send_span(js.conn, subject, data, headers, options.get("msg_id"))
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                ack = self._quiet(js.publish, subject, data, headers=h, **options)
            except BaseException as exc:
                _fail(span, exc)
                raise
            if ack is not None:
                _ack_attrs(span, ack)
            return ack

    def js_publish_async(self, js: Any, subject: str, data: bytes, headers: dict[str, str] | None,
                         options: dict[str, Any]) -> concurrent.futures.Future[Any]:
        """``JetStream.publish_async`` in a PRODUCER span that ends when its Future is done."""
        span, h = self._send_span(js.conn, subject, data, headers, options.get("msg_id"))
        try:
            fut: concurrent.futures.Future[Any] = self._quiet(js.publish_async, subject, data, headers=h, **options)
        except BaseException as exc:
            _fail(span, exc)
            span.end()
            raise

        def done(f: concurrent.futures.Future[Any]) -> None:
            try:
                if f.cancelled():
                    span.set_status(Status(StatusCode.ERROR, "cancelled"))
                else:
                    exc = f.exception()
                    if exc is not None:
                        _fail(span, exc)
                    else:
                        _ack_attrs(span, f.result())
            finally:
                span.end()

        fut.add_done_callback(done)
        return fut

    # -- receive -----------------------------------------------------------------------------

    def receive(self, operation: str, fn: Callable[..., Msg], conn: Connection, stream: str | None,
                consumer: str | None, *args: Any) -> Msg:
        """Run ``fn`` (which returns one message the application asked for) in a CLIENT span.

        The span starts when the call starts and is made once its outcome is known: a
        message (the span links to the message's creation context) or an error (recorded).
        An iteration that ends (StopIteration) makes no span.
        """
        start = time.time_ns()
        try:
            msg: Msg = self._quiet(fn, *args)
        except StopIteration:
            raise
        except BaseException as exc:
            name, attrs = _base("receive", operation, None, conn)
            if stream is not None:
                attrs[STREAM] = stream
            if consumer is not None:
                attrs[CONSUMER] = consumer
                attrs[CONSUMER_GROUP] = consumer
            span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, start_time=start)
            _fail(span, exc)
            span.end()
            raise
        name, attrs = _msg_attrs("receive", operation, msg, conn)
        _ctx, links = self._extract(msg)
        self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, links=links,
                                start_time=start).end()
        return msg

    # -- process -----------------------------------------------------------------------------

    def process(self, callback: Callable[[Msg], Any], msg: Msg, conn: Connection, queue: str | None = None) -> Any:
        """Run a subscription's or consume's callback in a CONSUMER span.

        The message's creation context (from its headers) is the span's parent, and the span
        also links to it; the baggage it carries is current while the callback runs. What the
        callback raises is recorded and raised again.
        """
        name, attrs = _msg_attrs("process", "process", msg, conn)
        if queue:
            attrs[CONSUMER_GROUP] = queue
        ctx, links = self._extract(msg)
        token = otel_context.attach(ctx) if ctx is not None else None
        try:
            span = self._tracer.start_span(name, kind=SpanKind.CONSUMER, attributes=attrs, links=links)
            with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                try:
                    return callback(msg)
                except BaseException as exc:
                    _fail(span, exc)
                    raise
        finally:
            if token is not None:
                otel_context.detach(token)

    # -- settle ------------------------------------------------------------------------------

    def settle(self, fn: Callable[..., Any], msg: Msg, conn: Connection, payload: bytes, *args: Any) -> Any:
        """An ack of any kind (``fn(payload, *args)``) in a CLIENT span linked to the message's creation context."""
        op = "ack"
        for prefix, op_name in _SETTLE_NAMES:
            if payload.startswith(prefix):
                op = op_name
                break
        name, attrs = _msg_attrs("settle", op, msg, conn)
        _ctx, links = self._extract(msg)
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, links=links)
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                return self._quiet(fn, payload, *args)
            except BaseException as exc:
                _fail(span, exc)
                raise

    def ack_next(self, fn: Callable[..., list[Msg]], conn: Connection, msg: Msg, batch: int, no_wait: bool,
                 timeout: float | None) -> list[Msg]:
        """``Msg.ack_next`` (``fn(conn, msg, batch, no_wait, timeout)``): an ack and a pull in one call.

        Two spans, both from the call until it returns: a settle span (``ack {subject}``, the
        ack of ``msg``, linked to its creation context) and a CLIENT receive span
        (``ack_next ...``) for the messages the call returns, linked to each one's creation
        context. With ``batch`` > 1 the receive span is a batch one
        (``messaging.batch.message_count``, the name has the subject when all share it).
        An error is recorded on the receive span, and on the settle span too unless the ack
        was sent.
        """
        start = time.time_ns()
        name, attrs = _msg_attrs("settle", "ack", msg, conn)
        _ctx, links = self._extract(msg)
        settle = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, links=links,
                                         start_time=start)
        try:
            msgs: list[Msg] = self._quiet(fn, conn, msg, batch, no_wait, None if timeout is None else float(timeout))
        except BaseException as exc:
            if not msg.is_acked:
                _fail(settle, exc)
            settle.end()
            name, attrs = _base("receive", "ack_next", None, conn)
            _consumer_attrs(attrs, msg)
            span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, start_time=start)
            _fail(span, exc)
            span.end()
            raise
        settle.end()
        if batch == 1 and msgs:
            name, attrs = _msg_attrs("receive", "ack_next", msgs[0], conn)
        else:
            subjects = {m.subject for m in msgs}
            name, attrs = _base("receive", "ack_next", subjects.pop() if len(subjects) == 1 else None, conn)
            _consumer_attrs(attrs, msg)
            if batch > 1:
                attrs[BATCH_COUNT] = len(msgs)
        links = [link for m in msgs for link in self._extract(m)[1]]
        self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, links=links,
                                start_time=start).end()
        return msgs


def _consumer_attrs(attrs: dict[str, Any], msg: Msg) -> None:
    """The stream and consumer of a JetStream message (when its metadata can be read)."""
    try:
        md = msg.metadata
    except Exception:  # noqa: BLE001 - not a JetStream message: no stream or consumer
        return
    attrs[STREAM] = md.stream
    attrs[CONSUMER] = md.consumer
    attrs[CONSUMER_GROUP] = md.consumer


def _ack_attrs(span: trace.Span, ack: Any) -> None:
    """The PubAck's stream, sequence and duplicate flag on a send span."""
    stream = getattr(ack, "stream", None)
    if stream:
        span.set_attribute(STREAM, stream)
    seq = getattr(ack, "seq", None)
    if seq is not None:
        span.set_attribute(STREAM_SEQ, seq)
    if getattr(ack, "duplicate", None):
        span.set_attribute(DUPLICATE, True)

