"""Partitioned consumer groups (orbit's pcgroups format) against a real nats-server."""

from __future__ import annotations

import collections
import threading
import time

import pytest
from nats.js import api

import jssync
from jssync import pcgroups as pcg
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 4


class Recorder:
    """What each member instance processed: (member, subject, data) in order, acked after recording."""

    def __init__(self, slow_every: int = 0) -> None:
        self.slow_every = slow_every  # every n-th message takes 5 ms (handovers meet a running handler)
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, bytes]] = []
        self.errors: list[BaseException] = []

    def handler(self, member: str):
        def on_msg(msg: jssync.Msg) -> None:
            if self.slow_every and int(msg.data) % self.slow_every == 0:
                time.sleep(0.005)  # behaviour: the handler is slow
            with self.lock:
                self.seen.append((member, msg.subject, msg.data))
            msg.ack()
        return on_msg

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def datas(self) -> list[bytes]:
        with self.lock:
            return [d for _, _, d in self.seen]

    def by_member(self) -> dict[str, list[tuple[str, bytes]]]:
        out: dict[str, list[tuple[str, bytes]]] = collections.defaultdict(list)
        with self.lock:
            for m, s, d in self.seen:
                out[m].append((s, d))
        return out


@pytest.fixture
def partitioned(js, unique):
    """A stream whose subjects get the partition number put first (what a static group needs)."""
    name = f"P{unique}"
    js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory",
                     subject_transform=api.SubjectTransform(
                         src=f"{name}.*", dest=f"{{{{Partition({PARTITIONS},1)}}}}.{name}.{{{{Wildcard(1)}}}}"))
    yield name
    for group in ("cg", "g2"):
        try:
            pcg.delete_static(js, name, group)
        except jssync.Error:
            pass
    js.delete_stream(name)


@pytest.fixture
def plain(js, unique):
    """A stream without partition numbers (what an elastic group needs); its groups removed after."""
    name = f"E{unique}"
    js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    yield name
    for group in ("cg", "g2"):
        try:
            pcg.delete_elastic(js, name, group)
        except jssync.Error:
            pass
    js.delete_stream(name)


def publish_keys(js, stream: str, n: int, keys: int = 20, start: int = 0) -> None:
    for i in range(start, start + n):
        js.publish_async(f"{stream}.k{i % keys}", b"%d" % i)
    js.publish_async_completed(timeout=30)


def stop_all(*ctxs: pcg.ConsumerGroupContext) -> None:
    for c in ctxs:
        c.stop()
    for c in ctxs:
        c.wait(30 * FACTOR)


def assert_each_key_stayed_with_one_member_in_order(rec: Recorder) -> None:
    owner: dict[str, str] = {}
    last: dict[str, int] = {}
    for member, subject, data in rec.seen:
        assert owner.setdefault(subject, member) == member, f"{subject} went to two members"
        assert int(data) > last.get(subject, -1), f"{subject} out of order"
        last[subject] = int(data)


# -- static ---------------------------------------------------------------------------------------


def test_static_group_with_default_options_gives_each_member_its_partitions_once(js, partitioned):
    cfg = pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1", "m2"])
    assert cfg.partition_filters("m1") == ["0.>", "1.>"] and cfg.partition_filters("m2") == ["2.>", "3.>"]
    rec = Recorder()
    m1 = pcg.static_consume(js, partitioned, "cg", "m1", rec.handler("m1"))
    m2 = pcg.static_consume(js, partitioned, "cg", "m2", rec.handler("m2"))
    try:
        publish_keys(js, partitioned, 400)
        wait_for(lambda: rec.count() >= 400, 30, what="400 messages processed")
        assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(400))
        per = rec.by_member()
        assert per["m1"] and per["m2"]
        assert all(s.startswith(f"{partitioned}.k") for s, _ in per["m1"] + per["m2"])  # partition token stripped
        assert_each_key_stayed_with_one_member_in_order(rec)
        assert sorted(pcg.static_active_members(js, partitioned, "cg")) == ["m1", "m2"]
        assert pcg.list_static(js, partitioned) == ["cg"]
    finally:
        stop_all(m1, m2)
    assert m1.error is None and m2.error is None
    assert sorted(js.consumer_names(partitioned)) == ["cg-m1", "cg-m2"]  # durable: kept after stop


