"""The Liftbridge client's errors: each under jssync's core tree (``StreamNameInUseError``,
``StreamNotFoundError``, ``NotSupportedError``, ``ValidationError``), shown as members of
``jssync.liftbridge`` (the ones ``jssync`` exports too are shown as ``jssync``'s)."""

from __future__ import annotations

from ..base.errors import NotSupportedError, StreamNameInUseError, StreamNotFoundError, ValidationError


class StreamExistsError(StreamNameInUseError):
    """A Liftbridge stream (or one of its partition streams) of that name already exists.

    The Liftbridge ``ErrStreamExists``. A :class:`jssync.StreamNameInUseError` (an
    :class:`jssync.APIError`: ``.code``, ``.err_code``, ``.description``).
    """


class NoSuchPartitionError(StreamNotFoundError):
    """The Liftbridge stream, or the partition of it, does not exist.

    The Liftbridge ``ErrNoSuchPartition`` (also raised where Liftbridge says
    ``ErrNoSuchStream``). A :class:`jssync.StreamNotFoundError`.
    """


class LiftbridgeNotSupportedError(NotSupportedError):
    """A Liftbridge option that has no faithful JetStream mapping (e.g. ``group``).

    A :class:`jssync.NotSupportedError`.
    """


class InvalidAckError(ValidationError):
    """The data given to :func:`unmarshal_ack` is not a JetStream PubAck."""


# Shown as members of jssync.liftbridge (jssync/__init__.py shows the ones jssync exports as
# jssync's). Liftbridge's NotSupportedError is named so there; this module has its own.
LiftbridgeNotSupportedError.__name__ = LiftbridgeNotSupportedError.__qualname__ = "NotSupportedError"
for _cls in (StreamExistsError, NoSuchPartitionError, LiftbridgeNotSupportedError, InvalidAckError):
    _cls.__module__ = "jssync.liftbridge"
del _cls


# -- internal


class _Terminal(Exception):
    """Internal: carries the error that ends a subscription."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc
