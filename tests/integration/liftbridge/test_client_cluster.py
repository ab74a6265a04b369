"""Partitioned streams (the Liftbridge client interface) on a real 3-node JetStream cluster."""

from __future__ import annotations

import threading

import pytest

import jssync
from jssync.liftbridge import AckPolicy, Client, Message, StartPosition
from jssync.server import NatsCluster
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)


def test_partition_leaders_spread_and_metadata(nats_cluster, unique):
    subject, name = f"sp{unique}", f"SP{unique}"
    with Client(nats_cluster.url, timeout=10 * FACTOR) as c:
        info = c.create_stream(subject, name, partitions=3, replication_factor=3, storage="memory")
        try:
            names = sorted(s.name for s in nats_cluster.servers)
            leaders = [info.partitions[p].leader for p in range(3)]
            assert sorted(leaders) == names  # one partition led by each server
            for p in range(3):
                part = info.partitions[p]
                assert part.replication_factor == 3 and sorted(part.replicas) == names
                assert part.replicas[0] == part.leader
            meta = c.fetch_metadata()
            assert sorted(b.id for b in meta.brokers()) == names
            by_name = {b.name: b for b in meta.brokers()}
            for srv in nats_cluster.servers:
                assert by_name[srv.name].addr() == f"127.0.0.1:{srv.port}"
            assert sorted(meta.addrs()) == sorted(f"127.0.0.1:{s.port}" for s in nats_cluster.servers)
            wait_for(lambda: all(len(p.isr) == 3 for p in c.fetch_metadata().get_stream(name).partitions.values()),
                     10, what="every replica in sync")
            # every partition works, each through its own leader
            for p in range(3):
                assert c.publish(subject, b"x", to_partition=p, ack_policy=AckPolicy.ALL).offset == 0
        finally:
            c.delete_stream(name)


def test_max_replication_uses_the_cluster_size(nats_cluster, unique):
    with Client(nats_cluster.url, timeout=10 * FACTOR) as c:
        info = c.create_stream(f"mx{unique}", f"MX{unique}", max_replication=True, storage="memory")
        try:
            assert info.replication_factor == 3
        finally:
            c.delete_stream(f"MX{unique}")
        info = c.create_stream(f"mx{unique}", f"MX{unique}", replication_factor=-1, storage="memory")
        try:
            assert info.replication_factor == 3
        finally:
            c.delete_stream(f"MX{unique}")


def test_ack_all_means_every_replica_has_it(nats_cluster, unique):
    subject, name = f"aa{unique}", f"AA{unique}"
    with Client(nats_cluster.url, timeout=10 * FACTOR) as c:
        c.create_stream(subject, name, replication_factor=3, storage="memory")
        try:
            acks = [c.publish(subject, b"%d" % i, ack_policy=AckPolicy.ALL) for i in range(30)]
            assert [a.offset for a in acks] == list(range(30))
            info = c.jetstream._api(f"STREAM.INFO.{name}-0")
            assert info["state"]["last_seq"] == 30
            assert len(info["cluster"]["replicas"]) == 2
            with c.subscribe(name, start_at=StartPosition.EARLIEST) as sub:
                assert [sub.next(5 * FACTOR).value for _ in range(30)] == [b"%d" % i for i in range(30)]
        finally:
            c.delete_stream(name)


