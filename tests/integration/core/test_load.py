"""Load on the core client: many threads at once, nothing lost, no deadlock, memory stable.

- 16 publisher threads and 16 consumers (8 callback subscriptions, 8 iterator threads),
  plus requesters doing request/reply on the same connections, for at least ``MIN_SECONDS`` and
  ``MESSAGES`` messages, at most ``JSSYNC_LOAD_SECONDS`` (default 60 s; lower it for quick local runs;
  ``JSSYNC_LOAD_MESSAGES`` raises the count for a longer soak). Each publisher keeps at
  most ``WINDOW`` messages ahead of its consumer, so memory must stay flat: RSS is read
  from /proc/self/status after a warm-up and at the end.
- A slow core subscriber drops past its pending limit, reports it through ``error_cb``
  (SlowConsumerError) and ``dropped``, and never blocks the I/O thread: another
  subscription on the same connection keeps receiving while the slow callback is stuck.
"""

from __future__ import annotations

import faulthandler
import os
import struct
import sys
import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SECONDS = float(os.environ.get("JSSYNC_LOAD_SECONDS", "60"))
#: Enough messages that a leak of 100 bytes each grows RSS by ~95 MiB, three times what the RSS check allows.
MESSAGES = int(os.environ.get("JSSYNC_LOAD_MESSAGES", "1000000"))
#: The least time under load, whatever the count (10 s: seven RSS samples after the warm-up; the message
#: count, not the time, is what makes a leak show).
MIN_SECONDS = min(SECONDS, 10.0)
PAIRS = 16
WINDOW = int(os.environ.get("JSSYNC_LOAD_WINDOW", "2000"))
PAYLOAD_PAD = b"." * 120


