"""A Spark data pipeline on JetStream: orders -> Spark -> result streams.

Runs with one command on local Spark against an embedded nats-server::

    python examples/spark_pipeline.py

Needs PySpark 4.2+ (``pip install '.[spark]'``) and Java 17 (see docs/spark.md).

1. 5,000 orders (JSON) are published to the ORDERS stream.
2. A batch job reads ORDERS in 2 partitions, totals the amounts per region and writes one
   message per region to RESULTS.totals.<region> (the region and snapshot are the message
   id, so running the job twice on the same snapshot writes nothing new).
3. A streaming job (trigger availableNow, with a checkpoint) copies the large orders to
   RESULTS.large; after 1,000 more orders it is started again and continues exactly where
   it stopped.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile

import jssync
from jssync.server import NatsServer

REGIONS = ["eu", "us", "apac"]


def publish_orders(js: jssync.JetStream, first: int, count: int) -> int:
    """Publish orders ``first..first+count-1``; returns how many are large (amount > 900)."""
    rnd = random.Random(first)
    large = 0
    for i in range(first, first + count):
        region = REGIONS[i % len(REGIONS)]
        order = {"id": i, "region": region, "amount": round(rnd.uniform(1, 1000), 2)}
        large += order["amount"] > 900
        js.publish_async(f"ORDERS.{region}", json.dumps(order).encode(), msg_id=f"order-{i}")
    js.publish_async_completed(timeout=60)
    return large


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from jssync.spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName("jssync-spark-pipeline")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # the "jetstream" format
    order_schema = "id long, region string, amount double"

    with NatsServer(jetstream=True) as server, jssync.connect(server.url) as nc, \
            tempfile.TemporaryDirectory() as tmp:
        url = server.url
        js = nc.jetstream()
        js.create_stream(name="ORDERS", subjects=["ORDERS.*"], storage="memory")
        js.create_stream(name="RESULTS", subjects=["RESULTS.>"], storage="memory")
        expected_large = publish_orders(js, 0, 5000)

        # -- 1. batch: totals per region ---------------------------------------------------
        snapshot = js.stream("ORDERS").info().state.last_seq  # the read below sees exactly these
        orders = (spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS")
                  .option("numPartitions", 2).option("endingSequence", snapshot).load())
        totals = (orders.select(F.from_json(F.col("data").cast("string"), order_schema).alias("o"))
                  .groupBy("o.region").agg(F.count("*").alias("orders"), F.round(F.sum("o.amount"), 2).alias("total")))
        results = totals.select(
            F.concat(F.lit("RESULTS.totals."), F.col("region")).alias("subject"),
            F.to_json(F.struct("region", "orders", "total")).alias("data"),
            F.concat(F.lit(f"totals-{snapshot}-"), F.col("region")).alias("msg_id"),
        )
        for _ in range(2):  # the second run is de-duplicated by the stream
            results.write.format("jetstream").mode("append") \
                .option("servers", url).option("msgIdColumn", "msg_id").save()
        for region in REGIONS:
            m = js.stream("RESULTS").get_msg(last_by_subject=f"RESULTS.totals.{region}")
            print(f"totals {region}: {m.data.decode()}")
        assert js.stream("RESULTS").info().state.messages == len(REGIONS)

        # -- 2. streaming: large orders, restarted from the checkpoint ---------------------
        checkpoint = os.path.join(tmp, "checkpoint")

        def run_stream() -> None:
            q = (spark.readStream.format("jetstream").option("servers", url).option("stream", "ORDERS")
                 .option("maxMessagesPerTrigger", 5000).load()
                 .select("seq", F.from_json(F.col("data").cast("string"), order_schema).alias("o"))
                 .where("o.amount > 900")
                 .select(F.concat(F.lit("RESULTS.large."), F.col("o.region")).alias("subject"),
                         F.to_json(F.struct("seq", "o.id", "o.amount")).alias("data"))
                 .writeStream.format("jetstream").option("servers", url)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
            q.awaitTermination()
            print(f"streaming run: {len(q.recentProgress)} micro-batch(es), "
                  f"{sum(p['numInputRows'] for p in q.recentProgress)} order(s) read")

        run_stream()
        expected_large += publish_orders(js, 5000, 1000)
        run_stream()  # reads only the 1,000 new orders

        large = (spark.read.format("jetstream").option("servers", url).option("stream", "RESULTS")
                 .option("subjects", "RESULTS.large.*").load())
        got = large.count()
        print(f"large orders: {got} in RESULTS.large.*, {expected_large} expected")
        assert got == expected_large
    spark.stop()
    print("spark pipeline finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
