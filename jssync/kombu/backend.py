"""A Celery result backend on a JetStream key-value bucket, so a Celery deployment needs nothing but NATS.

Use it as (install ``jssync[celery]``)::

    app.conf.result_backend = "jssync.kombu.backend:KeyValueBackend"                  # the broker's servers
    app.conf.result_backend = "jssync.kombu.backend:KeyValueBackend+nats://host:4222"  # other servers

Results, saved groups and chord counters are keys of one bucket (``bucket`` option, default
``celery_results``); the bucket's TTL is Celery's ``result_expires`` (a value goes that long
after it was last written; ``None`` or 0: kept until forgotten). ``forget()`` deletes a result.
Chords count their finished parts with :meth:`KeyValueBackend.incr`, a revision-checked update,
so parts finishing at once in several workers never lose a count.

Options (Celery's ``result_backend_transport_options``): ``bucket``, ``storage`` (``"file"`` or
``"memory"``), ``replicas`` (1), ``connect_options`` (a dict passed to :func:`jssync.connect`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery.backends.base import KeyValueStoreBackend

from ..base.errors import ValidationError
from ..core.connection import Connection, connect
from ..kv.errors import (
    BucketExistsError,
    BucketNotFoundError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from ..kv.keyvalue import KeyValue
from .names import escape

__all__ = ["KeyValueBackend"]

logger = logging.getLogger("jssync")

#: the backend's options (``result_backend_transport_options``) and their defaults
DEFAULT_BACKEND_OPTIONS: dict[str, Any] = {
    "bucket": "celery_results",
    "storage": "file",
    "replicas": 1,
    "connect_options": {},
}
#: the most times :meth:`KeyValueBackend.incr` tries again when another process updated the key first
INCR_ATTEMPTS = 100


def backend_options(raw: dict[str, Any]) -> dict[str, Any]:
    """The backend options with defaults filled in, checked; raises ValidationError naming a bad one."""
    opts = dict(DEFAULT_BACKEND_OPTIONS)
    opts.update({k: v for k, v in raw.items() if k in DEFAULT_BACKEND_OPTIONS})
    bucket = opts["bucket"]
    if not isinstance(bucket, str) or not bucket or not all(c.isalnum() or c in "_-" for c in bucket):
        raise ValidationError(f"result backend bucket {bucket!r}: need a name of A-Z a-z 0-9 _ -")
    if opts["storage"] not in ("file", "memory"):
        raise ValidationError(f"result backend storage {opts['storage']!r}: need 'file' or 'memory'")
    replicas = opts["replicas"]
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 5:
        raise ValidationError(f"result backend replicas {replicas!r}: need an int from 1 to 5")
    if not isinstance(opts["connect_options"], dict):
        raise ValidationError(f"result backend connect_options {opts['connect_options']!r}: "
                              "need a dict of jssync.connect options")
    return opts


def server_urls(url: str | None, broker_url: Any) -> list[str]:
    """The NATS URLs of the backend: its own ``url``, else the broker's when that is a NATS URL,
    else ``nats://127.0.0.1:4222``; ``jssync://`` is ``nats://``, commas separate alternates."""
    chosen = url
    if not chosen and isinstance(broker_url, str) and broker_url.split("://", 1)[0] in ("nats", "jssync", "tls"):
        chosen = broker_url
    if not chosen:
        return ["nats://127.0.0.1:4222"]
    out = []
    for one in chosen.split(","):
        one = one.strip()
        if not one:
            continue
        if "://" not in one:
            one = f"nats://{one}"
        scheme, rest = one.split("://", 1)
        out.append(f"{'nats' if scheme == 'jssync' else scheme}://{rest}")
    if not out:
        raise ValidationError(f"result backend url {url!r}: no server in it")
    return out


