"""Every shortcut into nats-py's internals is active on the nats-py this runs with.

jssync checks each shortcut (``Connection._fast_paths`` lists them) against the nats-py
it finds and quietly takes nats-py's public path where the check fails: still correct,
but slower. On a supported nats-py (setup.cfg's range; CI runs this file against the
floor too, see .ci/run) every one must be on, so a nats-py that breaks one fails here
instead of just getting slower.
"""

from __future__ import annotations

import importlib.metadata

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import echo, needs_fast_paths, wait_answered

pytestmark = [pytest.mark.timeout(60), needs_fast_paths]

#: the shortcuts a plain TCP connection on Linux must have (a new one is added here too)
EXPECTED = {"pump_buffer", "direct_write", "direct_read", "reply_headers", "wire_header_len", "msg_class",
            "msg_parse"}


def _off(nc: jssync.Connection) -> list[str]:
    paths = nc._fast_paths()
    assert set(paths) == EXPECTED
    return sorted(name for name, on in paths.items() if not on)


def test_every_fast_path_is_on(nc: jssync.Connection, unique: str) -> None:
    version = importlib.metadata.version("nats-py")
    assert _off(nc) == [], f"fast paths off with nats-py {version}"
    # and they are used: a request's reply is read by the caller as this connection's Msg
    taken = []
    orig = nc._sockpath.steal

    def spy(sock, token):  # type: ignore[no-untyped-def]
        msg = orig(sock, token)
        if msg is not None:
            taken.append(msg)
        return msg

    nc._sockpath.steal = spy  # type: ignore[method-assign]
    # the responder on a connection of its own: a request's caller reads its reply only when
    # the reply is the next thing on the socket (a responder on the same connection must
    # first be given the request by the I/O thread)
    responder = jssync.connect(nc.connected_url)
    try:
        echo(responder, f"FP.{unique}")
        responder.flush()
        i = 0
        # the I/O thread may win the race for a reply many times in a row on a loaded
        # machine: ask until one was read by its caller (bounded)
        while i < 20 or (not taken and i < 5000):
            r = nc.request(f"FP.{unique}", str(i).encode(), headers={"K": "v"}, timeout=5)
            assert type(r) is nc._nc.msg_class and r.data == str(i).encode() and r.headers == {"K": "v"}
            i += 1
    finally:
        responder.close()
    assert taken, f"no reply was read by its caller with nats-py {version}"


def test_fast_paths_come_back_after_a_reconnect(unique: str) -> None:
    with NatsServer() as server:
        nc = jssync.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        try:
            echo(nc, f"FP.{unique}")
            assert _off(nc) == []
            server.restart()
            wait_answered(nc, f"FP.{unique}")
            assert _off(nc) == []
        finally:
            nc.close()


def test_messages_handed_to_a_subscription_are_counted_and_keep_their_headers(nc: jssync.Connection,
                                                                              unique: str) -> None:
    """The msg_class fast path hands each message to a jssync subscription without nats-py's
    per-message steps: messages with and without headers arrive whole and in order, and the
    connection's counts go up exactly as nats-py's own path counts them."""
    sub = nc.subscribe(f"D.{unique}")
    nc.flush()
    before = nc.stats
    sent = []
    for i in range(40):
        headers = {"N": str(i), "K": "v"} if i % 3 == 0 else None
        data = b"x" * i
        nc.publish(f"D.{unique}", data, headers=headers)
        sent.append((data, headers))
    got = [sub.next_msg(timeout=5) for _ in sent]
    assert [(m.data, m.headers) for m in got] == sent
    assert all(type(m) is nc._nc.msg_class and m.subject == f"D.{unique}" and m.reply == "" for m in got)
    after = nc.stats
    assert after["in_msgs"] - before["in_msgs"] == len(sent)
    assert after["in_bytes"] - before["in_bytes"] == sum(len(d) for d, _ in sent)
    sub.unsubscribe()
