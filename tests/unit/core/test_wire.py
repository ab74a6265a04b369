"""The wire encoder and reply parser (jssync/core/wire.py): pure functions, no server, no I/O.

Checked against a reader of the protocol written here independently of the code under test:
every burst the encoder builds reads back as the same messages in the same order, and every
reply line parses back to its payload and headers. The I/O thread's MSG/HMSG step
(``msg_parser``) is checked against nats-py's own parser, fed the same reads.
"""

from __future__ import annotations

import asyncio
import os
import string
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jssync.base.validate import _encode_headers
from jssync.core.wire import Item, Reply, encode_burst, encode_one, parse_reply

pytestmark = pytest.mark.timeout(120)

fuzz = settings(max_examples=int(os.environ.get("JSSYNC_FUZZ_EXAMPLES", "100")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])



def read_pubs(chunk: bytes) -> list[Item]:
    """The messages in ``chunk``: PUB <subject> [reply] <size>, HPUB <subject> <reply> <hdr> <total>."""
    out: list[Item] = []
    i = 0
    while i < len(chunk):
        j = chunk.index(b"\r\n", i)
        words = chunk[i:j].split(b" ")
        i = j + 2
        if words[0] == b"PUB":
            assert len(words) in (3, 4), words
            subject, reply, size = words[1], (words[2] if len(words) == 4 else b""), int(words[-1])
            hdrs = None
            data = chunk[i:i + size]
        else:
            assert words[0] == b"HPUB" and len(words) == 5, words
            subject, reply, hlen, total = words[1], words[2], int(words[3]), int(words[4])
            raw = chunk[i:i + hlen]
            assert raw.startswith(b"NATS/1.0\r\n") and raw.endswith(b"\r\n\r\n")
            hdrs = dict(line.split(": ", 1) for line in raw[10:-4].decode().split("\r\n") if line)
            data = chunk[i + hlen:i + total]
            size = total
        assert chunk[i + size:i + size + 2] == b"\r\n"
        i += size + 2
        out.append((subject.decode(), data, reply.decode(), hdrs))
    return out


tokens = st.text(alphabet=string.ascii_letters + string.digits + "-_$", min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=4).map(".".join)
header_maps = st.dictionaries(st.text(alphabet=string.ascii_letters + "-", min_size=1, max_size=8),
                              st.text(alphabet=string.ascii_letters + string.digits + " ", max_size=12).map(str.strip),
                              min_size=1, max_size=3)
items = st.tuples(subjects, st.binary(max_size=64), st.one_of(st.just(""), subjects),
                  st.one_of(st.none(), header_maps))


# -- encoding ---------------------------------------------------------------------------------


def test_a_publish_without_reply_without_and_with_headers() -> None:
    assert encode_one("s.x", b"hello") == b"PUB s.x 5\r\nhello\r\n"
    assert encode_one("s.x", b"hello", "_INBOX.abc.7") == b"PUB s.x _INBOX.abc.7 5\r\nhello\r\n"
    hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
    assert encode_one("s.x", b"hi", "r", {"K": "v"}) == b"HPUB s.x r %d %d\r\n" % (len(hdr), len(hdr) + 2) + \
        hdr + b"hi\r\n"
    assert encode_one("s.x", b"", "", {"K": "v"}).startswith(b"HPUB s.x  %d %d\r\n" % (len(hdr), len(hdr)))


def test_a_burst_stops_at_its_count_and_leaves_the_rest_queued_in_order() -> None:
    q: deque[Item] = deque((f"s.{i}", b"x" * i, "", None) for i in range(10))
    chunk, n, nbytes = encode_burst(q, 4, 1 << 20)
    assert (n, nbytes) == (4, 0 + 1 + 2 + 3)
    assert [m[0] for m in read_pubs(chunk)] == ["s.0", "s.1", "s.2", "s.3"]
    assert [m[0] for m in q] == [f"s.{i}" for i in range(4, 10)]


def test_a_burst_stops_at_its_payload_bytes_but_never_splits_a_message() -> None:
    q: deque[Item] = deque(("s", b"y" * 600, "", None) for _ in range(5))
    chunk, n, nbytes = encode_burst(q, 100, 1000)
    assert (n, nbytes, len(q)) == (2, 1200, 3)  # the cap is looked at before each message
    assert [m[1] for m in read_pubs(chunk)] == [b"y" * 600] * 2
    assert encode_burst(deque(), 10, 10) == (b"", 0, 0)


