"""request_many (ADR-47) against a real nats-server: limits, stall, sentinel, cleanup, bad input."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import pytest

import jssync
from tests.conftest import FACTOR, wait_for


def _responders(nc, subject: str, n: int) -> list[jssync.Subscription]:
    subs = [nc.subscribe(subject, callback=lambda m, i=i: m.respond(f"r{i}".encode())) for i in range(n)]
    nc.flush()
    return subs


def _server_subjects(nats_server) -> set[str]:
    """The subjects of every subscription the server holds (from /subsz)."""
    info = nats_server.varz("subsz?subs=1")
    return {s["subject"] for s in info.get("subscriptions_list", []) or []}


def test_scatter_gather_max_messages(nc, unique):
    subj = f"rm.{unique}"
    _responders(nc, subj, 3)
    t0 = time.monotonic()
    rm = nc.request_many(subj, b"hi", max_wait=5.0, max_messages=3)
    got = sorted(m.data for m in rm)
    assert got == [b"r0", b"r1", b"r2"]
    assert rm.reason == "max_messages" and rm.received == 3
    assert time.monotonic() - t0 < 2.0 * FACTOR  # did not wait for max_wait
    assert rm._sub.is_closed


def test_max_wait_ends_quietly(nc, unique):
    subj = f"rm.{unique}"
    _responders(nc, subj, 2)
    t0 = time.monotonic()
    got = list(nc.request_many(subj, max_wait=0.5))
    elapsed = time.monotonic() - t0
    assert len(got) == 2
    assert 0.45 <= elapsed < 0.5 + 0.5 * FACTOR


def test_stall_ends_after_the_last_reply(nc, unique):
    subj = f"rm.{unique}"
    _responders(nc, subj, 2)
    t0 = time.monotonic()
    rm = nc.request_many(subj, max_wait=10.0, stall=0.2)
    got = list(rm)
    assert len(got) == 2 and rm.reason == "stall"
    assert time.monotonic() - t0 < 2.0 * FACTOR


def test_stall_does_not_cut_the_first_wait(nc, unique):
    subj = f"rm.{unique}"

    def slow(m):
        time.sleep(0.4)  # behaviour: the responder is slower than the stall
        m.respond(b"late but first")

    nc.subscribe(subj, callback=slow)
    nc.flush()
    rm = nc.request_many(subj, max_wait=5.0, stall=0.1)
    assert [m.data for m in rm] == [b"late but first"]
    assert rm.reason == "stall"


def test_standard_sentinel_and_custom_sentinel(nc, unique):
    subj = f"rm.{unique}"

    def stream(m):
        for chunk in (b"a", b"b", b"c", b"", b"never"):
            m.respond(chunk)

    nc.subscribe(subj, callback=stream)
    nc.flush()
    rm = nc.request_many(subj, max_wait=5.0, sentinel=True)
    assert [m.data for m in rm] == [b"a", b"b", b"c"]
    assert rm.reason == "sentinel"
    rm2 = nc.request_many(subj, max_wait=5.0, sentinel=lambda m: m.data == b"b")
    assert [m.data for m in rm2] == [b"a"]
    # without a sentinel the empty payload is an ordinary reply
    rm3 = nc.request_many(subj, max_wait=5.0, max_messages=5)
    assert [m.data for m in rm3] == [b"a", b"b", b"c", b"", b"never"]


def test_no_responders(nc, unique):
    rm = nc.request_many(f"rm.{unique}.nobody", max_wait=5.0)
    t0 = time.monotonic()
    with pytest.raises(jssync.NoRespondersError, match="nobody"):
        next(rm)
    assert time.monotonic() - t0 < 2.0 * FACTOR
    assert rm._sub.is_closed
    assert list(rm) == []


def test_headers_reach_the_responders(nc, unique):
    subj = f"rm.{unique}"
    nc.subscribe(subj, callback=lambda m: m.respond(m.headers["X-Q"].encode(), headers={"X-A": "1"}))
    nc.flush()
    (msg,) = list(nc.request_many(subj, headers={"X-Q": "what"}, max_messages=1))
    assert msg.data == b"what" and msg.headers["X-A"] == "1"


def test_time_between_replies_is_not_counted(nc, unique):
    subj = f"rm.{unique}"
    go = f"rm.{unique}.go"
    replies: list[str] = []

    def first(m):
        replies.append(m.reply)
        m.respond(b"1")

    nc.subscribe(subj, callback=first)
    nc.subscribe(go, callback=lambda m: nc.publish(replies[0], b"2"))
    nc.flush()
    rm = nc.request_many(subj, max_wait=1.0)
    assert next(rm).data == b"1"
    time.sleep(1.5)  # behaviour: the application is busy longer than max_wait in all
    nc.publish(go, b"")
    assert next(rm).data == b"2"
    rm.close()
    assert rm.reason == "closed"


def test_inbox_subscription_removed_at_end_close_and_gc(nc, nats_server, unique):
    subj = f"rm.{unique}"
    _responders(nc, subj, 3)
    base = len(nc._subs)

    # ends by itself
    rm0 = nc.request_many(subj, max_wait=0.3)
    inboxes = {rm0._sub.subject}
    nc.flush()  # request_many does not wait for the server to have the SUB: a PING/PONG does
    assert rm0._sub.subject in _server_subjects(nats_server)  # (the check below can fail)
    list(rm0)
    # leaves a with block early
    with nc.request_many(subj, max_wait=5.0) as rm:
        next(rm)
        inboxes.add(rm._sub.subject)
    assert rm.reason == "closed" and rm._sub.is_closed
    # abandoned mid-iteration: the finalizer unsubscribes
    rm2 = nc.request_many(subj, max_wait=5.0)
    for _ in rm2:
        break
    sub2 = rm2._sub
    inboxes.add(sub2.subject)
    del rm2
    gc.collect()
    assert sub2.is_closed
    assert len(nc._subs) == base
    nc.flush()
    wait_for(lambda: not inboxes & _server_subjects(nats_server), 5, what="the server to drop the inboxes")


def test_ctrl_c_while_waiting(nc, unique):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread for SIGINT")  # pragma: no cover
    subj = f"rm.{unique}"
    nc.subscribe(subj, callback=lambda m: m.respond(b"one"))
    nc.flush()
    rm = nc.request_many(subj, max_wait=10.0)
    assert next(rm).data == b"one"
    sent: list[float] = []

    def interrupt() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.2, interrupt)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(rm)
    # measured from the signal, not from starting the timer (whose thread may start late
    # on a loaded machine): the wait ends promptly once the signal is there
    assert sent and time.monotonic() - sent[0] < 0.2 * FACTOR + 0.1
    timer.join()
    rm.close()


def test_connection_close_ends_the_iteration(nats_server, unique):
    nc = jssync.connect(nats_server.url)
    subj = f"rm.{unique}"
    nc.subscribe(subj, callback=lambda m: m.respond(b"one"))
    nc.flush()
    rm = nc.request_many(subj, max_wait=10.0)
    assert next(rm).data == b"one"
    threading.Timer(0.2, nc.close).start()
    t0 = time.monotonic()
    assert list(rm) == []
    assert rm.reason == "connection_closed"
    assert time.monotonic() - t0 < 3.0 * FACTOR
    wait_for(lambda: nc.is_closed, 5)


@pytest.mark.parametrize(
    ("kwargs", "exc", "names"),
    [
        ({"max_messages": 0}, ValueError, "max_messages"),
        ({"max_messages": -2}, ValueError, "-2"),
        ({"max_messages": True}, ValueError, "max_messages"),
        ({"max_messages": "3"}, ValueError, "'3'"),
        ({"max_messages": 2.5}, ValueError, "2.5"),
        ({"max_wait": 0}, ValueError, "max_wait"),
        ({"max_wait": -1.0}, ValueError, "-1.0"),
        ({"max_wait": None}, ValueError, "max_wait"),
        ({"max_wait": float("nan")}, ValueError, "nan"),
        ({"max_wait": float("inf")}, ValueError, "inf"),
        ({"stall": 0}, ValueError, "stall"),
        ({"stall": -0.5}, ValueError, "-0.5"),
        ({"stall": "1"}, ValueError, "stall"),
        ({"sentinel": 3}, TypeError, "sentinel"),
        ({"sentinel": b""}, TypeError, "sentinel"),
        ({"headers": {"Bad Name": "x"}}, jssync.BadHeaderError, "Bad Name"),
        ({"headers": {"X": "a\r\nb"}}, jssync.BadHeaderError, "X"),
    ],
)
def test_bad_input_raises_before_sending(nc, unique, kwargs, exc, names):
    subj = f"rm.{unique}"
    spy = nc.subscribe(subj)
    base = len(nc._subs)
    with pytest.raises(exc, match=names.replace(".", r"\.").replace("(", r"\(")):
        nc.request_many(subj, b"x", **kwargs)
    assert len(nc._subs) == base
    nc.flush()
    with pytest.raises(jssync.TimeoutError):
        spy.next_msg(timeout=0.2)


@pytest.mark.parametrize("subject", ["", "a.*", "a.>", "a b", "a..b", ".a"])
def test_bad_subject(nc, subject):
    with pytest.raises(jssync.BadSubjectError):
        nc.request_many(subject, b"x")


def test_bad_data_and_too_big(nc, unique):
    with pytest.raises(TypeError, match="str"):
        nc.request_many(f"rm.{unique}", "text")  # type: ignore[arg-type]
    with pytest.raises(jssync.MaxPayloadError):
        nc.request_many(f"rm.{unique}", b"x" * (nc.max_payload + 1))


def test_stall_not_below_max_wait_is_ignored(nc, unique):
    subj = f"rm.{unique}"
    _responders(nc, subj, 1)
    rm = nc.request_many(subj, max_wait=0.3, stall=5.0)
    assert len(list(rm)) == 1 and rm.reason == "max_wait"


def test_replies_past_max_messages_are_no_slow_consumer(nats_server, unique):
    errors: list[BaseException] = []
    nc = jssync.connect(nats_server.url, error_cb=errors.append)
    try:
        subj = f"rm.{unique}"
        _responders(nc, subj, 5)
        for _ in range(5):
            rm = nc.request_many(subj, max_wait=2.0, max_messages=1)
            wait_for(lambda rm=rm: rm._sub.pending_msgs == 5, 5, what="every reply before the first next()")
            assert len(list(rm)) == 1
        nc.flush()
        assert not [e for e in errors if isinstance(e, jssync.SlowConsumerError)], errors
    finally:
        nc.close()


_PERMS = """
authorization {
  users: [
    {user: alice, password: alicepw, permissions: {publish: {deny: ["Secret.>"]}}}
    {user: bob, password: bobpw, permissions: {subscribe: {deny: ["_INBOX.>"]}}}
  ]
}
"""


def test_permission_denied_publish_and_inbox():
    from jssync.server import NatsServer

    with NatsServer(jetstream=False, config=_PERMS) as srv:
        with jssync.connect(srv.url, user="alice", password="alicepw", error_cb=lambda e: None) as alice:
            rm = alice.request_many("Secret.Plans", max_wait=5.0)
            t0 = time.monotonic()
            with pytest.raises(jssync.PermissionDeniedError) as ei:
                next(rm)
            assert time.monotonic() - t0 < 2 * FACTOR
            assert (ei.value.operation, ei.value.subject) == ("publish", "Secret.Plans")
            assert "'Secret.Plans'" in str(ei.value)
            assert rm._sub.is_closed and not alice._perms.watches
        with jssync.connect(srv.url, user="bob", password="bobpw", error_cb=lambda e: None) as bob:
            rm = bob.request_many("open.thing", max_wait=5.0)
            with pytest.raises(jssync.PermissionDeniedError) as ei:
                next(rm)
            assert ei.value.operation == "subscribe" and ei.value.subject.startswith("_INBOX.")
            assert not bob._perms.watches
