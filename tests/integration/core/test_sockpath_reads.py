"""Replies read off the socket by the caller's thread keep the connection's stream intact.

A caller that wrote its request itself watches the socket for a few milliseconds and,
when its reply is the next whole message there and the I/O thread has parsed everything
before it, reads the reply itself (``jssync/core/sockpath.py``). These tests check that this
happens, that every other message on the connection still arrives complete and
in order while it happens, and that everything else (big replies, replies with headers,
slow responders, many threads, a reconnect) falls back to the I/O thread correctly.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, echo, needs_fast_paths, wait_answered, wait_for

pytestmark = [pytest.mark.timeout(120), needs_fast_paths]


class _StealCount:
    """Counts the replies a connection's callers read themselves."""

    def __init__(self, nc: jssync.Connection) -> None:
        self.taken = 0
        self.declined = 0
        self._lock = threading.Lock()
        orig = nc._sockpath.steal

        def spy(sock, token):  # type: ignore[no-untyped-def]
            msg = orig(sock, token)
            with self._lock:
                if msg is None:
                    self.declined += 1
                else:
                    self.taken += 1
            return msg

        nc._sockpath.steal = spy  # type: ignore[method-assign]


@pytest.fixture
def pair(nats_server) -> Iterator[tuple[jssync.Connection, jssync.Connection]]:
    with jssync.connect(nats_server.url) as srv, jssync.connect(nats_server.url) as nc:
        yield srv, nc


def test_replies_are_read_by_the_caller(pair):
    srv, nc = pair
    echo(srv, "dr.echo")
    assert nc.request("dr.echo", b"warm-up", timeout=5).data == b"warm-up"
    assert nc._sockpath.reader is not None, "plain TCP: the direct read path is installed"
    count = _StealCount(nc)
    for i in range(200):
        body = f"req-{i}".encode() * (1 + i % 7)
        reply = nc.request("dr.echo", body, timeout=5)
        assert reply.data == body
        assert reply.subject.startswith(nc._mux_prefix)
    assert count.taken > 0, "some replies were read by the caller's thread"
    stats = nc.stats
    assert stats["in_msgs"] >= 201


