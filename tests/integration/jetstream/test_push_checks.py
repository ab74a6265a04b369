"""Push subscribe (ADR-15): stream and consumer lookups, and every check, against a real server."""

from __future__ import annotations

import threading

import pytest

import jssync
from jssync.jetstream.push import (
    ConsumerConfigMismatchError,
    ConsumerIsPullBasedError,
    DeliverGroupError,
    DuplicateSubscriptionError,
    JetStreamSubscription,
    MultipleStreamsMatchError,
    QueueGroupOptionError,
    SubjectMismatchError,
    check_consumer,
)
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def stream(js, unique):
    """A memory stream ``P<unique>`` on ``p<unique>.*``; yields (name, subject prefix)."""
    name = f"P{unique}"
    js.create_stream(name=name, subjects=[f"p{unique}.*"], storage="memory")
    try:
        yield name, f"p{unique}"
    finally:
        js.delete_stream(name)


def names(js, stream_name):
    return sorted(js.consumer_names(stream_name))


# -- stream lookup ---------------------------------------------------------------------------


def test_stream_found_by_subject(js, stream):
    name, p = stream
    js.publish(f"{p}.a", b"1")
    sub = js.subscribe(f"{p}.a")
    try:
        assert sub.stream_name == name
        assert sub.next_msg(2).data == b"1"
    finally:
        sub.unsubscribe()


def test_no_stream_matches_subject(js, unique):
    with pytest.raises(jssync.StreamNotFoundError, match=f"nomatch{unique}"):
        js.subscribe(f"nomatch{unique}.x")


def test_several_streams_match_subject(js, unique):
    js.create_stream(name=f"A{unique}", subjects=[f"m{unique}.a"], storage="memory")
    js.create_stream(name=f"B{unique}", subjects=[f"m{unique}.b"], storage="memory")
    try:
        with pytest.raises(MultipleStreamsMatchError, match="more than one stream") as ei:
            js.subscribe(f"m{unique}.*")
        assert ei.value.subject == f"m{unique}.*"
        # naming the stream resolves it
        sub = js.subscribe(f"m{unique}.*", stream=f"A{unique}")
        sub.unsubscribe()
    finally:
        js.delete_stream(f"A{unique}")
        js.delete_stream(f"B{unique}")


def test_subject_required_without_stream(js, stream):
    name, p = stream
    with pytest.raises(jssync.BadSubjectError, match="subject is required"):
        js.subscribe("")
    # with the stream named, no subject means every subject of the stream
    js.publish(f"{p}.a", b"a")
    js.publish(f"{p}.b", b"b")
    sub = js.subscribe("", stream=name)
    try:
        assert [sub.next_msg(2).data for _ in range(2)] == [b"a", b"b"]
        assert not sub.consumer_info().config.filter_subject
    finally:
        sub.unsubscribe()


# -- consumer lookup -----------------------------------------------------------------------


def test_bind_to_missing_consumer_is_an_error(js, stream):
    name, p = stream
    with pytest.raises(jssync.ConsumerNotFoundError, match="NOPE"):
        js.subscribe(f"{p}.a", stream=name, consumer="NOPE")


def test_bind_to_existing_consumer(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="BOUND", deliver_subject=f"dlv.{name}", filter_subject=f"{p}.a")
    js.publish(f"{p}.a", b"x")
    sub = js.subscribe(f"{p}.a", stream=name, consumer="BOUND")
    try:
        assert sub.deliver_subject == f"dlv.{name}"
        assert sub.consumer_name == "BOUND" and not sub.created_consumer
        assert sub.next_msg(2).data == b"x"
    finally:
        sub.unsubscribe()
    assert names(js, name) == ["BOUND"]  # not created here: not deleted


def test_durable_created_when_missing_and_deleted_on_unsubscribe(js, stream):
    name, p = stream
    sub = js.subscribe(f"{p}.a", durable="MINE")
    assert sub.created_consumer and sub.consumer_name == "MINE"
    info = sub.consumer_info()
    assert info.config.filter_subject == f"{p}.a"
    assert info.config.ack_policy == jssync.AckPolicy.EXPLICIT
    assert names(js, name) == ["MINE"]
    sub.unsubscribe()
    assert names(js, name) == []


def test_durable_reused_when_present_and_kept_on_unsubscribe(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="THEIRS", deliver_subject=f"dlv.t.{name}", filter_subject=f"{p}.a")
    sub = js.subscribe(f"{p}.a", durable="THEIRS")
    assert not sub.created_consumer and sub.deliver_subject == f"dlv.t.{name}"
    sub.unsubscribe()
    assert names(js, name) == ["THEIRS"]


def test_ephemeral_name_saved_from_reply_and_deleted(js, stream):
    name, p = stream
    sub = js.subscribe(f"{p}.a")
    assert sub.created_consumer
    assert names(js, name) == [sub.consumer_name]
    assert sub.consumer_info().name == sub.consumer_name
    sub.unsubscribe()
    assert names(js, name) == []


# -- PushBound / DeliverGroup checks -------------------------------------------------------------


