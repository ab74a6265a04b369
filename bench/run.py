"""jssync vs plain nats-py (asyncio), same server, same run.

    python bench/run.py            # every scenario, 3 runs each, median
    python bench/run.py --quick    # short run
    python bench/run.py --size 16384 --json results.json --only core_publish
    python bench/run.py --sizes 128,16384 --threads 1,4,16
    python bench/run.py --only memory_consume

Each paired scenario runs once with jssync and once with nats-py doing the same work the
idiomatic way, and prints msgs/s for both and the ratio jssync / nats-py. The thread
scenarios (``*_threads``) run jssync only, with 1, 4 and 16 user threads (``--threads``),
and print one row per thread count. ``memory_consume`` (jssync only, 128 B, not part of
``--quick``) consumes 1,000,000 messages in a fresh process and prints the RSS growth.
With ``--sizes`` every selected scenario is repeated per payload size, one section each.

natsio (asyncio, Python 3.13 only) runs beside them for consume_ack, consume_noack,
fetch_loop, js_publish_sync and core_publish when a Python 3.13 that can import natsio is
found (``--natsio-python PATH``, else ``python3.13`` on PATH, else
``~/.pyenv/versions/3.13*/bin/python3.13``): bench/natsio_side.py does the measured work
in that interpreter against the same server, after this script set up the same stream;
the table gets natsio msgs/s and jssync / natsio. Otherwise a one-line note says what
was looked for. Nothing is installed.

Some scenarios also run a **floor** in the same run: what one blocking Python socket with no
library, no thread and no event loop does (the protocol spoken by hand): ``request_reply``,
``js_publish_sync`` and ``kv_get`` one round trip at a time (``raw_round_trips``),
``core_publish`` (each frame encoded on its own, written per 64 KiB) and ``consume_ack`` /
``consume_noack`` (``raw_pull_loop``: pulls of 500 refilled at half, the acks of one ``recv``
in one ``sendall``). The extra column prints the floor's rate and floor / jssync.

    python bench/run.py --count 20000 --runs 3 \
        --only consume_ack --only consume_noack --only fetch_loop --only js_publish_sync --only core_publish
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nats  # noqa: E402
import nats.errors  # noqa: E402
import nats.js.api  # noqa: E402

import jssync  # noqa: E402
from jssync.server import NatsServer  # noqa: E402

SCENARIOS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
#: the raw-socket floor of a scenario (see raw_round_trips, raw_pull_loop, CorePublish.floor)
FLOORS: dict[str, Callable[..., Any]] = {}


def scenario(name: str) -> Callable[[Any], Any]:
    def deco(cls: Any) -> Any:
        SCENARIOS[name] = (cls.jssync, cls.natspy)
        if hasattr(cls, "floor"):
            FLOORS[name] = cls.floor
        return cls

    return deco


# ---------------------------------------------------------------------------------- core


@scenario("core_publish")
class CorePublish:
    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        with jssync.connect(url) as nc:
            t0 = time.perf_counter()
            pub = nc.publish
            for _ in range(n):
                pub("bench.pub", payload)
            nc.flush(timeout=60)
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        async def main() -> float:
            nc = await nats.connect(url)
            t0 = time.perf_counter()
            for _ in range(n):
                await nc.publish("bench.pub", payload)
            await nc.flush(timeout=60)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}

    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        """One blocking socket: each PUB frame encoded on its own, written per 64 KiB, then PING/PONG."""
        c = _RawNats(url)
        frame_head = b"PUB bench.pub %d\r\n" % len(payload)
        out: list[bytes] = []
        size = 0
        send = c.sock.sendall
        t0 = time.perf_counter()
        for _ in range(n):
            frame = frame_head + payload + b"\r\n"
            out.append(frame)
            size += len(frame)
            if size >= 65536:
                send(b"".join(out))
                out.clear()
                size = 0
        out.append(b"PING\r\n")
        send(b"".join(out))
        while c._line() != b"PONG":
            pass
        dt = time.perf_counter() - t0
        c.close()
        return {"rate": n / dt}


@scenario("core_subscribe")
class CoreSubscribe:
    """A publisher connection floods; the measured side receives with an iterator."""

    @staticmethod
    def _publisher(url: str, n: int, payload: bytes, subject: str, ready: threading.Event) -> None:
        with jssync.connect(url) as pub:
            ready.wait(10)
            for _ in range(n):
                pub.publish(subject, payload)
            pub.flush(timeout=60)

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        with jssync.connect(url) as nc:
            sub = nc.subscribe("bench.sub.j", pending_msgs_limit=n + 1)
            nc.flush()
            ready = threading.Event()
            t = threading.Thread(target=CoreSubscribe._publisher, args=(url, n, payload, "bench.sub.j", ready))
            t.start()
            t0 = time.perf_counter()
            ready.set()
            for got, _ in enumerate(sub, 1):
                if got == n:
                    break
            dt = time.perf_counter() - t0
            t.join()
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        ready = threading.Event()

        async def main() -> float:
            nc = await nats.connect(url)
            sub = await nc.subscribe("bench.sub.n", pending_msgs_limit=n + 1, pending_bytes_limit=0)
            await nc.flush()
            t = threading.Thread(target=CoreSubscribe._publisher, args=(url, n, payload, "bench.sub.n", ready))
            t.start()
            t0 = time.perf_counter()
            ready.set()
            got = 0
            async for _ in sub.messages:
                got += 1
                if got == n:
                    break
            dt = time.perf_counter() - t0
            await nc.close()
            await asyncio.get_running_loop().run_in_executor(None, t.join)
            return dt

        return {"rate": n / asyncio.run(main())}


@scenario("request_reply")
class RequestReply:
    @staticmethod
    def _responder(url: str, stop: threading.Event, ready: threading.Event) -> None:
        async def main() -> None:
            nc = await nats.connect(url)

            async def cb(msg: Any) -> None:
                await msg.respond(msg.data)

            await nc.subscribe("bench.rr", cb=cb)
            await nc.flush()
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await nc.close()

        asyncio.run(main())

    @staticmethod
    def _with_responder(url: str, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
        # The responder runs in its own process so it does not share the GIL with the
        # measured client.
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        stop, ready = ctx.Event(), ctx.Event()
        p = ctx.Process(target=_responder_main, args=(url, stop, ready), daemon=True)
        p.start()
        ready.wait(20)
        try:
            return fn()
        finally:
            stop.set()
            p.join(10)

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(200, n // 50)

        def run() -> dict[str, float]:
            lat = []
            with jssync.connect(url) as nc:
                for _ in range(50):
                    nc.request("bench.rr", payload)
                t0 = time.perf_counter()
                for _ in range(n):
                    s = time.perf_counter()
                    nc.request("bench.rr", payload, timeout=5)
                    lat.append(time.perf_counter() - s)
                dt = time.perf_counter() - t0
            return _lat(n / dt, lat)

        return RequestReply._with_responder(url, run)

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(200, n // 50)

        def run() -> dict[str, float]:
            async def main() -> dict[str, float]:
                nc = await nats.connect(url)
                for _ in range(50):
                    await nc.request("bench.rr", payload)
                lat = []
                t0 = time.perf_counter()
                for _ in range(n):
                    s = time.perf_counter()
                    await nc.request("bench.rr", payload, timeout=5)
                    lat.append(time.perf_counter() - s)
                dt = time.perf_counter() - t0
                await nc.close()
                return _lat(n / dt, lat)

            return asyncio.run(main())

        return RequestReply._with_responder(url, run)

    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(200, n // 50)
        return RequestReply._with_responder(url, lambda: raw_round_trips(url, [b"bench.rr"] * n, payload))


# ---------------------------------------------------------------------------------- JetStream


def _fresh_stream(url: str, name: str, subjects: list[str], **cfg: Any) -> None:
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name=name, subjects=subjects, storage="memory", **cfg)


@scenario("js_publish_sync")
class JsPublishSync:
    """js.publish one at a time (wait for each PubAck)."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
        lat = []
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            t0 = time.perf_counter()
            for _ in range(n):
                s = time.perf_counter()
                js.publish("bench.js.p", payload)
                lat.append(time.perf_counter() - s)
            dt = time.perf_counter() - t0
        return _lat(n / dt, lat)

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])

        lat: list[float] = []

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            t0 = time.perf_counter()
            for _ in range(n):
                s = time.perf_counter()
                await js.publish("bench.js.p", payload)
                lat.append(time.perf_counter() - s)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return _lat(n / asyncio.run(main()), lat)

    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
        return raw_round_trips(url, [b"bench.js.p"] * n, payload)