def test_a_python_member_joins_a_static_group_orbit_created(js, partitioned):
    # the bucket and the value exactly as orbit.go's CreateStatic writes them
    try:
        kv = js.key_value("static-consumer-groups")
    except jssync.BucketNotFoundError:
        kv = js.create_key_value(bucket="static-consumer-groups", storage="file")
    kv.put(f"{partitioned}.cg",
           b'{"max_members":4,"member_mappings":[{"member":"go1","partitions":[0,1,3]},'
           b'{"member":"py1","partitions":[2]}]}')
    rec = Recorder()
    ctx = pcg.static_consume(js, partitioned, "cg", "py1", rec.handler("py1"), max_ack_pending=1)
    try:
        info = js.consumer(partitioned, "cg-py1").cached_info
        assert info.config.filter_subjects == ["2.>"]
        assert (info.config.priority_policy, info.config.priority_groups) == ("pinned_client", ["PCG"])
        assert info.config.priority_timeout == 5.0 and info.config.ack_wait == 5.0
        assert info.config.max_ack_pending == 1
        publish_keys(js, partitioned, 200)
        expected = {b"%d" % i for i in range(200)
                    if js.stream(partitioned).get_msg(i + 1).subject.startswith("2.")}
        wait_for(lambda: set(rec.datas()) == expected, 30, what="partition 2's messages")
        assert len(rec.datas()) == len(expected)
    finally:
        stop_all(ctx)


def test_static_config_python_writes_is_what_orbit_reads(js, partitioned):
    pcg.create_static(js, partitioned, "cg", 6, filters=[f"{partitioned}.>"], members=["b", "a"])
    raw = js.key_value("static-consumer-groups").get(f"{partitioned}.cg").value
    assert raw == b'{"max_members":6,"filters":["%s.>"],"members":["b","a"]}' % partitioned.encode()
    pcg.create_static(js, partitioned, "g2", 2, member_mappings={"x": [1], "y": [0]})
    raw = js.key_value("static-consumer-groups").get(f"{partitioned}.g2").value
    assert raw == (b'{"max_members":2,"member_mappings":[{"member":"x","partitions":[1]},'
                   b'{"member":"y","partitions":[0]}]}')
    # the same create again returns it; another config is refused
    assert pcg.create_static(js, partitioned, "g2", 2, member_mappings={"x": [1], "y": [0]}).max_members == 2
    with pytest.raises(jssync.ConsumerGroupConfigError, match="exists with another config"):
        pcg.create_static(js, partitioned, "g2", 3, members=["x"])


def test_static_standby_instance_takes_over_when_the_pinned_one_stops(nats_server, js, partitioned):
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    rec = Recorder()
    conns = [jssync.connect(nats_server.url) for _ in range(2)]
    try:
        a = pcg.static_consume(conns[0].jetstream(), partitioned, "cg", "m1", rec.handler("a"))
        b = pcg.static_consume(conns[1].jetstream(), partitioned, "cg", "m1", rec.handler("b"))
        publish_keys(js, partitioned, 300)
        wait_for(lambda: rec.count() >= 300, 30, what="first 300")
        first = {m for m, _, _ in rec.seen}
        assert len(first) == 1, "only the pinned instance gets messages"
        active, standby = (a, b) if first == {"a"} else (b, a)
        active.stop()
        active.wait(30 * FACTOR)
        publish_keys(js, partitioned, 300, start=300)
        wait_for(lambda: rec.count() >= 600, 30, what="the standby took over")
        assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(600))
        assert {m for m, _, _ in rec.seen[300:]} == ({"b"} if first == {"a"} else {"a"})
        stop_all(standby)
    finally:
        for c in conns:
            c.close()


def test_deleting_a_static_group_ends_members_and_a_change_ends_them_with_an_error(js, partitioned):
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    ctx = pcg.static_consume(js, partitioned, "cg", "m1", Recorder().handler("m1"))
    pcg.delete_static(js, partitioned, "cg")
    ctx.wait(30 * FACTOR)
    assert ctx.closed and ctx.error is None
    assert list(js.consumer_names(partitioned)) == []

    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    errors: list[BaseException] = []
    ctx = pcg.static_consume(js, partitioned, "cg", "m1", Recorder().handler("m1"), error_cb=errors.append)
    js.key_value("static-consumer-groups").put(f"{partitioned}.cg", b'{"max_members":4,"members":["m1","m2"]}')
    ctx.wait(30 * FACTOR)
    assert isinstance(ctx.error, jssync.ConsumerGroupChangedError)
    assert errors == [ctx.error]
    assert list(js.consumer_names(partitioned)) == []


