"""The wire encoder and reply parser (jssync/core/wire.py): pure functions, no server, no I/O.

Checked against a reader of the protocol written here independently of the code under test:
every burst the encoder builds reads back as the same messages in the same order, and every
reply line parses back to its payload and headers.
"""

from __future__ import annotations

import os
import string
from collections import deque

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