@scenario("js_publish_async")
class JsPublishAsync:
    """publish_async for every message, then wait for all PubAcks."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            t0 = time.perf_counter()
            pub = js.publish_async
            for _ in range(n):
                pub("bench.js.a", payload)
            js.publish_async_completed(timeout=120)
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream(publish_async_max_pending=4000)
            t0 = time.perf_counter()
            for _ in range(n):
                await js.publish_async("bench.js.a", payload)
            await asyncio.wait_for(js.publish_async_completed(), 120)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


@scenario("js_fast_publish")
class JsFastPublish:
    """A fast-ingest batch (ADR-50, default options) of every message, until its final PubAck.

    nats-py has no fast ingest: its side is publish_async and publish_async_completed, the
    way nats-py moves many messages into a stream.
    """

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"], allow_batched=True)
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            t0 = time.perf_counter()
            with js.fast_publisher(timeout=120) as fp:
                add = fp.add
                for _ in range(n):
                    add("bench.js.f", payload)
            dt = time.perf_counter() - t0
        if fp.ack is None or fp.ack.batch_size != n:
            raise RuntimeError(f"fast batch stored {fp.ack} instead of {n} messages")
        return {"rate": n / dt}

    natspy = JsPublishAsync.natspy


def _preload(url: str, name: str, n: int, payload: bytes, **cfg: Any) -> None:
    """A fresh memory stream ``name`` on subject ``<name>.x`` holding ``n`` messages."""
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", **cfg)
        futs = [js.publish_async(f"{name}.x", payload) for _ in range(n)]
        js.publish_async_completed(timeout=300)
        _check_preload(js, name, n, futs)
    del futs
    gc.collect()  # the preload's leftovers are not collected during the measured side that follows


def _check_preload(js: Any, name: str, n: int, futs: list[Any]) -> None:
    """Fail loudly (instead of waiting forever for missing messages) when a preload fell short."""
    bad = [f.exception() for f in futs if f.exception() is not None]
    have = js.stream(name).info().state.messages
    if bad or have != n:
        raise RuntimeError(f"preloading {name}: {have} of {n} messages stored; "
                           f"{len(bad)} publish(es) failed, first: {bad[:1]}")


def _cleanup(url: str, keep: tuple[str, ...] = ()) -> None:
    """Delete every stream (and so every KV bucket) on the bench server: memory streams add up."""
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        for name in list(js.stream_names()):
            if name not in keep:
                js.delete_stream(name)
    for key in [k for k in _PRELOADED if k[1] not in keep]:
        del _PRELOADED[key]


def _natspy_fetch_loop(url: str, name: str, n: int, ack: bool) -> float:
    async def main() -> float:
        nc = await nats.connect(url)
        js = nc.jetstream()
        psub = await js.pull_subscribe(f"{name}.x", durable="NP", stream=name)
        got = 0
        t0 = time.perf_counter()
        while got < n:
            try:
                msgs = await psub.fetch(min(500, n - got), timeout=5)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                if ack:
                    await m.ack()
                got += 1
        dt = time.perf_counter() - t0
        await nc.close()
        return dt

    return asyncio.run(main())


@scenario("consume_ack")
class ConsumeAck:
    """consume() with an explicit ack per message vs nats-py fetch(500)+ack loop."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCA", n, payload)
        with jssync.connect(url) as nc:
            c = nc.jetstream().create_consumer("BCA", durable_name="JS", ack_policy="explicit")
            got = 0
            t0 = time.perf_counter()
            with c.consume(max_messages=500) as msgs:
                for m in msgs:
                    m.ack()
                    got += 1
                    if got == n:
                        break
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCA", n, payload)
        return {"rate": n / _natspy_fetch_loop(url, "BCA", n, ack=True)}


    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCA", n, payload)
        return {"rate": n / raw_pull_loop(url, "BCA", n, ack=True)}


