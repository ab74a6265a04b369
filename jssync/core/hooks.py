"""What the layers above core plug into it (dependency inversion: core never imports them).

The core layer (connection, msg) offers two calls that belong to the JetStream layer:
``Connection.jetstream()`` builds a :class:`jssync.JetStream`, and ``Msg.ack_next()`` acks and
pulls the next messages of a pull consumer. Instead of importing upward, core calls the function
the JetStream layer stored here when it was imported. ``jssync/__init__.py`` imports every layer,
and importing any ``jssync.x`` module runs it first, so both hooks are set before a user can hold
a Connection or a Msg.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..jetstream.context import JetStream
    from .connection import Connection
    from .msg import Msg


class CoreHooks:
    """The hooks; each is set once, at import, by the module named in its comment."""

    #: ``JetStream(conn, domain=, api_prefix=, timeout=, max_pending=)``: set by jssync.jetstream.context
    jetstream: Callable[..., JetStream]
    #: ``ack_next(conn, msg, batch, no_wait, timeout) -> list[Msg]``: set by jssync.jetstream.pull
    ack_next: Callable[[Connection, Msg, int, bool, float | None], list[Msg]]


HOOKS = CoreHooks()
