"""Pull accounting and statuses: inbox isolation, byte counts, re-pulls, causes (real server)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

import jssync
from jssync.base.status import PullRequestError
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)


def publish(js, stream, n, start=0):
    for i in range(start, start + n):
        js.publish_async(f"{stream.name}.m", b"%d" % i)
    js.publish_async_completed(10)


def durable(stream, name="D", **cfg):
    cfg.setdefault("ack_policy", "explicit")
    return stream.create_consumer(durable_name=name, **cfg)


def raw_consumer(js, stream, name, **server_cfg):
    cfg = {"durable_name": name, "ack_policy": "explicit", **server_cfg}
    js._api(f"CONSUMER.CREATE.{stream.name}.{name}", {"stream_name": stream.name, "config": cfg})
    return js.consumer(stream.name, name)


class PullSpy:
    """A second connection that sees every pull request's reply subject (core NATS fan-out)."""

    def __init__(self, url: str, stream: str, consumer: str) -> None:
        self.nc = jssync.connect(url)
        self.replies: list[str] = []
        self.sub = self.nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                                     callback=lambda m: self.replies.append(m.reply))
        self.nc.flush()

    def close(self) -> None:
        self.nc.close()


@pytest.fixture
def spy_factory(nats_server) -> Iterator:
    spies: list[PullSpy] = []

    def make(stream: str, consumer: str) -> PullSpy:
        s = PullSpy(nats_server.url, stream, consumer)
        spies.append(s)
        return s

    yield make
    for s in spies:
        s.close()