class KeyValueBackend(KeyValueStoreBackend):  # type: ignore[misc]
    """Celery results in a JetStream key-value bucket (see the module docs).

    Each process (each prefork child too) opens its own connection on first use; every call
    blocks on one or two key-value requests (at most the connection's request timeout) and
    raises jssync errors (``jssync.Error``) when the server does not answer.
    """

    supports_autoexpire = True
    implements_incr = True
    # a str key: the bucket's key is the escaped Celery key
    key_t = staticmethod(str)

    def __init__(self, url: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, url=url, **kwargs)
        conf = self.app.conf
        self.options = backend_options(dict(conf.get("result_backend_transport_options") or {}))
        self.servers = server_urls(url, conf.get("broker_url"))
        self._lock = threading.Lock()
        self._nc: Connection | None = None
        self._kv: KeyValue | None = None
        self._pid = 0

    def __reduce__(self, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        return super().__reduce__(args, dict(kwargs or {}, url=self.url))

    # -- the bucket ---------------------------------------------------------------------------

    @property
    def bucket(self) -> KeyValue:
        """The results bucket (connects, and creates the bucket with ``result_expires`` as its TTL
        unless it exists: blocks on the connect and up to two requests). A process forked from
        one that was connected (a prefork child) opens a connection of its own."""
        with self._lock:
            if self._kv is not None and self._pid == os.getpid() and self._nc is not None and not self._nc.is_closed:
                return self._kv
            self._nc = None  # a parent's connection: its I/O thread is not in this process
            nc = connect(self.servers, **{"name": "celery-results", **self.options["connect_options"]})
            try:
                js = nc.jetstream()
                name = self.options["bucket"]
                try:
                    kv = js.key_value(name)
                except BucketNotFoundError:
                    ttl = float(self.expires) if self.expires else None
                    try:
                        kv = js.create_key_value(bucket=name, history=1, ttl=ttl, storage=self.options["storage"],
                                                 replicas=self.options["replicas"],
                                                 description="Celery results")
                    except BucketExistsError:
                        kv = js.key_value(name)
            except BaseException:
                nc.close()
                raise
            self._nc, self._kv, self._pid = nc, kv, os.getpid()
            return kv

    def close(self) -> None:
        """Close this process's connection (flushes what is buffered); the next call opens another."""
        with self._lock:
            nc, self._nc, self._kv = self._nc, None, None
            mine = self._pid == os.getpid()
        if nc is not None and mine:
            nc.close()

    @staticmethod
    def _key(key: str | bytes) -> str:
        return escape(key.decode("utf-8") if isinstance(key, bytes) else key)

    # -- KeyValueStoreBackend -----------------------------------------------------------------

    def get(self, key: str | bytes) -> bytes | None:
        """The stored value of ``key`` or None (one request)."""
        try:
            return self.bucket.get(self._key(key)).value
        except KeyNotFoundError:  # never set, forgotten, or expired
            return None

    def mget(self, keys: list[str | bytes]) -> list[bytes | None]:
        """The values of ``keys`` (None where there is none), one request each."""
        return [self.get(key) for key in keys]

    def set(self, key: str | bytes, value: str | bytes) -> None:
        """Store ``value`` as ``key`` (blocks until the stream confirmed it)."""
        self.bucket.put(self._key(key), value)

    def delete(self, key: str | bytes) -> None:
        """Remove ``key`` (a delete marker; a get finds nothing after it)."""
        self.bucket.delete(self._key(key))

    def incr(self, key: str | bytes) -> int:
        """Add one to the counter ``key`` (0 when missing) and return the new count: a
        revision-checked update, tried again when another process changed it first."""
        kv = self.bucket
        name = self._key(key)
        for _ in range(INCR_ATTEMPTS):
            try:
                entry = kv.get(name)
            except KeyNotFoundError:
                try:
                    kv.create(name, b"1")
                    return 1
                except KeyExistsError:
                    continue
            count = int(entry.value or b"0") + 1
            try:
                kv.update(name, str(count).encode(), entry.revision)
                return count
            except KeyWrongLastSequenceError:
                continue
        raise KeyWrongLastSequenceError(f"counter {name!r} in bucket {kv.bucket!r}: changed by others "
                                        f"on each of {INCR_ATTEMPTS} tries")
