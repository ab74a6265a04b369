"""Reliable sourcing (ADR-60) in a 3-node cluster: the sourcing consumer has the work queue's replicas.

An R3 work-queue stream sourced by an R3 stream, with the plain source config (the server
makes the durable ``JS_SRC_`` consumer) and through a pre-created ``flow_control`` consumer
made with default options. The consumer on the origin is R3 like its stream (its info lists
two replicas beside the leader); the node leading it is stopped in the middle of the moving and
started again: every message ends up in the sourcing stream once, in order, and the work
queue is emptied.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import jssync
from jssync.server import NatsCluster, NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FIRST, SECOND = 500, 500
TRANSIENT = (jssync.TimeoutError, jssync.ServiceUnavailableError, jssync.NoRespondersError, jssync.APIError)


@pytest.fixture(scope="module")
def cluster() -> Iterator[NatsCluster]:
    with NatsCluster(size=3) as cl:
        yield cl


def _node(cluster: NatsCluster, name: str | None) -> NatsServer:
    for s in cluster.servers:
        if s.name == name:
            return s
    raise AssertionError(f"no node named {name!r}")


def _count(js: jssync.JetStream, stream: str) -> int | None:
    try:
        return int(js.stream(stream).info(timeout=2).state.messages)
    except TRANSIENT:
        return None


def _publish(js: jssync.JetStream, subject: str, payloads: list[bytes]) -> None:
    for data in payloads:
        end = time.monotonic() + 30 * FACTOR
        while True:
            try:
                js.publish(subject, data, msg_id=data.decode(), timeout=2)
                break
            except TRANSIENT:
                assert time.monotonic() < end, "publish kept failing"
                time.sleep(0.1)  # poll: retry back-off, inside the deadline


@pytest.mark.parametrize("through", ["server-made consumer", "pre-created consumer"])
def test_sourcing_consumer_is_replicated_and_survives_losing_its_leader(cluster, through):
    tag = "S" if through == "server-made consumer" else "P"
    origin, agg = f"WQ{tag}", f"AGG{tag}"
    nc = jssync.connect(cluster.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream()
        js.create_stream(name=origin, subjects=[f"{origin}.>"], retention="workqueue", storage="file",
                         num_replicas=3)
        source = jssync.StreamSource(name=origin)
        if through == "pre-created consumer":
            c = js.create_consumer(origin, durable_name="TOAGG", ack_policy="flow_control",
                                   deliver_subject=f"deliver.{agg}")
            assert c.cached_info.config.num_replicas in (0, None, 3)  # 0: the stream's
            source = jssync.StreamSource(
                name=origin, consumer=jssync.StreamConsumerSource(name="TOAGG", deliver_subject=f"deliver.{agg}"))
        js.create_stream(name=agg, sources=[source], storage="file", num_replicas=3)
        expected = [b"%s-%d" % (tag.encode(), i) for i in range(FIRST + SECOND)]
        _publish(js, f"{origin}.a", expected[:FIRST])
        wait_for(lambda: _count(js, agg) == FIRST, timeout=30, what="the first half sourced")

        names = list(js.consumer_names(origin))
        assert len(names) == 1
        name = names[0]
        info = js.consumer(origin, name).info()
        assert str(getattr(info.config.ack_policy, "value", info.config.ack_policy)) == "flow_control"
        wait_for(lambda: len(js.consumer(origin, name).info().cluster.replicas or []) == 2, timeout=30,
                 what="the consumer's two replicas")
        leader = _node(cluster, js.consumer(origin, name).info().cluster.leader)

        _publish(js, f"{origin}.b", expected[FIRST:FIRST + SECOND // 2])
        leader.stop()  # in the middle: messages sourced, some waiting, the consumer's leader gone
        _publish(js, f"{origin}.b", expected[FIRST + SECOND // 2:])
        leader.start()
        total = len(expected)
        wait_for(lambda: _count(js, agg) == total and _count(js, origin) == 0, timeout=90, interval=0.2,
                 what="every message sourced and the work queue empty")
        got = [js.stream(agg).get_msg(seq).data for seq in range(1, total + 1)]
        assert got == expected
        assert js.stream(agg).info().state.last_seq == total  # nothing more, nothing twice
        assert list(js.consumer_names(origin)) == [name]
    finally:
        for stream in (agg, origin):
            try:
                js.delete_stream(stream)
            except (jssync.StreamNotFoundError, *TRANSIENT):
                pass
        nc.close()
