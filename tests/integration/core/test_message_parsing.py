"""The I/O thread's MSG/HMSG parse step (core/wire.py ``msg_parser``, the ``msg_parse`` fast path).

Against a real server: consumed, fetched and subscribed messages (with and without headers,
payloads split across socket reads, payloads that hold CR LF and protocol lines) arrive whole,
in order and with their headers. nats-py's own MSG/HMSG patterns are swapped for ones that
match nothing while the messages flow, so every message must have gone through jssync's step.
"""

from __future__ import annotations

import re
from typing import Any

import nats.protocol.parser as npp
import pytest

import jssync
from jssync.core import natspy as _natspy
from tests.conftest import needs_fast_paths, wait_for

pytestmark = [pytest.mark.timeout(120), needs_fast_paths]

#: Payloads that are hard on a parser: empty, protocol lines inside, and larger than a socket read.
PAYLOADS = [b"", b"x" * 128, b"MSG a 1 3\r\nabc\r\n", b"\r\n", b"HMSG b 2 4 4\r\nPING\r\n",
            bytes(range(256)) * 800, b"y" * 300_000]


def _sent(i: int) -> tuple[bytes, dict[str, str] | None]:
    data = PAYLOADS[i % len(PAYLOADS)] + str(i).encode()
    return data, ({"N": str(i), "K": "MSG x 1 2"} if i % 2 else None)


def _only_jssync_parses(monkeypatch: pytest.MonkeyPatch, nc: jssync.Connection) -> None:
    assert nc._fast_paths()["msg_parse"] and _natspy.msg_parser_installed(nc.internal.nc)
    never = re.compile(b"(?!)")  # nats-py would wait forever on a MSG/HMSG line it was handed
    monkeypatch.setattr(npp, "MSG_RE", never)
    monkeypatch.setattr(npp, "HMSG_RE", never)


def test_consumed_messages_arrive_whole_through_jssyncs_parse_step(nc: jssync.Connection, js: Any, stream: Any,
                                                                  unique: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sent = [_sent(i) for i in range(60)]
    for data, headers in sent:
        js.publish(f"S{unique}.m", data, headers=headers)
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    _only_jssync_parses(monkeypatch, nc)
    got = []
    with c.consume() as it:  # all defaults
        for m in it:
            got.append((m.data, m.headers))
            m.ack()
            if len(got) == 30:
                break
    for m in c.fetch(10, max_bytes=4 << 20, expires=5):  # (bytes counted: the header block's size is read)
        got.append((m.data, m.headers))
        m.ack()
    with c.consume(max_bytes=2 << 20) as it:
        for m in it:
            got.append((m.data, m.headers))
            m.ack()
            if len(got) == len(sent):
                break
    assert got[:30] == sent[:30]  # (then the stopped consume's unhanded messages come back, nak'd)
    assert sorted(got, key=repr) == sorted(sent, key=repr)
    wait_for(lambda: c.info().num_ack_pending == 0, what="every message acked")


def test_subscribed_messages_arrive_whole_through_jssyncs_parse_step(nc: jssync.Connection, unique: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sub = nc.subscribe(f"P.{unique}")
    nc.flush()
    _only_jssync_parses(monkeypatch, nc)
    before = nc.stats
    sent = [_sent(i) for i in range(40)]
    for data, headers in sent:
        nc.publish(f"P.{unique}", data, headers=headers)
    got = [sub.next_msg(timeout=10) for _ in sent]
    assert [(m.data, m.headers) for m in got] == sent
    assert all(m.subject == f"P.{unique}" for m in got)
    after = nc.stats
    assert after["in_msgs"] - before["in_msgs"] == len(sent)
    assert after["in_bytes"] - before["in_bytes"] == sum(len(d) for d, _ in sent)
    nc.flush()  # (its PONG is another line the step hands to nats-py's parser)
    sub.unsubscribe()


def test_a_plain_header_block_is_parsed_without_natspys_header_coroutine(nc: jssync.Connection, js: Any,
                                                                         stream: Any, unique: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A header block without a status line is parsed on the I/O thread's step itself (the same
    dict nats-py's parser makes); a status (here a pull's idle heartbeats) still goes to nats-py's
    parser; a client whose parser keeps the raw blocks (the Spark source's ``includeHeaders``)
    still gets them."""
    import nats.aio.client

    calls: list[bytes] = []
    natspy_parse = nats.aio.client.Client._process_headers

    async def counted(self: Any, raw: bytes) -> Any:
        calls.append(raw)
        return await natspy_parse(self, raw)

    monkeypatch.setattr(nats.aio.client.Client, "_process_headers", counted)
    sent = [(b"%d" % i, {"N": str(i), "Nats-Msg-Id": f"m{i}", "Odd": " spaced  value "}) for i in range(50)]
    for data, headers in sent:
        js.publish(f"S{unique}.m", data, headers=headers)
    c = stream.create_consumer(durable_name="D", ack_policy="explicit")
    got = []
    with c.consume() as it:
        for m in it:
            got.append((m.data, m.headers))
            m.ack()
            if len(got) == len(sent):
                break
    assert got == [(d, {**h, "Odd": "spaced  value"}) for d, h in sent]
    assert calls == []  # none of them needed nats-py's header parser
    # a pull that waits with heartbeats: its status messages are nats-py's to parse
    assert list(c.fetch(1, expires=1.5, idle_heartbeat=0.5)) == []
    assert calls and all(b"100" in raw or b"408" in raw or b"404" in raw for raw in calls)
    # the raw blocks kept: the wrapper on this client is used, not the step's own parse
    assert _natspy.keep_header_blocks(nc.internal.nc)
    sub = nc.subscribe(f"B.{unique}")
    nc.publish(f"B.{unique}", b"x", headers={"A": "1"})
    m = sub.next_msg(timeout=10)
    assert m.headers == {"A": "1"} and isinstance(m.headers, _natspy.HeaderBlock)
    assert m.headers.block.startswith(b"NATS/1.0\r\nA: 1\r\n")
    sub.unsubscribe()


def _raw_publish(url: str, *lines: bytes) -> None:
    """Publish as a bare client that writes its own HPUB lines (no NATS/1.0 in the header block)."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(url)
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=10) as s:
        s.recv(65536)  # INFO
        s.sendall(b'CONNECT {"headers":true,"verbose":false,"protocol":1}\r\n' + b"".join(lines) + b"PING\r\n")
        got = b""
        while b"PONG\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, f"server closed the publisher: {got!r}"
            got += chunk


def test_a_header_block_without_the_nats_version_line_arrives_as_the_sizes_frame_it(
        nc: jssync.Connection, nats_server: Any, unique: str) -> None:
    """A server forwards whatever header block a publisher wrote: a 1-byte block of digits
    (``HMSG s 1 1 1\\r\\n0\\r\\n``, which nats-py's own HMSG pattern misreads, its last size
    running on over the line end) reaches the subscriber as one message with an empty payload,
    and the messages after it arrive too, on the same connection."""
    sub = nc.subscribe(f"R.{unique}")
    nc.flush()
    subject = f"R.{unique}".encode()
    _raw_publish(nats_server.url, b"HPUB " + subject + b" 1 1\r\n0\r\n", b"PUB " + subject + b" 5\r\nafter\r\n")
    first = sub.next_msg(timeout=10)
    second = sub.next_msg(timeout=10)
    assert (first.data, second.data, second.headers) == (b"", b"after", None)
    assert not first.headers  # (not a NATS/1.0 block: no fields in it)
    assert nc.is_connected
    nc.flush()
    sub.unsubscribe()