def test_joining_errors(js, partitioned):
    with pytest.raises(jssync.ConsumerGroupNotFoundError):
        pcg.static_consume(js, partitioned, "nope", "m1", print)
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    with pytest.raises(jssync.NotAMemberError, match="'m9' is not a member"):
        pcg.static_consume(js, partitioned, "cg", "m9", print)
    assert list(js.consumer_names(partitioned)) == []


# -- bad input --------------------------------------------------------------------------------------


def test_bad_input_is_refused_before_anything_is_sent(js, partitioned, plain):
    bucket_rev = {}
    for b in ("static-consumer-groups", "elastic-consumer-groups"):
        try:
            bucket_rev[b] = js.key_value(b).status().values
        except jssync.BucketNotFoundError:
            bucket_rev[b] = None
    cases = [
        (lambda: pcg.create_static(js, partitioned, "c.g", 4, members=["a"]), "consumer group name"),
        (lambda: pcg.create_static(js, partitioned, "cg", 0, members=["a"]), "max_members"),
        (lambda: pcg.create_static(js, partitioned, "cg", 2, members=["a b"]), "member name"),
        (lambda: pcg.create_static(js, partitioned, "cg", 2, members=["a"], member_mappings={"a": [0, 1]}),
         "not both"),
        (lambda: pcg.create_static(js, partitioned, "cg", 2, member_mappings={"a": [0]}), "unassigned"),
        (lambda: pcg.create_static(js, "bad.stream", "cg", 2, members=["a"]), "stream name"),
        (lambda: pcg.create_elastic(js, plain, "cg", 2, partitioning_filters=[("x.*", [2])]), "out of range"),
        (lambda: pcg.create_elastic(js, plain, "cg", 2, partitioning_filters=["x.y"]), "wildcard"),
        (lambda: pcg.create_elastic(js, plain, "cg", 2, max_buffered_msgs=-1), "max_buffered"),
        (lambda: pcg.static_consume(js, partitioned, "cg", "m*", print), "member name"),
        (lambda: pcg.elastic_consume(js, plain, "cg", "m1", print, ack_policy="none"), "explicit"),
        (lambda: pcg.static_consume(js, partitioned, "cg", "m1", print, durable_name="x"), "durable_name"),
        (lambda: pcg.static_consume(js, partitioned, "cg", "m1", print, no_such_option=1), "no_such_option"),
        (lambda: pcg.add_members(js, plain, "cg", []), "at least one"),
    ]
    for call, words in cases:
        with pytest.raises(jssync.ValidationError, match=words):
            call()
    with pytest.raises(TypeError, match="callable"):
        pcg.static_consume(js, partitioned, "cg", "m1", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of member names"):
        pcg.add_members(js, plain, "cg", "m1")
    for b, before in bucket_rev.items():
        try:
            assert js.key_value(b).status().values == before
        except jssync.BucketNotFoundError:
            assert before is None
    assert list(js.consumer_names(partitioned)) == []
    assert f"{plain}-cg" not in list(js.stream_names())


# -- elastic --------------------------------------------------------------------------------------


def test_elastic_group_with_default_options(js, plain):
    cfg = pcg.create_elastic(js, plain, "cg", PARTITIONS)
    assert cfg.to_json() == b'{"max_members":4,"partitioning_filters":null}'
    info = js.stream(f"{plain}-cg").info()
    assert info.config.retention == api.RetentionPolicy.WORK_QUEUE
    assert info.config.sources[0].subject_transforms[0].dest == "{{Partition(4)}}.>"
    rec = Recorder()
    m1 = pcg.elastic_consume(js, plain, "cg", "m1", rec.handler("m1"))
    try:
        assert not m1.active  # not in the membership yet
        assert pcg.add_members(js, plain, "cg", ["m1"]) == ["m1"]
        assert (js.key_value("elastic-consumer-groups").get(f"{plain}.cg").value
                == b'{"max_members":4,"partitioning_filters":null,"members":["m1"]}')  # null stays null
        publish_keys(js, plain, 200)
        wait_for(lambda: rec.count() >= 200, 30, what="200 messages")
        assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(200))
        assert m1.partition_filters == ["0.>", "1.>", "2.>", "3.>"]
        assert all(s.startswith(f"{plain}.k") for _, s, _ in rec.seen)
        assert pcg.elastic_active_members(js, plain, "cg") == ["m1"]
        assert pcg.delete_members(js, plain, "cg", ["m1"]) == []
        wait_for(lambda: not m1.active, 30, what="m1 stops consuming once dropped")
        wait_for(lambda: list(js.consumer_names(f"{plain}-cg")) == [], 30, what="m1's consumer deleted")
    finally:
        stop_all(m1)
    assert m1.error is None


