"""Spark figures: rows/s of a batch read with 1, 2 and 4 partitions, and of a batch write.

    python bench/spark.py                 # 100,000 messages of 100 bytes
    python bench/spark.py --count 20000 --size 1024 --json spark.json

Starts its own nats-server and a local Spark (``local[2]``; needs PySpark 4.2+ and Java 17).
Each figure is the best of ``--runs`` runs (default 2), after one warm-up read.
"""

from __future__ import annotations

import argparse
import json
import os
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

        read(2)  # warm-up: Python workers, JIT
        for parts in (1, 2, 4):
            rate = max(read(parts) for _ in range(args.runs))
            results[f"read_{parts}"] = rate
            print(f"batch read, {parts} partition(s): {rate:12,.0f} rows/s", flush=True)

        src = spark.range(0, n, numPartitions=2).selectExpr(
            "concat('BSPARKOUT.', id % 8) as subject", f"repeat('x', {args.size}) as data")
        src.cache().count()
        best = 0.0
        for _ in range(args.runs):
            js.stream("BSPARKOUT").purge()
            t0 = time.perf_counter()
            src.write.format("jetstream").option("servers", srv.url).save()
            dt = time.perf_counter() - t0
            assert js.stream("BSPARKOUT").info().state.messages == n
            best = max(best, n / dt)
        results["write_2"] = best
        print(f"batch write, 2 partitions:  {best:12,.0f} rows/s", flush=True)
    spark.stop()
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
