"""What the pull engine answers: its actions, and the states it is in (pure values).

:class:`~jssync.jetstream.consume.engine.PullEngine` answers every event with a tuple of
these small immutable objects (the shared empty tuple :data:`NOTHING` when there is nothing
to do); its runner carries them out. They are re-exported by ``engine.py``.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

__all__ = [
    "NOTHING", "Action", "ArmTimer", "CheckConsumer", "Drop", "End", "EngineState", "Nak", "NakBuffered",
    "PinLost", "Recreate", "SendPull", "SwapInbox", "Unsubscribe", "Warn",
]

class EngineState(Enum):
    """Where a :class:`PullEngine` is (see the module docstring)."""

    NEW = 0
    RUNNING = 1
    DRAINING = 2
    STOPPED = 3
    CLOSED = 4


# -- actions ---------------------------------------------------------------------------------


class SendPull:
    """Send one pull request (``CONSUMER.MSG.NEXT``) with these values; it is counted already."""

    __slots__ = ("batch", "max_bytes", "expires", "heartbeat")

    def __init__(self, batch: int, max_bytes: int, expires: float, heartbeat: float) -> None:
        self.batch = batch
        self.max_bytes = max_bytes
        self.expires = expires
        self.heartbeat = heartbeat

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SendPull) and (self.batch, self.max_bytes, self.expires, self.heartbeat) == (
            other.batch, other.max_bytes, other.expires, other.heartbeat)

    def __hash__(self) -> int:
        return hash((self.batch, self.max_bytes, self.expires, self.heartbeat))

    def __repr__(self) -> str:
        return f"SendPull(batch={self.batch}, max_bytes={self.max_bytes}, expires={self.expires}, " \
               f"heartbeat={self.heartbeat})"


class _Marker:
    """An action without values (compared by kind)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Nak(_Marker):
    """Nak the message just given to :meth:`PullEngine.message` (it arrived after stop)."""

    __slots__ = ()


class Drop(_Marker):
    """Drop the message just given to :meth:`PullEngine.message` (the consume is closed)."""

    __slots__ = ()


class NakBuffered(_Marker):
    """Nak every message in the buffer (stop): the server redelivers them at once."""

    __slots__ = ()


class SwapInbox(_Marker):
    """The pulls in flight were written off but may be alive: send the next ones to a new
    inbox (what still arrives on the old one goes to ``message``/``status`` with
    ``written_off=True``); report the outcome with :meth:`PullEngine.inbox_swapped`."""

    __slots__ = ()


class CheckConsumer(_Marker):
    """Ask (off the I/O thread) whether the consumer still exists (after a 503)."""

    __slots__ = ()


class PinLost:
    """423 (pinned_client): the runner forgets the pin id its pulls carried; when it had
    one, it calls :meth:`PullEngine.pin_lost`. ``description``: the status's."""

    __slots__ = ("description",)

    def __init__(self, description: str = "") -> None:
        self.description = description

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PinLost)

    def __hash__(self) -> int:
        return hash("PinLost")

    def __repr__(self) -> str:
        return f"PinLost({self.description!r})"


class Unsubscribe:
    """Unsubscribe the inbox; ``wait``: first let the pulls in flight finish sending."""

    __slots__ = ("wait",)

    def __init__(self, wait: bool) -> None:
        self.wait = wait

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unsubscribe) and other.wait == self.wait

    def __hash__(self) -> int:
        return hash(("Unsubscribe", self.wait))

    def __repr__(self) -> str:
        return f"Unsubscribe(wait={self.wait})"


class End:
    """The consume ends: quietly (``error`` None) or with ``error`` (after the buffer,
    unless the engine was closed or stopped). ``fatal``: the iteration raises ``error``
    (a single pull's warnings and missed heartbeats are only kept, not raised)."""

    __slots__ = ("error", "fatal")

    def __init__(self, error: BaseException | None, fatal: bool | None = None) -> None:
        self.error = error
        self.fatal = error is not None if fatal is None else fatal

    def __eq__(self, other: object) -> bool:
        return isinstance(other, End) and type(other.error) is type(self.error)

    def __hash__(self) -> int:
        return hash(("End", type(self.error)))

    def __repr__(self) -> str:
        return f"End({self.error!r})"


class Warn:
    """Tell the application (error callback / logger); consuming goes on."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Warn) and type(other.error) is type(self.error)

    def __hash__(self) -> int:
        return hash(("Warn", type(self.error)))

    def __repr__(self) -> str:
        return f"Warn({self.error!r})"


class ArmTimer:
    """(Re)arm the consume's one timer to call :meth:`PullEngine.tick` at ``at`` (None: cancel it)."""

    __slots__ = ("at",)

    def __init__(self, at: float | None) -> None:
        self.at = at

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArmTimer) and other.at == self.at

    def __hash__(self) -> int:
        return hash(("ArmTimer", self.at))

    def __repr__(self) -> str:
        return f"ArmTimer({self.at})"


class Recreate:
    """(``recreate`` engines: the ordered consume) the consumer must be made again; when the
    new one and its inbox are ready, call :meth:`PullEngine.recreated`."""

    __slots__ = ("reason", "error")

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        self.reason = reason
        self.error = error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recreate) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(("Recreate", self.reason))

    def __repr__(self) -> str:
        return f"Recreate({self.reason!r})"


Action = SendPull | Nak | Drop | NakBuffered | SwapInbox | CheckConsumer | PinLost | Unsubscribe | End | Warn | \
    ArmTimer | Recreate

#: What an event with nothing to do returns (shared: nothing is allocated).
NOTHING: Final[tuple[Action, ...]] = ()
