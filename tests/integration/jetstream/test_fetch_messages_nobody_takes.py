"""Messages that reach a fetch's inbox when no fetch takes them any more (a pull request the
client counts as over but the server still serves, as a pull re-sent after a reconnect is):
nak'ed at once, so the server redelivers them now instead of holding them ack-pending until
AckWait. Real nats-server; the stale pull request is made by hand on a fetch's inbox."""

from __future__ import annotations

import json
import time
from typing import Any

import jssync
from jssync.jetstream import pull
from tests.conftest import FACTOR, wait_for


def _ack_pending(c: Any) -> int:
    return int(c.info().num_ack_pending or 0)


def _idle_inbox(nc: jssync.Connection) -> str:
    boxes = pull._pools.get(nc) or []
    assert boxes, "the filled fetch gave its inbox back for reuse"
    return str(boxes[-1].subject)


def _stale_pull(nc: jssync.Connection, stream: str, consumer: str, inbox: str, batch: int) -> None:
    nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
               json.dumps({"batch": batch, "expires": 2_000_000_000}).encode(), reply=inbox)
    nc.flush()


def _fetch_all(c: Any, count: int) -> list[Any]:
    """Fetch (and ack) until ``count`` messages came, for at most 5 s (times FACTOR): what was
    held ack-pending would take 600 s."""
    got: list[Any] = []
    end = time.monotonic() + 5 * FACTOR
    while len(got) < count and time.monotonic() < end:
        for m in c.fetch(count - len(got), expires=0.5):
            m.ack_sync()
            got.append(m)
    return got


def test_messages_reaching_an_idle_fetch_inbox_are_nakd_at_once(js: Any, stream: Any) -> None:
    for i in range(6):
        js.publish(f"{stream.name}.x", str(i).encode())
    c = stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=600)
    first = list(c.fetch(1, expires=2))  # filled: its inbox goes back to the pool, idle
    assert [m.data for m in first] == [b"0"]
    first[0].ack_sync()
    _stale_pull(js.conn, stream.name, "D", _idle_inbox(js.conn), 3)
    wait_for(lambda: _ack_pending(c) == 3, timeout=5, what="the stale pull served")
    # the three the server sent to the idle inbox come back at once, not after 600 s
    again = _fetch_all(c, 5)
    assert sorted(m.data for m in again) == [b"1", b"2", b"3", b"4", b"5"]
    assert sorted(m.metadata.num_delivered for m in again) == [1, 1, 2, 2, 2]
    assert _ack_pending(c) == 0


def test_messages_beyond_a_filled_fetch_are_nakd_at_once(js: Any, stream: Any) -> None:
    """A stale pull on the inbox the next fetch reuses: that fetch takes the one it asked
    for and ends; the rest reaches it after it ended (or its idle inbox after that)."""
    for i in range(6):
        js.publish(f"{stream.name}.x", str(i).encode())
    c = stream.create_consumer(durable_name="D", ack_policy="explicit", ack_wait=600)
    warm = list(c.fetch(1, expires=2))
    warm[0].ack_sync()
    inbox = _idle_inbox(js.conn)
    _stale_pull(js.conn, stream.name, "D", inbox, 4)
    taken = list(c.fetch(1, expires=2))
    assert len(taken) == 1
    taken[0].ack_sync()
    rest = _fetch_all(c, 4)
    assert sorted(m.data for m in rest + taken) == [b"1", b"2", b"3", b"4", b"5"]
    assert _ack_pending(c) == 0
