"""Spark figures: rows/s of a batch read with 1, 2 and 4 partitions, and of a batch write.

    python bench/spark.py                 # 100,000 messages of 100 bytes
    python bench/spark.py --count 20000 --size 1024 --json spark.json
    python bench/spark.py --only write --runs 5   # the write vs a plain publish_async loop

The write is compared, in the same run, with a plain ``publish_async`` loop in this
process over the same rows (same subjects and payloads, a ``Nats-Msg-Id`` on each, then
``publish_async_completed``); runs of the two alternate and the medians are printed with
their ratio.

Starts its own nats-server and a local Spark (``local[2]``; needs PySpark 4.2+ and Java 17).
Each read figure is the best of ``--runs`` runs (default 2), after one warm-up read; the
write figures are medians of ``--runs`` alternating runs, after one warm-up write.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jssync  # noqa: E402
from jssync.server import NatsServer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--only", choices=["read", "write"], help="run only the reads or only the writes")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from jssync.spark import register

    spark = (SparkSession.builder.master(args.master).appName("jssync-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    n = args.count
    results: dict[str, Any] = {"count": n, "size": args.size, "master": args.master}
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        js.create_stream(name="BSPARK", subjects=["BSPARK.*"], storage="memory")
        js.create_stream(name="BSPARKOUT", subjects=["BSPARKOUT.*"], storage="memory")
        payload = b"x" * args.size
        for i in range(n):
            js.publish_async(f"BSPARK.{i % 8}", payload)
        js.publish_async_completed(timeout=120)

        def read(parts: int) -> float:
            df = (spark.read.format("jetstream").option("servers", srv.url).option("stream", "BSPARK")
                  .option("numPartitions", parts).load())
            t0 = time.perf_counter()
            # consume every row on the executors (a count alone would drop the columns)
            got = df.selectExpr("sum(length(data)) as b", "count(*) as c").first()
            dt = time.perf_counter() - t0
            assert got is not None and got["c"] == n, got
            return n / dt

        if args.only != "write":
            read(2)  # warm-up: Python workers, JIT
            for parts in (1, 2, 4):
                rate = max(read(parts) for _ in range(args.runs))
                results[f"read_{parts}"] = rate
                print(f"batch read, {parts} partition(s): {rate:12,.0f} rows/s", flush=True)
        if args.only == "read":
            spark.stop()
            return _dump(args, results)

        src = spark.range(0, n, numPartitions=2).selectExpr(
            "concat('BSPARKOUT.', id % 8) as subject", f"repeat('x', {args.size}) as data")
        src.cache().count()
        out = js.stream("BSPARKOUT")
        subjects = [f"BSPARKOUT.{i % 8}" for i in range(n)]  # the same rows as ``src``
        row_data = b"x" * args.size

        def spark_write() -> float:
            out.purge()
            t0 = time.perf_counter()
            src.write.format("jetstream").option("servers", srv.url).save()
            dt = time.perf_counter() - t0
            assert out.info().state.messages == n
            return n / dt

        def plain_loop() -> float:
            out.purge()
            prefix = os.urandom(6).hex()
            pub = js.publish_async
            t0 = time.perf_counter()
            for i, subj in enumerate(subjects):
                pub(subj, row_data, msg_id=f"{prefix}.{i}")
            js.publish_async_completed(timeout=120)
            dt = time.perf_counter() - t0
            assert out.info().state.messages == n
            return n / dt

        spark_write()  # warm-up: Python workers, imports on the executors
        plain_loop()
        w: list[float] = []
        p: list[float] = []
        for _ in range(args.runs):  # alternate, so load changes hit both alike
            w.append(spark_write())
            p.append(plain_loop())
        mw, mp = statistics.median(w), statistics.median(p)
        results.update(write_2=mw, plain_publish_async=mp, write_ratio=mw / mp, write_runs=w, plain_runs=p)
        print(f"batch write, 2 partitions ({args.master}): {mw:12,.0f} rows/s  "
              f"(runs: {', '.join(f'{x:,.0f}' for x in w)})", flush=True)
        print(f"plain publish_async loop, msg ids:  {mp:12,.0f} rows/s  "
              f"(runs: {', '.join(f'{x:,.0f}' for x in p)})", flush=True)
        print(f"write / plain loop: {mw / mp:.2f}", flush=True)
    spark.stop()
    return _dump(args, results)


def _dump(args: argparse.Namespace, results: dict[str, Any]) -> int:
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
