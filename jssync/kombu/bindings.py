"""The bindings of the key-value bucket, kept in memory by a watch."""

from __future__ import annotations

import logging
import threading
import time

from ..base.errors import (
    Error,
    TimeoutError,
)
from ..kv.keyvalue import KeyValue, KeyValueOp
from .names import escape, unescape

logger = logging.getLogger("jssync")


class BindingsCache:
    """The bindings of the key-value bucket, kept current by a watch of the whole bucket.

    A daemon thread reads the watch and applies every put and delete, so a publish through an
    exchange routes from memory instead of listing the bucket. Other processes' changes are seen
    as soon as the watch delivers them (a round trip after they were stored); this process's own
    changes are applied at once (:meth:`note`). The watch re-creates its consumer after a
    reconnect or a gap; when it fails for good, :attr:`usable` turns False and the transport
    lists the bucket again (and starts a new cache).
    """

    def __init__(self, kv: KeyValue) -> None:
        self._lock = threading.Lock()
        #: key -> (revision, bound); a deleted key stays as (revision, False) so an older
        #: entry arriving later does not bring it back
        self._keys: dict[str, tuple[int, bool]] = {}
        #: escaped exchange -> {key: (routing key, queue)} of the keys bound now
        self._routes: dict[str, dict[str, tuple[str, str]]] = {}
        self._ready = threading.Event()
        self._failed = False
        self._stop = threading.Event()
        self._watcher = kv.watch(">")
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-bindings", daemon=True)
        self._thread.start()

    @property
    def usable(self) -> bool:
        """The initial bindings were read and the watch still runs."""
        return self._ready.is_set() and not self._failed and not self._stop.is_set()

    @property
    def failed(self) -> bool:
        return self._failed

    def wait_ready(self, timeout: float) -> bool:
        """Block until the initial bindings were read (at most ``timeout`` s, in short slices)."""
        end = time.monotonic() + timeout
        while not self._ready.is_set() and not self._failed and not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            self._ready.wait(min(left, 0.1))
        return self.usable

    def routes(self, exchange: str) -> list[tuple[str, str]]:
        """(routing key, queue) of every binding of ``exchange`` stored in the bucket."""
        with self._lock:
            return list(self._routes.get(escape(exchange), {}).values())

    def note(self, key: str, revision: int, bound: bool) -> None:
        """Apply a change to ``key`` at ``revision`` unless a newer one was applied already."""
        parts = key.split(".")
        if len(parts) != 3:
            return
        ex, q, rk = parts
        with self._lock:
            old = self._keys.get(key)
            if old is not None and old[0] >= revision:
                return
            self._keys[key] = (revision, bound)
            if bound:
                self._routes.setdefault(ex, {})[key] = (unescape(rk), unescape(q))
            else:
                table = self._routes.get(ex)
                if table is not None:
                    table.pop(key, None)
                    if not table:
                        del self._routes[ex]

    def forget(self, key: str) -> None:
        """Drop ``key`` now (this process deleted it; the watch confirms with the revision)."""
        parts = key.split(".")
        with self._lock:
            old = self._keys.get(key)
            self._keys[key] = (old[0] if old else 0, False)
            table = self._routes.get(parts[0])
            if table is not None:
                table.pop(key, None)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    entry = self._watcher.next(timeout=0.5)
                except TimeoutError:
                    continue
                if entry is None:
                    self._ready.set()
                    continue
                self.note(entry.key, entry.revision, entry.operation == KeyValueOp.PUT)
        except StopIteration:
            pass
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to listing the bucket
            logger.warning("kombu transport: the bindings watch stopped (%s); listing the bucket instead", exc)
        finally:
            if not self._stop.is_set():
                self._failed = True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and its thread (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        try:
            self._watcher.stop()
        except Error as exc:
            logger.debug("kombu transport: stopping the bindings watch: %s", exc)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
