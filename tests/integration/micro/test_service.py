"""jssync.micro (ADR-32) against a real nats-server: discovery as the nats CLI does it, stats, errors."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import pytest

import jssync
from jssync import micro
from tests.conftest import FACTOR, wait_for

IDENTITY = {"type", "name", "id", "version", "metadata"}
INFO_KEYS = IDENTITY | {"description", "endpoints"}
STATS_KEYS = IDENTITY | {"endpoints", "started"}
EP_INFO_KEYS = {"name", "subject", "queue_group", "metadata"}
EP_STATS_KEYS = {"name", "subject", "queue_group", "num_requests", "num_errors", "last_error",
                 "processing_time", "average_processing_time"}


@pytest.fixture
def nc2(nats_server):
    conn = jssync.connect(nats_server.url, name="micro-client")
    try:
        yield conn
    finally:
        conn.close()


def discover(nc, verb: str = "INFO", name: str | None = None, id: str | None = None) -> list[dict]:  # noqa: A002
    """What ``nats micro ls/info`` does: one request on a fresh inbox, replies until 300 ms of silence."""
    subject = micro.control_subject(verb, name, id)
    replies = nc.request_many(subject, b"", headers={"Accept-Encoding": "snappy"}, max_wait=5.0, stall=0.3)
    return [json.loads(m.data) for m in replies]


def echo_upper(req: micro.Request) -> None:
    req.respond(req.data.upper())


def test_discovery_from_a_second_connection_like_the_nats_cli(nc, nc2, unique):
    name = f"calc{unique}"
    a = micro.add_service(nc, name=name, version="1.2.3", description="adds", metadata={"zone": "a"})
    b = micro.add_service(nc, name=name, version="1.2.3")
    other = micro.add_service(nc, name=f"other{unique}", version="0.0.1-rc.1+b5")
    a.add_endpoint("upper", echo_upper, metadata={"format": "text"})
    g = a.add_group(f"math{unique}")
    g.add_endpoint("add", echo_upper)
    try:
        mine = {d["id"]: d for d in discover(nc2) if d["name"] in (name, f"other{unique}")}
        assert set(mine) == {a.id, b.id, other.id}
        doc = mine[a.id]
        assert set(doc) == INFO_KEYS
        assert doc["type"] == "io.nats.micro.v1.info_response"
        assert (doc["name"], doc["version"], doc["description"], doc["metadata"]) == (name, "1.2.3", "adds",
                                                                                       {"zone": "a"})
        assert doc["endpoints"] == [
            {"name": "upper", "subject": "upper", "queue_group": "q", "metadata": {"format": "text"}},
            {"name": "add", "subject": f"math{unique}.add", "queue_group": "q", "metadata": {}},
        ]
        assert mine[b.id]["endpoints"] == [] and mine[b.id]["metadata"] == {}
        assert doc == a.info()
        # by name, and by name and id
        assert {d["id"] for d in discover(nc2, "INFO", name)} == {a.id, b.id}
        (one,) = discover(nc2, "INFO", name, b.id)
        assert one["id"] == b.id
        # the endpoints answer the second connection
        assert nc2.request("upper", b"hi", timeout=2).data == b"HI"
        assert nc2.request(f"math{unique}.add", b"x", timeout=2).data == b"X"
    finally:
        for s in (a, b, other):
            s.stop()


def test_ping_all_by_name_by_id(nc, nc2, unique):
    name = f"pinger{unique}"
    svc = micro.add_service(nc, name=name, version="2.0.0", metadata={"k": "v"})
    try:
        everyone = [d for d in discover(nc2, "PING") if d["name"] == name]
        assert everyone == [{"type": "io.nats.micro.v1.ping_response", "name": name, "id": svc.id,
                             "version": "2.0.0", "metadata": {"k": "v"}}]
        assert discover(nc2, "PING", name) == everyone
        assert discover(nc2, "PING", name, svc.id) == everyone
        assert svc.ping() == everyone[0]
        # the lowercase verb is the same subject (the ADR's verbs are upper case)
        assert micro.control_subject("ping", name) == f"$SRV.PING.{name}"
    finally:
        svc.stop()


def test_stats_counts_requests_errors_and_time(nc, nc2, unique):
    name = f"stats{unique}"

    def handler(req: micro.Request) -> None:
        time.sleep(0.01)  # behaviour: the handler takes time (processing_time counts it)
        if req.data == b"fail":
            raise RuntimeError("boom")
        if req.data == b"bad":
            req.respond_error(400, "bad input", b"details")
            return
        req.respond(b"ok")

    svc = micro.add_service(nc, name=name, version="1.0.0",
                            stats_handler=lambda ep: {"endpoint": ep.name, "extra": 1})
    ep = svc.add_endpoint("work", handler, subject=f"work.{unique}")
    try:
        for _ in range(3):
            assert nc2.request(f"work.{unique}", b"x", timeout=2).data == b"ok"
        r = nc2.request(f"work.{unique}", b"fail", timeout=2)
        assert r.headers is not None
        assert (r.headers["Nats-Service-Error-Code"], r.headers["Nats-Service-Error"]) == ("500", "boom")
        with pytest.raises(micro.ServiceError) as ei:
            micro.check_response(r)
        assert (ei.value.code, ei.value.description) == ("500", "boom")
        r = nc2.request(f"work.{unique}", b"bad", timeout=2)
        assert r.data == b"details" and r.headers["Nats-Service-Error-Code"] == "400"
        wait_for(lambda: svc.stats()["endpoints"][0]["num_requests"] == 5, 5)

        (doc,) = discover(nc2, "STATS", name, svc.id)
        assert set(doc) == STATS_KEYS
        assert doc["type"] == "io.nats.micro.v1.stats_response"
        started = datetime.fromisoformat(doc["started"])
        assert doc["started"].endswith("Z") and started.utcoffset().total_seconds() == 0
        (st,) = doc["endpoints"]
        assert set(st) == EP_STATS_KEYS | {"data"}
        assert (st["name"], st["subject"], st["queue_group"]) == ("work", f"work.{unique}", "q")
        assert (st["num_requests"], st["num_errors"], st["last_error"]) == (5, 2, "400:bad input")
        assert isinstance(st["processing_time"], int) and st["processing_time"] >= 5 * 10_000_000
        assert st["average_processing_time"] == st["processing_time"] // 5
        assert st["data"] == {"endpoint": "work", "extra": 1}
        assert discover(nc2, "STATS", name) == [doc]
        assert ep.num_requests == 5

        before = doc["started"]
        time.sleep(0.01)  # behaviour: a time gap, so the reset's started is later
        svc.reset()
        st2 = svc.stats()
        assert st2["started"] > before
        e2 = st2["endpoints"][0]
        assert (e2["num_requests"], e2["num_errors"], e2["last_error"], e2["processing_time"],
                e2["average_processing_time"]) == (0, 0, "", 0, 0)
    finally:
        svc.stop()


def test_service_error_raised_in_handler_and_last_error(nc, unique):
    def handler(req: micro.Request) -> None:
        raise micro.ServiceError(404, "no such thing")

    svc = micro.add_service(nc, name=f"err{unique}", version="1.0.0")
    svc.add_endpoint("find", handler, subject=f"find.{unique}")
    try:
        r = nc.request(f"find.{unique}", b"", timeout=2)
        assert r.headers["Nats-Service-Error-Code"] == "404"
        assert r.headers["Nats-Service-Error"] == "no such thing"
        wait_for(lambda: svc.stats()["endpoints"][0]["num_errors"] == 1, 5)
        assert svc.stats()["endpoints"][0]["last_error"] == "404:no such thing"
    finally:
        svc.stop()


def test_handlers_run_on_the_worker_pool_in_queue_group_q(nc, nc2, unique):
    threads: list[str] = []

    def handler(req: micro.Request) -> None:
        threads.append(threading.current_thread().name)
        req.respond(b"1")

    subj = f"shared.{unique}"
    s1 = micro.add_service(nc, name=f"pool{unique}", version="1.0.0")
    s2 = micro.add_service(nc, name=f"pool{unique}", version="1.0.0")
    s1.add_endpoint("shared", handler, subject=subj)
    s2.add_endpoint("shared", handler, subject=subj)
    try:
        for _ in range(20):
            # queue group "q": exactly one of the two instances answers each request
            assert len(list(nc2.request_many(subj, max_wait=2.0, stall=0.1))) == 1
        assert len(threads) == 20
        assert all("-cb-" in t for t in threads), threads
        n1 = s1.stats()["endpoints"][0]["num_requests"]
        n2 = s2.stats()["endpoints"][0]["num_requests"]
        assert n1 + n2 == 20
    finally:
        s1.stop()
        s2.stop()


def test_queue_group_none_and_overrides(nc, nc2, unique):
    s1 = micro.add_service(nc, name=f"qg{unique}", version="1.0.0", queue_group=None)
    s2 = micro.add_service(nc, name=f"qg{unique}", version="1.0.0", queue_group="svcq")
    try:
        s1.add_endpoint("all", echo_upper, subject=f"all.{unique}")
        s2.add_endpoint("all", echo_upper, subject=f"all.{unique}", queue_group=None)
        # no queue group on either: both answer
        assert len(list(nc2.request_many(f"all.{unique}", max_wait=2.0, max_messages=5, stall=0.3))) == 2
        g = s2.add_group(f"g{unique}", queue_group="gq")
        e1 = g.add_endpoint("a", echo_upper)
        e2 = g.add_endpoint("b", echo_upper, queue_group="own")
        e3 = g.add_group("inner").add_endpoint("c", echo_upper, subject="c.*")
        e4 = s2.add_endpoint("d", echo_upper, subject=f"d.{unique}")
        e5 = s2.add_group("", queue_group=None).add_endpoint("e", echo_upper, subject=f"e.{unique}")
        assert [(e.subject, e.queue_group) for e in (e1, e2, e3, e4, e5)] == [
            (f"g{unique}.a", "gq"), (f"g{unique}.b", "own"), (f"g{unique}.inner.c.*", "gq"),
            (f"d.{unique}", "svcq"), (f"e.{unique}", None),
        ]
        assert nc2.request(f"g{unique}.inner.c.x", b"w", timeout=2).data == b"W"
        info_eps = {e["name"]: e for e in s2.info()["endpoints"]}
        assert info_eps["e"]["queue_group"] == "" and info_eps["b"]["queue_group"] == "own"
        assert s1.info()["endpoints"][0]["queue_group"] == ""
    finally:
        s1.stop()
        s2.stop()


def test_stop_is_idempotent_and_removes_every_subscription(nc, nc2, nats_server, unique):
    name = f"stop{unique}"
    base = len(nc._subs)
    svc = micro.add_service(nc, name=name, version="1.0.0")
    svc.add_endpoint("x", echo_upper, subject=f"x.{unique}")
    assert len(nc._subs) == base + 10
    assert nc2.request(f"x.{unique}", b"a", timeout=2).data == b"A"
    svc.stop()
    svc.stop()
    assert svc.stopped
    assert len(nc._subs) == base
    nc.flush()
    with pytest.raises(jssync.NoRespondersError):
        nc2.request(f"x.{unique}", b"a", timeout=2)
    with pytest.raises(jssync.NoRespondersError):
        discover(nc2, "PING", name)
    with pytest.raises(jssync.Error, match="stopped"):
        svc.add_endpoint("y", echo_upper)
    svc.wait(timeout=0.1)  # returns at once


def test_drain_finishes_requests_already_received(nc, nc2, unique):
    started = threading.Event()

    def slow(req: micro.Request) -> None:
        started.set()
        time.sleep(0.2)  # behaviour: the handler is slow, so drain has a request to finish
        req.respond(b"done " + req.data)

    svc = micro.add_service(nc, name=f"drain{unique}", version="1.0.0")
    svc.add_endpoint("slow", slow, subject=f"slow.{unique}")
    inbox = nc2.new_inbox()
    sub = nc2.subscribe(inbox)
    for i in range(3):
        nc2.publish(f"slow.{unique}", str(i).encode(), reply=inbox)
    nc2.flush()
    assert started.wait(5 * FACTOR)
    wait_for(lambda: svc.endpoints[0]._sub.delivered == 3, 5)
    svc.drain(timeout=10)
    assert svc.stopped
    got = sorted(sub.next_msg(timeout=2).data for _ in range(3))
    assert got == [b"done 0", b"done 1", b"done 2"]
    svc.drain()  # idempotent


def test_wait_returns_on_stop_from_another_thread_and_times_out(nc, unique):
    svc = micro.add_service(nc, name=f"wait{unique}", version="1.0.0")
    with pytest.raises(jssync.TimeoutError):
        svc.wait(timeout=0.2)
    threading.Timer(0.2, svc.stop).start()
    t0 = time.monotonic()
    svc.wait(timeout=5)
    assert time.monotonic() - t0 < 2 * FACTOR


def test_connection_close_stops_the_service(nats_server, unique):
    nc = jssync.connect(nats_server.url)
    svc = micro.add_service(nc, name=f"closing{unique}", version="1.0.0")
    nc.close()
    assert svc.stopped
    svc.wait(timeout=1)
    svc.stop()  # never raises for a closed connection


def test_respond_error_and_respond_json(nc, unique):
    results: list[BaseException] = []

    def handler(req: micro.Request) -> None:
        for bad in ((None, "x"), ("abc", "x"), (True, "x"), (500, ""), (500, "a\r\nb")):
            try:
                req.respond_error(*bad)
            except ValueError as exc:
                results.append(exc)
        req.respond_json({"ok": True}, headers={"X-Y": "1"})

    svc = micro.add_service(nc, name=f"rj{unique}", version="1.0.0")
    svc.add_endpoint("rj", handler, subject=f"rj.{unique}")
    try:
        r = nc.request(f"rj.{unique}", b"", timeout=2)
        assert json.loads(r.data) == {"ok": True} and r.headers == {"X-Y": "1"}
        assert len(results) == 5
        assert "None" in str(results[0]) and "'abc'" in str(results[1]) and "''" in str(results[3])
        assert svc.stats()["endpoints"][0]["num_errors"] == 0
    finally:
        svc.stop()
    assert micro.error_headers(503, "busy") == {"Nats-Service-Error": "busy", "Nats-Service-Error-Code": "503"}


def test_metadata_is_copied(nc, unique):
    md = {"a": "1"}
    svc = micro.add_service(nc, name=f"md{unique}", version="1.0.0", metadata=md)
    try:
        md["a"] = "changed"
        svc.metadata["a"] = "changed too"
        assert svc.info()["metadata"] == {"a": "1"}
    finally:
        svc.stop()


# -- bad input: a clear exception naming the value, before anything is sent ------------------


@pytest.fixture
def spy(nc2):
    """Everything published in the account while the test runs."""
    sub = nc2.subscribe(">")
    nc2.flush()
    return sub


def _nothing_sent(nc, nc2, spy, base: int) -> None:
    assert len(nc._subs) == base
    nc.flush()
    nc2.flush()
    with pytest.raises(jssync.TimeoutError):
        spy.next_msg(timeout=0.2)
    nc.publish("spy.check", b"")  # the spy does see what is sent
    assert spy.next_msg(timeout=2).subject == "spy.check"


@pytest.mark.parametrize(
    ("kwargs", "exc", "names"),
    [
        ({"name": "a.b"}, ValueError, "'a.b'"),
        ({"name": "a b"}, ValueError, "'a b'"),
        ({"name": ""}, ValueError, "service name"),
        ({"name": "a*"}, ValueError, "'a\\*'"),
        ({"name": None}, ValueError, "None"),
        ({"version": "1.0"}, ValueError, "'1.0'"),
        ({"version": "v1.0.0"}, ValueError, "'v1.0.0'"),
        ({"version": "1.0.0.0"}, ValueError, "'1.0.0.0'"),
        ({"version": "01.0.0"}, ValueError, "'01.0.0'"),
        ({"version": "1.0.0-"}, ValueError, "'1.0.0-'"),
        ({"version": ""}, ValueError, "SemVer"),
        ({"version": 1}, ValueError, "1"),
        ({"description": 5}, TypeError, "description"),
        ({"metadata": {"a": 1}}, TypeError, "'a': 1"),
        ({"metadata": {1: "a"}}, TypeError, "1: 'a'"),
        ({"metadata": ["a"]}, TypeError, "list"),
        ({"queue_group": ""}, ValueError, "queue_group"),
        ({"queue_group": "a b"}, ValueError, "'a b'"),
        ({"queue_group": 7}, ValueError, "7"),
        ({"stats_handler": 3}, TypeError, "stats_handler"),
        ({"api_prefix": "$SRV.*"}, jssync.BadSubjectError, "api_prefix"),
        ({"api_prefix": ""}, jssync.BadSubjectError, "api_prefix"),
    ],
)
def test_add_service_bad_input(nc, nc2, spy, kwargs, exc, names):
    base = len(nc._subs)
    args = {"name": "ok", "version": "1.0.0", **kwargs}
    with pytest.raises(exc, match=names):
        micro.add_service(nc, **args)
    _nothing_sent(nc, nc2, spy, base)


def test_add_service_needs_a_connection():
    with pytest.raises(TypeError, match="str"):
        micro.add_service("nats://localhost:4222", name="x", version="1.0.0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "exc", "names"),
    [
        (lambda s: s.add_endpoint("a.b", echo_upper), ValueError, "'a.b'"),
        (lambda s: s.add_endpoint("", echo_upper), ValueError, "endpoint name"),
        (lambda s: s.add_endpoint("a b", echo_upper), ValueError, "'a b'"),
        (lambda s: s.add_endpoint("ok", "not callable"), TypeError, "not callable"),
        (lambda s: s.add_endpoint("ok", echo_upper, subject="a..b"), jssync.BadSubjectError, "'a..b'"),
        (lambda s: s.add_endpoint("ok", echo_upper, subject="a b"), jssync.BadSubjectError, "'a b'"),
        (lambda s: s.add_endpoint("ok", echo_upper, subject="a.>.b"), jssync.BadSubjectError, "'a.>.b'"),
        (lambda s: s.add_endpoint("ok", echo_upper, subject=""), jssync.BadSubjectError, "endpoint subject"),
        (lambda s: s.add_endpoint("ok", echo_upper, subject=5), jssync.BadSubjectError, "int"),
        (lambda s: s.add_endpoint("ok", echo_upper, queue_group=""), ValueError, "queue_group"),
        (lambda s: s.add_endpoint("ok", echo_upper, queue_group="a\tb"), ValueError, "'a\\\\tb'"),
        (lambda s: s.add_endpoint("ok", echo_upper, metadata={"a": None}), TypeError, "'a': None"),
        (lambda s: s.add_group("a.>"), jssync.BadSubjectError, "'a.>'"),
        (lambda s: s.add_group(">"), jssync.BadSubjectError, "'>'"),
        (lambda s: s.add_group("a b"), jssync.BadSubjectError, "'a b'"),
        (lambda s: s.add_group("g", queue_group=" "), ValueError, "' '"),
        (lambda s: s.add_group("g").add_endpoint("a.b", echo_upper), ValueError, "'a.b'"),
        (lambda s: s.add_group("g").add_group("x.>"), jssync.BadSubjectError, "'x.>'"),
        (lambda s: s.add_group("g").add_endpoint("ok", echo_upper, subject="x y"), jssync.BadSubjectError,
         "'x y'"),
    ],
)
def test_endpoint_and_group_bad_input(nc, nc2, spy, unique, call, exc, names):
    svc = micro.add_service(nc, name=f"bad{unique}", version="1.0.0")
    try:
        # the spy saw nothing of add_service (subscriptions publish nothing)
        base = len(nc._subs)
        with pytest.raises(exc, match=names):
            call(svc)
        _nothing_sent(nc, nc2, spy, base)
        assert svc.info()["endpoints"] == []
    finally:
        svc.stop()


def test_control_subject_bad_input():
    with pytest.raises(ValueError, match="'PONG'"):
        micro.control_subject("PONG")
    with pytest.raises(ValueError, match="'abc'"):
        micro.control_subject("PING", None, "abc")
    assert micro.control_subject("STATS", "svc", "id1") == "$SRV.STATS.svc.id1"


@pytest.mark.parametrize("version", ["0.0.0", "1.2.3-alpha.1", "10.20.30+build.1.2", "1.0.0-rc.1+sha-5114f85",
                                     "1.0.0-0A.is.legal"])
def test_valid_versions_and_names_are_accepted(nc, version):
    svc = micro.add_service(nc, name="Svc_name-1", version=version)
    try:
        assert svc.info()["version"] == version
        svc.add_endpoint("End_point-2", echo_upper, subject="ep.*.x")
    finally:
        svc.stop()