def test_duplicate_subscription(js, stream):
    name, p = stream
    first = js.subscribe(f"{p}.a", durable="DUP")
    try:
        with pytest.raises(DuplicateSubscriptionError, match="duplicate subscription"):
            js.subscribe(f"{p}.a", durable="DUP")
    finally:
        first.unsubscribe()


def test_non_queue_subscription_for_queue_consumer(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="G", deliver_subject=f"dlv.g.{name}", deliver_group="grp")
    with pytest.raises(DeliverGroupError, match="non queue subscription") as ei:
        js.subscribe(f"{p}.a", durable="G")
    assert ei.value.deliver_group == "grp" and ei.value.queue is None


def test_queue_subscription_for_other_group(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="G2", deliver_subject=f"dlv.g2.{name}", deliver_group="grp")
    with pytest.raises(DeliverGroupError, match="created for queue group 'grp'") as ei:
        js.subscribe(f"{p}.a", durable="G2", queue="other")
    assert (ei.value.queue, ei.value.deliver_group) == ("other", "grp")


def test_queue_subscription_for_consumer_without_group(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="NG", deliver_subject=f"dlv.ng.{name}")
    with pytest.raises(DeliverGroupError, match="without a deliver group"):
        js.subscribe(f"{p}.a", durable="NG", queue="grp")


def test_filter_subject_mismatch(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="F", deliver_subject=f"dlv.f.{name}", filter_subject=f"{p}.a")
    with pytest.raises(SubjectMismatchError, match="does not match the filter subject") as ei:
        js.subscribe(f"{p}.b", durable="F")
    assert ei.value.filter_subject == f"{p}.a"


def test_push_subscription_for_pull_consumer(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="PULL", ack_policy="explicit")
    with pytest.raises(ConsumerIsPullBasedError, match="pull subscription is required"):
        js.subscribe(f"{p}.a", durable="PULL")


def test_pull_check_for_push_consumer(js, stream):
    # the other direction of the ADR-15 check, on real consumer infos
    name, p = stream
    js.create_consumer(name, durable_name="PUSH", deliver_subject=f"dlv.p.{name}")
    js.create_consumer(name, durable_name="PULL", ack_policy="explicit")
    push_info = js._api(f"CONSUMER.INFO.{name}.PUSH")
    with pytest.raises(jssync.ConsumerIsPushBasedError, match="cannot make a pull subscription"):
        check_consumer(push_info, subject=None, pull=True)
    with pytest.raises(jssync.ConsumerIsPushBasedError):
        check_consumer(js.consumer(name, "PUSH").cached_info, subject=None, pull=True)
    check_consumer(js.consumer(name, "PULL").cached_info, subject=None, pull=True)
    with pytest.raises(ConsumerIsPullBasedError):
        check_consumer(js.consumer(name, "PULL").cached_info, subject=None, pull=False)


@pytest.mark.parametrize(
    ("option", "field"),
    [({"max_ack_pending": 7}, "max_ack_pending"), ({"ack_wait": 11.0}, "ack_wait"),
     ({"idle_heartbeat": 2.0}, "idle_heartbeat"), ({"deliver_policy": "new"}, "deliver_policy"),
     ({"ack_policy": "all"}, "ack_policy"), ({"headers_only": True}, "headers_only")],
)
def test_config_differs_from_existing_consumer(js, stream, option, field):
    name, p = stream
    js.create_consumer(name, durable_name="C", deliver_subject=f"dlv.c.{name}", ack_policy="explicit",
                       ack_wait=30.0, max_ack_pending=5)
    with pytest.raises(ConsumerConfigMismatchError, match=field) as ei:
        js.subscribe(f"{p}.a", durable="C", **option)
    assert ei.value.field == field
    assert js.consumer(name, "C").cached_info.config.max_ack_pending == 5  # unchanged


def test_config_equal_to_existing_consumer_is_fine(js, stream):
    name, p = stream
    cfg = jssync.ConsumerConfig(durable_name="C", deliver_subject=f"dlv.c.{name}", ack_policy="explicit",
                                ack_wait=30.0, max_ack_pending=5, idle_heartbeat=1.0,
                                metadata={"team": "a"})
    js.create_consumer(name, cfg)
    sub = js.subscribe(f"{p}.a", durable="C", ack_wait=30.0, max_ack_pending=5, idle_heartbeat=1.0,
                       ack_policy=jssync.AckPolicy.EXPLICIT, deliver_policy="all", metadata={"team": "a"})
    try:
        assert sub.idle_heartbeat == 1.0 and sub.heartbeat_alarm == 3.0
    finally:
        sub.unsubscribe()


# -- queue groups --------------------------------------------------------------------------


@pytest.mark.parametrize("option", [{"flow_control": True, "idle_heartbeat": 1.0}, {"idle_heartbeat": 1.0}])
def test_queue_refuses_flow_control_and_heartbeats(js, unique, option):
    # raised before anything is sent: the stream does not even exist
    with pytest.raises(QueueGroupOptionError, match="not supported with a queue group"):
        js.subscribe(f"q{unique}.a", stream=f"NOPE{unique}", queue="workers", **option)


