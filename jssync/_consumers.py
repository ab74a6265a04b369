"""Consumer: a handle on one (pull) consumer of a stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nats.js import api

if TYPE_CHECKING:
    from ._jetstream import JetStream


class Consumer:
    """A handle on one consumer. Made by :meth:`JetStream.consumer` / ``create_consumer``.

    Thread-safe.
    """

    def __init__(self, js: JetStream, stream: str, info: api.ConsumerInfo) -> None:
        self._js = js
        self.stream = stream
        self._info = info
        self.name: str = info.name

    def __repr__(self) -> str:
        return f"<jssync.Consumer {self.stream!r}/{self.name!r}>"

    @property
    def cached_info(self) -> api.ConsumerInfo:
        """The info from when this handle was made or last refreshed (no I/O)."""
        return self._info

    def info(self, *, timeout: float | None = None) -> api.ConsumerInfo:
        """Fetch the consumer's info (refreshes :attr:`cached_info`).

        Raises:
            jssync.ConsumerNotFoundError, jssync.StreamNotFoundError.
        """
        self._info = self._js._consumer_info(self.stream, self.name, timeout)
        return self._info

    def delete(self, *, timeout: float | None = None) -> bool:
        """Delete this consumer on the server."""
        return self._js.delete_consumer(self.stream, self.name, timeout=timeout)
