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

The backend is thread-safe (``thread_safe = True``: Celery shares one instance between threads)
and every backend of a process with the same servers and options shares one connection; a
forked child (a prefork pool process) opens its own on first use and never touches its
parent's; what is still open is closed at interpreter exit (with a 2 s limit).

Celery's ``result_chord_expires`` is not honoured: a key's lifetime is the bucket's TTL
(``result_expires``, restarted by each write) and JetStream has no per-key expiry to set
afterwards, which is what Celery's ``expire()`` asks for (a warning is logged when it is set).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import weakref
from typing import Any

from celery.backends.base import KeyValueStoreBackend

from ..base.backoff import Backoff, retry
from ..base.deadline import Deadline
from ..base.errors import (
    ConnectionClosedError,
    Error,
    MessageNotFoundError,
    NoRespondersError,
    NoServersError,
    StreamNotFoundError,
    ValidationError,
    worth_retrying,
)
from ..core.connection import Connection, connect
from ..kv.errors import (
    BucketExistsError,
    BucketNotFoundError,
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
#: how long :meth:`KeyValueBackend.incr` tries again (seconds) when others keep updating the counter first
INCR_DEADLINE = 30.0
#: the waits between those tries: 5 ms doubling up to 0.5 s, half of each wait random
INCR_BACKOFF = Backoff(0.005, 0.5, jitter=0.5)
#: the KV operation header of a delete or purge marker
_OPERATION = "KV-Operation"


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
    else ``nats://127.0.0.1:4222``; ``jssync://`` is ``nats://``; commas or semicolons (kombu's
    separator) separate alternates."""
    chosen = url
    if not chosen and isinstance(broker_url, str) and broker_url.split("://", 1)[0] in ("nats", "jssync", "tls"):
        chosen = broker_url
    if not chosen:
        return ["nats://127.0.0.1:4222"]
    out = []
    for one in re.split(r"[,;]", chosen):
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


# -- one connection per process, shared by the backends with the same servers and options ----

_shared_lock = threading.Lock()
_shared_pid = os.getpid()
#: (servers, options) -> [the connection, how many backends hold it]
_shared: dict[tuple[tuple[str, ...], str], list[Any]] = {}
#: every backend of the process (a forked child gives each a new lock)
_backends: weakref.WeakSet[KeyValueBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: forget the parent's connections (never close them: they are the
    parent's) and replace the lock (a parent's thread may have held it at the fork)."""
    global _shared_lock, _shared_pid, _shared
    _shared_lock = threading.Lock()
    _shared_pid = os.getpid()
    _shared = {}
    for backend in list(_backends):
        backend._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _shared_key(servers: list[str], options: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    return tuple(servers), repr(sorted(options.items()))


def _check_pid() -> None:
    """Call under ``_shared_lock``: a fork the hook did not see leaves the parent's connections."""
    global _shared_pid, _shared
    if _shared_pid != os.getpid():
        _shared_pid, _shared = os.getpid(), {}


def _acquire(servers: list[str], options: dict[str, Any]) -> Connection:
    """This process's open connection to ``servers`` with ``options`` (connecting unless there is one;
    blocks on the connect), counted as held once more."""
    key = _shared_key(servers, options)
    with _shared_lock:
        _check_pid()
        held = _shared.get(key)
        if held is not None and not held[0].is_closed:
            held[1] += 1
            return held[0]  # type: ignore[no-any-return]
        nc = connect(servers, **options)
        _shared[key] = [nc, 1]  # the holders of a closed one acquire again when they see it closed
        return nc


def _release(nc: Connection) -> None:
    """One holder less of ``nc``; the last one closes it (flushing what is buffered)."""
    with _shared_lock:
        _check_pid()
        for key, held in list(_shared.items()):
            if held[0] is nc:
                held[1] -= 1
                if held[1] > 0:
                    return
                del _shared[key]
                break
        else:
            return  # not this process's (a parent's, or closed at exit)
    nc.close()


@atexit.register
def _close_at_exit() -> None:
    with _shared_lock:
        _check_pid()
        conns = [held[0] for held in _shared.values()]
        _shared.clear()
    for nc in conns:
        try:
            nc.close(timeout=2.0)
        except BaseException:  # noqa: BLE001 - nothing to report to at exit
            pass


class KeyValueBackend(KeyValueStoreBackend):  # type: ignore[misc]
    """Celery results in a JetStream key-value bucket (see the module docs).

    Thread-safe: one instance serves every thread of a process, over the process's one
    connection (opened on first use; a prefork child opens its own). Every call blocks on one
    or two key-value requests (at most the connection's request timeout) and raises jssync
    errors (``jssync.Error``) when the server does not answer. A bucket deleted meanwhile is
    created again, as at first use.
    """

    supports_autoexpire = True
    implements_incr = True
    # one instance for every thread (Celery keeps a thread-unsafe backend per thread)
    thread_safe = True
    # a str key: the bucket's key is the escaped Celery key
    key_t = staticmethod(str)

    def __init__(self, url: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, url=url, **kwargs)
        self.thread_safe = True  # Celery's __init__ sets it from result_backend_thread_safe
        conf = self.app.conf
        self.options = backend_options(dict(conf.get("result_backend_transport_options") or {}))
        self.servers = server_urls(url, conf.get("broker_url"))
        if conf.get("result_chord_expires") is not None:
            logger.warning("KeyValueBackend: result_chord_expires is not honoured: a chord's counter and "
                           "results live as long as the bucket's TTL (result_expires) after their last write")
        self._lock = threading.Lock()
        self._nc: Connection | None = None
        self._kv: KeyValue | None = None
        self._pid = 0
        _backends.add(self)

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
            return self._open()

    def _open(self) -> KeyValue:
        """Call under ``self._lock``: this process's connection, and the bucket (created unless it exists)."""
        nc = self._nc if self._pid == os.getpid() else None  # else a parent's: its I/O thread is not here
        self._nc = self._kv = None
        if nc is not None and nc.is_closed:
            _release(nc)
            nc = None
        if nc is None:
            nc = _acquire(self.servers, {"name": "celery-results", **self.options["connect_options"]})
        self._nc, self._pid = nc, os.getpid()
        js = nc.jetstream()
        name = self.options["bucket"]
        try:
            kv = js.key_value(name)
        except BucketNotFoundError:
            ttl = float(self.expires) if self.expires else None
            try:
                kv = js.create_key_value(bucket=name, history=1, ttl=ttl, storage=self.options["storage"],
                                         replicas=self.options["replicas"], description="Celery results")
            except BucketExistsError:
                kv = js.key_value(name)
        self._kv = kv
        return kv

    def _reopen(self, gone: KeyValue) -> KeyValue:
        """The bucket again after ``gone`` was found deleted: created anew (blocks on up to three requests)."""
        with self._lock:
            if self._kv is not None and self._kv is not gone and self._pid == os.getpid():
                return self._kv  # another thread re-opened it first
            logger.warning("KeyValueBackend: bucket %r is gone: creating it again", self.options["bucket"])
            return self._open()

    def _call(self, op: Any) -> Any:
        """``op(bucket)``, once more on a re-created bucket when the bucket was deleted meanwhile."""
        kv = self.bucket
        try:
            return op(kv)
        except (StreamNotFoundError, NoRespondersError):  # BucketNotFoundError; a put to no stream
            pass
        return op(self._reopen(kv))

    def close(self) -> None:
        """Let go of this process's connection (the last backend holding it closes it, flushing what
        is buffered); the next call opens one again."""
        with self._lock:
            nc, self._nc, self._kv = self._nc, None, None
            mine = self._pid == os.getpid()
        if nc is not None and mine:
            _release(nc)

    def exception_safe_to_retry(self, exc: BaseException) -> bool:
        """Whether Celery's ``result_backend_always_retry`` may try a call again after ``exc``: a
        jssync error that says it is retriable (``exc.retriable``: no responders, a 503, a leader
        election), a timeout (the backend's calls store, read or delete a whole value: doing one
        twice does no harm), and a lost connection (the next call opens another)."""
        if isinstance(exc, ConnectionClosedError | NoServersError):
            return True
        return isinstance(exc, Error) and worth_retrying(exc, timeouts=True)

    @staticmethod
    def _key(key: str | bytes) -> str:
        return escape(key.decode("utf-8") if isinstance(key, bytes) else key)

    # -- KeyValueStoreBackend -----------------------------------------------------------------

    def get(self, key: str | bytes) -> bytes | None:
        """The stored value of ``key`` or None (one request)."""
        name = self._key(key)

        def op(kv: KeyValue) -> bytes | None:
            try:
                return kv.get(name).value
            except KeyNotFoundError:  # never set, forgotten, or expired
                return None

        return self._call(op)  # type: ignore[no-any-return]

    def mget(self, keys: list[str | bytes]) -> list[bytes | None]:
        """The values of ``keys`` (None where there is none), one request each."""
        return [self.get(key) for key in keys]

    def set(self, key: str | bytes, value: str | bytes) -> None:
        """Store ``value`` as ``key`` (blocks until the stream confirmed it)."""
        name = self._key(key)
        self._call(lambda kv: kv.put(name, value))

    def delete(self, key: str | bytes) -> None:
        """Remove ``key`` (a delete marker; a get finds nothing after it)."""
        name = self._key(key)
        self._call(lambda kv: kv.delete(name))

    def incr(self, key: str | bytes) -> int:
        """Add one to the counter ``key`` (0 when missing) and return the new count.

        Reads the counter's latest revision from the stream leader (never a direct get that a
        lagging replica may answer), then writes the new count only if that revision is still
        the latest; when another process changed it first, tries again after a backoff (5 ms
        doubling to 0.5 s, jittered) for up to :data:`INCR_DEADLINE` seconds. Blocks on two
        requests per try.

        Raises:
            KeyWrongLastSequenceError: others changed the counter on every try until the deadline.
            jssync.Error: a retriable error (no responders, a leader election) until the deadline,
                or any other error of the requests at once.
        """
        name = self._key(key)

        def attempt(_failures: int) -> int:
            return self._call(lambda kv: self._incr_once(kv, name))  # type: ignore[no-any-return]

        def give_up(last: Exception) -> BaseException:
            if not isinstance(last, KeyWrongLastSequenceError):
                return last  # the server's own error (no responders, no leader): raised as it is
            return KeyWrongLastSequenceError(f"counter {name!r} in bucket {self.options['bucket']!r}: changed by "
                                             f"others on every try for {INCR_DEADLINE} s")

        return retry(attempt, INCR_BACKOFF, Deadline(INCR_DEADLINE),
                     worth_retrying=lambda exc: isinstance(exc, KeyWrongLastSequenceError) or worth_retrying(exc),
                     give_up=give_up)

    @staticmethod
    def _incr_once(kv: KeyValue, name: str) -> int:
        """One compare-and-set of counter ``name``: the leader's latest revision, plus one."""
        try:
            stored = kv.stream.get_msg(last_by_subject=f"$KV.{kv.bucket}.{name}")
        except MessageNotFoundError:  # never set, or gone with the bucket's TTL
            count, last = 1, 0
        else:
            op = (stored.headers or {}).get(_OPERATION)
            # a delete or purge marker counts from 0 again, written over the marker's revision
            count = 1 if op in ("DEL", "PURGE") else int(stored.data or b"0") + 1
            last = stored.seq
        kv.update(name, str(count).encode(), last)
        return count