def test_queue_refused_for_consumer_with_heartbeats(js, stream):
    name, p = stream
    js.create_consumer(name, durable_name="HB", deliver_subject=f"dlv.hb.{name}", deliver_group="HB",
                       idle_heartbeat=1.0)
    with pytest.raises(QueueGroupOptionError, match="idle heartbeats"):
        js.subscribe(f"{p}.a", queue="HB")


def test_flow_control_needs_heartbeat(js, unique):
    with pytest.raises(ValueError, match="flow_control needs idle_heartbeat"):
        js.subscribe(f"q{unique}.a", stream=f"NOPE{unique}", flow_control=True)


def test_queue_name_used_as_durable(js, stream):
    name, p = stream
    sub = js.subscribe(f"{p}.a", queue="workers")
    try:
        assert sub.consumer_name == "workers" and sub.created_consumer
        info = sub.consumer_info()
        assert info.config.durable_name == "workers" and info.config.deliver_group == "workers"
    finally:
        sub.unsubscribe()


def test_queue_group_members_share_one_durable(js, nc, stream):
    name, p = stream
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    lock = threading.Lock()

    def member(key):
        def cb(msg):
            with lock:
                got[key].append(msg.data)
        return cb

    a = js.subscribe(f"{p}.a", queue="workers", callback=member("a"))
    b = js.subscribe(f"{p}.a", queue="workers", callback=member("b"))
    try:
        assert a.created_consumer and not b.created_consumer
        assert a.deliver_subject == b.deliver_subject
        assert names(js, name) == ["workers"]
        for i in range(40):
            js.publish_async(f"{p}.a", b"%d" % i)
        js.publish_async_completed(5)
        wait_for(lambda: len(got["a"]) + len(got["b"]) >= 40, 5, what="40 messages")
        assert sorted(got["a"] + got["b"]) == sorted(b"%d" % i for i in range(40))  # each once
        assert got["a"] and got["b"]
        wait_for(lambda: a.consumer_info().num_ack_pending == 0, 5, what="auto acks")
    finally:
        b.unsubscribe()
        assert names(js, name) == ["workers"]  # b did not create it
        a.unsubscribe()
    assert names(js, name) == []


# -- order of operations, and the "already exists" race ------------------------------------------


def test_nats_subscription_made_before_consumer(js, stream, monkeypatch):
    name, p = stream
    replies = []
    real_api = js._api

    def spy(suffix, payload=None, timeout=None):
        resp = real_api(suffix, payload, timeout)
        if suffix.startswith("CONSUMER.CREATE"):
            replies.append(resp)
        return resp

    monkeypatch.setattr(js, "_api", spy)
    sub = js.subscribe(f"{p}.a", durable="ORDERED")
    sub.unsubscribe()
    # the server already had interest on the deliver subject when it created the consumer
    assert len(replies) == 1 and replies[0]["push_bound"] is True


def _race(js, nc_other, name, p, durable, group):
    """Make ``js._api`` create the durable from another connection right after our lookup."""
    real_api = js._api
    other = {}

    def spy(suffix, payload=None, timeout=None):
        try:
            return real_api(suffix, payload, timeout)
        except jssync.ConsumerNotFoundError:
            if suffix == f"CONSUMER.INFO.{name}.{durable}" and not other:
                js2 = nc_other.jetstream()
                other["sub"] = js2.subscribe(f"{p}.a", stream=name, durable=durable, queue=group)
            raise

    js._api = spy
    return other


def test_already_exists_race_queue_member_joins(js, nats_server, stream):
    name, p = stream
    with jssync.connect(nats_server.url) as nc2:
        other = _race(js, nc2, name, p, "workers", "workers")
        sub = js.subscribe(f"{p}.a", queue="workers")
        try:
            first = other["sub"]
            assert first.created_consumer and not sub.created_consumer
            assert sub.deliver_subject == first.deliver_subject  # moved to the real deliver subject
            for i in range(20):
                js.publish(f"{p}.a", b"%d" % i)
            got = []
            wait_for(lambda: (got.extend(_take(sub) + _take(first)) or len(got) >= 20), 5, what="20 messages")
            assert sorted(m.data for m in got) == sorted(b"%d" % i for i in range(20))
        finally:
            del js._api
            sub.unsubscribe()
            assert names(js, name) == ["workers"]
            other["sub"].unsubscribe()
        assert names(js, name) == []


def _take(sub):
    out = []
    while sub.pending_msgs:
        out.append(sub.next_msg(1))
    return out


def test_already_exists_race_non_queue_is_an_error(js, nc, nats_server, stream):
    name, p = stream
    with jssync.connect(nats_server.url) as nc2:
        other = _race(js, nc2, name, p, "SOLO", None)
        with pytest.raises(DuplicateSubscriptionError):
            js.subscribe(f"{p}.a", durable="SOLO")
        del js._api
        # the NATS subscription made before the create attempt is gone again
        assert not [s for s in nc._subs if isinstance(s, JetStreamSubscription)]
        assert names(js, name) == ["SOLO"]
        other["sub"].unsubscribe()
