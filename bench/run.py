"""jssync vs plain nats-py (asyncio), same server, same run.

    python bench/run.py            # every scenario, 3 runs each, median
    python bench/run.py --quick    # short run
    python bench/run.py --size 16384 --json results.json --only core_publish

Each scenario runs once with jssync and once with nats-py doing the same work the
idiomatic way, and prints msgs/s for both and the ratio jssync / nats-py.
"""

from __future__ import annotations

import argparse
import asyncio
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


def scenario(name: str) -> Callable[[Any], Any]:
    def deco(cls: Any) -> Any:
        SCENARIOS[name] = (cls.jssync, cls.natspy)
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


# ---------------------------------------------------------------------------------- JetStream


def _fresh_stream(url: str, name: str, subjects: list[str]) -> None:
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name=name, subjects=subjects, storage="memory")


@scenario("js_publish_sync")
class JsPublishSync:
    """js.publish one at a time (wait for each PubAck)."""

    @staticmethod
    def jssync(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])
        with jssync.connect(url) as nc:
            js = nc.jetstream()
            t0 = time.perf_counter()
            for _ in range(n):
                js.publish("bench.js.p", payload)
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

    @staticmethod
    def natspy(url: str, n: int, payload: bytes) -> dict[str, float]:
        n = max(1000, n // 10)
        _fresh_stream(url, "BENCHPUB", ["bench.js.>"])

        async def main() -> float:
            nc = await nats.connect(url)
            js = nc.jetstream()
            t0 = time.perf_counter()
            for _ in range(n):
                await js.publish("bench.js.p", payload)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


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


def _preload(url: str, name: str, n: int, payload: bytes, **cfg: Any) -> None:
    """A fresh memory stream ``name`` on subject ``<name>.x`` holding ``n`` messages."""
    with jssync.connect(url) as nc:
        js = nc.jetstream()
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass
        js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", **cfg)
        for _ in range(n):
            js.publish_async(f"{name}.x", payload)
        js.publish_async_completed(timeout=300)


def _natspy_fetch_loop(url: str, name: str, n: int, ack: bool) -> float:
    async def main() -> float:
        nc = await nats.connect(url)
        js = nc.jetstream()
        psub = await js.pull_subscribe(f"{name}.x", durable="NP", stream=name)
        got = 0
        t0 = time.perf_counter()
        while got < n:
            try:
                msgs = await psub.fetch(500, timeout=5)
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
                    msgs = await psub.fetch(500, timeout=5)
                except nats.errors.TimeoutError:
                    continue
                got += len(msgs)
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


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
                for m in c.fetch(500, expires=5.0):
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
            t0 = time.perf_counter()
            for i in range(n):
                kv.get(f"k{i % 100}")
            dt = time.perf_counter() - t0
        return {"rate": n / dt}

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
                await kv.get(f"k{i % 100}")
            dt = time.perf_counter() - t0
            await nc.close()
            return dt

        return {"rate": n / asyncio.run(main())}


def _responder_main(url: str, stop: Any, ready: Any) -> None:
    RequestReply._responder(url, stop, ready)


def _lat(rate: float, lat: list[float]) -> dict[str, float]:
    lat.sort()
    return {"rate": rate, "p50_us": lat[len(lat) // 2] * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6}


# ---------------------------------------------------------------------------------- driver


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer messages, one run")
    ap.add_argument("--size", type=int, default=128, help="payload size in bytes (default 128)")
    ap.add_argument("--runs", type=int, default=None, help="runs per scenario (median is reported)")
    ap.add_argument("--count", type=int, default=None, help="messages per run")
    ap.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    n = args.count or (20_000 if args.quick else 200_000)
    payload = os.urandom(args.size)
    names = args.only or list(SCENARIOS)
    unknown = [x for x in names if x not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    results: dict[str, Any] = {"size": args.size, "count": n, "runs": runs, "scenarios": {}}
    with NatsServer(jetstream=True) as srv:
        print(f"server {srv.url}; payload {args.size} B; {n} msgs; {runs} run(s); median reported")
        print(f"{'scenario':28} {'jssync/s':>12} {'nats-py/s':>12} {'ratio':>7}  extra")
        for name in names:
            fj, fn = SCENARIOS[name]
            rj, rn = [], []
            for _ in range(runs):
                rj.append(fj(srv.url, n, payload))
                rn.append(fn(srv.url, n, payload))
            mj = {k: statistics.median(r[k] for r in rj) for k in rj[0]}
            mn = {k: statistics.median(r[k] for r in rn) for k in rn[0]}
            ratio = mj["rate"] / mn["rate"]
            extra = ""
            if "p50_us" in mj:
                extra = (f"p50 {mj['p50_us']:.0f}/{mn['p50_us']:.0f} us (overhead {mj['p50_us'] - mn['p50_us']:+.0f}),"
                         f" p99 {mj['p99_us']:.0f}/{mn['p99_us']:.0f} us")
            print(f"{name:28} {mj['rate']:>12,.0f} {mn['rate']:>12,.0f} {ratio:>7.2f}  {extra}", flush=True)
            results["scenarios"][name] = {"jssync": mj, "natspy": mn, "ratio": ratio}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
