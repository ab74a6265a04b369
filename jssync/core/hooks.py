"""What the layers above core plug into it (dependency inversion: core never imports them).

The core layer (connection, msg) offers two calls that belong to the JetStream layer:
``Connection.jetstream()`` builds a :class:`jssync.JetStream`, and ``Msg.ack_next()`` acks and
pulls the next messages of a pull consumer. Instead of importing upward, core calls the function
the JetStream layer stored here when it was imported. ``jssync/__init__.py`` imports every layer,
and importing any ``jssync.x`` module runs it first, so both hooks are set before a user can hold
a Connection or a Msg.

A third hook is optional and off by default: ``HOOKS.tracer``, the message tracer that
``jssync.otel.instrument()`` installs (None until then, and again after ``uninstrument()``).
The call sites that send, receive, process and settle messages read it once per message
and do nothing more while it is None, so tracing costs nothing when it is off, and core
never imports the layer that implements it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import concurrent.futures

    from ..jetstream.context import JetStream
    from ..jetstream.replies import PubAck
    from .connection import Connection
    from .msg import Msg
    from .request_many import RequestMany


class MessageTracer(Protocol):
    """What the call sites hand to the tracer (jssync/otel/_tracer.py implements it).

    Each wrapping call runs the wrapped operation itself: a call site checks
    ``tracer is not None and tracer.wants()`` and, when true, returns what the tracer
    returns. ``wants()`` is False on a thread that is inside an operation the tracer is
    already tracing (so that the tracer's call of the same method runs it untraced, and a
    ``consumer.next()`` is one receive span, not also the fetch it uses).
    """

    def wants(self) -> bool: ...

    def publish(self, conn: Connection, subject: str, data: bytes, reply: str | None,
                headers: dict[str, str] | None) -> None: ...

    def respond(self, conn: Connection, msg: Msg, data: bytes, headers: dict[str, str] | None) -> None: ...

    def request(self, conn: Connection, subject: str, data: bytes, headers: dict[str, str] | None,
                timeout: float | None) -> Msg: ...

    def request_many(self, conn: Connection, subject: str, data: bytes, headers: dict[str, str] | None,
                     options: dict[str, Any]) -> RequestMany: ...

    def js_publish(self, js: Any, subject: str, data: bytes, headers: dict[str, str] | None,
                   options: dict[str, Any]) -> PubAck | None: ...

    def js_publish_async(self, js: Any, subject: str, data: bytes, headers: dict[str, str] | None,
                         options: dict[str, Any]) -> concurrent.futures.Future[PubAck]: ...

    def receive(self, operation: str, fn: Callable[..., Msg], conn: Connection, stream: str | None,
                consumer: str | None, *args: Any) -> Msg: ...

    def process(self, callback: Callable[[Msg], Any], msg: Msg, conn: Connection, queue: str | None = None) -> Any: ...

    def settle(self, fn: Callable[..., Any], msg: Msg, conn: Connection, payload: bytes, *args: Any) -> Any: ...

    def ack_next(self, fn: Callable[..., list[Msg]], conn: Connection, msg: Msg, batch: int, no_wait: bool,
                 timeout: float | None) -> list[Msg]: ...


class CoreHooks:
    """The hooks; each is set once, at import, by the module named in its comment."""

    #: ``JetStream(conn, domain=, api_prefix=, timeout=, max_pending=)``: set by jssync.jetstream.context
    jetstream: Callable[..., JetStream]
    #: ``ack_next(conn, msg, batch, no_wait, timeout) -> list[Msg]``: set by jssync.jetstream.pull
    ack_next: Callable[[Connection, Msg, int, bool, float | None], list[Msg]]
    #: the message tracer, or None (tracing off): set by jssync.otel.instrument(), cleared by uninstrument()
    tracer: MessageTracer | None

    def __init__(self) -> None:
        self.tracer = None


HOOKS = CoreHooks()
