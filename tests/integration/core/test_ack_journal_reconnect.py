"""What the ack journal sends again after a reconnect (jssync/core/ackjournal.py), against a
real server behind a TCP proxy that drops the link while the server stays up:

- a stale -NAK is never sent again (it would make the server deliver its message once more);
- an ack queued while the link is down is written once, on the reconnect, not once more by
  the journal;
- the resends of several consumers wait for their consumers together, under one deadline, and
  go out anyway when CONSUMER.INFO is not permitted (one violation per consumer, not a dozen).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for
from tests.proxy import LinkEvents, TcpProxy, connect_through, go_down

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def _journal(nc: jssync.Connection):
    return nc._out.journal


def _reconnect_with_server_up(proxy: TcpProxy, ev: LinkEvents, nc: jssync.Connection) -> None:
    ev.reconnected.clear()
    proxy.drop()  # the server stays up; the client reconnects at once
    assert ev.reconnected.wait(10 * FACTOR)
    wait_for(lambda: not _journal(nc)._tasks, 10, what="the journal's resends")


@pytest.fixture
def link(nats_server, proxy) -> Iterator[tuple[jssync.Connection, LinkEvents]]:
    ev = LinkEvents()
    nc = connect_through(proxy.url, ev, "journal", 5.0)
    try:
        yield nc, ev
    finally:
        nc.close()


def test_a_naked_message_is_redelivered_once_after_a_reconnect_with_the_server_up(link, proxy, js, stream) -> None:
    nc, ev = link
    subject = f"{stream.name}.x"
    js.publish(subject, b"0")
    js.publish(subject, b"1")
    stream.create_consumer(durable_name="N", ack_wait=60)
    consumer = nc.jetstream().consumer(stream.name, "N")
    first = list(consumer.fetch(2, expires=5 * FACTOR))
    assert [m.data for m in first] == [b"0", b"1"]
    first[0].nak()
    first[1].ack()
    again = list(consumer.fetch(1, expires=5 * FACTOR))
    assert [m.data for m in again] == [b"0"]
    assert again[0].metadata.num_delivered == 2
    _reconnect_with_server_up(proxy, ev, nc)
    # the -NAK of the first delivery is not sent again: the message (held, not acked) does not come a third time
    assert list(consumer.fetch(1, expires=1.5 * FACTOR)) == []
    again[0].ack()
    wait_for(lambda: js.consumer(stream.name, "N").info().num_ack_pending == 0, 10, what="the ack")


def test_an_ack_queued_while_the_link_is_down_is_written_once(link, proxy, js, stream) -> None:
    nc, ev = link
    js.publish(f"{stream.name}.x", b"0")
    stream.create_consumer(durable_name="Q", ack_wait=60)
    consumer = nc.jetstream().consumer(stream.name, "Q")
    (msg,) = list(consumer.fetch(1, expires=5 * FACTOR))
    go_down(proxy, ev, nc)
    msg.ack()  # queued: written on the reconnect
    ev.reconnected.clear()
    proxy.forward()
    assert ev.reconnected.wait(10 * FACTOR)
    wait_for(lambda: js.consumer(stream.name, "Q").info().num_ack_pending == 0, 10, what="the queued ack")
    wait_for(lambda: not _journal(nc)._tasks, 10, what="the journal's resends")
    assert _journal(nc).resent == 0


_PERMS = """
authorization {
  users: [
    {user: admin, password: adminpw},
    {user: noinfo, password: noinfopw, permissions: {publish: {deny: ["$JS.API.CONSUMER.INFO.>"]}}}
  ]
}
"""

CONSUMERS = 4


def test_resends_of_several_consumers_without_info_permission_go_out_together() -> None:
    with NatsServer(jetstream=True, config=_PERMS) as server, TcpProxy(("127.0.0.1", server.port)) as proxy:
        with jssync.connect(server.url, user="admin", password="adminpw") as admin:
            ajs = admin.jetstream()
            ajs.create_stream(name="P", subjects=["p.>"], storage="memory")
            for i in range(CONSUMERS):
                ajs.publish(f"p.{i}", b"x")
        ev = LinkEvents()
        violations: list[BaseException] = []

        def on_error(exc: BaseException) -> None:
            if "CONSUMER.INFO" in str(exc):
                violations.append(exc)

        nc = connect_through(proxy.url, ev, "noinfo", 5.0, user="noinfo", password="noinfopw", error_cb=on_error)
        try:
            js = nc.jetstream()
            for i in range(CONSUMERS):
                # made here (CONSUMER.CREATE answers with the info): no CONSUMER.INFO needed
                consumer = js.create_consumer("P", durable_name=f"C{i}", filter_subject=f"p.{i}", ack_wait=60)
                for msg in consumer.fetch(1, expires=5 * FACTOR):
                    msg.ack()
            journal = _journal(nc)
            ev.reconnected.clear()
            t0 = time.monotonic()
            proxy.drop()
            assert ev.reconnected.wait(10 * FACTOR)
            wait_for(lambda: journal.resent >= CONSUMERS, 6, what="the resends of every consumer")
            took = time.monotonic() - t0
            assert took < 6 * FACTOR  # together, not one consumer's wait after another's
            assert len(violations) <= CONSUMERS, violations
        finally:
            nc.close()