def rss_mb() -> float:
    """This process's resident set size in MiB (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Stream:
    """One publisher/consumer pair: sequence checks and a window of messages in flight."""

    def __init__(self, i: int, subject: str) -> None:
        self.i = i
        self.subject = subject
        self.window = threading.BoundedSemaphore(WINDOW)
        self.published = 0
        self.received = 0
        self.expected = 0
        self.gaps: list[tuple[int, int]] = []

    def on_msg(self, msg: jssync.Msg) -> None:
        (seq,) = struct.unpack_from(">Q", msg.data)
        if seq != self.expected:
            self.gaps.append((self.expected, seq))
        self.expected = seq + 1
        self.received += 1
        self.window.release()


def _dump_threads(reason: str) -> None:
    print(f"\n--- {reason}: thread stacks ---", file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="RSS is read from /proc (Linux)")
def test_sixteen_publishers_and_consumers_nothing_lost(nats_server, unique, record_property):
    errors: list[BaseException] = []
    pub_nc = jssync.connect(nats_server.url, name="load-pub", error_cb=errors.append)
    sub_nc = jssync.connect(nats_server.url, name="load-sub", error_cb=errors.append,
                            callback_workers=int(os.environ.get("JSSYNC_LOAD_WORKERS", "8")))
    stop = threading.Event()
    streams = [Stream(i, f"load.{unique}.{i}") for i in range(PAIRS)]
    subs: list[jssync.Subscription] = []
    threads: list[threading.Thread] = []
    failures: list[str] = []
    requests_done = [0]
    latencies: list[float] = []
    try:
        for s in streams:
            if s.i % 2 == 0:
                subs.append(sub_nc.subscribe(s.subject, callback=s.on_msg, pending_msgs_limit=WINDOW * 2))
            else:
                sub = sub_nc.subscribe(s.subject, pending_msgs_limit=WINDOW * 2)
                subs.append(sub)

                def read(sub: jssync.Subscription = sub, s: Stream = s) -> None:
                    for msg in sub:
                        s.on_msg(msg)

                threads.append(threading.Thread(target=read, name=f"load-iter-{s.i}", daemon=True))
        # a responder on the consuming connection, requesters on both
        sub_nc.subscribe(f"load.{unique}.rpc", callback=lambda m: m.respond(m.data))
        sub_nc.flush()

        def publish(s: Stream) -> None:
            try:
                while not stop.is_set():
                    if not s.window.acquire(timeout=10 * FACTOR):
                        failures.append(f"publisher {s.i} waited 10s for its consumer: "
                                        f"published {s.published}, received {s.received}")
                        return
                    pub_nc.publish(s.subject, struct.pack(">Q", s.published) + PAYLOAD_PAD)
                    s.published += 1
            except Exception as exc:  # noqa: BLE001
                failures.append(f"publisher {s.i}: {exc!r}")

        def requester(nc: jssync.Connection, n: int) -> None:
            try:
                while not stop.is_set():
                    body = f"{n}-{requests_done[0]}".encode()
                    t = time.monotonic()
                    assert nc.request(f"load.{unique}.rpc", body, timeout=5 * FACTOR).data == body
                    latencies.append(time.monotonic() - t)
                    requests_done[0] += 1
            except Exception as exc:  # noqa: BLE001
                failures.append(f"requester {n}: {exc!r}")

        threads += [threading.Thread(target=publish, args=(s,), name=f"load-pub-{s.i}", daemon=True)
                    for s in streams]
        threads += [threading.Thread(target=requester, args=(nc, n), name=f"load-req-{n}", daemon=True)
                    for n, nc in enumerate([pub_nc, sub_nc])]
        start_rss = rss_mb()
        t0 = time.monotonic()
        for t in threads:
            t.start()
        warm = min(3.0, SECONDS / 3)
        time.sleep(warm)  # behaviour: the load warms up before the first memory sample
        warm_rss = rss_mb()
        samples = [warm_rss]
        while time.monotonic() - t0 < SECONDS and not failures and not (
                time.monotonic() - t0 >= MIN_SECONDS and sum(s.published for s in streams) >= MESSAGES):
            time.sleep(min(1.0, max(0.0, SECONDS - (time.monotonic() - t0))))  # behaviour: the load runs its time
            samples.append(rss_mb())
        stop.set()
        elapsed = time.monotonic() - t0
        for t in threads:
            if t.name.startswith(("load-pub", "load-req")):
                t.join(15 * FACTOR)
                if t.is_alive():
                    _dump_threads(f"{t.name} did not stop")
                    pytest.fail(f"deadlock: {t.name} did not stop")
        pub_nc.flush(timeout=10)
        total = sum(s.published for s in streams)

        def all_received() -> bool:
            return all(s.received == s.published for s in streams)

        try:
            wait_for(all_received, 20, what="every published message to arrive")
        except AssertionError:
            _dump_threads("messages missing")
            raise
        end_rss = rss_mb()
        assert not failures, failures
        assert all(not s.gaps for s in streams), [(s.i, s.gaps[:3]) for s in streams if s.gaps]
        assert all(sub.dropped == 0 for sub in subs)
        assert not errors, errors[:5]
        assert requests_done[0] > 0
        rate = total / elapsed
        print(f"\n[measure] load: {total} messages in {elapsed:.1f}s ({rate:,.0f} msg/s), "
              f"{requests_done[0]} requests (max latency {max(latencies):.3f}s); RSS start {start_rss:.1f} MiB, "
              f"after warm-up {warm_rss:.1f} MiB, end {end_rss:.1f} MiB, max {max(samples):.1f} MiB")
        for name, value in (("messages", total), ("msgs_per_s", round(rate)), ("requests", requests_done[0]),
                            ("rss_warm_mb", round(warm_rss, 1)), ("rss_end_mb", round(end_rss, 1))):
            record_property(name, value)
        # memory stays flat once warmed up: a leak of even 100 bytes per message would show
        assert end_rss - warm_rss < max(30.0, warm_rss * 0.25), f"RSS grew from {warm_rss:.1f} to {end_rss:.1f} MiB"
    finally:
        stop.set()
        for s in streams:  # unblock publishers stuck on a window
            for _ in range(WINDOW):
                try:
                    s.window.release()
                except ValueError:
                    break
        sub_nc.close()
        pub_nc.close()
        for t in threads:
            t.join(5)


def test_slow_subscriber_drops_and_never_blocks_the_io_thread(nats_server, unique):
    errors: list[BaseException] = []
    got_error = threading.Event()

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        got_error.set()

    gate = threading.Event()
    in_callback = threading.Event()
    slow_calls: list[bytes] = []

    def slow(msg: jssync.Msg) -> None:
        in_callback.set()
        gate.wait(30)
        slow_calls.append(msg.data)

    fast_seen: list[bytes] = []
    fast_done = threading.Event()
    n = 1000

    def fast(msg: jssync.Msg) -> None:
        fast_seen.append(msg.data)
        if len(fast_seen) == n:
            fast_done.set()

    with jssync.connect(nats_server.url, error_cb=on_error) as nc, jssync.connect(nats_server.url) as pub:
        slow_sub = nc.subscribe(f"slow.{unique}", callback=slow, pending_msgs_limit=50)
        stuck_iter = nc.subscribe(f"stuck.{unique}", pending_msgs_limit=20)  # never read
        fast_iter = nc.subscribe(f"fast.{unique}")
        nc.subscribe(f"fastcb.{unique}", callback=fast)
        nc.subscribe(f"echo.{unique}", callback=lambda m: m.respond(m.data))
        nc.flush()
        for i in range(n):
            body = str(i).encode()
            pub.publish(f"slow.{unique}", body)
            pub.publish(f"stuck.{unique}", body)
            pub.publish(f"fast.{unique}", body)
            pub.publish(f"fastcb.{unique}", body)
        pub.flush()
        assert in_callback.wait(5 * FACTOR)
        # while the slow callback is stuck, the same connection keeps delivering
        t0 = time.monotonic()
        assert [int(fast_iter.next_msg(5 * FACTOR).data) for _ in range(n)] == list(range(n))
        assert fast_done.wait(10 * FACTOR), f"callback subscription got {len(fast_seen)} of {n}"
        assert nc.request(f"echo.{unique}", b"ping", timeout=2).data == b"ping"
        print(f"\n[measure] fast subscription drained {n} messages in {time.monotonic() - t0:.3f}s "
              "while the slow callback was blocked")
        assert not gate.is_set()
        # the slow ones dropped past their limits and said so
        wait_for(lambda: slow_sub.dropped > 0 and stuck_iter.dropped > 0, 5, what="drops")
        assert got_error.wait(5 * FACTOR)
        wait_for(lambda: {getattr(e, "subject", None) for e in errors} >= {f"slow.{unique}", f"stuck.{unique}"},
                 5, what="a SlowConsumerError for both slow subscriptions")
        slow_errs = [e for e in errors if isinstance(e, jssync.SlowConsumerError)]
        assert slow_errs and all(e.dropped > 0 for e in slow_errs)
        assert stuck_iter.dropped == n - 20
        assert stuck_iter.pending_msgs == 20
        # once unblocked, the slow callback gets what was kept, in order, and nothing else
        gate.set()
        wait_for(lambda: len(slow_calls) + slow_sub.dropped == n, 10, what="slow callback to finish")
        assert [int(x) for x in slow_calls] == sorted(int(x) for x in slow_calls)
        assert 0 < len(slow_calls) <= 51
        assert [int(stuck_iter.next_msg(1).data) for _ in range(20)] == list(range(20))


def test_busy_callback_subscription_does_not_starve_the_others(nats_server, unique):
    with jssync.connect(nats_server.url, callback_workers=1) as nc, jssync.connect(nats_server.url) as pub:
        busy_done = threading.Event()
        busy_count = [0]

        def busy(msg: jssync.Msg) -> None:
            time.sleep(0.001)  # behaviour: the handler is busy
            busy_count[0] += 1
            if busy_count[0] == 1000:
                busy_done.set()

        other = threading.Event()
        nc.subscribe(f"busy.{unique}", callback=busy)
        nc.subscribe(f"other.{unique}", callback=lambda m: other.set())
        nc.flush()
        for _ in range(1000):
            pub.publish(f"busy.{unique}", b"x")
        pub.flush()
        wait_for(lambda: busy_count[0] > 0, 5, what="the busy callback to start")
        t0 = time.monotonic()
        pub.publish(f"other.{unique}", b"y")
        assert other.wait(5)
        waited = time.monotonic() - t0
        busy_done.wait(10)
        # a fair pool runs the other subscription's callback long before the busy backlog is done
        assert waited < 0.3 * FACTOR, f"the other subscription waited {waited:.2f}s behind the busy one"
