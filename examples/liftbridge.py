"""Partitioned streams with the Liftbridge client interface, on JetStream.

Run: python examples/liftbridge.py   (starts its own local nats-server)

Creates a stream with three partitions, publishes keyed messages (each key always lands
on the same partition), reads a partition from the start, follows new messages with a
handler, inspects the metadata, and uses the low-level helpers with a plain connection.
"""

from __future__ import annotations

import threading

import jssync
from jssync.liftbridge import (
    AckPolicy,
    Client,
    PartitionByKey,
    PartitionByRoundRobin,
    StartPosition,
    StreamExistsError,
    new_message,
    unmarshal_ack,
)
from jssync.server import NatsServer


def main() -> None:
    with NatsServer(jetstream=True) as srv, Client([srv.url]) as client:
        # CreateStream: partition n of "orders" captures "orders" (n = 0) or "orders.n"
        client.create_stream("orders", "orders-stream", partitions=3, storage="memory")
        try:
            client.create_stream("orders", "orders-stream", partitions=3)
        except StreamExistsError:
            print("orders-stream already exists")

        # Publish with keys: CRC-32 of the key modulo 3 picks the partition
        for customer in ("erin", "alice", "user-2", "erin", "grace", "alice"):
            ack = client.publish("orders", f"order from {customer}".encode(), key=customer.encode(),
                                 partition_by=PartitionByKey(), headers={"source": "example"})
            print(f"{customer:>6} -> partition {ack.partition} offset {ack.offset}")

        # Round-robin, ack policy ALL, an explicit partition, and fire-and-forget (NONE)
        rr = PartitionByRoundRobin()
        print("round robin:", [client.publish("orders", b"tick", partition_by=rr).partition for _ in range(4)])
        ack = client.publish("orders", b"audit", to_partition=2, ack_policy=AckPolicy.ALL)
        print(f"ALL ack: partition {ack.partition} offset {ack.offset} stored as {ack.jetstream_stream}")
        assert client.publish("orders", b"metrics", ack_policy=AckPolicy.NONE) is None

        # Subscribe (iterator form) from the earliest message of alice's partition
        alice = client.publish("orders", b"one more", key=b"alice", partition_by=PartitionByKey())
        # (the same key always goes to the same partition)
        with client.subscribe("orders-stream", partition=alice.partition,
                              start_at=StartPosition.EARLIEST) as sub:
            for msg in sub:
                print(f"  p{msg.partition} #{msg.offset} key={msg.key!r} {msg.value!r} headers={msg.headers}")
                if msg.offset == alice.offset:
                    break

        # Subscribe (handler form): new messages only, handler(msg, err) on the worker pool
        seen = threading.Event()

        def handler(msg, err):
            if err is not None:
                print("subscription ended:", err)
                return
            print(f"  handler got #{msg.offset} {msg.value!r}")
            seen.set()

        live = client.subscribe("orders-stream", handler, partition=1)
        client.publish("orders", b"live update", to_partition=1)
        assert seen.wait(5.0), "no live message"
        live.close()

        # FetchMetadata: always from the server
        meta = client.fetch_metadata()
        print("brokers:", [(b.id, b.addr()) for b in meta.brokers()])
        print("partitions for 'orders':", meta.partition_counts_for_subject("orders"))
        for p in meta.get_stream("orders-stream").partitions.values():
            print(f"  partition {p.id}: {p.subject} leader={p.leader} newest offset={p.newest_offset}")

        # Low-level helpers with a plain NATS connection (NewMessage / UnmarshalMessage / UnmarshalAck)
        with jssync.connect(srv.url) as nc:
            with client.subscribe("orders-stream", partition=0) as sub:
                nc.publish("orders", new_message(b"hello", key=b"k", headers={"trace": b"\x01\x02"}))
                got = sub.next(5.0)
                print(f"envelope read back: offset {got.offset} key {got.key!r} headers {got.headers}")
            acks = nc.subscribe("my.ack.inbox")
            client.publish("orders", b"acked", ack_inbox="my.ack.inbox", correlation_id="order 123.4")
            low = unmarshal_ack(acks.next_msg(5.0).data)
            print(f"ack on the inbox: correlation {low.correlation_id!r} -> {low.stream} p{low.partition} "
                  f"offset {low.offset}")
            acks.unsubscribe()

        client.delete_stream("orders-stream")
        print("done")


if __name__ == "__main__":
    main()
