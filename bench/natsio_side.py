"""The natsio side of bench/run.py's paired scenarios; run by a Python 3.13 with natsio installed.

    python3.13 bench/natsio_side.py SCENARIO URL COUNT SIZE [STREAM]

bench/run.py starts this as a subprocess against its own nats-server, after it has set up the
stream (``_fresh_stream`` / ``_preload``, exactly as for the nats-py side), and reads one JSON
line ``{"rate": msgs_per_s}`` from stdout. Only the measured work runs here, the idiomatic
natsio way: ``consumer.consume()`` for the consume scenarios (natsio has ADR-37 consume, unlike
nats-py), ``consumer.fetch(500)`` for the fetch loop, ``js.publish`` / ``nc.publish`` for the
publishes. This file imports nothing from jssync (it runs under another interpreter).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import natsio  # type: ignore[import-not-found]  # only installed in the 3.13 interpreter
from natsio.jetstream import AckPolicy, ConsumerConfig  # type: ignore[import-not-found]


async def core_publish(url: str, n: int, payload: bytes, stream: str) -> float:
    nc = await natsio.connect(url)
    t0 = time.perf_counter()
    pub = nc.publish
    for _ in range(n):
        await pub("bench.pub", payload)
    await nc.flush(timeout=60)
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


async def js_publish_sync(url: str, n: int, payload: bytes, stream: str) -> float:
    nc = await natsio.connect(url)
    js = nc.jetstream()
    t0 = time.perf_counter()
    for _ in range(n):
        await js.publish("bench.js.p", payload)
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


async def _consume(url: str, n: int, stream: str, ack: bool) -> float:
    nc = await natsio.connect(url)
    js = nc.jetstream()
    st = await js.stream(stream)
    policy = AckPolicy.EXPLICIT if ack else AckPolicy.NONE
    c = await st.create_consumer(ConsumerConfig(durable_name="NI", ack_policy=policy))
    got = 0
    t0 = time.perf_counter()
    async with c.consume(max_messages=500) as msgs:
        async for m in msgs:
            if ack:
                await m.ack()
            got += 1
            if got == n:
                break
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


async def consume_ack(url: str, n: int, payload: bytes, stream: str) -> float:
    return await _consume(url, n, stream, ack=True)


async def consume_noack(url: str, n: int, payload: bytes, stream: str) -> float:
    return await _consume(url, n, stream, ack=False)


async def fetch_loop(url: str, n: int, payload: bytes, stream: str) -> float:
    nc = await natsio.connect(url)
    js = nc.jetstream()
    st = await js.stream(stream)
    c = await st.create_consumer(ConsumerConfig(durable_name="NI", ack_policy=AckPolicy.EXPLICIT))
    got = 0
    t0 = time.perf_counter()
    while got < n:
        for m in await c.fetch(min(500, n - got), timeout=5.0):  # [] on expiry: just pull again
            await m.ack()
            got += 1
    dt = time.perf_counter() - t0
    await nc.close()
    return dt


SCENARIOS: dict[str, Callable[[str, int, bytes, str], Awaitable[float]]] = {
    "core_publish": core_publish,
    "js_publish_sync": js_publish_sync,
    "consume_ack": consume_ack,
    "consume_noack": consume_noack,
    "fetch_loop": fetch_loop,
}


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5) or argv[0] not in SCENARIOS:
        print(f"usage: natsio_side.py {{{','.join(SCENARIOS)}}} URL COUNT SIZE [STREAM]", file=sys.stderr)
        return 2
    name, url, n, size = argv[0], argv[1], int(argv[2]), int(argv[3])
    stream = argv[4] if len(argv) == 5 else ""
    dt = asyncio.run(SCENARIOS[name](url, n, os.urandom(size), stream))
    out: dict[str, Any] = {"rate": n / dt, "natsio": natsio.__version__}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