@fuzz
@given(st.lists(items, max_size=20), st.integers(min_value=1, max_value=25))
def test_every_burst_reads_back_as_the_messages_queued(queued: list[Item], limit: int) -> None:
    q = deque(queued)
    got: list[Item] = []
    while q:
        chunk, n, nbytes = encode_burst(q, limit, 100)
        assert 1 <= n <= limit
        back = read_pubs(chunk)
        assert len(back) == n and nbytes == sum(len(m[1]) for m in back)
        got += back
    assert got == queued


@fuzz
@given(items)
def test_one_message_is_a_burst_of_one(item: Item) -> None:
    one = encode_one(*item)
    assert one == encode_burst(deque([item]), 1, 1)[0]
    assert read_pubs(one) == [item]


# -- parsing a reply ----------------------------------------------------------------------------

HEAD = b"MSG _INBOX.abc."
SID = b"3"


def reply_bytes(token: bytes, data: bytes, headers: dict[str, str] | None, sid: bytes = SID) -> bytes:
    if headers is None:
        return b"MSG _INBOX.abc.%s %s %d\r\n%s\r\n" % (token, sid, len(data), data)
    hdr = _encode_headers(headers)
    return b"HMSG _INBOX.abc.%s %s %d %d\r\n%s%s\r\n" % (token, sid, len(hdr), len(hdr) + len(data), hdr, data)


@fuzz
@given(st.integers(min_value=1, max_value=10**9).map(lambda n: str(n).encode()), st.binary(max_size=300),
       st.one_of(st.none(), header_maps), st.binary(max_size=40))