@scenario("consume_noack")
class ConsumeNoAck:
    """consume() on an ack-none consumer vs nats-py fetch(500) loop."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCN", n, payload)
        with jssync.connect(url) as nc:
            c = nc.jetstream().create_consumer("BCN", durable_name="JS", ack_policy="none")
            got = 0
            t0 = time.perf_counter()
            with c.consume(max_messages=500) as msgs:
                for _ in msgs:
                    got += 1
                    if got == n:
                        break
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCN", n, payload)

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            psub = await js.pull_subscribe("BCN.x", durable="NP", stream="BCN",
                                           config=nats.js.api.ConsumerConfig(ack_policy="none"))
            got = 0
            t0 = time.perf_counter()
            while got < n:
                try:
                    msgs = await psub.fetch(min(500, n - got), timeout=5)
                except nats.errors.TimeoutError:
                    continue
                got += len(msgs)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}

    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BCN", n, payload)
        return {"rate": n / raw_pull_loop(url, "BCN", n, ack=False)}


@scenario("fetch_loop")
class FetchLoop:
    """fetch(500) + ack loop on both sides."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BFL", n, payload)
        with jssync.connect(url) as nc:
            c = nc.jetstream().create_consumer("BFL", durable_name="JS", ack_policy="explicit")
            got = 0
            t0 = time.perf_counter()
            while got < n:
                for m in c.fetch(min(500, n - got), expires=5.0):  # no partial last batch to wait out
                    m.ack()
                    got += 1
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BFL", n, payload)
        return {"rate": n / _natspy_fetch_loop(url, "BFL", n, ack=True)}


@scenario("ordered")
class Ordered:
    """An ordered consumer read of the whole stream vs nats-py ordered push subscribe."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BOR", n, payload)
        with jssync.connect(url) as nc:
            oc = nc.jetstream().stream("BOR").ordered_consumer()
            got = 0
            t0 = time.perf_counter()
            with oc.consume() as msgs:
                for _ in msgs:
                    got += 1
                    if got == n:
                        break
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        _preload(url, "BOR", n, payload)

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            sub = await js.subscribe("BOR.x", ordered_consumer=True, pending_msgs_limit=n + 10,
                                     pending_bytes_limit=0)
            got = 0
            t0 = time.perf_counter()
            async for _ in sub.messages:
                got += 1
                if got == n:
                    break
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


@scenario("direct_get_batch")
class DirectGetBatch:
    """direct_get_batch(500) over the stream vs nats-py one-by-one direct get."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _preload(url, "BDG", n, payload, allow_direct=True)
        with jssync.connect(url) as nc:
            st = nc.jetstream().stream("BDG")
            got = 0
            seq = 1
            t0 = time.perf_counter()
            while got < n:
                for m in st.direct_get_batch("BDG.x", 500, seq=seq):
                    got += 1
                    seq = m.seq + 1
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _preload(url, "BDG", n, payload, allow_direct=True)

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            t0 = time.perf_counter()
            for seq in range(1, n + 1):
                await js.get_msg("BDG", seq, direct=True)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


