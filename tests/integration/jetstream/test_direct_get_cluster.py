"""Direct Get on a real 3-node JetStream cluster: R3 replicas, mirrors, and a killed leader."""

from __future__ import annotations

import time

import pytest

import jssync
from jssync.server import NatsCluster
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)


def _direct_ok(s, seq: int) -> bool:
    try:
        return s.direct_get(seq, timeout=1).seq == seq
    except (jssync.MessageNotFoundError, jssync.NoRespondersError, jssync.TimeoutError):
        return False


def _mirror_serves(up) -> bool:
    """One round of the reads the mirror test checks, False on a miss (a lagging replica)."""
    try:
        return (up.direct_get(1, timeout=1).data == b"0"
                and up.direct_get(last_by_subject="up.5", timeout=1).seq == 6
                and [m.seq for m in up.direct_get_batch("up.>", 20, timeout=1)] == list(range(1, 11)))
    except (jssync.MessageNotFoundError, jssync.NoRespondersError, jssync.TimeoutError):
        return False


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


def _all_respond(cluster: NatsCluster, stream: str, per_node: int = 1) -> bool:
    r = _responders(cluster, stream)
    return bool(r) and all(n >= per_node for n in r.values())


def test_r3_stream_direct_gets_from_every_node(nats_cluster, unique):
    name = f"R{unique}"
    with jssync.connect(nats_cluster.url) as nc:
        js = nc.jetstream()
        s = js.create_stream(name=name, subjects=[f"r{unique}.>"], num_replicas=3, allow_direct=True)
        try:
            assert s.cached_info.config.allow_direct
            # every replica, not only the leader, becomes a responder once it is current
            wait_for(lambda: _all_respond(nats_cluster, name), 10 * FACTOR, what="a responder on every replica")
            for i in range(20):
                js.publish(f"r{unique}.{i % 4}", str(i).encode())
            for url in nats_cluster.urls:  # a client on each node
                with jssync.connect(url) as nc1:
                    s1 = nc1.jetstream().stream(name)
                    wait_for(lambda s1=s1: _direct_ok(s1, 20), 10, what=f"direct get on {url}")
                    assert s1.direct_get(1).data == b"0"
                    assert s1.direct_get(last_by_subject=f"r{unique}.3").seq == 20
                    assert [m.seq for m in s1.direct_get_batch(f"r{unique}.>", 100)] == list(range(1, 21))
                    assert [m.seq for m in s1.direct_get_last_for([f"r{unique}.>"])] == [17, 18, 19, 20]
        finally:
            js.delete_stream(name)


def test_mirror_direct_serves_the_upstream(nats_cluster, unique):
    up_name, m_name = f"U{unique}", f"M{unique}"
    with jssync.connect(nats_cluster.url) as nc:
        js = nc.jetstream()
        up = js.create_stream(name=up_name, subjects=[f"u{unique}.>"], allow_direct=True)
        mirror_made = False
        try:
            for i in range(10):
                js.publish(f"u{unique}.{i % 2}", str(i).encode())
            m = js.create_stream(name=m_name, mirror={"name": up_name}, mirror_direct=True, num_replicas=3)
            mirror_made = True
            assert m.cached_info.config.mirror_direct
            wait_for(lambda: m.info().state.messages == 10, 10, what="mirror caught up")
            # each of the mirror's replicas answers direct gets addressed to the upstream
            wait_for(lambda: sum(_responders(nats_cluster, up_name).values()) >= 4, 10 * FACTOR,
                     what="mirror replicas answering for the upstream")
            # with the upstream gone, only the mirror can answer direct gets addressed to it
            js.delete_stream(up_name)
            wait_for(lambda: _direct_ok(up, 10), 10, what="direct get served by the mirror")
            assert up.direct_get(3).data == b"2"
            assert up.direct_get(last_by_subject=f"u{unique}.0").seq == 9
            assert [m.seq for m in up.direct_get_batch(f"u{unique}.1", 10)] == [2, 4, 6, 8, 10]
            assert [m.seq for m in up.direct_get_last_for([f"u{unique}.>"])] == [9, 10]
            with pytest.raises(jssync.MessageNotFoundError):
                up.direct_get(11, timeout=2)
        finally:
            if mirror_made:
                js.delete_stream(m_name)
            try:
                js.delete_stream(up_name)
            except jssync.StreamNotFoundError:
                pass