def test_a_python_member_joins_an_elastic_group_orbit_created(js, plain):
    # what orbit.go's CreateElastic + AddMembers leave behind: the config and the work-queue stream
    try:
        kv = js.key_value("elastic-consumer-groups")
    except jssync.BucketNotFoundError:
        kv = js.create_key_value(bucket="elastic-consumer-groups", storage="file")
    raw = (b'{"max_members":4,"partitioning_filters":[{"filter":"%s.*","partitioning_wildcards":[1]}],'
           b'"members":["gomember","py"]}' % plain.encode())
    kv.put(f"{plain}.cg", raw)
    js.create_stream(name=f"{plain}-cg", retention="workqueue", storage="memory", discard="new", allow_direct=True,
                     sources=[api.StreamSource(name=plain, subject_transforms=[api.SubjectTransform(
                         src=f"{plain}.*", dest=f"{{{{Partition(4,1)}}}}.{plain}.{{{{Wildcard(1)}}}}")])])
    rec = Recorder()
    ctx = pcg.elastic_consume(js, plain, "cg", "py", rec.handler("py"))
    try:
        # members sorted: gomember owns 0-1, py owns 2-3
        assert ctx.partition_filters == [f"2.{plain}.*", f"3.{plain}.*"]
        info = js.consumer(f"{plain}-cg", "py").cached_info
        assert info.config.inactive_threshold == 5.0 and info.config.priority_groups == ["PCG"]
        publish_keys(js, plain, 200)
        wq = js.stream(f"{plain}-cg")
        wait_for(lambda: wq.info().state.messages + rec.count() >= 200 and rec.count() > 0, 30,
                 what="sourced and consumed")
        # what is left in the work queue is exactly the other member's partitions
        wait_for(lambda: rec.count() + wq.info().state.messages == 200, 30, what="nothing lost")
        left = [m.subject for m in wq.direct_get_batch(">", 200)]
        assert all(s.split(".")[0] in ("0", "1") for s in left)
        # python's own update writes the config as orbit does
        pcg.add_members(js, plain, "cg", ["py2"])
        assert kv.get(f"{plain}.cg").value == (
            b'{"max_members":4,"partitioning_filters":[{"filter":"%s.*","partitioning_wildcards":[1]}],'
            b'"members":["gomember","py","py2"]}' % plain.encode())
    finally:
        stop_all(ctx)


