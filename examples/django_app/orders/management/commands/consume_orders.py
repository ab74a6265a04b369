"""``python manage.py consume_orders --count N``: handle orders from JetStream, with acks.

Pulls batches from the durable consumer ``--durable`` (default ``orders-command``) with
``consumer.fetch``, prints each order it handles and acks it. Stops after ``--count``
orders (0: run until Ctrl-C or SIGTERM), or fails after ``--timeout`` seconds without
reaching the count. Orders it fetched but did not ack are redelivered by the server after
the consumer's ack wait, so stopping at any point loses nothing.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

import jssync
from orders.nats import NEW, ensure_stream


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # jssync waits in 0.1 s slices: this gets through at once


class Command(BaseCommand):
    help = "Consume orders from JetStream, acking each one handled."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--count", type=int, default=0, help="stop after N orders (0: run until stopped)")
        parser.add_argument("--timeout", type=float, default=None,
                            help="fail if --count orders were not handled within this many seconds")
        parser.add_argument("--batch", type=int, default=10, help="messages per pull request")
        parser.add_argument("--durable", default="orders-command", help="the durable consumer's name")

    def handle(self, *args: Any, count: int, timeout: float | None, batch: int, durable: str,
               **options: Any) -> None:
        if count < 0 or batch < 1:
            raise CommandError("--count must be 0 or more and --batch 1 or more")
        signal.signal(signal.SIGTERM, _raise_interrupt)
        deadline = None if timeout is None else time.monotonic() + timeout
        handled = 0
        with jssync.connect(settings.NATS_URL, name="consume_orders", timeout=5.0) as nc:
            js = nc.jetstream()
            ensure_stream(js, settings.ORDERS_STREAM)
            consumer = js.create_or_update_consumer(
                settings.ORDERS_STREAM, durable_name=durable, filter_subject=NEW,
                ack_policy="explicit", ack_wait=30.0, max_deliver=5)
            self.stdout.write(f"consuming {NEW} from stream {settings.ORDERS_STREAM} as {durable}")
            try:
                while count == 0 or handled < count:
                    wait = 5.0
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise CommandError(f"timed out: handled {handled} of {count} orders")
                        wait = max(0.2, min(wait, left))
                    want = batch if count == 0 else min(batch, count - handled)
                    # One pull request: yields messages as they come, ends after `wait` seconds.
                    for msg in consumer.fetch(want, expires=wait):
                        self.handle_order(msg)
                        handled += 1
            except KeyboardInterrupt:
                self.stdout.write("stopping")
            # leaving the with block closes the connection, which sends the acks still queued
        self.stdout.write(f"done: handled {handled} orders")

    def handle_order(self, msg: jssync.Msg) -> None:
        meta = msg.metadata
        order_id = (msg.headers or {}).get("Nats-Msg-Id", "-")
        try:
            order = json.loads(msg.data)
            line = f"{order['qty']} x {order['item']}"
        except (ValueError, KeyError, TypeError):
            msg.term("not an order")  # never redelivered
            self.stdout.write(f"rejected message {meta.sequence.stream}: not an order")
            return
        # ... the real work goes here (write to the database, call a service) ...
        msg.ack()
        self.stdout.write(f"handled order {order_id}: {line} (stream seq {meta.sequence.stream}, "
                          f"delivery {meta.num_delivered})")
