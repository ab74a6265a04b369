"""ADR-31 on a real 3-node cluster: reads without a leader, and a responder that lags behind.

Kept to two tests: a cluster costs CPU on a shared machine.
"""

from __future__ import annotations

import os
import threading

import pytest

import jssync
from jssync.objectstore.objectstore import create_object_store, delete_object_store
from jssync.server import NatsCluster
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)


def _responders(cluster: NatsCluster, stream: str) -> dict[str, int]:
    """How many Direct Get responders (queue group ``_sys_``) each running node has for ``stream``."""
    out: dict[str, int] = {}
    subject = f"$JS.API.DIRECT.GET.{stream}"
    for srv in cluster.servers:
        if not srv.running:
            continue
        d = srv.varz(f"subsz?subs=1&test={subject.replace('$', '%24')}")
        out[srv.name] = sum(1 for x in d.get("subscriptions_list") or []  # type: ignore[union-attr]
                            if x.get("subject") == subject and x.get("qgroup") == "_sys_")
    return out


def _nodes(info) -> set[str]:
    c = info.cluster
    return {c.leader} | {r.name for r in (c.replicas or [])}


@pytest.mark.fault
def test_object_get_survives_a_responder_without_the_chunks(nats_cluster, unique):
    """A Direct Get responder that has an object's info but not (yet) its chunks.

    ADR-31 gives Direct Get no read-after-write coherence: a replica or mirror may answer
    from a store that is behind. Here a mirror that copies only the infos (``$O.b.M.>``)
    plays that responder: its replicas join the store's Direct Get queue group (on
    nats-server 2.15 an R1 mirror in a cluster did not, hence R2), and the server
    picks one member at random per request, so about every other chunk read lands on it.
    20 gets in a row: before the fix one of them fails with DigestMismatchError
    ("read 0 chunk(s) / 0 bytes, its info says 3 / 300000") with probability 1 - 2**-20.
    """
    bucket = f"lag{unique}"
    obj_stream = f"OBJ_{bucket}"
    mirror = f"MI{unique}"
    with jssync.connect(nats_cluster.url) as nc:
        js = nc.jetstream()
        store = create_object_store(js, bucket=bucket, storage="memory", replicas=1)
        try:
            m = js.create_stream(name=mirror, storage="memory", mirror_direct=True, num_replicas=2,
                                 mirror={"name": obj_stream, "filter_subject": f"$O.{bucket}.M.>"}, timeout=20)
            wait_for(lambda: sum(_responders(nats_cluster, obj_stream).values()) >= 2, 30 * FACTOR,
                     what="the mirror answering Direct Gets for the store")
            data = os.urandom(300_000)
            store.put("blob", data)  # 3 chunks
            wait_for(lambda: m.info().state.messages == 1, 10, what="the mirror has the info")
            # the lagging responder is in play: some chunk reads find nothing
            wait_for(lambda: list(js.direct_get_batch(obj_stream, f"$O.{bucket}.C.>", 10, timeout=2)) == [],
                     10, what="a chunk read answered by the mirror")
            for _ in range(20):
                assert store.get("blob").data == data
            for _ in range(5):
                out = _Sink()
                store.get("blob", writeinto=out)
                assert out.data == data
            # a new version: once its info is out, every get returns it whole
            data2 = os.urandom(200_000)
            store.put("blob", data2)
            wait_for(lambda: m.info().state.messages == 2, 10, what="the mirror has the new info")
            for _ in range(10):
                assert store.get("blob").data == data2
        finally:
            try:
                js.delete_stream(mirror)
            except jssync.StreamNotFoundError:
                pass
            delete_object_store(js, bucket)


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, b: bytes) -> int:
        self.data += b
        return len(b)


