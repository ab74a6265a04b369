"""``python manage.py jssync_consume STREAM CONSUMER --handler dotted.path [--workers N] [--nak-delay S] [--grace S]``.

Consumes the pull consumer forever: ``handler(msg)`` runs on one of ``--workers`` threads; the
message is acked when the handler returns and nak'ed (after ``--nak-delay`` seconds, if given)
when it raises. A message the handler acked, nak'ed or terminated itself is left as it is.

SIGTERM or SIGINT stops it: no more pulls, every buffered message not handed to a handler is
nak'ed (the server redelivers it at once), the running handlers get ``--grace`` seconds
(default 30) to finish and be acked, the connection is closed (flushing the acks), exit status
0. A second signal stops waiting for the handlers. Handlers still running when the grace
runs out leave their messages to the server's ack wait; exit status 1.

A terminal error (consumer or stream not found or deleted, credentials refused, connection
closed) is logged and ends the command with exit status 1. Logs go to the ``jssync`` logger,
configured by Django's ``LOGGING``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

import jssync
from jssync.base.validate import positive_int
from jssync.contrib.django.client import close, jetstream

log = logging.getLogger("jssync")

#: how long the command waits for a message before it looks at its stop flag again
_POLL = 0.25


def _seconds(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}")
    return v


class _Workers:
    """``n`` daemon threads that run the handler; :meth:`submit` blocks while all are busy."""

    def __init__(self, n: int, run: Callable[[jssync.Msg], None]) -> None:
        self._run = run
        self._slots = threading.Semaphore(n)
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Condition(self._lock)

    def acquire(self, timeout: float) -> bool:
        """Reserve a free worker, waiting up to ``timeout`` seconds; False if none came free."""
        return self._slots.acquire(timeout=timeout)

    def release(self) -> None:
        self._slots.release()

    def submit(self, msg: jssync.Msg) -> None:
        """Run the handler on ``msg`` in a new thread (a worker slot must be reserved)."""
        with self._lock:
            self._busy += 1
        threading.Thread(target=self._work, args=(msg,), name="jssync_consume-handler", daemon=True).start()

    def _work(self, msg: jssync.Msg) -> None:
        try:
            self._run(msg)
        finally:
            with self._lock:
                self._busy -= 1
                self._idle.notify_all()
            self._slots.release()

    def wait_idle(self, deadline: float, force: threading.Event) -> int:
        """Wait until no handler runs, until ``deadline`` (monotonic) or ``force``; return how many still run."""
        with self._lock:
            while self._busy and not force.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(min(left, 0.1))
            return self._busy


class Command(BaseCommand):
    help = ("Consume a JetStream pull consumer forever: call the handler for each message, ack when it "
            "returns, nak when it raises; stop cleanly on SIGTERM/SIGINT.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("stream", help="the stream's name")
        parser.add_argument("consumer", help="the (durable) pull consumer's name; it must exist")
        parser.add_argument("--handler", required=True, metavar="DOTTED.PATH",
                            help="the callable run with each message, e.g. orders.handlers.handle_order")
        parser.add_argument("--workers", type=positive_int, default=1, metavar="N",
                            help="handlers running at once (default 1)")
        parser.add_argument("--nak-delay", type=_seconds, default=None, metavar="SECONDS",
                            help="redeliver a message whose handler raised after this many seconds "
                                 "(default: at once, or as the consumer's backoff says)")
        parser.add_argument("--grace", type=_seconds, default=30.0, metavar="SECONDS",
                            help="on SIGTERM/SIGINT, how long running handlers may take to finish (default 30)")
        parser.add_argument("--max-messages", type=positive_int, default=None, metavar="N",
                            help="messages buffered ahead of the handlers (default: jssync's, 500)")

    def handle(self, *args: Any, stream: str, consumer: str, handler: str, workers: int,
               nak_delay: float | None, grace: float, max_messages: int | None, **options: Any) -> None:
        try:
            fn = import_string(handler)
        except ImportError as exc:
            raise CommandError(f"--handler {handler!r} cannot be imported: {exc}") from None
        if not callable(fn):
            raise CommandError(f"--handler {handler!r} is not callable")
        stopping = threading.Event()
        force = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if stopping.is_set():
                force.set()
            stopping.set()

        old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._consume(stream, consumer, fn, workers, nak_delay, grace, max_messages, stopping, force)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)

    def _consume(self, stream: str, consumer: str, fn: Callable[[jssync.Msg], Any], workers: int,
                 nak_delay: float | None, grace: float, max_messages: int | None, stopping: threading.Event,
                 force: threading.Event) -> None:
        def run(msg: jssync.Msg) -> None:
            try:
                fn(msg)
            except Exception:
                meta = msg.metadata
                log.exception("handler %s raised on %s stream seq %d (delivery %d); nak'ed%s", handler_name,
                              msg.subject, meta.sequence.stream, meta.num_delivered,
                              f" with a delay of {nak_delay}s" if nak_delay else "")
                try:
                    msg.nak(delay=nak_delay)
                except jssync.Error as exc:
                    log.warning("could not nak stream seq %d: %s", meta.sequence.stream, exc)
                return
            try:
                msg.ack()
            except jssync.Error as exc:
                log.warning("could not ack stream seq %d: %s", msg.metadata.sequence.stream, exc)

        handler_name = getattr(fn, "__qualname__", repr(fn))
        failure: str | None = None
        pool = _Workers(workers, run)
        try:
            try:
                cons = jetstream().consumer(stream, consumer)
            except jssync.Error as exc:
                raise CommandError(f"cannot consume {stream}/{consumer}: {type(exc).__name__}: {exc}") from None
            opts: dict[str, Any] = {} if max_messages is None else {"max_messages": max_messages}
            messages = cons.consume(**opts)
            log.info("consuming %s/%s with %d worker(s), handler %s", stream, consumer, workers, handler_name)
            try:
                while not stopping.is_set():
                    if not pool.acquire(_POLL):
                        continue
                    try:
                        msg = messages.next(timeout=_POLL)
                    except jssync.TimeoutError:
                        pool.release()
                        continue
                    except StopIteration:
                        pool.release()
                        if not stopping.is_set():
                            failure = "consuming ended: the connection was closed"
                        break
                    except jssync.Error as exc:
                        pool.release()
                        failure = f"consuming {stream}/{consumer} ended: {type(exc).__name__}: {exc}"
                        break
                    pool.submit(msg)
            finally:
                messages.stop()  # no more pulls; the buffered messages are nak'ed
            if stopping.is_set():
                log.info("stopping: waiting up to %ss for %s/%s's running handlers", grace, stream, consumer)
            still = pool.wait_idle(time.monotonic() + grace, force)
            try:
                messages.wait(timeout=5.0)  # the inbox is unsubscribed and the buffer nak'ed
            except jssync.TimeoutError:
                log.warning("the consume of %s/%s did not wind down within 5s", stream, consumer)
            if still:
                failure = failure or (f"{still} handler(s) still running after the grace period of {grace}s: "
                                      "their messages are redelivered after the consumer's ack wait")
        finally:
            close(timeout=max(5.0, min(grace, 30.0)))  # flushes the acks and naks
        if failure:
            log.error("%s", failure)
            raise CommandError(failure)
        log.info("stopped consuming %s/%s", stream, consumer)
