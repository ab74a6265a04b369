"""Ordered consumers through server faults: restart and a paused server (real servers)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow, pytest.mark.fault]


@pytest.fixture
def server(tmp_path):
    with NatsServer(store_dir=tmp_path / "js") as srv:
        yield srv


def test_ordered_consume_survives_server_restart(server):
    got: list[int] = []
    errors: list[BaseException] = []
    with jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORS", subjects=["ors.>"], storage="file")
        for i in range(100):
            js.publish_async("ors.x", b"%d" % i)
        js.publish_async_completed(10)
        oc = st.ordered_consumer()
        cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream), error_cb=errors.append,
                        max_messages=10, expires=2, idle_heartbeat=0.5)
        try:
            wait_for(lambda: len(got) >= 100, what="first 100")
            first = oc.name
            server.restart()
            wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
            for i in range(100, 200):
                js.publish_async("ors.x", b"%d" % i)
            js.publish_async_completed(15)
            wait_for(lambda: len(got) >= 200, timeout=30, what="all 200 after the restart")
        finally:
            cc.stop()
    assert got == list(range(1, 201))
    assert oc.name != first and cc.resets == 1


def test_ordered_fetch_after_server_restart(server):
    with jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORF", subjects=["orf.>"], storage="file")
        for i in range(10):
            js.publish("orf.x", b"%d" % i)
        oc = st.ordered_consumer()
        got = [m.metadata.sequence.stream for m in oc.fetch(5, expires=1)]
        server.restart()
        wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
        # the in-memory consumer is gone: the next reads recreate it after sequence 5 (a
        # create JetStream cannot answer yet is retried within next()'s timeout)
        while len(got) < 10:
            got.append(oc.next(timeout=5).metadata.sequence.stream)
        assert got == list(range(1, 11))


def test_ordered_recovers_after_missed_heartbeats(server):
    got: list[int] = []
    errors: list[BaseException] = []
    with jssync.connect(server.url) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORH", subjects=["orh.>"], storage="file")
        js.publish("orh.x", b"0")
        oc = st.ordered_consumer()
        cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream), error_cb=errors.append,
                        expires=2, idle_heartbeat=0.5)
        try:
            wait_for(lambda: got == [1], what="first message")
            os.kill(server.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: any(isinstance(e, jssync.NoHeartbeatError) for e in errors), timeout=6,
                         what="missed heartbeats")
            finally:
                os.kill(server.pid, signal.SIGCONT)
            for i in range(1, 20):
                js.publish("orh.x", b"%d" % i, timeout=10)
            wait_for(lambda: len(got) >= 20, timeout=20, what="recovered")
        finally:
            cc.stop()
    assert got == list(range(1, 21))



def test_ordered_next_loop_through_graceful_restarts(server):
    """A thread reading with ``next()`` while the server restarts gracefully gets every
    message once, in order, and no exception.

    On SIGTERM the server ends the waiting pull with ``409 Server Shutdown`` while the
    connection is still up; the consumer create that follows is lost with the server and
    times out (5 s, the JetStream API timeout). That create is retried within next()'s own
    timeout (60 s here, never reached), so it must not surface from next().
    """
    per_round, restarts = 10, 2
    total = per_round * (restarts + 1)
    got: list[int] = []
    errors: list[BaseException] = []
    cond = threading.Condition()
    with jssync.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORN", subjects=["orn.>"], storage="file")
        oc = st.ordered_consumer()

        def reader() -> None:
            while len(got) < total:
                try:
                    msg = oc.next(timeout=60)
                except BaseException as exc:  # noqa: BLE001 - asserted on below
                    with cond:
                        errors.append(exc)
                        cond.notify_all()
                    return
                with cond:
                    got.append(msg.metadata.sequence.stream)
                    cond.notify_all()

        def pull_waiting() -> bool:
            try:
                return oc.name is not None and js.consumer(st.name, oc.name, timeout=2).info().num_waiting >= 1
            except jssync.Error:
                return False

        t = threading.Thread(target=reader, name="ordered-reader", daemon=True)
        t.start()
        try:
            names = []
            for r in range(restarts + 1):
                for i in range(per_round):
                    js.publish("orn.x", b"%d" % i, timeout=15)
                want = per_round * (r + 1)
                with cond:
                    assert cond.wait_for(lambda n=want: len(got) >= n or bool(errors), 30 * FACTOR), \
                        f"round {r}: {len(got)} of {want} messages"
                assert errors == []
                if r < restarts:
                    # the reader is blocked in next() with its pull request waiting on the server
                    wait_for(pull_waiting, timeout=10, what="the reader's pull request waiting")
                    names.append(oc.name)
                    server.restart()
                    wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
            with cond:
                assert cond.wait_for(lambda: not t.is_alive() or bool(errors), 10 * FACTOR)
        finally:
            nc.close()  # ends a reader still blocked in next() (when an assertion failed)
            t.join(10 * FACTOR)
    assert not t.is_alive()
    assert errors == []
    assert got == list(range(1, total + 1))
    assert oc.name not in names  # the consumer was recreated after each restart


def test_ordered_next_times_out_normally_while_the_server_is_down(server):
    """With the server down, next() raises its own TimeoutError once ``timeout`` has passed,
    not the consumer create's (after the JetStream API timeout, 5 s)."""
    with jssync.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1) as nc:
        js = nc.jetstream()
        st = js.create_stream(name="ORD", subjects=["ord.>"], storage="file")
        js.publish("ord.x", b"0")
        oc = st.ordered_consumer()
        assert oc.next(timeout=5).metadata.sequence.stream == 1
        server.stop()
        try:
            wait_for(lambda: not nc.is_connected, timeout=10, what="disconnected")
            # the first call's pull goes unanswered; the second one has to recreate the consumer
            for _ in range(2):
                t0 = time.monotonic()
                with pytest.raises(jssync.TimeoutError, match="no message from the ordered consumer"):
                    oc.next(timeout=1.5)
                assert time.monotonic() - t0 < 1.5 + 1.5 * FACTOR
        finally:
            server.start()
        wait_for(lambda: nc.is_connected, timeout=15, what="reconnected")
        js.publish("ord.x", b"1", timeout=15)
        assert oc.next(timeout=20).metadata.sequence.stream == 2



