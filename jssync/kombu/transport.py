"""The kombu transport: one jssync connection, its queues, bindings and event-loop hooks."""

from __future__ import annotations

import builtins
import itertools
import logging
import os
import socket
import ssl
import threading
import time
from importlib import metadata
from queue import Empty
from typing import Any

from kombu.transport import virtual
from kombu.transport.virtual.base import BrokerState
from nats.js import api

from ..base.errors import (
    APIError,
    ConnectionClosedError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    Error,
    NoRespondersError,
    NoServersError,
    ReconnectBufferExceededError,
    ServiceUnavailableError,
    StreamNameInUseError,
    StreamNotFoundError,
    TimeoutError,
    ValidationError,
)
from ..core.connection import Connection, connect
from ..jetstream.consumers import Consumer
from ..jetstream.context import JetStream
from ..kv.errors import (
    BucketExistsError,
    BucketNotFoundError,
    KeyValueError,
)
from ..kv.keyvalue import KeyValue
from .bindings import BindingsCache
from .channel import Channel
from .deadletter import DeadLetters
from .names import escape, unescape
from .options import options

logger = logging.getLogger("jssync")

DEFAULT_PORT = 4222
#: most seconds a kombu event loop this transport is registered with waits before it turns
TICK = 0.5
#: the stream metadata key of a queue's ``x-expires`` (milliseconds)
EXPIRES_KEY = "kombu-expires-ms"

_Channel = Channel