def test_three_members_join_and_leave_while_10000_messages_flow(nats_server, js, plain):
    """Each message is processed exactly once although the membership changes six times."""
    total, keys = 10_000, 200
    pcg.create_elastic(js, plain, "cg", 6, partitioning_filters=[pcg.PartitioningFilter(f"{plain}.*", [1])])
    rec = Recorder(slow_every=10)
    conns: list[jssync.Connection] = []
    running: dict[str, pcg.ConsumerGroupContext] = {}

    def start(member: str) -> None:
        nc = jssync.connect(nats_server.url, name=member)
        conns.append(nc)
        running[member] = pcg.elastic_consume(nc.jetstream(), plain, "cg", member, rec.handler(member),
                                              error_cb=rec.errors.append)

    def leave(member: str) -> None:
        pcg.delete_members(js, plain, "cg", [member])
        ctx = running.pop(member)
        wait_for(lambda: not ctx.active, 30, what=f"{member} let go of its partitions")
        ctx.stop()
        ctx.wait(30 * FACTOR)

    def join(member: str) -> None:
        start(member)
        pcg.add_members(js, plain, "cg", [member])

    # membership steps, each after another 1/8 of the messages went out
    steps = [lambda: join("m1"), lambda: join("m2"), lambda: join("m3"), lambda: leave("m1"),
             lambda: join("m1"), lambda: leave("m2"), lambda: leave("m3")]
    chunk = total // 8
    try:
        for i, step in enumerate(steps):
            step()
            publish_keys(js, plain, chunk, keys=keys, start=i * chunk)
            # the next change comes while half a chunk is still to be processed
            wait_for(lambda i=i: rec.count() >= (i + 1) * chunk - chunk // 2, 60, interval=0.05,
                     what=f"step {i}: processing goes on")
        publish_keys(js, plain, total - len(steps) * chunk, keys=keys, start=len(steps) * chunk)
        wait_for(lambda: rec.count() >= total, 120, interval=0.1, what=f"{total} messages processed")
        wq = js.stream(f"{plain}-cg")
        wait_for(lambda: wq.info().state.messages == 0, 30, what="every message acked")
        datas = rec.datas()
        counts = collections.Counter(datas)
        assert [d for d, n in counts.items() if n > 1] == [], "processed twice"
        assert set(datas) == {b"%d" % i for i in range(total)}
        assert len(datas) == total
        assert rec.errors == []
        assert {m for m, _, _ in rec.seen} == {"m1", "m2", "m3"}
    finally:
        stop_all(*running.values())
        for nc in conns:
            nc.close()


def test_elastic_member_mappings_and_a_shape_change_ends_members(js, plain):
    pcg.create_elastic(js, plain, "cg", 3, partitioning_filters=[f"{plain}.*"])
    rec = Recorder()
    errors: list[BaseException] = []
    a = pcg.elastic_consume(js, plain, "cg", "a", rec.handler("a"), error_cb=errors.append)
    b = pcg.elastic_consume(js, plain, "cg", "b", rec.handler("b"), error_cb=errors.append)
    try:
        with pytest.raises(jssync.ConsumerGroupConfigError, match="unassigned"):
            pcg.set_member_mappings(js, plain, "cg", {"a": [0], "b": [1]})
        cfg = pcg.set_member_mappings(js, plain, "cg", [pcg.MemberMapping("a", [0, 2]), ("b", [1])])
        assert cfg.members is None and len(cfg.member_mappings or []) == 2
        wait_for(lambda: a.partition_filters == ["0.>", "2.>"] and b.partition_filters == ["1.>"], 30,
                 what="members follow the mappings")
        with pytest.raises(jssync.ConsumerGroupConfigError, match="member mappings"):
            pcg.add_members(js, plain, "cg", ["c"])
        publish_keys(js, plain, 100)
        wait_for(lambda: rec.count() >= 100, 30, what="100 messages")
        assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(100))
        assert_each_key_stayed_with_one_member_in_order(rec)
        # a change of the partitions (another max_members) cannot be followed: members end
        kv = js.key_value("elastic-consumer-groups")
        kv.put(f"{plain}.cg", b'{"max_members":5,"partitioning_filters":null}')
        a.wait(30 * FACTOR)
        b.wait(30 * FACTOR)
        assert isinstance(a.error, jssync.ConsumerGroupChangedError)
        assert isinstance(b.error, jssync.ConsumerGroupChangedError)
        assert len(errors) == 2
    finally:
        stop_all(a, b)


def test_closing_the_connection_ends_the_member_quietly(nats_server, js, partitioned):
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    nc = jssync.connect(nats_server.url)
    ctx = pcg.static_consume(nc.jetstream(), partitioned, "cg", "m1", Recorder().handler("m1"))
    nc.close()
    ctx.wait(30 * FACTOR)
    assert ctx.closed and ctx.error is None


def test_drain_hands_over_what_was_sent_and_wait_refuses_the_handler(js, partitioned):
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    rec = Recorder()
    problems: list[BaseException] = []
    holder: dict[str, pcg.ConsumerGroupContext] = {}

    def handler(msg):
        rec.handler("m1")(msg)
        try:
            holder["ctx"].wait(0)
        except RuntimeError as exc:
            problems.append(exc)

    holder["ctx"] = ctx = pcg.static_consume(js, partitioned, "cg", "m1", handler)
    publish_keys(js, partitioned, 50)  # after: the handler's first call finds the context
    wait_for(lambda: rec.count() >= 50, 30, what="50 messages")
    ctx.drain(timeout=30 * FACTOR)
    assert ctx.closed and ctx.error is None
    assert problems and "own handler" in str(problems[0])
    assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(50))