@scenario("kv_get")
class KvGet:
    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 20)
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            try:
                js.delete_key_value("BKV")
            except jssync.Error:
                pass
            kv = js.create_key_value(bucket="BKV", storage="memory")
            for i in range(100):
                kv.put(f"k{i}", payload)
            lat = []
            t0 = time.perf_counter()
            for i in range(n):
                s = time.perf_counter()
                kv.get(f"k{i % 100}")
                lat.append(time.perf_counter() - s)
            dt = time.perf_counter() - t0
        return _lat(n / dt, lat)

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 20)

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            try:
                await js.delete_key_value("BKV")
            except Exception:
                pass
            kv = await js.create_key_value(bucket="BKV", storage="memory")
            for i in range(100):
                await kv.put(f"k{i}", payload)
            t0 = time.perf_counter()
            for i in range(n):
                s = time.perf_counter()
                await kv.get(f"k{i % 100}")
                lat.append(time.perf_counter() - s)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        lat: list[float] = []
        return _lat(n / asyncio.run(main()), lat)

    @staticmethod
    def floor(url: str, n: int, payload: bytes) -> dict[str, float]:
        """A direct get of the key's last value (the ADR-31 request jssync's kv.get sends)."""
        n = max(1000, n // 20)
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            try:
                js.delete_key_value("BKV")
            except jssync.Error:
                pass
            kv = js.create_key_value(bucket="BKV", storage="memory")
            for i in range(100):
                kv.put(f"k{i}", payload)
        subjects = [b"$JS.API.DIRECT.GET.KV_BKV.$KV.BKV.k%d" % (i % 100) for i in range(n)]
        return raw_round_trips(url, subjects, b"")


# ---------------------------------------------------------------------------------- threads
#
# jssync only: the same total work split over k user threads sharing one connection.

THREAD_SCENARIOS: dict[str, Callable[[str, int, bytes, int], dict[str, float]]] = {}
THREAD_LABELS = {"core_publish_threads": "core publish", "js_publish_async_threads": "publish_async",
                 "js_publish_sync_threads": "js.publish", "consume_threads": "consume, 1 shared ctx",
                 "consume_threads_each": "consume, ctx each", "consume_callback_workers": "consume cb, k workers"}


def thread_scenario(name: str) -> Callable[[Any], Any]:
    def deco(fn: Any) -> Any:
        THREAD_SCENARIOS[name] = fn
        return fn

    return deco


def _run_threads(k: int, target: Callable[[int], None]) -> float:
    """Start ``k`` threads running ``target(i)`` together; return the wall time until all end."""
    go = threading.Barrier(k + 1)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        go.wait(30)
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,), name=f"bench-{i}") for i in range(k)]
    for t in ts:
        t.start()
    go.wait(30)
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return dt