def test_a_reply_parses_back_and_a_cut_one_asks_for_its_length(token: bytes, data: bytes,
                                                               headers: dict[str, str] | None, after: bytes) -> None:
    wire = reply_bytes(token, data, headers)
    got = parse_reply(wire + after, HEAD, SID, token)
    assert isinstance(got, Reply) and got.end == len(wire) and got.data == data and got.sid == 3
    assert got.hdr == (None if headers is None else _encode_headers(headers))
    line_end = wire.index(b"\r\n") + 2
    for cut in {line_end, (line_end + len(wire)) // 2, len(wire) - 1}:
        if cut < len(wire):
            assert parse_reply(wire[:cut], HEAD, SID, token) == len(wire)
    # another token, another sid, a limit below its size: never taken
    assert parse_reply(wire, HEAD, SID, token + b"0") is None
    assert parse_reply(reply_bytes(token, data, headers, b"4"), HEAD, SID, token) is None
    assert parse_reply(wire, HEAD, SID, token, limit=len(wire) - 1) is None


def _reference_parse(buf: bytes, token: bytes, limit: int) -> Reply | int | None:
    """The reply grammar as one regular expression (written here, apart from the parser under test)."""
    import re

    m = re.match(rb"(?:MSG _INBOX\.abc\.([^ \r\n]*) 3 ([0-9]+)|HMSG _INBOX\.abc\.([^ \r\n]*) 3 ([0-9]+) ([0-9]+))\r\n",
                 buf)
    if m is None:
        return None
    hmsg = m[1] is None
    tok, hn, n = (m[3], int(m[4]), int(m[5])) if hmsg else (m[1], 0, int(m[2]))
    end = m.end() + n + 2
    if tok != token or hn > n or end > limit:
        return None
    if len(buf) < end:
        return end
    if buf[end - 2:end] != b"\r\n":
        return None
    return Reply(end, 3, buf[m.end():m.end() + hn] if hmsg else None, buf[m.end() + hn:m.end() + n], n)


_line_bits = st.sampled_from([b"MSG ", b"HMSG ", b"H", b"_INBOX.abc.", b"_INBOX.abd.", b"7", b"71", b"3", b"4",
                              b" ", b"  ", b"\r\n", b"\r", b"\n", b"0", b"12", b"x", b"\xff", b"-1"])


@fuzz
@given(st.lists(_line_bits, max_size=12).map(b"".join), st.binary(max_size=30),
       st.integers(min_value=0, max_value=80))
def test_any_line_parses_as_the_reply_grammar_says(line: bytes, rest: bytes, limit: int) -> None:
    for buf in (line, line + rest, b"MSG _INBOX.abc." + line + rest, b"HMSG _INBOX.abc.7 3 " + line + rest):
        assert parse_reply(buf, HEAD, SID, b"7", limit) == _reference_parse(buf, b"7", limit), buf


def test_a_published_request_is_not_mistaken_for_its_reply() -> None:
    assert parse_reply(encode_one("_INBOX.abc.7", b"x", "r"), HEAD, SID, b"7") is None


# ----------------------------------------------------------------------------- header blocks


def _natspy_parse(raw: bytes) -> dict[str, str] | None:
    """nats-py's own parse of a header block (its coroutine, run to completion: no I/O)."""
    import nats.aio.client

    coro = nats.aio.client.Client()._process_headers(raw)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("nats-py's header parser waited")


_header_bytes = st.binary(max_size=12) | st.sampled_from(
    [b"Nats-Sequence", b"Nats-Time-Stamp", b" a ", b"a b", b"a\x1cb", b"\x1c", b"", b"\xff", b"K", b"\t",
     b"v\xc3\xa9", b"\xe9", b" 12 ", b":"])


@fuzz
@given(lines=st.lists(st.tuples(_header_bytes, st.sampled_from([b":", b": ", b":\t", b""]), _header_bytes),
                      max_size=6),
       extra=st.sampled_from([b"", b"\r\n", b"\r\n\r\n", b"\r\nbare\r\n"]))
def test_a_plain_header_block_parses_as_natspy_parses_it(lines: list[tuple[bytes, bytes, bytes]],
                                                         extra: bytes) -> None:
    import nats.aio.client

    from jssync.core.wire import parse_plain_headers

    if getattr(nats.aio.client, "parse_email", None) is not None:
        pytest.skip("fast_mail_parser is installed: nats-py parses headers with it")
    body = b"".join(k.replace(b"\r\n", b"") + sep + v.replace(b"\r\n", b"") + b"\r\n" for k, sep, v in lines)
    raw = b"NATS/1.0\r\n" + body + extra
    assert parse_plain_headers(raw) == _natspy_parse(raw)


@pytest.mark.parametrize("raw", [b"NATS/1.0 503\r\n\r\n", b"NATS/1.0 404 No Messages\r\n\r\n",
                                 b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n\r\n", b"NATS/1.1\r\n"])
def test_a_header_block_with_a_status_line_is_left_to_natspy(raw: bytes) -> None:
    from jssync.core.wire import parse_plain_headers

    assert parse_plain_headers(raw) is False


def test_the_usual_direct_get_headers_parse_to_their_dict() -> None:
    from jssync.core.wire import parse_plain_headers

    raw = (b"NATS/1.0\r\nNats-Stream: KV_b\r\nNats-Subject: $KV.b.k\r\nNats-Sequence: 7\r\n"
           b"Nats-Time-Stamp: 2026-01-01T00:00:00.5Z\r\nNats-Num-Pending: 0\r\n\r\n")
    assert parse_plain_headers(raw) == _natspy_parse(raw) == {
        "Nats-Stream": "KV_b", "Nats-Subject": "$KV.b.k", "Nats-Sequence": "7",
        "Nats-Time-Stamp": "2026-01-01T00:00:00.5Z", "Nats-Num-Pending": "0"}
    assert parse_plain_headers(b"NATS/1.0\r\n\r\n") is None


# -- the I/O thread's MSG/HMSG step (msg_parser), against nats-py's own parser ------------------


class Recorder:
    """A stand-in for nats-py's client as its parser sees it: records what the parser hands over.

    A message with headers is recorded with the parser's ``needed`` at that moment (what
    ``natspy.parser_needed`` reads while a message is handed over).
    """

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.ps: Any = None

    def msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        ev: tuple[Any, ...] = ("MSG", sid, bytes(subject), bytes(reply), bytes(data))
        if headers is not None:
            ev += (bytes(headers), self.ps.needed)
        self.events.append(ev)

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self.msg(sid, subject, reply, data, headers)

    async def _process_ping(self) -> None:
        self.events.append(("PING",))

    async def _process_pong(self) -> None:
        self.events.append(("PONG",))

    async def _process_err(self, err: str) -> None:
        self.events.append(("ERR", err))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.events.append(("INFO", info))


def natspy_step() -> tuple[Recorder, Any, Callable[[bytes], Awaitable[None]]]:
    """nats-py's own parser on a :class:`Recorder`: ``(recorder, parser, parse step)``."""
    from nats.protocol.parser import Parser

    rec = Recorder()
    rec.ps = ps = Parser(rec)
    return rec, ps, ps.parse


def jssync_step(awaited: Callable[[int], bool] = lambda sid: sid % 3 == 0
                ) -> tuple[Recorder, Any, Callable[[bytes], Awaitable[None]]]:
    """``msg_parser`` over a nats-py parser on a :class:`Recorder` (on a running loop).

    Its dispatch returns the done future, except for the sids ``awaited`` picks: for those it
    returns a coroutine (as jssync's dispatch does for a message with headers, and nats-py's
    own ``_process_msg`` for a subscription jssync does not own), which the step must await.
    """
    from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

    from jssync.core.wire import msg_parser

    rec = Recorder()
    rec.ps = ps = Parser(rec)
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)

    def dispatch(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> Awaitable[None]:
        if awaited(sid):
            return rec._process_msg(sid, subject, reply, data, headers)
        rec.msg(sid, subject, reply, data, headers)
        return done

    return rec, ps, msg_parser(ps, ps.parse, dispatch, done, AWAITING_CONTROL_LINE)


def parser_idle(ps: Any) -> bool:
    """What ``natspy.install_reader``'s idle check asks of the parser: nothing half-read."""
    from nats.protocol.parser import AWAITING_CONTROL_LINE

    return not ps.buf and ps.state == AWAITING_CONTROL_LINE


async def feed_both(chunks: list[bytes], whole: bool = True) -> tuple[Recorder, Recorder]:
    """Feed ``chunks`` to nats-py's parser and to ``msg_parser``; after each, both handed over
    the same things and agree on whether they are between messages (at the end, when the
    chunks make up ``whole`` messages, both are)."""
    old, old_ps, old_parse = natspy_step()
    new, new_ps, new_parse = jssync_step()
    for i, chunk in enumerate(chunks):
        await old_parse(chunk)
        await new_parse(chunk)
        assert new.events == old.events, f"after chunk {i}"
        assert parser_idle(new_ps) == parser_idle(old_ps), f"after chunk {i}"
    assert parser_idle(new_ps) or not whole
    return old, new


def msg_frame(subject: bytes, sid: int, reply: bytes, data: bytes, hdr: bytes | None = None,
              sep: bytes = b" ") -> bytes:
    """A MSG (HMSG with ``hdr``) as the server writes it (``sep`` between the fields)."""
    fields = [subject, str(sid).encode()] + ([reply] if reply else [])
    if hdr is None:
        return b"MSG" + sep + sep.join([*fields, str(len(data)).encode()]) + b"\r\n" + data + b"\r\n"
    sizes = [str(len(hdr)).encode(), str(len(hdr) + len(data)).encode()]
    return b"HMSG" + sep + sep.join(fields + sizes) + b"\r\n" + hdr + data + b"\r\n"


_HDR = b"NATS/1.0\r\nNats-Msg-Id: 7\r\n\r\n"
_STATUS = b"NATS/1.0 404 No Messages\r\n\r\n"
#: One of everything a server sends a client, with payloads that look like protocol lines.
_STREAM = b"".join([
    b'INFO {"server_id":"S","max_payload":1048576}\r\n',
    msg_frame(b"_INBOX.a.1", 5, b"$JS.ACK.S.C.1.1.1.1700000000000000000.0", b"x" * 128),
    msg_frame(b"a", 6, b"", b"MSG a 6 3\r\nabc\r\n"),
    b"PING\r\n",
    msg_frame(b"_INBOX.a.1", 5, b"$JS.ACK.S.C.1.2.2.1700000000000000000.0", b"with \r\n inside", _HDR),
    msg_frame(b"_INBOX.a.1", 5, b"", b"", _STATUS),
    b"+OK\r\n",
    msg_frame(b"b", 9, b"r", b""),
    msg_frame(b"c", 12, b"", b"HMSG c 12 4 4\r\n\r\n", b"NATS/1.0\r\n\r\n"),
    b"PONG\r\n",
    b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\n",
    msg_frame(b"d", 3, b"", b"tabs", sep=b"\t"),
    msg_frame(b"e", 4, b"r", b"hdr", _HDR, sep=b"  "),
])


def test_every_message_and_line_reaches_the_client_as_natspy_hands_it_over() -> None:
    async def run() -> None:
        old, new = await feed_both([_STREAM])
        assert [e[0] for e in new.events] == ["INFO", "MSG", "MSG", "PING", "MSG", "MSG", "MSG", "MSG", "PONG",
                                              "ERR", "MSG", "MSG"]
        assert new.events[2] == ("MSG", 6, b"a", b"", b"MSG a 6 3\r\nabc\r\n")
        assert new.events[4][4:] == (b"with \r\n inside", _HDR, len(_HDR) + len(b"with \r\n inside"))

    asyncio.run(run())


def test_a_stream_cut_at_any_byte_gives_the_same_messages() -> None:
    async def run() -> None:
        for cut in range(1, len(_STREAM)):
            await feed_both([_STREAM[:cut], _STREAM[cut:]])
        await feed_both([_STREAM[i:i + 1] for i in range(len(_STREAM))])  # a byte per read

    asyncio.run(run())


def test_a_large_message_in_many_reads_is_handed_over_once_whole() -> None:
    async def run() -> None:
        big = bytes(range(256)) * 1024  # 256 KiB, with CR, LF and "MSG" inside
        stream = msg_frame(b"big", 1, b"", big) + msg_frame(b"big", 1, b"r", big, _HDR) + b"PING\r\n"
        chunks = [stream[i:i + 65536] for i in range(0, len(stream), 65536)]
        _, new = await feed_both(chunks)
        assert [e[4] == big for e in new.events[:2]] == [True, True] and new.events[2] == ("PING",)

    asyncio.run(run())


def test_a_message_natspy_started_is_finished_by_natspy() -> None:
    from nats.protocol.parser import AWAITING_MSG_PAYLOAD, Parser

    async def run() -> None:
        rec, ps, parse = jssync_step()
        await Parser.parse(ps, b"MSG a 1 3\r\nab")  # nats-py's own step read the line: it is inside the payload
        assert ps.state == AWAITING_MSG_PAYLOAD
        await parse(b"c\r\nMSG a 1 1\r\nd\r\n")
        assert rec.events == [("MSG", 1, b"a", b"", b"abc"), ("MSG", 1, b"a", b"", b"d")]
        assert parser_idle(ps)

    asyncio.run(run())


@pytest.mark.parametrize("line", [b"MSG a 1 x\r\n", b"MSG a 1 -3\r\n", b"HMSG a 1 9 3\r\n", b"HMSG a b 1 3\r\n",
                                  b"NOPE\r\n", b"MSG a\r\n"])
def test_a_malformed_line_is_natspys_to_refuse(line: bytes) -> None:
    from nats.errors import ProtocolError

    async def run() -> None:
        old, old_ps, old_parse = natspy_step()
        new, new_ps, new_parse = jssync_step()
        data = msg_frame(b"ok", 1, b"", b"1") + line + msg_frame(b"ok", 1, b"", b"2")
        with pytest.raises(ProtocolError):
            await old_parse(data)
        with pytest.raises(ProtocolError):
            await new_parse(data)
        assert new.events == old.events  # (nats-py hands over an HMSG whose header is longer than it first)
        assert new.events[0] == ("MSG", 1, b"ok", b"", b"1") and ("MSG", 1, b"ok", b"", b"2") not in new.events

    asyncio.run(run())


def test_a_reset_while_a_message_is_awaited_drops_the_rest_of_the_read() -> None:
    async def run() -> None:
        rec, ps, parse = jssync_step(awaited=lambda sid: sid == 2)
        orig = rec._process_msg

        async def reset_on_two(sid: int, *args: Any) -> None:
            await orig(sid, *args)
            ps.reset()  # (nats-py resets its parser when the connection is lost)

        rec._process_msg = reset_on_two  # type: ignore[method-assign]
        await parse(msg_frame(b"a", 1, b"", b"1") + msg_frame(b"a", 2, b"", b"2") + msg_frame(b"a", 3, b"", b"3"))
        assert [e[1] for e in rec.events] == [1, 2] and parser_idle(ps)
        await parse(msg_frame(b"a", 4, b"", b"4"))  # the new connection's first message
        assert [e[1] for e in rec.events] == [1, 2, 4]

    asyncio.run(run())


def test_what_a_failed_hand_over_leaves_unparsed_stays_in_the_parser() -> None:
    async def run() -> None:
        rec, ps, parse = jssync_step(awaited=lambda sid: False)
        rest = msg_frame(b"a", 3, b"", b"3")
        failing = True

        def dispatch_fails(*args: Any) -> None:
            nonlocal failing
            if failing:
                failing = False
                raise RuntimeError("receiver failed")
            Recorder.msg(rec, *args)

        rec.msg = dispatch_fails  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            await parse(msg_frame(b"a", 1, b"", b"1") + rest)
        assert bytes(ps.buf) == rest
        await parse(b"")
        assert rec.events == [("MSG", 3, b"a", b"", b"3")] and parser_idle(ps)

    asyncio.run(run())