@pytest.mark.slow
def test_killing_a_partition_leader_loses_no_acknowledged_message(unique):
    with NatsCluster(3) as cluster:
        with Client(cluster.url, timeout=10 * FACTOR, reconnect_time_wait=0.1, replica_max_lag_time=2.0) as c:
            c.create_stream("kl", "KL", partitions=3, replication_factor=3)

            received: list[Message] = []
            errors: list[BaseException] = []
            lock = threading.Lock()

            def handler(msg, err):
                with lock:
                    if err is not None:
                        errors.append(err)
                    else:
                        received.append(msg)

            sub = c.subscribe("KL", handler, partition=0, start_at=StartPosition.EARLIEST, idle_heartbeat=0.5)
            # the victim is the partition leader and also hosts the subscription's (R1) consumer,
            # so both the publisher and the subscriber lose their server
            host = c.jetstream.consumer("KL-0", sub._consumer).cached_info.cluster.leader

            def leader():
                try:  # no answer while the stream has no leader
                    return c.jetstream._api("STREAM.INFO.KL-0", None, 0.5)["cluster"].get("leader")
                except jssync.Error:
                    return None

            if leader() != host:
                c.jetstream._api("STREAM.LEADER.STEPDOWN.KL-0", {"placement": {"preferred": host}})
                wait_for(lambda: leader() == host, 15, what="the partition leader to move to the consumer's server")
            victim = next(s for s in cluster.servers if s.name == host)
            acked: dict[int, bytes] = {}
            failed: list[bytes] = []
            killed = threading.Event()

            def publisher():
                for i in range(150):
                    value = b"m%d" % i
                    try:
                        ack = c.publish("kl", value, to_partition=0, ack_policy=AckPolicy.ALL,
                                        timeout=15 * FACTOR)
                    except jssync.Error:
                        failed.append(value)
                        continue
                    assert ack.partition == 0
                    acked[ack.offset] = value
                    if i == 40:
                        victim.kill()
                        killed.set()

            t = threading.Thread(target=publisher)
            t.start()
            t.join(90 * FACTOR)
            assert not t.is_alive() and killed.is_set()
            assert len(acked) >= 100, f"only {len(acked)} acknowledged, {len(failed)} failed"
            # the subscription resumed and saw every acknowledged message, in order, once
            top = max(acked)
            wait_for(lambda: bool(received) and received[-1].offset >= top, 30, what="the subscriber to catch up")
            with lock:
                got = list(received)
            assert not errors and not sub.closed
            assert sub.resubscribes >= 1  # its consumer died with the server: it resubscribed
            assert [m.offset for m in got] == list(range(len(got)))  # dense, in order, no duplicates
            by_offset = {m.offset: m.value for m in got}
            for offset, value in acked.items():
                assert by_offset[offset] == value
            values = [m.value for m in got]
            assert len(values) == len(set(values))  # retried publishes were de-duplicated
            # a new subscriber (on the new leader) reads the same partition
            meta = c.fetch_metadata()
            assert meta.get_stream("KL").partitions[0].leader not in (None, host)
            with c.subscribe("KL", partition=0, start_at=StartPosition.EARLIEST) as again:
                reread = [again.next(10 * FACTOR) for _ in range(len(got))]
            assert [(m.offset, m.value) for m in reread] == [(m.offset, m.value) for m in got]
            sub.close()


@pytest.mark.slow
def test_subscription_moves_with_the_leader_of_a_replicated_partition(unique):
    """Stepping the leader down (a planned move) is survived without loss or duplicates."""
    with NatsCluster(3) as cluster:
        with Client(cluster.url, timeout=10 * FACTOR) as c:
            c.create_stream("mv", "MV", replication_factor=3, storage="memory")
            sub = c.subscribe("MV", start_at=StartPosition.EARLIEST, idle_heartbeat=0.3)
            try:
                for i in range(20):
                    c.publish("mv", b"%d" % i)
                first = [sub.next(5 * FACTOR).offset for _ in range(10)]
                old = c.fetch_metadata().get_stream("MV").partitions[0].leader
                c.jetstream._api("STREAM.LEADER.STEPDOWN.MV-0", None)
                wait_for(lambda: c.fetch_metadata().get_stream("MV").partitions[0].leader not in (None, old), 15,
                         what="a new leader")
                for i in range(20, 40):
                    c.publish("mv", b"%d" % i)
                rest = [sub.next(15 * FACTOR).offset for _ in range(30)]
                assert first + rest == list(range(40))
            finally:
                sub.close()