class _Sweeper:
    """Every ``expires_check`` seconds, deletes the expired queues of the transport's prefix
    (:meth:`Transport.delete_expired_queues`); a daemon thread of the connection."""

    def __init__(self, transport: Transport) -> None:
        self._owner = transport
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jssync-kombu-expires", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = float(self._owner.options["expires_check"])
        while not self._stop.wait(interval):
            try:
                self._owner.delete_expired_queues()
            except Error as exc:  # not connected now, a timeout: the next round tries again
                logger.debug("kombu transport: the check for expired queues failed: %s", exc)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (joins it, at most ``timeout`` s). Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class Transport(virtual.Transport):
    """kombu transport on one jssync connection (its own I/O thread); see the module docs."""

    Channel = Channel
    driver_type = "nats"
    driver_name = "jssync"
    can_parse_url = True
    polling_interval = 0.1

    implements = virtual.Transport.implements.extend(
        asynchronous=True,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )

    #: errors a reconnect can cure: kombu reconnects and retries on these
    connection_errors = (  # type: ignore[assignment]  # kombu types it as a 1-tuple
        *virtual.Transport.connection_errors,
        ConnectionClosedError,
        NoServersError,
        TimeoutError,
        ServiceUnavailableError,
        NoRespondersError,
        ReconnectBufferExceededError,
        socket.error,
    )
    #: errors of one call (bad request, missing stream, refused config, message too big)
    channel_errors = (  # type: ignore[assignment]  # kombu types it as a 1-tuple
        *virtual.Transport.channel_errors, APIError, ValidationError, KeyValueError)
    #: what kombu's ``ensure`` (publish retry, ``ensure_connection``) reconnects and retries on;
    #: without these kombu would also reconnect on every channel error and try again once
    recoverable_connection_errors = connection_errors
    #: a channel error is raised as is: trying the same call again would fail the same way
    recoverable_channel_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, client: Any, **kwargs: Any) -> None:
        self.options = options(client.transport_options or {})
        super().__init__(client, **kwargs)
        self.state = BrokerState()
        if "polling_interval" not in (client.transport_options or {}):
            self.polling_interval = self.options["polling_interval"]
        self._nc: Connection | None = None
        self._js: JetStream | None = None
        self._kv: KeyValue | None = None
        self._cache: BindingsCache | None = None
        self._cache_retry_at = 0.0
        self._cache_lock = threading.Lock()
        self._declare_lock = threading.Lock()
        #: queue -> its durable consumer, for queues declared on this connection
        self.consumers: dict[str, Consumer] = {}
        #: queues whose consumer this connection set to its own settings (it consumes them)
        self.configured: set[str] = set()
        #: queue -> the x- arguments it was declared with here, for declaring it again
        self.queue_arguments: dict[str, dict[str, Any]] = {}
        self._sweeper: _Sweeper | None = None
        #: moves messages that reached max_deliver to the dead_letter_queue (when that option is set)
        self._dead: DeadLetters | None = None
        #: bumped (and waiters woken) on every arrival, ack, reject, prefetch or pull change
        self.events = 0
        self._events_cond = threading.Condition(threading.Lock())
        #: the pipe a kombu event loop reads (register_with_event_loop); None until then
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        #: the event loop's periodic timer (register_with_event_loop); None until then
        self._tick: Any = None

    # -- events: arrivals and freed prefetch room ----------------------------------------------

    def wake(self) -> None:
        """Count an event and wake every thread waiting in :meth:`wait_event` (and a kombu
        event loop this transport is registered with)."""
        with self._events_cond:
            self.events += 1
            self._events_cond.notify_all()
        fd = self._wake_w
        if fd is not None:
            try:
                os.write(fd, b"\0")
            except OSError:  # full (a wake-up is pending anyway) or closed meanwhile
                pass

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Let a kombu event loop (``kombu.asynchronous.Hub``) deliver this transport's messages:
        a pipe the transport writes to on every arrival, ack or freed prefetch room is a reader
        of the loop, and its callback delivers what is ready without blocking."""
        if self._wake_r is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake_r, self._wake_w = r, w
        loop.add_reader(self._wake_r, self._on_wake, connection)
        loop.call_soon(self._deliver_ready, connection)  # starts the pulls of consumed queues
        # a timer, so the loop's poll never sleeps longer than TICK: Celery sees a warm
        # shutdown (SIGTERM) only when its loop turns, and a poll with no timer due waits on
        # (without it a prefork worker took 3.5-4 s after SIGTERM to start shutting down)
        if self._tick is not None:
            self._tick.cancel()
        self._tick = loop.call_repeatedly(TICK, self._deliver_ready, connection)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.cancel()
        if self._wake_r is not None:
            loop.remove_reader(self._wake_r)
        self._close_wake_pipe()

    def _close_wake_pipe(self) -> None:
        r, w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, None, None
        for fd in (w, r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _on_wake(self, connection: Any) -> None:
        fd = self._wake_r
        if fd is not None:
            try:
                while os.read(fd, 4096):
                    pass
            except OSError:  # emptied (BlockingIOError) or closed
                pass
        self._deliver_ready(connection)

    def _deliver_ready(self, connection: Any) -> None:
        """Deliver what is ready now (at most 100 messages), never waiting."""
        for _ in range(100):
            try:
                self.drain_events(connection, timeout=0)
            except builtins.TimeoutError:
                return

    def wait_event(self, seen: int, timeout: float) -> None:
        """Block until :attr:`events` differs from ``seen``, at most ``timeout`` s (``seen=-1``:
        just the pause, ended early only by a wake)."""
        with self._events_cond:
            if self.events == seen or seen < 0:
                self._events_cond.wait(timeout)

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """Deliver one message to its consumer's callback; blocks until one is there.

        Messages of consumed queues arrive through each queue's open pull (see
        :class:`Puller`), so this waits for an arrival or freed prefetch room instead of
        polling. Raises ``socket.timeout`` (``TimeoutError``) after ``timeout`` s with nothing to
        deliver, and what stopped a pull thread for good (the connection closed, a channel error).
        """
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self.events
            for channel in self.channels:
                exc = getattr(channel, "_pull_error", None)
                if exc is not None:
                    channel._pull_error = None
                    raise exc
            cycle = self.cycle
            if cycle is None:
                raise ConnectionClosedError("the kombu transport is closed")
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            left = 0.5 if end is None else min(0.5, end - time.monotonic())
            if left <= 0:
                raise builtins.TimeoutError("no message within the timeout")  # socket.timeout
            self.wait_event(seen, left)

    # -- connection ---------------------------------------------------------------------------

    @property
    def _client(self) -> Any:
        """The kombu Connection this transport serves; ConnectionClosedError once it let go of it."""
        if self.client is None:
            raise ConnectionClosedError("the kombu connection of this transport was closed")
        return self.client

    def servers(self) -> list[str]:
        """The URLs to connect to: the current one first, then kombu's alternates."""
        hosts = [self._client.hostname or "127.0.0.1"]
        hosts += [alt for alt in self._client.alt or [] if isinstance(alt, str)]
        out: list[str] = []
        for host in hosts:
            for one in host.split(","):  # "nats://a:4222,nats://b:4222" is one kombu host
                url = self._url(one.strip(), self._client.port if not out else None)
                if url not in out:
                    out.append(url)
        return out

    def _url(self, host: str, port: int | None) -> str:
        if "://" in host:
            scheme, rest = host.split("://", 1)
            if scheme == "jssync":
                scheme = "nats"
            return f"{scheme}://{rest}"
        return f"nats://{host}:{port or DEFAULT_PORT}"

    def establish_connection(self) -> Transport:
        """Connect to NATS (all URLs kombu knows; jssync fails over between them) and check JetStream.

        Blocks up to the connection's ``connect_timeout``. Raises one of :attr:`connection_errors`
        (``jssync.NoServersError`` when no server answers).
        """
        if self._nc is None or self._nc.is_closed:
            opts: dict[str, Any] = {"name": f"kombu-{socket.gethostname()}"}
            if self._client.userid:
                opts["user"] = self._client.userid
                opts["password"] = self._client.password
            tls = tls_context(self._client.ssl)
            if tls is not None:
                opts["tls"] = tls
            if self._client.connect_timeout:
                opts["timeout"] = float(self._client.connect_timeout)
            opts.update(self.options["connect_options"])
            nc = connect(self.servers(), **opts)
            try:
                js = nc.jetstream()
                js.account_info()
            except BaseException:
                nc.close()
                raise
            self._stop_cache()
            self._stop_sweeper()
            self._stop_dead_letters()
            self._nc, self._js = nc, js
            self._kv = None
            self._sweeper = _Sweeper(self)
            if self.options["dead_letter_queue"] is not None:
                self._dead = DeadLetters(self, nc)
            self.consumers.clear()
            self.configured.clear()
        super().establish_connection()
        return self

    def close_connection(self, connection: Any) -> None:
        """Stop the dead-letter mover (it publishes through a channel of its own), close the channels
        (-NAK what they hold), then the NATS connection (flushes acks)."""
        try:
            self._stop_dead_letters()
            super().close_connection(connection)
        finally:
            self._close_wake_pipe()
            self._stop_cache()
            self._stop_sweeper()
            self._stop_dead_letters()
            nc, self._nc, self._js, self._kv = self._nc, None, None, None
            if nc is not None:
                nc.close()

    def verify_connection(self, connection: Any) -> bool:
        return self._nc is not None and self._nc.is_connected

    def driver_version(self) -> str:
        try:
            return metadata.version("jssync")
        except metadata.PackageNotFoundError:
            return "unknown"

    @property
    def js(self) -> JetStream:
        if self._js is None:
            raise ConnectionClosedError("the kombu transport is not connected")
        return self._js

    # -- shared state: queues and bindings -----------------------------------------------------

    def forget_queue(self, queue: str) -> None:
        """Drop what this connection knows of ``queue``'s consumer (gone, or the queue deleted)."""
        self.consumers.pop(queue, None)
        self.configured.discard(queue)

    def declare_queue(self, queue: str, arguments: dict[str, Any], channel: _Channel, *,
                      consuming: bool = False) -> None:
        """Create ``queue``'s stream and durable consumer unless they exist; remember the consumer.

        ``arguments["x-message-ttl"]`` (milliseconds, kombu's ``Queue(message_ttl=...)``) becomes
        the stream's max age, ``x-max-length`` / ``x-max-length-bytes`` its ``max_msgs`` /
        ``max_bytes`` (the oldest messages are dropped), ``x-expires`` (``Queue(expires=...)``)
        the consumer's ``inactive_threshold``: once nobody has pulled from the queue for that
        long the server drops its consumer, and a connection's periodic check then deletes the
        stream and its bindings. ``arguments`` empty: those this connection declared it with.

        The consumer settings (``ack_wait``, ``max_deliver``, ``max_ack_pending``) belong to the
        processes that consume the queue: only a declaration with ``consuming`` (a consumer of
        this connection starts) writes this process's settings over existing ones; any other
        one (a producer's, ``basic_get``) creates the consumer when it is missing and leaves an
        existing one as it is. Blocks on up to three JetStream API calls.
        """
        if arguments:
            self.queue_arguments[queue] = dict(arguments)
        else:
            arguments = self.queue_arguments.get(queue, {})
        opts = self.options
        name = channel.stream_name(queue)
        config = api.StreamConfig(
            name=name,
            subjects=[channel.subject(queue)],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType(opts["storage"]),
            num_replicas=opts["replicas"],
            allow_msg_ttl=True,
            description=f"kombu queue {queue}",
        )
        if arguments.get("x-message-ttl") is not None:
            config.max_age = float(arguments["x-message-ttl"]) / 1000
        if arguments.get("x-max-length") is not None:
            config.max_msgs = int(arguments["x-max-length"])  # the oldest go first, as in AMQP
        if arguments.get("x-max-length-bytes") is not None:
            config.max_bytes = int(arguments["x-max-length-bytes"])
        expires: float | None = None
        if arguments.get("x-expires") is not None:
            try:
                expires = float(arguments["x-expires"]) / 1000
            except (TypeError, ValueError):
                raise ValidationError(f"queue {queue!r} x-expires {arguments['x-expires']!r}: "
                                      "need milliseconds") from None
            if not expires > 0:
                raise ValidationError(f"queue {queue!r} x-expires {arguments['x-expires']!r}: need milliseconds > 0")
            config.metadata = {EXPIRES_KEY: str(int(expires * 1000))}
        with self._declare_lock:
            try:
                self.js.create_stream(config)
            except StreamNameInUseError:
                pass
            cconfig = api.ConsumerConfig(
                durable_name=channel.consumer_name,
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=float(opts["ack_wait"]),
                max_deliver=opts["max_deliver"],
                max_ack_pending=opts["max_ack_pending"],
                inactive_threshold=expires,
            )
            if consuming:
                self.consumers[queue] = self.js.create_or_update_consumer(name, cconfig)
                self.configured.add(queue)
                return
            try:
                self.consumers[queue] = self.js.consumer(name, channel.consumer_name)
                return
            except ConsumerNotFoundError:
                pass
            try:
                self.consumers[queue] = self.js.create_consumer(name, cconfig)
            except ConsumerExistsError:  # made meanwhile, by another process, with its settings
                self.consumers[queue] = self.js.consumer(name, channel.consumer_name)

    def bindings(self) -> KeyValue:
        """The key-value bucket of bindings (``<exchange>.<queue>.<routing key>``, escaped)."""
        if self._kv is None:
            bucket = f"{self.options['subject_prefix'].replace('.', '_')}_bindings"
            try:
                self._kv = self.js.key_value(bucket)
            except BucketNotFoundError:
                try:
                    self._kv = self.js.create_key_value(bucket=bucket, history=1, storage=self.options["storage"],
                                                        replicas=self.options["replicas"])
                except BucketExistsError:
                    self._kv = self.js.key_value(bucket)
        return self._kv

    def delete_bindings(self, queue: str) -> None:
        """Remove every stored binding of ``queue`` (one listing, one delete per binding)."""
        kv = self.bindings()
        for key in kv.keys(f"*.{escape(queue)}.*"):
            self._forget(key)
            kv.delete(key)

    def store_binding(self, exchange: str, queue: str, routing_key: str) -> None:
        """Store the binding in the bucket (blocks until stored); this process's cache has it at once."""
        key = f"{escape(exchange)}.{escape(queue)}.{escape(routing_key)}"
        revision = self.bindings().put(key, b"")
        cache = self._cache
        if cache is not None:
            cache.note(key, revision, True)

    def remove_binding(self, exchange: str, queue: str, routing_key: str) -> None:
        """Delete the binding from the bucket (blocks until stored); gone from this process's cache first."""
        key = f"{escape(exchange)}.{escape(queue)}.{escape(routing_key)}"
        self._forget(key)
        self.bindings().delete(key)

    def _forget(self, key: str) -> None:
        cache = self._cache
        if cache is not None:
            cache.forget(key)

    def stored_bindings(self, exchange: str, *, fresh: bool = False) -> list[tuple[str, str]]:
        """(routing key, queue) of the bindings of ``exchange`` in the bucket, every process's.

        From the cache a watch of the bucket keeps current; the first call starts it and waits
        for the initial bindings (at most 5 s). While no cache is usable (not
        ready, its watch failed), or with ``fresh``, the bucket is listed instead (one listing,
        about 1-2 ms).
        """
        cache = None if fresh else self._bindings_cache()
        if cache is not None:
            return cache.routes(exchange)
        out = []
        for key in self.bindings().keys(f"{escape(exchange)}.*.*"):
            _, q, rk = key.split(".")
            out.append((unescape(rk), unescape(q)))
        return out

    def _bindings_cache(self) -> BindingsCache | None:
        cache = self._cache
        if cache is not None and cache.usable:
            return cache
        if not self._cache_lock.acquire(blocking=False):
            return None  # another thread is starting it: list the bucket this once
        try:
            cache = self._cache
            if cache is not None and not cache.failed:
                return cache if cache.wait_ready(5.0) else None
            now = time.monotonic()
            if now < self._cache_retry_at:
                return None
            self._cache_retry_at = now + 5.0
            if cache is not None:
                cache.stop()
            self._cache = None
            try:
                cache = self._cache = BindingsCache(self.bindings())
            except Error as exc:  # no watch now: list the bucket, try again in 5 s
                logger.warning("kombu transport: no watch of the bindings bucket (%s); listing it instead", exc)
                return None
            return cache if cache.wait_ready(5.0) else None
        finally:
            self._cache_lock.release()

    def _stop_dead_letters(self) -> None:
        dead, self._dead = self._dead, None
        if dead is not None:
            dead.stop()

    def _stop_sweeper(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop()

    def delete_expired_queues(self) -> list[str]:
        """Delete the queues of this prefix declared with ``x-expires`` whose consumer the server
        dropped (nobody pulled from them for that long): their streams and bindings. Returns
        their names. Blocks on one listing plus a lookup per such queue (and the deletes).
        A queue created less than its ``x-expires`` ago is kept (its declaration may be under way)."""
        prefix = str(self.options["subject_prefix"])
        durable = prefix.replace(".", "_")
        now = time.time()
        gone = []
        for info in list(self.js.streams(subject=f"{prefix}.q.*")):
            cfg = info.config
            expires_ms = (cfg.metadata or {}).get(EXPIRES_KEY)
            if expires_ms is None or cfg.name is None or not cfg.name.startswith(f"{durable}_"):
                continue
            created = _timestamp(info.created)
            if created is not None and now - created < float(expires_ms) / 1000:
                continue
            try:
                self.js.consumer(cfg.name, durable)
                continue
            except ConsumerNotFoundError:
                pass
            except StreamNotFoundError:
                continue
            try:
                queue = unescape(cfg.name[len(durable) + 1:])
            except (ValueError, UnicodeDecodeError):
                continue
            self.delete_bindings(queue)
            self.state.queue_bindings_delete(queue)
            self.forget_queue(queue)
            try:
                self.js.delete_stream(cfg.name)
            except StreamNotFoundError:
                continue  # another connection deleted it first
            logger.info("kombu transport: queue %r expired (unused for %s ms): deleted", queue, expires_ms)
            gone.append(queue)
        return gone

    def _stop_cache(self) -> None:
        cache, self._cache = self._cache, None
        self._cache_retry_at = 0.0
        if cache is not None:
            cache.stop()


def _timestamp(value: Any) -> float | None:
    """Seconds since the epoch of a stream's ``created`` (a datetime or an RFC 3339 string)."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        from datetime import datetime

        text = str(value)
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        head, _, tail = text.partition(".")
        if tail:  # fractions beyond microseconds: cut to six digits
            digits = "".join(itertools.takewhile(str.isdigit, tail))
            text = f"{head}.{digits[:6]}{tail[len(digits):]}"
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def tls_context(value: Any) -> ssl.SSLContext | None:
    """An SSL context for kombu's ``ssl=`` (True, an ``ssl.SSLContext``, or a dict of
    ``ca_certs``, ``certfile``, ``keyfile``, ``cert_reqs``); None when it is off."""
    if not value:
        return None
    if isinstance(value, ssl.SSLContext):
        return value
    ctx = ssl.create_default_context(cafile=value.get("ca_certs")) if isinstance(value, dict) \
        else ssl.create_default_context()
    if isinstance(value, dict):
        if value.get("certfile"):
            ctx.load_cert_chain(value["certfile"], value.get("keyfile"))
        if value.get("cert_reqs") == ssl.CERT_NONE:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    return ctx