def test_ordered_consume_recreates_its_consumer_once_after_a_dropped_connection(proxy, nats_server, unique):
    """A dropped connection (the server stays up, so the old consumer and its pull are still
    there) makes the ordered consume recreate its consumer exactly once: deleting the old
    consumer ends the old pull with ``409 Consumer Deleted``, which must not start another reset.

    Three of the connection's four callback workers are kept busy by other subscriptions'
    callbacks, so the old consumer's deletion (on the worker pool) runs only after the new
    consumer was created and pulled from.
    """
    got: list[int] = []
    reconnected = threading.Event()
    release = threading.Event()
    with jssync.connect(proxy.url, reconnect_time_wait=0.1, reconnected_cb=reconnected.set) as nc, \
            jssync.connect(nats_server.url) as direct:
        busy = [nc.subscribe(f"busy{unique}.{i}", callback=lambda m: release.wait(30 * FACTOR)) for i in range(3)]
        djs = direct.jetstream()
        st = djs.create_stream(name=f"ORP{unique}", subjects=[f"orp{unique}.>"], storage="memory")
        try:
            for i in range(10):
                djs.publish(f"orp{unique}.x", b"%d" % i)
            oc = nc.jetstream().stream(st.name).ordered_consumer()
            cc = oc.consume(lambda m: got.append(m.metadata.sequence.stream))
            try:
                wait_for(lambda: len(got) == 10, what="the first 10")
                first = oc.name
                for i in range(3):
                    nc.publish(f"busy{unique}.{i}", b"")
                nc.flush()
                proxy.drop()
                assert reconnected.wait(15 * FACTOR), "not reconnected"
                wait_for(lambda: cc.resets >= 1, what="the consumer recreated")
                for i in range(10, 20):
                    djs.publish(f"orp{unique}.x", b"%d" % i)
                wait_for(lambda: len(got) == 20, what="all 20 after the reconnect")
                # the old consumer is gone and the new one's pull waits: no reset is under way
                wait_for(lambda: first not in djs.consumer_names(st.name), what="the old consumer deleted")

                def pull_waiting() -> bool:
                    name = oc.name
                    try:
                        return name is not None and djs.consumer(st.name, name).info().num_waiting == 1
                    except jssync.NotFoundError:
                        return False

                wait_for(pull_waiting, what="a pull waiting")
                assert cc.resets == 1, f"{cc.resets} resets"
            finally:
                release.set()
                cc.stop()
                for sub in busy:
                    sub.unsubscribe()
            assert got == list(range(1, 21))
        finally:
            djs.delete_stream(st.name)


NO_DELETE = """
authorization {
  users: [
    {user: admin, password: adminpw}
    {user: reader, password: readerpw, permissions: {publish: {allow: [">"], deny: ["$JS.API.CONSUMER.DELETE.>"]}}}
  ]
}
"""


def test_ordered_consume_ignores_the_end_of_a_dropped_consumers_pull():
    """After a reset, the ``408`` that ends a pull of the consumer it dropped (still there:
    this user may not delete consumers) carries pending counts that were written off at the
    reset already: they must not be subtracted again, or the consume pulls past
    ``max_messages`` and buffers more than that."""
    from tests.proxy import TcpProxy

    reconnected = threading.Event()
    with NatsServer(config=NO_DELETE) as srv, TcpProxy(("127.0.0.1", srv.port)) as proxy, \
            jssync.connect(srv.url, user="admin", password="adminpw") as admin, \
            jssync.connect(proxy.url, user="reader", password="readerpw", reconnect_time_wait=0.1,
                           reconnected_cb=reconnected.set, error_cb=lambda e: None) as nc:
        ajs = admin.jetstream()
        st = ajs.create_stream(name="ORL", subjects=["orl.>"], storage="memory")
        ajs.publish("orl.x", b"0")
        oc = nc.jetstream().stream(st.name).ordered_consumer()
        with oc.consume(max_messages=10, expires=2) as it:
            assert it.next(timeout=5 * FACTOR).metadata.sequence.stream == 1
            first = oc.name
            proxy.drop()
            assert reconnected.wait(15 * FACTOR), "not reconnected"
            wait_for(lambda: it.resets == 1 and oc.name != first, what="the consumer recreated")
            # the first consumer's pull (batch 10, 9 of them never delivered) expires with a 408
            wait_for(lambda: ajs.consumer(st.name, first).info().num_waiting == 0, what="the old pull expired")
            nc.flush()
            for i in range(30):
                ajs.publish("orl.x", b"%d" % (i + 1))

            def delivered() -> int:
                return ajs.consumer(st.name, oc.name).info().delivered.consumer_seq

            wait_for(lambda: delivered() >= 10 and it._q.qsize() >= 10, what="the buffer filled")
            nc.flush()
            admin.flush()
            assert delivered() == 10 and it._q.qsize() == 10
            assert it.pending_messages == 10
            assert [it.next(timeout=5 * FACTOR).metadata.sequence.stream for _ in range(30)] == list(range(2, 32))
