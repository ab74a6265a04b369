"""Pull consumer priority groups (ADR-42): overflow, pinned_client, prioritized (real server)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import jssync
from jssync.base.status import PullRequestError
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(90)


def publish(js, stream, n, start=0):
    for i in range(start, start + n):
        js.publish(f"{stream.name}.m", b"%d" % i)


def pinned(stream, name="P", timeout=2.0, **cfg):
    return stream.create_consumer(durable_name=name, ack_policy="explicit", priority_policy="pinned_client",
                                  priority_groups=["jobs"], priority_timeout=timeout, **cfg)


class Worker:
    """One client (own connection and consumer handle) consuming a group; records what it got."""

    def __init__(self, url, stream, consumer, **opts):
        self.nc = jssync.connect(url)
        self.c = self.nc.jetstream().consumer(stream, consumer)
        self.got: list[bytes] = []
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.cc = self.c.consume(self._on_msg, error_cb=self.errors.append, **opts)

    def _on_msg(self, msg):
        with self.lock:
            self.got.append(msg.data)
        msg.ack()

    def count(self):
        with self.lock:
            return len(self.got)

    def close(self):
        self.cc.stop()
        self.cc.wait(10)
        self.nc.close()


# -- consumer config ----------------------------------------------------------------------


def test_config_fields_are_sent_and_read_back(js, stream):
    c = pinned(stream, timeout=7.5)
    assert c.priority == ("pinned_client", ("jobs",), 7.5)
    cfg = c.cached_info.config
    assert (cfg.priority_policy, cfg.priority_groups, cfg.priority_timeout) == ("pinned_client", ["jobs"], 7.5)
    assert [g["group"] for g in c.cached_info.priority_groups] == ["jobs"]
    # a lookup (CONSUMER.INFO) and the listing read them too
    assert js.consumer(stream.name, "P").priority == ("pinned_client", ("jobs",), 7.5)
    assert [getattr(i.config, "priority_policy", None) for i in js.consumers(stream.name)] == ["pinned_client"]
    # the config that came back keeps them when it is sent again (update keeps the policy)
    c2 = js.update_consumer(stream.name, c.cached_info.config, max_ack_pending=50)
    assert c2.priority == ("pinned_client", ("jobs",), 7.5) and c2.cached_info.config.max_ack_pending == 50
    c3 = js.update_consumer(stream.name, c.cached_info.config, priority_timeout=9)
    assert c3.priority.timeout == 9.0
    for pol in ("overflow", "prioritized"):
        c = stream.create_consumer(durable_name=pol.upper(), ack_policy="explicit", priority_policy=pol,
                                   priority_groups=["a", "b/c=d-_"])
        assert c.priority == (pol, ("a", "b/c=d-_"), None)


# -- pinned_client ------------------------------------------------------------------------


def test_pinned_group_exactly_one_receives_then_the_other_takes_over(nats_server, js, stream):
    """Two clients consume a pinned group: one gets every message; after it stops, the other
    takes over within priority_timeout."""
    prio_timeout = 2.0
    pinned(stream, timeout=prio_timeout)
    # each pull lives 1 s: the pinned client renews its pin well within priority_timeout
    a = Worker(nats_server.url, stream.name, "P", group="jobs", expires=1.0, max_messages=10)
    b = Worker(nats_server.url, stream.name, "P", group="jobs", expires=1.0, max_messages=10)
    try:
        publish(js, stream, 30)
        wait_for(lambda: a.count() + b.count() == 30, 15, what="30 messages")
        time.sleep(0.3 * FACTOR)  # nothing happens: nothing more arrives (no redelivery to the other client)
        counts = sorted([a.count(), b.count()])
        assert counts == [0, 30], counts
        first, second = (a, b) if a.count() == 30 else (b, a)
        pin = first.c.pin_id("jobs")
        assert pin is not None and second.c.pin_id("jobs") is None
        # more messages over several pull lifetimes: still only the pinned client
        publish(js, stream, 10, start=30)
        wait_for(lambda: first.count() == 40, 10, what="the pinned client's 10 more")
        assert second.count() == 0 and first.c.pin_id("jobs") == pin

        first.close()
        t0 = time.monotonic()
        publish(js, stream, 5, start=40)
        wait_for(lambda: second.count() == 5, prio_timeout + 5, what="the standby client taking over")
        took = time.monotonic() - t0
        assert took <= (prio_timeout + 1.5) * FACTOR, took
        assert sorted(second.got) == [b"%d" % i for i in range(40, 45)]
        new_pin = second.c.pin_id("jobs")
        assert new_pin is not None and new_pin != pin
        assert not [e for e in a.errors + b.errors if isinstance(e, PullRequestError) and e.code == 423]
    finally:
        for w in (a, b):
            if not w.nc.is_closed:
                w.close()


def test_consume_with_a_stale_pin_id_gets_423_and_stays_a_candidate(nats_server, js, stream, caplog):
    """A was pinned, then stalled (no pull for priority_timeout) and B was pinned. A's consume
    starts with A's old id: its pull gets 423, A forgets the id and pulls again without it
    (no error reported), a standby candidate that takes over once B stops."""
    caplog.set_level(logging.DEBUG, logger="jssync")
    pinned(stream, timeout=1.5)
    nca = jssync.connect(nats_server.url)
    try:
        ca = nca.jetstream().consumer(stream.name, "P")
        publish(js, stream, 1)
        ca.next(5, group="jobs").ack()
        old = ca.pin_id("jobs")
        assert old is not None
        b = Worker(nats_server.url, stream.name, "P", group="jobs", expires=1.0, max_messages=5)
        try:
            publish(js, stream, 1, start=1)
            wait_for(lambda: b.count() == 1, 10, what="B pinned after A's pin timed out")
            got_a: list[bytes] = []
            errors_a: list[BaseException] = []
            cca = ca.consume(lambda m: (got_a.append(m.data), m.ack()), error_cb=errors_a.append,
                             group="jobs", expires=1.0, max_messages=5)
            try:
                wait_for(lambda: ca.pin_id("jobs") is None, 10, what="A's old pin id forgotten")
                wait_for(lambda: any("pin lost (423" in r.getMessage() for r in list(caplog.records)), 5,
                         what="the 423 handled by consume")
                publish(js, stream, 5, start=2)
                wait_for(lambda: b.count() == 6, 10, what="B's messages")
                assert got_a == [] and not errors_a and not b.errors, errors_a + b.errors
                b.close()
                publish(js, stream, 2, start=7)
                wait_for(lambda: len(got_a) == 2, 10, what="A taking over")
                assert ca.pin_id("jobs") not in (None, old) and not errors_a
            finally:
                cca.stop()
                cca.wait(10)
        finally:
            if not b.nc.is_closed:
                b.close()
    finally:
        nca.close()


def test_fetch_and_next_follow_the_pin(js, stream, nc, nats_server):
    c = pinned(stream, timeout=2.0)
    publish(js, stream, 3)
    m = c.next(5, group="jobs")
    assert m.data == b"0" and m.headers["Nats-Pin-Id"] == c.pin_id("jobs")
    m.ack()
    old = c.pin_id("jobs")
    # a second client (own connection) waits while the first one is pinned
    nc2 = jssync.connect(nats_server.url)
    try:
        c2 = nc2.jetstream().consumer(stream.name, "P")
        assert list(c2.fetch(1, group="jobs", expires=1.0)) == []
        assert c2.pin_id("jobs") is None
        js.unpin_consumer(stream.name, "P", "jobs")  # not through c: c keeps its (now old) id
        assert c.pin_id("jobs") == old
        got = list(c2.fetch(1, group="jobs", expires=3.0))
        assert [x.data for x in got] == [b"1"] and c2.pin_id("jobs") not in (None, old)
        got[0].ack()
        # c's pull carries the old id: 423 ends the fetch, on .error (not raised), and the id is cleared
        res = c.fetch(1, group="jobs", expires=3.0)
        assert list(res) == []
        assert isinstance(res.error, PullRequestError) and res.error.code == 423
        assert c.pin_id("jobs") is None
        # next(): 423 -> the id is cleared and the pull is sent again without it; once c2's pin
        # times out (no pulls from it for priority_timeout) c is pinned and gets the message
        c._pins._ids["jobs"] = old  # the old id once more (as if c had not pulled since)
        t0 = time.monotonic()
        m = c.next(10, group="jobs")
        assert m.data == b"2" and time.monotonic() - t0 < 8 * FACTOR
        assert c.pin_id("jobs") not in (None, old)
        m.ack()
    finally:
        nc2.close()


def test_unpin_through_the_handle_forgets_the_id(js, stream):
    c = pinned(stream)
    publish(js, stream, 1)
    c.next(5, group="jobs").ack()
    assert c.pin_id("jobs") is not None
    c.unpin("jobs")
    assert c.pin_id("jobs") is None
    state = js.consumer(stream.name, "P").cached_info.priority_groups
    assert [s.get("pinned_client_id") for s in state] == [None]



def test_a_stored_pin_id_header_is_not_taken_for_the_servers(js, stream):
    """A message stored with its own ``Nats-Pin-Id`` header is delivered with the server's pin
    id added after it (both on the wire): the handle keeps the server's id, the one a pinned
    pull must carry."""
    c = pinned(stream)
    js.publish(f"{stream.name}.m", b"x", headers={"Nats-Pin-Id": "forged"})
    m = c.next(5, group="jobs")
    state = js.consumer(stream.name, "P").cached_info.priority_groups
    server_pin = state[0]["pinned_client_id"]
    assert server_pin and server_pin != "forged"
    assert c.pin_id("jobs") == server_pin
    m.ack()

# -- overflow ---------------------------------------------------------------------------------


def test_overflow_min_pending(js, stream):
    c = stream.create_consumer(durable_name="O", ack_policy="explicit", priority_policy="overflow",
                               priority_groups=["jobs"])
    publish(js, stream, 3)
    # 3 pending < 5: the overflow pull is not served (it expires with nothing)
    res = c.fetch(10, group="jobs", min_pending=5, expires=1.0)
    assert list(res) == [] and res.error is None
    # a waiting overflow pull is served once pending reaches min_pending, and only while it is:
    # after one message 4 are pending (< 5), so the rest of the batch is not served
    res = c.fetch(10, group="jobs", min_pending=5, expires=2.0)
    it = iter(res)
    wait_for(lambda: c.info().num_waiting == 1, 5, what="the overflow pull to wait on the server")
    publish(js, stream, 2, start=3)
    got = [m.data for m in it]
    assert got == [b"0"] and res.error is None
    # min_ack_pending: served only while at least that many are unacknowledged (1 now)
    assert list(c.fetch(1, group="jobs", min_ack_pending=2, expires=1.0)) == []
    assert [m.data for m in c.fetch(1, group="jobs", expires=1.0)] == [b"1"]  # a plain pull of the group
    assert [m.data for m in c.fetch(1, group="jobs", min_ack_pending=2, expires=1.0)] == [b"2"]
    # either limit satisfied is enough (boolean OR): 2 pending < 5, 3 unacknowledged >= 3
    assert [m.data for m in c.fetch(1, group="jobs", min_pending=5, min_ack_pending=3, expires=1.0)] == [b"3"]


def test_overflow_consume_takes_over_only_above_min_pending(nats_server, js, stream):
    stream.create_consumer(durable_name="O", ack_policy="explicit", priority_policy="overflow",
                           priority_groups=["jobs"])
    overflow = Worker(nats_server.url, stream.name, "O", group="jobs", min_pending=10, expires=1.0,
                      max_messages=5)
    try:
        publish(js, stream, 4)
        time.sleep(1.5 * FACTOR)  # nothing happens: a whole pull lifetime, 4 pending < 10, nothing is served
        assert overflow.count() == 0
        publish(js, stream, 8, start=4)  # 12 pending >= 10
        wait_for(lambda: overflow.count() >= 1, 10, what="the overflow client served")
        wait_for(lambda: js.consumer(stream.name, "O").cached_info.num_pending < 10, 10, what="backlog drained")
        time.sleep(1.5 * FACTOR)  # nothing happens: the overflow client stops below min_pending
        # it stops once pending fell below min_pending
        assert js.consumer(stream.name, "O").cached_info.num_pending >= 1
        assert not overflow.errors
    finally:
        overflow.close()


# -- prioritized ------------------------------------------------------------------------------


def test_prioritized_lower_priority_served_first(js, stream):
    c = stream.create_consumer(durable_name="R", ack_policy="explicit", priority_policy="prioritized",
                               priority_groups=["jobs"])
    low = c.fetch(1, group="jobs", priority=5, expires=3.0)
    high = c.fetch(1, group="jobs", priority=0, expires=3.0)
    wait_for(lambda: c.info().num_waiting == 2, 5, what="both pulls to wait on the server")
    publish(js, stream, 1)
    assert [m.data for m in high] == [b"0"]
    publish(js, stream, 1, start=1)
    assert [m.data for m in low] == [b"1"]


# -- bad input: a clear error before anything is sent ------------------------------------------


@pytest.mark.parametrize(
    ("opts", "exc", "text"),
    [
        ({"priority_policy": "pinned", "priority_groups": ["g"]}, ValueError, "unknown priority_policy"),
        ({"priority_policy": "overflow"}, ValueError, "needs priority_groups"),
        ({"priority_policy": "overflow", "priority_groups": []}, ValueError, "at least one"),
        ({"priority_policy": "overflow", "priority_groups": "g"}, TypeError, "list of group names"),
        ({"priority_policy": "overflow", "priority_groups": ["bad.name"]}, ValueError, "invalid priority group"),
        ({"priority_policy": "overflow", "priority_groups": ["x" * 17]}, ValueError, "16 characters"),
        ({"priority_policy": "overflow", "priority_groups": [""]}, ValueError, "invalid priority group"),
        ({"priority_policy": "overflow", "priority_groups": ["a b"]}, ValueError, "invalid priority group"),
        ({"priority_policy": "overflow", "priority_groups": ["g", "g"]}, ValueError, "twice"),
        ({"priority_groups": ["g"]}, ValueError, "needs a priority_policy"),
        ({"priority_policy": "overflow", "priority_groups": ["g"], "priority_timeout": 5}, ValueError,
         "pinned_client"),
        ({"priority_timeout": 5}, ValueError, "pinned_client"),
        ({"priority_policy": "pinned_client", "priority_groups": ["g"], "priority_timeout": 0}, ValueError,
         "priority_timeout must be"),
        ({"priority_policy": "pinned_client", "priority_groups": ["g"], "priority_timeout": "5 s"}, ValueError,
         "priority_timeout must be"),
        ({"priority_policy": "pinned_client", "priority_groups": ["g"], "deliver_subject": "d.x"}, ValueError,
         "pull consumers only"),
    ],
)
def test_bad_consumer_config(js, stream, opts, exc, text):
    with pytest.raises(exc, match=text):
        stream.create_consumer(durable_name="BAD", ack_policy="explicit", **opts)
    assert list(js.consumer_names(stream.name)) == []


def _groups(stream):
    return {
        "pinned": pinned(stream),
        "overflow": stream.create_consumer(durable_name="O", ack_policy="explicit", priority_policy="overflow",
                                           priority_groups=["jobs"]),
        "prioritized": stream.create_consumer(durable_name="R", ack_policy="explicit",
                                              priority_policy="prioritized", priority_groups=["jobs"]),
        "plain": stream.create_consumer(durable_name="N", ack_policy="explicit"),
    }


@pytest.mark.parametrize(
    ("which", "opts", "text"),
    [
        ("pinned", {}, "pass group="),
        ("overflow", {"min_pending": 5}, "pass group="),
        ("pinned", {"group": "other"}, "not one of"),
        ("pinned", {"group": "bad.name"}, "invalid group"),
        ("pinned", {"group": "x" * 17}, "invalid group"),
        ("plain", {"group": "jobs"}, "has no priority groups"),
        ("plain", {"min_pending": 1}, "needs group="),
        ("overflow", {"group": "jobs", "min_pending": -1}, "min_pending must be an int >= 0"),
        ("overflow", {"group": "jobs", "min_ack_pending": -3}, "min_ack_pending must be an int >= 0"),
        ("overflow", {"group": "jobs", "min_pending": 1.5}, "min_pending must be an int"),
        ("pinned", {"group": "jobs", "min_pending": 1}, "go with priority_policy 'overflow'"),
        ("prioritized", {"group": "jobs", "min_ack_pending": 1}, "go with priority_policy 'overflow'"),
        ("prioritized", {"group": "jobs", "priority": 10}, "from 0 to 9"),
        ("prioritized", {"group": "jobs", "priority": -1}, "from 0 to 9"),
        ("prioritized", {"group": "jobs", "priority": True}, "from 0 to 9"),
        ("overflow", {"group": "jobs", "priority": 1}, "goes with priority_policy 'prioritized'"),
    ],
)
def test_bad_pull_options(js, stream, which, opts, text):
    c = _groups(stream)[which]
    calls = [
        lambda: c.fetch(1, expires=1.0, **opts),
        lambda: c.fetch_bytes(1000, expires=1.0, **opts),
        lambda: c.fetch_no_wait(1, **opts),
        lambda: c.next(1.0, **opts),
        lambda: c.consume(**opts),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=text):
            call()
    assert js.consumer(stream.name, c.name).cached_info.num_waiting == 0  # no pull was sent


def test_bad_unpin(js, stream):
    cs = _groups(stream)
    with pytest.raises(ValueError, match="pinned_client"):
        cs["overflow"].unpin("jobs")
    with pytest.raises(ValueError, match="pinned_client"):
        cs["plain"].unpin("jobs")
    with pytest.raises(ValueError, match="not one of"):
        cs["pinned"].unpin("other")
    with pytest.raises(ValueError, match="invalid group"):
        cs["pinned"].unpin("a.b")
    with pytest.raises(ValueError, match="invalid group"):
        js.unpin_consumer(stream.name, "P", "")
    with pytest.raises(jssync.APIError, match="does not exist"):
        js.unpin_consumer(stream.name, "P", "other")  # the server's answer