@thread_scenario("core_publish_threads")
def core_publish_threads(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """k threads publish 5n/k messages each on one connection, then one flush.

    Five times the count: 100,000 core publishes take ~0.15 s, too short to tell the
    thread counts apart on a shared machine.
    """
    per = 5 * n // k
    with jssync.connect(url) as nc:
        pub = nc.publish

        def work(_: int) -> None:
            for _ in range(per):
                pub("bench.tpub", payload)

        t0 = time.perf_counter()
        _run_threads(k, work)
        nc.flush(timeout=60)
        dt = time.perf_counter() - t0
    return {"rate": per * k / dt}


@thread_scenario("js_publish_async_threads")
def js_publish_async_threads(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """k threads publish_async n/k messages each on one JetStream context, then completed."""
    per = n // k
    _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        pub = js.publish_async

        def work(_: int) -> None:
            for _ in range(per):
                pub("bench.js.t", payload)

        t0 = time.perf_counter()
        _run_threads(k, work)
        js.publish_async_completed(timeout=120)
        dt = time.perf_counter() - t0
    return {"rate": per * k / dt}


@thread_scenario("js_publish_sync_threads")
def js_publish_sync_threads(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """k threads call js.publish (one at a time, waiting for each PubAck) n/10/k times each."""
    per = max(1000, n // 10) // k
    _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        pub = js.publish

        def work(_: int) -> None:
            for _ in range(per):
                pub("bench.js.t", payload)

        dt = _run_threads(k, work)
    return {"rate": per * k / dt}


_PRELOADED: dict[tuple[str, str], tuple[int, bytes]] = {}


def _preload_once(url: str, name: str, n: int, payload: bytes) -> None:
    """Like _preload, but reuse the stream when it already holds this exact load."""
    if _PRELOADED.get((url, name)) != (n, payload):
        _preload(url, name, n, payload)
        _PRELOADED[(url, name)] = (n, payload)


def _threads_consumer(url: str, n: int, payload: bytes) -> str:
    _preload_once(url, "BTC", n, payload)
    durable = f"T{next(_DURABLES)}"
    return durable


_DURABLES = iter(range(1, 1 << 30))


@thread_scenario("consume_threads")
def consume_threads(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """k threads iterate ONE consume(max_messages=500) context, explicit ack each."""
    durable = _threads_consumer(url, n, payload)
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        c = js.create_consumer("BTC", durable_name=durable, ack_policy="explicit")
        counter = iter(range(1, n + 1))
        try:
            t0 = time.perf_counter()
            with c.consume(max_messages=500) as ctx:

                def work(_: int) -> None:
                    for m in ctx:
                        m.ack()
                        if next(counter, n) == n:
                            ctx.stop()  # ends the other threads' iteration too

                _run_threads(k, work)
            dt = time.perf_counter() - t0
        finally:
            js.delete_consumer("BTC", durable)
    return {"rate": n / dt}


@thread_scenario("consume_threads_each")
def consume_threads_each(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """k threads, each with its own consume(max_messages=500) on one shared durable."""
    durable = _threads_consumer(url, n, payload)
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        c = js.create_consumer("BTC", durable_name=durable, ack_policy="explicit",
                               max_ack_pending=600 * k)
        counter = iter(range(1, n + 1))
        ctxs: list[Any] = []
        lock = threading.Lock()
        done = threading.Event()

        # 500 buffered per context, but at most ~32 MiB over all contexts: past 64 MiB unread
        # the server drops the connection as a slow consumer (16 x 500 x 16 KiB = 128 MiB).
        per_ctx = min(500, max(10, (32 << 20) // (max(len(payload), 1) * k)))

        def work(_: int) -> None:
            ctx = c.consume(max_messages=per_ctx)
            with lock:
                ctxs.append(ctx)
            if done.is_set():
                ctx.stop()
            for m in ctx:
                m.ack()
                if next(counter, n) == n:
                    done.set()
                    with lock:
                        for x in ctxs:
                            x.stop()

        try:
            t0 = time.perf_counter()
            _run_threads(k, work)
            dt = time.perf_counter() - t0
        finally:
            for x in ctxs:
                x.stop()
            js.delete_consumer("BTC", durable)
    return {"rate": n / dt}


@thread_scenario("consume_callback_workers")
def consume_callback_workers(url: str, n: int, payload: bytes, k: int) -> dict[str, float]:
    """A connection with k callback workers; k consume(callback) contexts on one durable, ack each.

    Each context's callback runs one message at a time (in order), so k contexts can use
    k workers at once.
    """
    durable = _threads_consumer(url, n, payload)
    with jssync.connect(url, callback_workers=k) as nc:
        js = nc.jetstream()
        c = js.create_consumer("BTC", durable_name=durable, ack_policy="explicit",
                               max_ack_pending=600 * k)
        count = itertools.count(1)
        done = threading.Event()
        per_ctx = min(500, max(10, (32 << 20) // (max(len(payload), 1) * k)))

        def cb(m: Any) -> None:
            m.ack()
            if next(count) == n:
                done.set()

        ctxs: list[Any] = []
        try:
            t0 = time.perf_counter()
            ctxs.extend(c.consume(cb, max_messages=per_ctx) for _ in range(k))
            if not done.wait(300):
                raise RuntimeError("consume_callback_workers: not all messages arrived in 300 s")
            dt = time.perf_counter() - t0
        finally:
            for x in ctxs:
                x.stop()
            js.delete_consumer("BTC", durable)
    return {"rate": n / dt}


# ---------------------------------------------------------------------------------- memory

MEMORY_TARGET_MB = 50.0


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _memory_child(url: str, stream: str, n: int, out: Any) -> None:
    """In a fresh process: consume ``n`` messages with explicit acks, sampling RSS."""
    try:
        peak = [0]
        stop = threading.Event()

        def sampler() -> None:
            while not stop.wait(0.5):
                peak[0] = max(peak[0], _rss_kb())

        with jssync.connect(url) as nc:
            c = nc.jetstream().create_consumer(stream, durable_name="MEM", ack_policy="explicit")
            before = _rss_kb()
            peak[0] = before
            th = threading.Thread(target=sampler, daemon=True)
            th.start()
            got = 0
            t0 = time.perf_counter()
            with c.consume(max_messages=500) as msgs:
                for m in msgs:
                    m.ack()
                    got += 1
                    if got == n:
                        break
            dt = time.perf_counter() - t0
            end = _rss_kb()
            stop.set()
            th.join()
        peak[0] = max(peak[0], end)
        out.put({"rate": n / dt, "seconds": dt, "rss_before_mb": before / 1024, "rss_end_mb": end / 1024,
                 "rss_peak_mb": peak[0] / 1024, "growth_mb": (end - before) / 1024,
                 "peak_growth_mb": (peak[0] - before) / 1024})
    except BaseException as e:  # noqa: BLE001 - shipped to the parent
        out.put({"error": repr(e)})


def memory_consume(url: str, n: int) -> dict[str, Any]:
    """Preload ``n`` 128-byte messages (publish_async in chunks), consume them in a child process."""
    import multiprocessing as mp

    payload = os.urandom(128)
    name = "BMEM"
    t0 = time.perf_counter()
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", max_msgs=n + 1000)
        left = n
        while left:
            chunk = min(left, 50_000)
            futs = [js.publish_async(f"{name}.x", payload) for _ in range(chunk)]
            js.publish_async_completed(timeout=300)
            left -= chunk
            _check_preload(js, name, n - left, futs)
    preload_s = time.perf_counter() - t0
    try:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_memory_child, args=(url, name, n, q), daemon=True)
        p.start()
        res: dict[str, Any] = q.get(timeout=max(600.0, n / 1000))
        p.join(30)
    finally:
        with jssync.connect(url) as nc:
            nc.jetstream().delete_stream(name)
    if "error" in res:
        raise RuntimeError(f"memory_consume child failed: {res['error']}")
    res.update({"count": n, "size": 128, "preload_s": preload_s, "target_mb": MEMORY_TARGET_MB,
                "met": res["growth_mb"] < MEMORY_TARGET_MB and res["peak_growth_mb"] < MEMORY_TARGET_MB})
    return res


def _responder_main(url: str, stop: Any, ready: Any) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # not pinned with the clients
    _raw_responder(url, stop, ready)


# ------------------------------------------------------------------ the raw-socket floor
#
# The floor of a synchronous round trip: one blocking socket, no library, no thread, no
# event loop: write PUB, read the one MSG/HMSG that answers it. The same raw responder
# answers every requester of request_reply (jssync, nats-py and the floor), so that the
# responder is not what is measured.


class _RawNats:
    """A minimal blocking NATS protocol client: CONNECT, SUB, PUB, and reading MSG/HMSG."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        import socket
        from urllib.parse import urlsplit

        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}'
                          b"\r\nPING\r\n")
        while True:  # INFO, then PONG
            line = self._line()
            if line == b"PONG":
                break

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def next_msg(self) -> tuple[bytes, bytes | None, bytes]:
        """The next MSG/HMSG: (subject, reply, raw headers + payload); answers PINGs on the way."""
        while True:
            line = self._line()
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                parts = line.split()
                size = int(parts[-1])
                reply = parts[3] if len(parts) == (5 if parts[0] == b"MSG" else 6) else None
                while len(self.buf) < size + 2:
                    self._fill()
                body, self.buf = self.buf[:size], self.buf[size + 2:]
                return parts[1], reply, body
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            # INFO, PONG, +OK: nothing to do

    def close(self) -> None:
        self.sock.close()


def _raw_responder(url: str, stop: Any, ready: Any) -> None:
    c = _RawNats(url)
    c.sock.sendall(b"SUB bench.rr 1\r\nPING\r\n")
    while c._line() != b"PONG":
        pass
    ready.set()
    c.sock.settimeout(0.05)
    while not stop.is_set():
        try:
            _subject, reply, body = c.next_msg()
        except TimeoutError:
            continue
        if reply is not None:
            c.sock.sendall(b"PUB %s %d\r\n%s\r\n" % (reply, len(body), body))
    c.close()


def raw_round_trips(url: str, subjects: list[bytes], payload: bytes, warm: int = 50) -> dict[str, float]:
    """The floor: one blocking socket sends PUB <subject> <inbox> and reads the answer, one at a time."""
    c = _RawNats(url)
    inbox = b"_INBOX.floor.%d" % os.getpid()
    c.sock.sendall(b"SUB %s 1\r\nPING\r\n" % inbox)
    while c._line() != b"PONG":
        pass
    head = [b"PUB %s %s %d\r\n" % (s, inbox, len(payload)) for s in subjects]
    tail = payload + b"\r\n"
    send, nxt = c.sock.sendall, c.next_msg
    for i in range(warm):
        send(head[i % len(head)] + tail)
        nxt()
    lat = []
    n = len(subjects)
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        send(head[i] + tail)
        nxt()
        lat.append(time.perf_counter() - s)
    dt = time.perf_counter() - t0
    c.close()
    return _lat(n / dt, lat)


def raw_pull_loop(url: str, stream: str, n: int, ack: bool, batch: int = 500) -> float:
    """The floor of consuming: one blocking socket keeps ``batch`` messages asked for (a pull of
    half of it each time half has arrived, as ``consume(max_messages=batch)`` does), reads each
    MSG/HMSG by position in the received bytes, and writes the acks of everything one ``recv``
    brought in one ``sendall``.
    Returns the seconds for ``n`` messages (the consumer ``RAW`` is made first, not timed)."""
    with jssync.connect(url) as nc:
        nc.jetstream().create_consumer(stream, durable_name="RAW", ack_policy="explicit" if ack else "none")
    c = _RawNats(url)
    sock = c.sock
    inbox = b"_INBOX.rawpull.%d" % os.getpid()
    half = batch // 2

    def pull_of(k: int) -> bytes:
        body = b'{"batch":%d,"expires":5000000000}' % k
        return b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.RAW %s %d\r\n%s\r\n" % (stream.encode(), inbox, len(body), body)

    pull = pull_of(half)  # a refill: what was taken since the last one
    sock.sendall(b"SUB %s 1\r\n" % inbox + pull_of(batch))
    buf = c.buf
    pos = 0
    got = 0
    since_pull = 0
    t0 = time.perf_counter()
    while got < n:
        data = sock.recv(262144)
        if not data:
            raise ConnectionError("server closed the connection")
        buf = buf[pos:] + data if pos < len(buf) else data
        pos = 0
        out: list[bytes] = []
        while True:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = buf[pos:i]
            if line[:4] == b"MSG " or line[:5] == b"HMSG ":
                parts = line.split()
                size = int(parts[-1])
                end = i + 2 + size + 2
                if end > len(buf):
                    break  # the body has not all arrived: read more
                pos = end
                reply = parts[3] if len(parts) == (5 if parts[0] == b"MSG" else 6) else b""
                if reply[:8] != b"$JS.ACK.":
                    continue  # a status (408/409/100) or a heartbeat
                got += 1
                since_pull += 1
                if ack:
                    out.append(b"PUB %s 4\r\n+ACK\r\n" % reply)
                if since_pull >= half:
                    out.append(pull)
                    since_pull = 0
            else:
                pos = i + 2
                if line == b"PING":
                    out.append(b"PONG\r\n")
        if out:
            sock.sendall(b"".join(out))
    if ack:  # every ack reached the server before the clock stops
        sock.sendall(b"PING\r\n")
        c.buf = buf[pos:]
        while c._line() != b"PONG":
            pass
    dt = time.perf_counter() - t0
    c.close()
    return dt


def _lat(rate: float, lat: list[float]) -> dict[str, float]:
    lat.sort()
    return {"rate": rate, "p50_us": lat[len(lat) // 2] * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6}


# ---------------------------------------------------------------------------------- driver


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return []


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _count_for_size(n: int, size: int, budget: int) -> int:
    """Cap the message count so one run's payload bytes stay within ``budget`` (memory streams)."""
    return max(1000, min(n, budget // max(size, 1)) // 500 * 500)  # whole fetch(500) batches


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _run_pairs(url: str, names: list[str], n: int, payload: bytes, runs: int, side: str,
               natsio_py: str | None = None) -> dict[str, Any]:
    """Each run: jssync, nats-py, then natsio (``natsio_py``, its scenarios only); medians per column."""
    out: dict[str, Any] = {}
    head = f"{'scenario':28} {'jssync/s':>12} {'nats-py/s':>12} {'ratio':>7}"
    if natsio_py:
        head += f" {'natsio/s':>12} {'j/natsio':>8}"
    print(f"{head}  extra")
    for name in names:
        fj, fn = SCENARIOS[name]
        with_natsio = natsio_py is not None and name in NATSIO_SCENARIOS
        rj, rn, ri, rf = [], [], [], []
        ff = FLOORS.get(name)
        for _ in range(runs):
            if side != "natspy":
                rj.append(fj(url, n, payload))
            if side != "jssync":
                rn.append(fn(url, n, payload))
            if with_natsio:
                assert natsio_py is not None
                ri.append(natsio_run(natsio_py, name, url, n, payload))
            if ff is not None:
                rf.append(ff(url, n, payload))
        nan = {"rate": float("nan")}
        mj = _median(rj) if rj else nan
        mn = _median(rn) if rn else nan
        ratio = mj["rate"] / mn["rate"]
        extra = ""
        if "p50_us" in mj and "p50_us" in mn:
            extra = (f"p50 {mj['p50_us']:.0f}/{mn['p50_us']:.0f} us (overhead {mj['p50_us'] - mn['p50_us']:+.0f}),"
                     f" p99 {mj['p99_us']:.0f}/{mn['p99_us']:.0f} us")
        row = f"{name:28} {mj['rate']:>12,.0f} {mn['rate']:>12,.0f} {ratio:>7.2f}"
        out[name] = {"jssync": mj, "natspy": mn, "ratio": ratio}
        if rf:
            mf = _median(rf)
            out[name]["floor"] = mf
            out[name]["rate_vs_floor"] = mf["rate"] / mj["rate"]
            extra += f"; floor {mf['rate']:,.0f}/s ({mf['rate'] / mj['rate']:.2f}x jssync)"
            if "p50_us" in mf:
                extra += f" p50 {mf['p50_us']:.0f} p99 {mf['p99_us']:.0f} us"
            if "p50_us" in mj and "p50_us" in mf:
                out[name]["p50_vs_floor"] = mj["p50_us"] / mf["p50_us"]
                extra += f" (jssync p50 {mj['p50_us'] / mf['p50_us']:.2f}x floor)"
        if with_natsio:
            mi = _median(ri)
            ratio_i = mj["rate"] / mi["rate"]
            row += f" {mi['rate']:>12,.0f} {ratio_i:>8.2f}"
            out[name].update({"natsio": mi, "ratio_natsio": ratio_i})
        elif natsio_py:
            row += f" {'-':>12} {'-':>8}"
        print(f"{row}  {extra}".rstrip(), flush=True)
        _cleanup(url)
    return out


def _run_threads_table(url: str, names: list[str], n: int, payload: bytes, runs: int,
                       threads: list[int]) -> dict[str, Any]:
    """Rows = thread counts, columns = thread scenarios (jssync msgs/s, median of runs)."""
    out: dict[str, Any] = {name: {} for name in names}
    print(f"\njssync with k user threads (msgs/s, total over all threads; {n} msgs per run, "
          f"core publish {5 * n}, js.publish {max(1000, n // 10)})")
    print(f"{'threads':>7} " + " ".join(f"{THREAD_LABELS.get(name, name):>22}" for name in names))
    for k in threads:
        row = []
        for name in names:
            res = _median([THREAD_SCENARIOS[name](url, n, payload, k) for _ in range(runs)])
            out[name][str(k)] = res
            row.append(f"{res['rate']:>22,.0f}")
            _cleanup(url, keep=("BTC",))  # the consume threads share one preloaded stream
        print(f"{k:>7} " + " ".join(row), flush=True)
    _cleanup(url)
    return out


NATSIO_SCENARIOS = ("consume_ack", "consume_noack", "fetch_loop", "js_publish_sync", "core_publish")


def _natsio_setup(name: str, url: str, n: int, payload: bytes) -> tuple[int, str]:
    """The same stream set-up as the nats-py side of ``name``; returns (message count, stream)."""
    if name == "js_publish_sync":
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
        return max(1000, n // 10), "BENCHPUB"
    stream = {"consume_ack": "BCA", "consume_noack": "BCN", "fetch_loop": "BFL"}.get(name, "")
    if stream:
        _preload(url, stream, n, payload)
    return n, stream


def natsio_run(py: str, name: str, url: str, n: int, payload: bytes) -> dict[str, float]:
    """One natsio run of scenario ``name``: set up here, measured by bench/natsio_side.py under ``py``."""
    import subprocess

    count, stream = _natsio_setup(name, url, n, payload)
    side = os.path.join(os.path.dirname(os.path.abspath(__file__)), "natsio_side.py")
    proc = subprocess.run([py, side, name, url, str(count), str(len(payload)), stream],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"natsio side of {name} failed ({py}, exit {proc.returncode}): {proc.stderr[-2000:]}")
    return {"rate": float(json.loads(proc.stdout.strip().splitlines()[-1])["rate"])}


def find_natsio(explicit: str | None) -> tuple[str | None, str]:
    """A Python 3.13 that can ``import natsio``, and a one-line note saying what was found or looked for.

    Looks at ``explicit`` (``--natsio-python``) only when given; otherwise at ``python3.13`` on
    PATH, then ``~/.pyenv/versions/3.13*/bin/python3.13``. Nothing is installed here.
    """
    import glob
    import shutil
    import subprocess

    if explicit:
        candidates = [explicit]
        looked = f"--natsio-python {explicit}"
    else:
        pattern = os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")
        candidates = [p for p in [shutil.which("python3.13"), *sorted(glob.glob(pattern))] if p]
        looked = f"python3.13 on PATH, {pattern}"
    for py in dict.fromkeys(candidates):
        try:
            probe = subprocess.run([py, "-c", "import natsio; print(natsio.__version__)"],
                                   capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return py, f"natsio {probe.stdout.strip()} under {py}"
    found = f" (tried {', '.join(candidates)}: none could import natsio)" if candidates else ""
    return None, (f"natsio side by side: skipped: no Python 3.13 with natsio; looked for {looked}{found}; "
                  "install with: python3.13 -m pip install natsio")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer messages, one run, no memory_consume")
    ap.add_argument("--size", type=int, default=128, help="payload size in bytes (default 128)")
    ap.add_argument("--sizes", type=_ints, default=None,
                    help="comma-separated payload sizes, e.g. 128,16384: one section per size (overrides --size)")
    ap.add_argument("--runs", type=int, default=None, help="runs per scenario (median is reported)")
    ap.add_argument("--count", type=int, default=None, help="messages per run (capped for big payloads)")
    ap.add_argument("--threads", type=_ints, default=[1, 4, 16],
                    help="user-thread counts for the *_threads scenarios (default 1,4,16)")
    ap.add_argument("--memory-count", type=int, default=1_000_000,
                    help="messages for memory_consume (default 1,000,000)")
    ap.add_argument("--side", choices=["both", "jssync", "natspy"], default="both",
                    help="run only one side of the paired scenarios (for profiling; natsio only with both)")
    ap.add_argument("--natsio-python", metavar="PATH", default=None,
                    help="a Python 3.13 with natsio installed, for the natsio column (default: python3.13 "
                         "on PATH, else ~/.pyenv/versions/3.13*/bin/python3.13; skipped with a note if none)")
    ap.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--pin-client", type=int, default=None, metavar="CPU",
                    help="run the measured clients (both sides) on this one CPU; the server and "
                         "the request/reply responder keep every CPU (Linux only)")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    n = args.count or (20_000 if args.quick else 200_000)
    budget = (64 if args.quick else 256) << 20
    sizes = args.sizes or [args.size]
    known = [*SCENARIOS, *THREAD_SCENARIOS, "memory_consume"]
    names = args.only or [x for x in known if not (args.quick and x == "memory_consume")]
    unknown = [x for x in names if x not in known]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {known}")
    pairs = [x for x in names if x in SCENARIOS]
    threaded = [x for x in names if x in THREAD_SCENARIOS]
    results: dict[str, Any] = {"sizes": sizes, "count": n, "runs": runs, "threads": args.threads,
                               "cpus": os.cpu_count(), "loadavg_start": _loadavg(), "by_size": {}}
    natsio_py = None
    if args.side == "both" and any(x in NATSIO_SCENARIOS for x in pairs):
        natsio_py, results["natsio"] = find_natsio(args.natsio_python)
        print(f"natsio column: {results['natsio']}" if natsio_py else results["natsio"])
    t_start = time.perf_counter()
    with NatsServer(jetstream=True) as srv:
        if args.pin_client is not None:
            # after the server started, so it keeps every CPU; threads made from here on
            # (jssync's I/O thread included) inherit the affinity
            os.sched_setaffinity(0, {args.pin_client})
            results["pin_client"] = args.pin_client
            print(f"clients pinned to CPU {args.pin_client}")
        print(f"server {srv.url}; {runs} run(s), median reported; load average {results['loadavg_start']}")
        for size in sizes:
            ns = _count_for_size(n, size, budget) if size > 128 else n
            payload = os.urandom(size)
            section: dict[str, Any] = {"count": ns}
            if pairs or threaded:
                print(f"\n== payload {size} B, {ns} msgs per run ==")
            if pairs:
                section["scenarios"] = _run_pairs(srv.url, pairs, ns, payload, runs, args.side, natsio_py)
            if threaded:
                section["threads"] = _run_threads_table(srv.url, threaded, ns, payload, runs, args.threads)
            results["by_size"][str(size)] = section
        if "memory_consume" in names:
            m = args.memory_count
            _cleanup(srv.url)
            print(f"\n== memory_consume: {m:,} msgs of 128 B, consume(max_messages=500) + ack, fresh process ==")
            res = memory_consume(srv.url, m)
            results["memory_consume"] = res
            print(f"preload {res['preload_s']:.1f} s; consume {res['rate']:,.0f} msgs/s ({res['seconds']:.1f} s)")
            print(f"RSS before {res['rss_before_mb']:.1f} MB, end {res['rss_end_mb']:.1f} MB, "
                  f"peak {res['rss_peak_mb']:.1f} MB: growth {res['growth_mb']:+.1f} MB "
                  f"(peak {res['peak_growth_mb']:+.1f} MB), target < {MEMORY_TARGET_MB:.0f} MB: "
                  f"{'met' if res['met'] else 'MISSED'}", flush=True)
    results["loadavg_end"] = _loadavg()
    results["seconds"] = time.perf_counter() - t_start
    print(f"\ndone in {results['seconds']:.0f} s; load average {results['loadavg_end']}")
    first = results["by_size"].get(str(sizes[0]), {})
    results["size"] = sizes[0]  # the first size's paired results, as before
    results["scenarios"] = first.get("scenarios", {})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