class _ApiSpy:
    """Records the JetStream API requests other than Direct Gets seen on one connection."""

    def __init__(self, nc) -> None:
        self.seen: list[str] = []
        self._lock = threading.Lock()
        self._sub = nc.subscribe("$JS.API.>", callback=self._on)
        nc.flush()

    def _on(self, msg) -> None:
        if not msg.subject.startswith("$JS.API.DIRECT.GET."):
            with self._lock:
                self.seen.append(msg.subject)

    def requests(self) -> list[str]:
        with self._lock:
            return list(self.seen)


@pytest.mark.slow
@pytest.mark.fault
def test_reads_without_a_handle_while_the_leader_and_the_upstream_are_down(unique):
    """ADR-31's reason to exist: the leader of an R3 stream and the only server of a mirrored
    stream are killed; a client that never made a stream handle still reads both at once,
    and sends no request but Direct Gets (no STREAM.INFO, which would need a leader)."""
    with NatsCluster(size=3, name=f"ds{unique[:4].lower()}") as cluster:
        with jssync.connect(cluster.url) as nc:
            js = nc.jetstream()
            up = js.create_stream(name="UP", subjects=["up.>"], allow_direct=True)  # R1
            host = up.info().cluster.leader
            r3 = js.create_stream(name="R3", subjects=["r3.>"], num_replicas=3, allow_direct=True)
            # make the node of UP the leader of R3 too, so one kill takes both down
            wait_for(lambda: _lead_on(js, r3, host), 30 * FACTOR, interval=0.5, what=f"R3's leader on {host}")
            for i in range(30):
                js.publish(f"r3.{i % 3}", str(i).encode())
            for i in range(10):
                js.publish(f"up.{i}", str(i).encode())
            m = js.create_stream(name="MIR", mirror={"name": "UP"}, mirror_direct=True, num_replicas=2)
            wait_for(lambda: m.info().state.messages == 10, 20, what="mirror caught up")
            wait_for(lambda: all(n >= 1 for name, n in _responders(cluster, "R3").items()), 20 * FACTOR,
                     what="a responder for R3 on every node")
            mirror_nodes = _nodes(m.info()) - {host}  # R2 on 3 nodes: at least one is not UP's
            assert mirror_nodes
            wait_for(lambda: any(_responders(cluster, "UP").get(n, 0) >= 1 for n in mirror_nodes), 20 * FACTOR,
                     what="a replica of the mirror answering for UP")
        victim = next(srv for srv in cluster.servers if srv.name == host)
        survivors = [srv.url for srv in cluster.servers if srv is not victim]
        with jssync.connect(survivors) as nc:
            js = nc.jetstream()
            spy = _ApiSpy(nc)
            victim.kill()
            # every read is served by a surviving replica or by the mirror; no leader is needed
            assert js.direct_get("R3", 30, timeout=2).data == b"29"
            assert js.direct_get("R3", last_by_subject="r3.0", timeout=2).seq == 28
            assert [x.seq for x in js.direct_get_batch("R3", "r3.>", 100, timeout=2)] == list(range(1, 31))
            assert [x.seq for x in js.direct_get_last_for("R3", ["r3.>"], timeout=2)] == [28, 29, 30]
            assert js.direct_get("UP", 1, timeout=2).data == b"0"
            assert js.direct_get("UP", last_by_subject="up.5", timeout=2).seq == 6
            assert [x.seq for x in js.direct_get_batch("UP", "up.>", 20, timeout=2)] == list(range(1, 11))
            assert [x.seq for x in js.direct_get_last_for("UP", ["up.>"], timeout=2)] == list(range(1, 11))
            nc.flush()
            assert spy.requests() == []
            # the leader-based API for UP has nobody to answer
            with pytest.raises(jssync.Error):
                js.stream("UP", timeout=1).get_msg(1, timeout=1)


def _lead_on(js, s, host: str) -> bool:
    """True once ``s``'s leader is ``host``; otherwise ask the leader to step down (one try)."""
    try:
        leader = s.info(timeout=2).cluster.leader
        if leader == host:
            return True
        js._api(f"STREAM.LEADER.STEPDOWN.{s.name}", {"placement": {"preferred": host}}, 2)
    except jssync.Error:
        pass
    return False
