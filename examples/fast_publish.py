"""Fast-ingest batch publishing (ADR-50, nats-server 2.14+): many messages, paced by the server.

Run: python examples/fast_publish.py   (starts its own local nats-server)
"""

from __future__ import annotations

import time

import jssync
from jssync.server import NatsServer


def main() -> None:
    with NatsServer(jetstream=True) as srv, jssync.connect(srv.url) as nc:
        js = nc.jetstream()
        # the stream opts in to fast batches
        metrics = js.create_stream(name="METRICS", subjects=["METRICS.>"], storage="memory", allow_batched=True)

        # gap="fail" (the default): what is stored has no gaps; a lost message ends the batch
        # with jssync.FastPublishGapError. The server paces the publisher with flow acks.
        start = time.monotonic()
        with js.fast_publisher() as fp:
            for i in range(20_000):
                fp.add(f"METRICS.host{i % 4}", b"cpu=%d" % (i % 100))
        took = time.monotonic() - start
        ack = fp.ack
        assert ack is not None
        print(f"stored {ack.batch_size} messages in {took:.2f}s (last at stream seq {ack.seq}); "
              f"add waited for the server's flow acks {fp.stalls} times (flow now {fp.flow})")
        print("the stream holds", metrics.info().state.messages, "messages")

        # gap="ok": the batch goes on past lost messages; each gap (and each refused message)
        # goes to error_cb and the jssync logger. flush() pings the batch and returns the
        # highest batch sequence the server acknowledged.
        def on_error(err: BaseException) -> None:
            print("reported:", err)

        with js.fast_publisher(gap="ok", flow=1, error_cb=on_error) as fp:  # flow=1: an ack per message
            fp.add("METRICS.host0", b"a")
            fp.add("METRICS.host0", b"b", expected_last_seq=1)  # refused by the server: reported, not fatal
            fp.add("METRICS.host0", b"c")
            print("acknowledged up to batch sequence", fp.flush())
        print("second batch:", fp.ack.batch_size if fp.ack else None, "counted by the server; refused:",
              [e.seq for e in fp.errors])

        # a stream that did not opt in refuses the batch at the first message
        js.create_stream(name="PLAIN", subjects=["PLAIN.>"], storage="memory")
        try:
            js.fast_publisher().add("PLAIN.x", b"x")
        except jssync.APIError as err:
            print("refused:", err)


if __name__ == "__main__":
    main()