def _leader_index(cluster: NatsCluster, s) -> int:
    leader = s.info().cluster.leader
    names = [srv.name for srv in cluster.servers]
    assert leader in names, (leader, names)
    return names.index(leader)


@pytest.mark.slow
@pytest.mark.fault
def test_direct_gets_keep_working_when_the_leader_is_killed(unique):
    with NatsCluster(size=3, name=f"dg{unique[:4].lower()}") as cluster:
        with jssync.connect(cluster.url) as nc:
            js = nc.jetstream()
            s = js.create_stream(name="R3", subjects=["r3.>"], num_replicas=3, allow_direct=True)
            for i in range(30):
                js.publish(f"r3.{i % 3}", str(i).encode())
            kv = js.create_key_value(bucket="cfg", replicas=3)
            kv.put("color", b"blue")
            wait_for(lambda: _all_respond(cluster, "R3") and _all_respond(cluster, "KV_cfg"), 10 * FACTOR,
                     what="responders on every replica")
            li = _leader_index(cluster, s)
        survivors = [srv.url for i, srv in enumerate(cluster.servers) if i != li]
        with jssync.connect(survivors) as nc:
            js = nc.jetstream()
            s = js.stream("R3")
            kv = js.key_value("cfg")
            cluster.servers[li].kill()
            t0 = time.monotonic()
            # no new leader is needed: the surviving replicas answer. The first request may still
            # be routed to the killed node's responder before its routes are seen closed (seen
            # about once in ten runs, more under load): it is asked again within the bound below.
            wait_for(lambda: _direct_ok(s, 30), 4 * FACTOR, interval=0.05, what="a survivor to answer")
            assert s.direct_get(30, timeout=2).data == b"29"
            assert s.direct_get(last_by_subject="r3.0", timeout=2).seq == 28
            assert [m.seq for m in s.direct_get_batch("r3.>", 100, timeout=2)] == list(range(1, 31))
            assert [m.seq for m in s.direct_get_last_for(["r3.>"], timeout=2)] == [28, 29, 30]
            assert kv.get("color", timeout=2).value == b"blue"
            assert time.monotonic() - t0 < 5 * FACTOR
            # many reads in a row all succeed
            for i in range(1, 31):
                assert s.direct_get(i, timeout=2).seq == i


@pytest.mark.slow
@pytest.mark.fault
def test_mirror_answers_while_the_upstream_node_is_down(unique):
    with NatsCluster(size=3, name=f"dm{unique[:4].lower()}") as cluster:
        with jssync.connect(cluster.url) as nc:
            js = nc.jetstream()
            up = js.create_stream(name="UP", subjects=["up.>"], allow_direct=True)
            for i in range(10):
                js.publish(f"up.{i}", str(i).encode())
            m = js.create_stream(name="MIR", mirror={"name": "UP"}, mirror_direct=True, num_replicas=3)
            wait_for(lambda: m.info().state.messages == 10, 20, what="mirror caught up")
            ui = _leader_index(cluster, up)
            wait_for(lambda: sum(_responders(cluster, "UP").values()) >= 4, 20 * FACTOR,
                     what="mirror replicas answering for the upstream")
        survivors = [srv.url for i, srv in enumerate(cluster.servers) if i != ui]
        with jssync.connect(survivors) as nc:
            js = nc.jetstream()
            cluster.servers[ui].kill()
            # the handle was made before; its info says allow_direct, so no info request is needed
            up = jssync.Stream(js, up.cached_info)
            # Direct Gets are spread over the mirror's replicas (a queue group): wait until
            # every read is served completely several times in a row, so a replica still
            # catching up right after the kill cannot fail a single read below
            wait_for(lambda: all(_mirror_serves(up) for _ in range(6)), 20 * FACTOR,
                     what="the mirror answering every read for the upstream")
            assert up.direct_get(1).data == b"0"
            assert up.direct_get(last_by_subject="up.5").seq == 6
            assert [m.seq for m in up.direct_get_batch("up.>", 20)] == list(range(1, 11))
            # the upstream itself is unreachable through the leader-based API
            with pytest.raises(jssync.Error):
                up.get_msg(1, timeout=1)
