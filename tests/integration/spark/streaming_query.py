"""What the Spark streaming-read tests share: run a ``jetstream`` streaming read to the end of
what is there (``trigger(availableNow=True)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tests.conftest import FACTOR


def run_available_now(spark: Any, url: str, streams: str | Sequence[str], ckpt: Any,
                      collect: Callable[[Any, int], None], **options: str) -> Any:
    """Run a streaming read of ``streams`` (one stream name: option ``stream``; several:
    option ``streams``) into ``collect`` (foreachBatch) with the checkpoint ``ckpt`` until it
    has read what is there, or failed (look at ``q.exception()``); returns the stopped query.
    ``options`` are further source options."""
    one = isinstance(streams, str)
    r = spark.readStream.format("jetstream").option("servers", url)
    r = r.option("stream" if one else "streams", streams if one else ",".join(streams))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().writeStream.foreachBatch(collect).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120 * FACTOR)
    except Exception:  # noqa: BLE001 - the failure is looked at through q.exception()
        pass
    return q