def raw_hpub(port: int, subject: str, header_block: bytes, payload: bytes, count: int) -> None:
    """Publish ``count`` messages with a header block as given (repeated keys and all), like a non-Python client."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.recv(4096)  # INFO
        out = [b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n']
        for _ in range(count):
            out.append(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(header_block),
                                                     len(header_block) + len(payload), header_block, payload))
        out.append(b"PING\r\n")
        s.sendall(b"".join(out))
        buf = b""
        while b"PONG" not in buf:
            chunk = s.recv(4096)
            assert chunk, "server closed the raw connection"
            assert b"-ERR" not in chunk, chunk
            buf += chunk


# -- item 3: a pull's replies never reach a later pull ------------------------------------------


def test_late_status_for_a_finished_fetch_does_not_end_the_next_one(nc, js, stream, spy_factory):
    c = durable(stream)
    spy = spy_factory(stream.name, "D")
    publish(js, stream, 1)
    first = list(c.fetch(1, max_bytes=100_000, expires=2))  # a full batch: 409 Batch Completed follows
    assert [m.data for m in first] == [b"0"]
    first[0].ack()
    wait_for(lambda: len(spy.replies) == 1, what="the first pull request seen")
    second = c.fetch(1, max_bytes=100_000, expires=3)
    wait_for(lambda: len(spy.replies) == 2, what="the second pull request seen")
    # the status the server sends after the last message of a full batch, arriving late
    # (injected: on a busy machine the real one arrives after the next fetch began)
    nc.publish(spy.replies[0], b"", headers={"Status": "409", "Description": "Batch Completed"})
    nc.flush()
    publish(js, stream, 1, start=1)
    assert [m.data for m in second] == [b"1"], second.error
    assert second.error is None


def test_fetch_bytes_full_batches_in_a_loop_lose_nothing(js, stream):
    """Full batches with max_bytes end with a trailing 409 Batch Completed: no later fetch may see it."""
    c = durable(stream)
    publish(js, stream, 60)
    got = []
    for _ in range(30):
        res = c.fetch(2, max_bytes=100_000, expires=2)
        batch = list(res)
        assert len(batch) == 2, (len(got), res.error)
        for m in batch:
            m.ack()
            got.append(m.data)
    assert got == [b"%d" % i for i in range(60)]


# -- item 4: consume(max_bytes) counts bytes as the server does ---------------------------------


def test_consume_max_bytes_with_repeated_header_keys_does_not_stall(nats_server, js, stream):
    hdr = b"NATS/1.0\r\nX-Dup: a\r\nX-Dup: bb\r\nX-Dup: ccc\r\n\r\n"
    raw_hpub(nats_server.port, f"{stream.name}.m", hdr, b"p" * 100, 300)
    c = durable(stream)
    got = 0
    with c.consume(max_bytes=3000, expires=10) as it:
        for _ in range(300):
            m = it.next(timeout=5 * FACTOR)
            m.ack()
            got += 1
        wait_for(lambda: it.pending_bytes <= 3000, what="pending bytes within max_bytes")
    assert got == 300


# -- item 5: warnings and 400 re-pull -------------------------------------------------------------


def test_consume_repulls_after_a_409_warning(js, stream):
    # a handle made before another tool set the limit (one that knows it refuses the consume)
    c = js.create_consumer(stream.name, durable_name="W", ack_policy="explicit")
    raw_consumer(js, stream, "W", max_batch=5)
    errors: list[BaseException] = []
    with c.consume(max_messages=10, expires=20, idle_heartbeat=5, error_cb=errors.append) as it:
        wait_for(lambda: any(isinstance(e, PullRequestError) and "MaxRequestBatch" in e.description
                             for e in errors), what="409 Exceeded MaxRequestBatch")
        assert it.pending_messages <= 10
        js._api(f"CONSUMER.CREATE.{stream.name}.W", {"stream_name": stream.name, "config": {
            "durable_name": "W", "ack_policy": "explicit", "max_batch": 100}})
        publish(js, stream, 3)
        t0 = time.monotonic()
        got = [it.next(timeout=8).data for _ in range(3)]
        assert got == [b"0", b"1", b"2"]
        # re-pulled after the warning, not after a (false) missed heartbeat 10 s later
        assert time.monotonic() - t0 < 4 * FACTOR
    assert not any(isinstance(e, jssync.NoHeartbeatError) for e in errors)


# -- item 9: next() raises the cause --------------------------------------------------------------


def test_next_raises_a_409_warning(js, stream):
    c = raw_consumer(js, stream, "E", max_expires=1_000_000_000)
    with pytest.raises(PullRequestError, match="MaxRequestExpires"):
        c.next(timeout=5)


def test_next_raises_connection_closed(nats_server, stream):
    nc2 = jssync.connect(nats_server.url)
    durable(stream)
    c2 = nc2.jetstream().consumer(stream.name, "D")
    box: list[BaseException] = []

    def run() -> None:
        try:
            c2.next(timeout=10)
        except BaseException as exc:  # noqa: BLE001
            box.append(exc)

    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: c2.info().num_waiting == 1, 5, what="next() to wait on the server")
    nc2.close()
    t.join(10)
    assert box and isinstance(box[0], jssync.ConnectionClosedError), box


def test_next_raises_no_heartbeat(proxy, nats_server, stream):
    durable(stream)
    with jssync.connect(proxy.url) as pnc:
        c = pnc.jetstream().consumer(stream.name, "D")
        threading.Timer(0.3, lambda: proxy.stall(new_connections=False)).start()
        t0 = time.monotonic()
        with pytest.raises(jssync.NoHeartbeatError):
            c.next(timeout=10, idle_heartbeat=1)
        assert time.monotonic() - t0 < 6 * FACTOR
        proxy.forward()


# -- item 10: consume warns at 2 x idle_heartbeat --------------------------------------------------


def test_consume_warns_at_twice_the_idle_heartbeat(proxy, nats_server, js, stream, spy_factory):
    durable(stream)
    spy = spy_factory(stream.name, "D")
    hb = 2.0
    beats: list[float] = []
    errors: list[tuple[float, BaseException]] = []
    with jssync.connect(proxy.url) as pnc:
        c = pnc.jetstream().consumer(stream.name, "D")
        with c.consume(max_messages=10, expires=30, idle_heartbeat=hb,
                       error_cb=lambda e: errors.append((time.monotonic(), e))) as it:
            wait_for(lambda: spy.replies, what="the pull request")
            spy.nc.subscribe(spy.replies[0], callback=lambda m: beats.append(time.monotonic()))
            spy.nc.flush()
            wait_for(lambda: beats, timeout=3 * hb, what="a heartbeat")
            n = len(beats)
            wait_for(lambda: len(beats) > n, timeout=3 * hb, what="the next heartbeat")
            # a message a little after a heartbeat (the monitor's checks are in step with the
            # heartbeats), then nothing more reaches the client
            time.sleep(0.1 * hb)  # behaviour: the message comes a little after a heartbeat
            publish(js, stream, 1)
            it.next(timeout=5).ack()
            last = time.monotonic()
            proxy.stall(new_connections=False)
            wait_for(lambda: any(isinstance(e, jssync.NoHeartbeatError) for _, e in errors), timeout=4 * hb,
                     what="the missed-heartbeat warning")
            at = next(t for t, e in errors if isinstance(e, jssync.NoHeartbeatError))
            proxy.forward()
    late = at - last
    assert 2 * hb - 0.3 <= late <= 2 * hb + 0.5 * FACTOR, late


# -- status detection: a user message with a Status header is a message ---------------------------


def test_user_message_with_a_status_header_is_delivered(js, stream):
    js.publish(f"{stream.name}.m", b"", headers={"Status": "409", "Description": "Consumer Deleted"})
    js.publish(f"{stream.name}.m", b"", headers={"Status": "100", "Description": "Idle Heartbeat"})
    c = durable(stream)
    got = list(c.fetch(2, expires=2))
    assert [m.headers["Status"] for m in got] == ["409", "100"]
    for m in got:
        m.nak()
    with c.consume(max_messages=5, expires=2) as it:
        got = [it.next(timeout=5) for _ in range(2)]
    assert [m.headers["Status"] for m in got] == ["409", "100"]


# -- consume pulls again after every missed heartbeat ----------------------------------------------


def test_consume_pulls_again_after_every_missed_heartbeat(nats_server, js, stream):
    """max_waiting=1 and another client's pull holding the slot: the server drops consume's pulls
    without an answer; once the slot is free the consume's next pull gets the messages."""
    raw_consumer(js, stream, "W", max_waiting=1)
    errors: list[BaseException] = []
    with jssync.connect(nats_server.url) as other:
        holder = other.jetstream().consumer(stream.name, "W").fetch(1, expires=3)
        wait_for(lambda: js.consumer(stream.name, "W").info().num_waiting == 1, what="the slot held")
        c = js.consumer(stream.name, "W")
        with c.consume(max_messages=10, expires=2, idle_heartbeat=1, error_cb=errors.append) as it:
            assert list(holder) == []  # the other pull expired: the slot is free
            publish(js, stream, 5)
            got = [it.next(timeout=10).data for _ in range(5)]
        assert got == [b"%d" % i for i in range(5)]
    assert any(isinstance(e, jssync.NoHeartbeatError) for e in errors)