def test_two_instances_of_each_elastic_member_through_a_rebalance(nats_server, js, plain):
    """The standby instances follow the pinned ones through membership changes; nothing runs twice."""
    total = 3000
    pcg.create_elastic(js, plain, "cg", 4, partitioning_filters=[f"{plain}.*"])
    rec = Recorder(slow_every=10)
    conns = [jssync.connect(nats_server.url) for _ in range(4)]
    ctxs = [pcg.elastic_consume(nc.jetstream(), plain, "cg", member, rec.handler(member))
            for nc, member in zip(conns, ["a", "a", "b", "b"], strict=True)]
    try:
        pcg.add_members(js, plain, "cg", ["a"])
        publish_keys(js, plain, total // 3, keys=50)
        wait_for(lambda: rec.count() >= total // 6, 60, what="a consumes")
        pcg.add_members(js, plain, "cg", ["b"])
        publish_keys(js, plain, total // 3, keys=50, start=total // 3)
        wait_for(lambda: rec.count() >= total // 2, 60, what="a and b consume")
        pcg.delete_members(js, plain, "cg", ["a"])
        publish_keys(js, plain, total - 2 * (total // 3), keys=50, start=2 * (total // 3))
        wait_for(lambda: rec.count() >= total, 60, interval=0.05, what="every message")
        wait_for(lambda: js.stream(f"{plain}-cg").info().state.messages == 0, 30, what="every message acked")
        datas = rec.datas()
        assert len(datas) == total and set(datas) == {b"%d" % i for i in range(total)}
        assert {m for m, _, _ in rec.seen} == {"a", "b"}
    finally:
        stop_all(*ctxs)
        for nc in conns:
            nc.close()


def test_step_down_moves_the_pin_to_the_standby_and_listings(nats_server, js, partitioned, plain):
    pcg.create_static(js, partitioned, "cg", PARTITIONS, members=["m1"])
    rec = Recorder()
    conns = [jssync.connect(nats_server.url) for _ in range(2)]
    ctxs = [pcg.static_consume(nc.jetstream(), partitioned, "cg", "m1", rec.handler(f"i{n}"))
            for n, nc in enumerate(conns)]
    try:
        publish_keys(js, partitioned, 100)
        wait_for(lambda: rec.count() >= 100, 30, what="first 100")
        first = {m for m, _, _ in rec.seen}
        assert len(first) == 1
        pcg.static_step_down(js, partitioned, "cg", "m1")
        # the server pins whichever pull comes first: step down until the other instance has it
        sent = [100]

        def moved() -> bool:
            publish_keys(js, partitioned, 10, start=sent[0])
            sent[0] += 10
            if {m for m, _, _ in rec.seen[100:]} - first:
                return True
            pcg.static_step_down(js, partitioned, "cg", "m1")
            return False
        wait_for(moved, 30, interval=0.2, what="the standby got the pin")
        wait_for(lambda: rec.count() >= sent[0], 30, what="all processed")
        assert sorted(rec.datas()) == sorted(b"%d" % i for i in range(sent[0]))
    finally:
        stop_all(*ctxs)
        for nc in conns:
            nc.close()
    pcg.create_elastic(js, plain, "cg", 2)
    pcg.create_elastic(js, plain, "g2", 2)
    assert sorted(pcg.list_elastic(js, plain)) == ["cg", "g2"]
    pcg.add_members(js, plain, "cg", ["x", "y"])
    assert pcg.elastic_config(js, plain, "cg").members == ["x", "y"]
    assert pcg.elastic_active_members(js, plain, "cg") == []
    ctx = pcg.elastic_consume(js, plain, "cg", "x", Recorder().handler("x"))
    try:
        assert pcg.elastic_active_members(js, plain, "cg") == ["x"]
        pcg.elastic_step_down(js, plain, "cg", "x")
    finally:
        stop_all(ctx)