def test_other_traffic_on_the_connection_stays_whole_and_in_order(pair, nats_server):
    """A subscription on the requesting connection gets a flood while requests run."""
    srv, nc = pair
    echo(srv, "dr.flood.echo")
    n = 20000
    got: list[int] = []
    done = threading.Event()

    def on_msg(msg: jssync.Msg) -> None:
        got.append(int(msg.data[:8]))
        if len(got) == n:
            done.set()

    nc.subscribe("dr.flood.data", callback=on_msg, pending_msgs_limit=n + 10)
    nc.flush()
    count = _StealCount(nc)
    errors: list[BaseException] = []

    def flood() -> None:
        try:
            with jssync.connect(nats_server.url) as pub:
                for i in range(n):
                    # payloads of many sizes so reads end at every kind of boundary
                    pub.publish("dr.flood.data", b"%08d" % i + b"z" * (i % 3000))
                pub.flush(10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    th = threading.Thread(target=flood)
    th.start()
    i = 0
    while th.is_alive() or i < 300:
        body = f"r{i}".encode() * (1 + i % 40)
        assert nc.request("dr.flood.echo", body, timeout=5).data == body
        i += 1
    th.join(30)
    assert not errors, errors
    assert done.wait(30 * FACTOR), f"only {len(got)} of {n} flood messages arrived"
    assert got == list(range(n)), "the flood arrived complete and in order"
    assert count.taken + count.declined > 0


def test_a_reply_look_alike_inside_a_payload_is_never_taken(pair, nats_server):
    """Payloads full of byte-exact copies of the next reply's wire form.

    Reads of the big payloads end at arbitrary offsets; a caller must never mistake the
    middle of a payload for its reply (it only reads when the I/O thread has parsed
    everything received up to a message boundary).
    """
    srv, nc = pair
    echo(srv, "dr.fake.echo")
    assert nc.request("dr.fake.echo", b"w", timeout=5).data == b"w"
    nc._req.tokens = itertools.repeat(777)  # every request waits on the same reply subject
    assert nc._mux_prefix is not None and nc._sockpath.sid is not None
    fake = b"MSG " + nc._mux_prefix.encode() + b"777 " + nc._sockpath.sid + b" 5\r\nFAKE!\r\n"
    payload = fake * (60_000 // len(fake))
    got: list[bytes] = []
    stop = threading.Event()

    nc.subscribe("dr.fake.data", callback=lambda m: got.append(m.data), pending_msgs_limit=1 << 20)
    nc.flush()
    errors: list[BaseException] = []

    def flood() -> None:
        try:
            sent = 0
            with jssync.connect(nats_server.url) as pub:
                while not stop.is_set():
                    for _ in range(20):
                        pub.publish("dr.fake.data", payload)
                    sent += 20
                    pub.flush(10)
                    # keep the backlog small: requests wait behind it
                    wait_for(lambda n=sent: len(got) >= n - 20 or stop.is_set(), 30, interval=0.001,
                             what="the subscriber catching up")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    th = threading.Thread(target=flood)
    th.start()
    try:
        # the flood must be running before the requests start, or under load the
        # requests could all finish before it sent anything and test nothing
        wait_for(lambda: got or errors, 30, what="the flood's first payload")
        assert not errors, errors
        # at least 400 requests, and keep going until more flood payloads arrived while
        # requesting (interleaved with the replies), within a bounded time
        start = len(got)
        end = time.monotonic() + 120 * FACTOR
        i = 0
        while i < 400 or len(got) < start + 40:
            assert time.monotonic() < end, f"{i} requests, {len(got) - start} payloads interleaved"
            body = f"real-{i}".encode()
            assert nc.request("dr.fake.echo", body, timeout=10).data == body
            i += 1
    finally:
        stop.set()
        th.join(30)
    assert not errors, errors
    nc.flush(10)
    assert got and all(d == payload for d in got), "every payload arrived intact"


def test_replies_with_headers_and_big_replies_come_through(pair):
    srv, nc = pair
    echo(srv, "dr.mixed")
    count = _StealCount(nc)
    for i in range(60):
        hdrs = {"X-Seq": str(i)} if i % 3 == 0 else None
        body = b"b" * (100_000 + i) if i % 5 == 0 else str(i).encode()
        reply = nc.request("dr.mixed", body, headers=hdrs, timeout=5)
        assert reply.data == body
        assert (reply.headers or {}).get("X-Seq") == (str(i) if hdrs else None)
    assert count.taken > 0


def test_replies_with_headers_are_read_by_the_caller(pair):
    srv, nc = pair
    echo(srv, "dr.hdr")
    nc.request("dr.hdr", b"w", headers={"A": "1"}, timeout=5)
    count = _StealCount(nc)
    for i in range(100):
        hdrs = {"X-Seq": str(i), "X-Multi": "a b:c"}
        reply = nc.request("dr.hdr", str(i).encode(), headers=hdrs, timeout=5)
        assert reply.data == str(i).encode()
        assert reply.headers == hdrs
    assert count.taken > 0


def test_no_responders_status_read_by_the_caller_still_raises(pair):
    _, nc = pair
    # the 503 status reply is an HMSG with an inline status and no payload
    count = _StealCount(nc)
    for _ in range(50):
        with pytest.raises(jssync.NoRespondersError):
            nc.request("dr.nobody.listens", b"x", timeout=5)
    assert count.taken > 0


def test_kv_gets_are_read_by_the_caller(js, unique):
    kv = js.create_key_value(bucket=f"KV{unique}", storage="memory")
    try:
        for i in range(20):
            kv.put(f"k{i}", f"v{i}".encode())
        count = _StealCount(js.conn)
        for _ in range(3):
            for i in range(20):
                entry = kv.get(f"k{i}")
                assert entry.value == f"v{i}".encode()
                assert entry.key == f"k{i}"
        with pytest.raises(jssync.KeyNotFoundError):
            kv.get("missing")
        assert count.taken > 0
    finally:
        js.delete_key_value(f"KV{unique}")


def test_a_slow_responder_is_still_answered(pair):
    """The caller stops watching after a few ms; the I/O thread delivers the reply."""
    srv, nc = pair
    gate = threading.Event()

    def slow(msg: jssync.Msg) -> None:
        gate.wait(10)
        msg.respond(b"late:" + msg.data)

    srv.subscribe("dr.slow", callback=slow)
    srv.flush()
    result: list[bytes] = []

    def ask() -> None:
        result.append(nc.request("dr.slow", b"x", timeout=10).data)

    th = threading.Thread(target=ask)
    th.start()
    # let the caller's watch window (a few ms) pass before the reply is sent
    wait_for(lambda: nc._replies, 5, what="the request in flight")
    th.join(0.05)
    gate.set()
    th.join(10)
    assert result == [b"late:x"]


def test_many_threads_each_get_their_own_reply(pair):
    srv, nc = pair
    echo(srv, "dr.threads")
    count = _StealCount(nc)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(200):
                body = f"{t}:{i}".encode() * (1 + (i + t) % 30)
                assert nc.request("dr.threads", body, timeout=10).data == body
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(60 * FACTOR)
    assert not errors, errors[:3]
    assert count.taken > 0


def test_js_publish_acks_are_read_by_the_caller(js, stream):
    nc = js.conn
    subject = f"{stream.name}.x"
    js.publish(subject, b"warm-up")
    count = _StealCount(nc)
    for i in range(100):
        ack = js.publish(subject, str(i).encode())
        assert ack.seq == i + 2
        assert ack.stream == stream.name
    assert count.taken > 0


def test_direct_reads_resume_after_a_reconnect():
    with NatsServer() as server:
        with jssync.connect(server.url, reconnect_time_wait=0.1) as srv, \
                jssync.connect(server.url, reconnect_time_wait=0.1) as nc:
            echo(srv, "dr.rc")
            assert nc.request("dr.rc", b"1", timeout=5).data == b"1"
            old_reader = nc._sockpath.reader
            assert old_reader is not None
            server.restart()
            wait_for(lambda: nc.is_connected and srv.is_connected, 20, what="both reconnected")
            srv.flush()
            wait_answered(nc, "dr.rc")
            count = _StealCount(nc)
            i = 0
            # the I/O thread may win many races in a row on a loaded machine: ask until one
            # reply was read by the caller (bounded)
            while i < 100 or (count.taken == 0 and i < 5000):
                assert nc.request("dr.rc", str(i).encode(), timeout=5).data == str(i).encode()
                i += 1
            assert nc._sockpath.reader is not None and nc._sockpath.reader is not old_reader
            assert count.taken > 0, "the new transport's replies are read by the caller again"


def test_the_io_thread_never_waits_for_a_caller_holding_the_read_lock(pair):
    """A caller inside the read lock (e.g. interrupted there by a signal handler) must not
    stall the I/O loop: it skips the read and comes back to it."""
    import asyncio
    import select

    from jssync.base.deadline import Deadline

    srv, nc = pair
    got = threading.Event()
    nc.subscribe("dr.held", callback=lambda m: got.set())
    nc.flush()
    with nc._sockpath.rlock:
        srv.publish("dr.held", b"x")
        srv.flush()
        poller = select.poll()
        poller.register(nc._sockpath.sock.fileno(), select.POLLIN)
        assert poller.poll(5000), "the message is waiting on the socket"
        # the loop keeps turning while the data waits and the lock is held elsewhere
        for _ in range(5):
            nc._loop.run(asyncio.sleep(0.01), Deadline(2.0), "loop turn")
        assert not got.is_set()
    assert got.wait(5), "read once the lock was free"


def test_a_parser_reset_stops_direct_reads_until_it_is_between_messages_again(pair):
    srv, nc = pair
    echo(srv, "dr.reset")
    assert nc.request("dr.reset", b"1", timeout=5).data == b"1"

    async def reset() -> None:
        nc._nc._ps.reset()

    from jssync.base.deadline import Deadline

    nc._loop.run(reset(), Deadline(2.0), "reset")
    assert nc._sockpath.gate.synced is False
    count = _StealCount(nc)
    for i in range(50):
        assert nc.request("dr.reset", str(i).encode(), timeout=5).data == str(i).encode()
    assert nc._sockpath.gate.synced is True
    assert count.taken > 0


class _HandBacks:
    """Counts the reads of a connection's callers that brought bytes not theirs (handed back)."""

    def __init__(self, nc: jssync.Connection) -> None:
        self.count = 0
        sp = nc._sockpath
        orig = sp._spill

        def spy(data: bytes) -> None:
            self.count += 1
            orig(data)

        sp._spill = spy  # type: ignore[method-assign]


def test_a_reply_read_along_with_other_messages_hands_them_to_the_io_thread_in_order(pair):
    """The responder publishes to the requester's own subscription just before and after it
    answers: the caller's one read of the socket brings other messages with (or instead of)
    its reply; they reach the subscription complete and in order, and every reply is right."""
    srv, nc = pair
    got: list[int] = []
    nc.subscribe("dr.around.data", callback=lambda m: got.append(int(m.data)), pending_msgs_limit=1 << 16)
    nc.flush()
    seq = itertools.count()

    def respond(msg: jssync.Msg) -> None:
        for _ in range(3):
            srv.publish("dr.around.data", b"%d" % next(seq))
        msg.respond(msg.data)
        for _ in range(2):
            srv.publish("dr.around.data", b"%d" % next(seq))

    srv.subscribe("dr.around", callback=respond)
    srv.flush()
    wait_answered(nc, "dr.around")
    handed = _HandBacks(nc)
    count = _StealCount(nc)
    for i in range(200):
        assert nc.request("dr.around", b"q%d" % i, timeout=5).data == b"q%d" % i
    srv.flush()
    sent = next(seq)
    wait_for(lambda: len(got) == sent, 10, what="every other message")
    assert got == list(range(sent)), "complete and in order"
    assert handed.count > 0, "some reads brought messages that were not the caller's"
    assert count.taken + count.declined > 0


def test_bytes_handed_back_reach_the_parser_before_a_disconnect(proxy, nats_server):
    """A caller read three messages that were not its reply and the I/O thread has not been
    given them yet when the link drops: its next read (the end of the connection) hands them
    to nats-py's parser first, so all three are delivered; then the connection reconnects
    and requests work again (nothing of the old connection reaches the new parser)."""
    with jssync.connect(proxy.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1) as nc, \
            jssync.connect(nats_server.url) as srv:
        echo(srv, "dr.drop.echo")
        got: list[bytes] = []
        nc.subscribe("dr.drop.data", callback=lambda m: got.append(m.data))
        assert nc.request("dr.drop.echo", b"w", timeout=5).data == b"w"  # (the reply inbox is made)
        sp = nc._sockpath
        sock = sp.sock
        held: list[object] = []
        sp._call_soon = held.append  # type: ignore[method-assign]  # give_back is not run yet
        parker = sp.parker
        assert parker is not None and parker.park(), "the I/O thread stops reading the socket"
        try:
            for i in range(3):
                srv.publish("dr.drop.data", b"m%d" % i)
            srv.flush()
            # the three messages are on nc's socket (peeked: nothing consumed)
            wait_for(lambda: _peek(sock).count(b"MSG dr.drop.data") == 3, 10, what="the three messages on the socket")
            assert sp.steal(sock, "999999") is None, "not the caller's reply"
            assert sp.spill.count(b"MSG dr.drop.data") == 3 and held == [sp.give_back]
        finally:
            parker.unpark()
        proxy.drop()
        wait_for(lambda: len(got) == 3, 10, what="the handed-back messages")
        assert got == [b"m0", b"m1", b"m2"]
        assert sp.spill == b""
        del sp._call_soon  # (the instance's own again)
        wait_for(lambda: nc.is_connected, 20, what="the reconnect")
        nc.run(_run_held(held), 5)
        for i in range(20):
            assert nc.request("dr.drop.echo", b"r%d" % i, timeout=5).data == b"r%d" % i
        assert sp.sock is not None and sp.sock is not sock, "the caller path is armed on the new connection"
        assert got == [b"m0", b"m1", b"m2"]


def _peek(sock: socket.socket) -> bytes:
    try:
        return sock.recv(4096, socket.MSG_PEEK)
    except BlockingIOError:
        return b""


async def _run_held(held: list[object]) -> None:
    for fn in held:  # on the I/O thread, as it would have run: nothing is left to hand back
        fn()  # type: ignore[operator]
