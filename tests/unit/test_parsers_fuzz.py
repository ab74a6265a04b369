"""Property tests (hypothesis) for every parser and validator that sees outside input. No I/O.

The properties: bad input is refused with the one documented exception (never a
TypeError, KeyError, RecursionError... from deep inside), and what is accepted is safe to
put on the wire (no whitespace or CR/LF in subjects, no CR/LF in headers, names that
cannot change the shape of an API subject).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import string

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import jssync
from jssync.base.errors import APIError, check_api_response, permission_error
from jssync.base.jsack import NotJSMessageError, parse_ack_subject
from jssync.base.status import Action, Status, classify, decide
from jssync.base.validate import _encode_headers, validate_headers, validate_subject
from jssync.jetstream.context import validate_name
from tests.unit.core.test_wire import feed_both, msg_frame

pytestmark = pytest.mark.timeout(120)

#: Applied to every property test (not a global profile: other modules keep their settings).
#: JSSYNC_FUZZ_EXAMPLES=5000 runs a longer search.
fuzz = settings(max_examples=int(os.environ.get("JSSYNC_FUZZ_EXAMPLES", "100")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# Text that is likely to hit the edges: subject syntax, whitespace of every kind, controls.
_EDGY = st.sampled_from(list(".*> \t\r\n\x00\x0b\x0c\x1c\u00a0\u2028\u3000$_-") + ["..", ".>", "*.", "\r\n"])
edgy_text = st.lists(st.one_of(_EDGY, st.text(min_size=1, max_size=4)), max_size=12).map("".join)
any_text = st.one_of(st.text(max_size=40), edgy_text)
tokens = st.text(alphabet=string.ascii_letters + string.digits + "-_$", min_size=1, max_size=8)


def _reference_subject_ok(s: str, wildcards: bool) -> bool:
    """The documented rule, written independently of the code under test."""
    if not s or any(c.isspace() for c in s) or re.search(r"\s", s):
        return False
    toks = s.split(".")
    if any(t == "" for t in toks):
        return False
    for i, t in enumerate(toks):
        if t == ">" and i != len(toks) - 1:  # inside a longer token '>' is a literal
            return False
        if not wildcards and t in ("*", ">"):
            return False
    return True


# -- subjects ---------------------------------------------------------------------------------


@fuzz
@given(any_text, st.booleans())
@example("a.>", False)
@example("a.*.b", False)
@example("a\r\nPUB x 1", True)
@example("a\u2028b", True)
def test_subject_validation(subject, wildcards):
    try:
        validate_subject(subject, wildcards=wildcards)
        accepted = True
    except jssync.BadSubjectError as exc:
        accepted = False
        assert repr(subject) in str(exc) or "must be a str" in str(exc)
    assert accepted == _reference_subject_ok(subject, wildcards)
    if accepted:
        assert not any(c in subject for c in " \t\r\n")


@fuzz
@given(any_text)
def test_subject_cache_does_not_change_answers(subject):
    """The validation cache must give the same answer whatever order the modes are asked in."""
    def ask(wildcards: bool) -> bool:
        try:
            validate_subject(subject, wildcards=wildcards)
            return True
        except jssync.BadSubjectError:
            return False

    first = (ask(True), ask(False))
    second = (ask(False), ask(True))
    assert first == (second[1], second[0])
    assert first == (_reference_subject_ok(subject, True), _reference_subject_ok(subject, False))


@fuzz
@given(st.one_of(st.integers(), st.none(), st.binary(max_size=8), st.floats(allow_nan=False)))
def test_subject_of_wrong_type(value):
    with pytest.raises(jssync.BadSubjectError, match="must be a str"):
        validate_subject(value)  # type: ignore[arg-type]


# -- headers -------------------------------------------------------------------------------------

header_names = st.one_of(st.text(alphabet=string.ascii_letters + string.digits + "-_.!#$%&'*+^`|~", min_size=1,
                                 max_size=12), any_text)
header_values = st.one_of(st.text(max_size=30), edgy_text)


@fuzz
@given(st.dictionaries(header_names, header_values, max_size=6))
@example({"A": "1\r\nPUB evil 1"})
@example({"A": "x\ny"})
@example({"Bad Name": "v"})
@example({"Name:": "v"})
@example({"": "v"})
@example({"X\n": "v"})  # a trailing newline once slipped past a "$"-anchored pattern
def test_header_validation_and_encoding(headers):
    try:
        validate_headers(headers)
    except jssync.BadHeaderError:
        bad = [k for k, v in headers.items()
               if not re.fullmatch(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", k) or "\r" in v or "\n" in v]
        assert bad, f"refused good headers {headers!r}"
        return
    for k, v in headers.items():
        assert "\r" not in v and "\n" not in v and ":" not in k and k.strip() == k and k
    block = _encode_headers(headers).decode()
    lines = block.split("\r\n")
    # NATS/1.0, one line per header, then the empty line that ends the block
    assert lines[0] == "NATS/1.0" and lines[-2:] == ["", ""]
    assert len(lines) == len(headers) + 3
    assert [ln.split(":", 1)[0] for ln in lines[1:-2]] == list(headers)


@fuzz
@given(st.one_of(st.lists(st.text(max_size=3)), st.text(max_size=5), st.integers()))
def test_headers_of_wrong_type(value):
    with pytest.raises(jssync.BadHeaderError):
        validate_headers(value)  # type: ignore[arg-type]


@fuzz
@given(st.dictionaries(st.text(alphabet=string.ascii_letters, min_size=1, max_size=5),
                       st.one_of(st.integers(), st.none(), st.binary(max_size=3)), min_size=1, max_size=3))
def test_header_values_must_be_str(headers):
    with pytest.raises(jssync.BadHeaderError, match="must be a str"):
        validate_headers(headers)  # type: ignore[arg-type]


# -- stream and consumer names ----------------------------------------------------------------------


@fuzz
@given(st.one_of(any_text, st.text(min_size=250, max_size=300), st.integers(), st.none(), st.binary(max_size=5)))
@example("ORDERS")
@example("a.b")
@example("a b")
@example("a\u3000b")
@example("a/b")
@example("*")
@example("x" * 256)
def test_names(name):
    try:
        assert validate_name(name) == name
    except ValueError as exc:
        assert not isinstance(exc, TypeError)
        return
    # an accepted name cannot change the shape of the API subjects it is put into
    for what in ("STREAM.INFO", "CONSUMER.INFO.S"):
        subject = f"$JS.API.{what}.{name}"
        validate_subject(subject, wildcards=False)
        assert subject.split(".")[-1] == name
    assert len(name) <= 255


# -- JSAck (ADR-15) ---------------------------------------------------------------------------------

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@fuzz
@given(any_text)
@example("$JS.ACK")
@example("$JS.ACK.s.c.1.2.3.4")
@example("$JS.ACK.s.c.1.2.3.4.5.6")
@example("$JS.ACK.s.c.-1.2.3.4.5")
@example("$JS.ACK.s.c.1.2.3.x.5")
@example("$JS.ACK..c.1.2.3.4.5")
@example("$JS.ACK.s.c.1_0.2.3.4.5")
@example("$JS.ACK.s.c.\u0661.2.3.4.5")
def test_ack_subject_junk_only_raises_not_js_message_error(reply):
    try:
        meta = parse_ack_subject(reply)
    except NotJSMessageError:
        return
    assert reply.startswith("$JS.ACK.")
    assert meta.num_delivered >= 0 and meta.sequence.stream >= 0


@fuzz
@given(tokens, tokens, u64, u64, u64, u64, u64)
def test_ack_subject_v1_round_trip(stream, consumer, delivered, sseq, cseq, ts, pending):
    meta = parse_ack_subject(f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{ts}.{pending}")
    assert (meta.stream, meta.consumer, meta.num_delivered, meta.sequence.stream, meta.sequence.consumer,
            meta.num_pending, meta.domain) == (stream, consumer, delivered, sseq, cseq, pending, None)
    assert meta.timestamp.tzinfo is not None
    assert abs(meta.timestamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) <= dt.timedelta(seconds=ts / 1e9 + 1)


@fuzz
@given(st.one_of(st.just("_"), tokens), tokens, tokens, tokens, u64, u64, u64, u64, u64,
       st.lists(tokens, max_size=2))
def test_ack_subject_v2_round_trip(domain, acc, stream, consumer, delivered, sseq, cseq, ts, pending, extra):
    reply = ".".join(["$JS.ACK", domain, acc, stream, consumer, *map(str, (delivered, sseq, cseq, ts, pending)),
                      *extra])
    if len(extra) == 0 or len(reply.split(".")) >= 11:
        meta = parse_ack_subject(reply)
        assert meta.domain == (None if domain == "_" else domain)
        assert meta.account_hash == acc
        assert (meta.stream, meta.consumer, meta.num_delivered, meta.sequence.stream,
                meta.sequence.consumer, meta.num_pending) == (stream, consumer, delivered, sseq, cseq, pending)


@fuzz
@given(tokens, tokens, st.lists(st.one_of(u64.map(str), any_text), min_size=5, max_size=5))
def test_ack_subject_mutated_numbers(stream, consumer, nums):
    assume(all("." not in n for n in nums))
    reply = f"$JS.ACK.{stream}.{consumer}." + ".".join(nums)
    try:
        parse_ack_subject(reply)
    except NotJSMessageError:
        assert not all(n.isascii() and n.isdigit() for n in nums)


def test_ack_subject_absurd_timestamp_is_not_js_message_error():
    with pytest.raises(NotJSMessageError):
        parse_ack_subject(f"$JS.ACK.s.c.1.2.3.{10**30}.0")


def test_msg_metadata_on_junk_reply_is_a_jssync_error():
    msg = jssync.Msg(subject="x", reply="$JS.ACK.not.enough")
    with pytest.raises(jssync.Error, match="not a JetStream message"):
        msg.metadata  # noqa: B018


# -- status headers (ADR-37) --------------------------------------------------------------------------

status_values = st.one_of(st.sampled_from(["100", "404", "408", "409", "400", "503", "423", "100 Idle Heartbeat",
                                           "", "  ", "abc", "4O4", "\u0664\u0660\u0664", "99999999999"]),
                          st.text(max_size=8))


@fuzz
@given(st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["Status", "Description", "Nats-Pending-Messages", "Nats-Pending-Bytes", "Other"]),
    st.one_of(status_values, st.integers(min_value=-5, max_value=10**20).map(str), any_text), max_size=5)),
    st.binary(max_size=4))
def test_status_classification_never_raises(headers, data):
    status = classify(headers, data)
    if status is None:
        return
    assert isinstance(status, Status)
    assert status.pending_msgs >= 0 and status.pending_bytes >= 0
    assert isinstance(decide(status), Action)


# -- JetStream API replies -------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children,
                                                                                max_size=4)),
    max_leaves=12,
)
error_objects = st.fixed_dictionaries({}, optional={"code": json_values, "err_code": json_values,
                                                    "description": json_values})


@fuzz
@given(st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4).map(lambda d: json.dumps(d).encode()),
    st.one_of(error_objects, json_values).map(lambda e: json.dumps({"error": e}).encode()),
))
@example(b"")
@example(b"\xff\xfe")
@example(b"[" * 50_000)
@example(b'{"error": {"code": 400, "err_code": [1]}}')
@example(b'{"error": {"code": "x", "err_code": {}}}')
@example(b'{"error": "just text"}')
@example(b'{"type": "io.nats.jetstream.api.v1.stream_info_response"}')
def test_api_reply_parsing_raises_only_api_error(data):
    try:
        resp = check_api_response(data)
    except APIError as exc:
        assert exc.code is None or isinstance(exc.code, int)
        assert exc.err_code is None or isinstance(exc.err_code, int)
        assert isinstance(exc.description, str)
        return
    assert isinstance(resp, dict)
    assert not resp.get("error")


@fuzz
@given(st.integers(min_value=-10**6, max_value=10**6), st.integers(min_value=-10**6, max_value=10**6),
       st.text(max_size=30))
def test_api_error_replies_map_to_the_most_specific_class(code, err_code, description):
    data = json.dumps({"error": {"code": code, "err_code": err_code, "description": description}}).encode()
    with pytest.raises(APIError) as ei:
        check_api_response(data)
    assert (ei.value.code, ei.value.err_code, ei.value.description) == (code, err_code, description)


# -- permission -ERR texts ----------------------------------------------------------------------------


def _go_quote(text: str) -> str:
    """Quote like Go's %q for the characters the test generates."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c])
        elif ord(c) < 0x20:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


@fuzz
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=20),
       st.sampled_from(["Publish to", "Subscription to", "Publish with Reply of"]),
       st.one_of(st.none(), tokens), st.booleans())
@example("a\\b\"c", "Publish to", None, False)
def test_permission_error_texts(subject, kind, queue, lower):
    text = f"Permissions Violation for {kind} {_go_quote(subject)}"
    if queue:
        text += f" using queue {_go_quote(queue)}"
    if lower:
        text = "nats: " + text.lower()
    err = permission_error(text)
    assert isinstance(err, jssync.PermissionDeniedError)
    assert err.operation == ("subscribe" if kind.startswith("Subscription") else "publish")
    if not lower:
        assert err.subject == subject
    elif "\\" not in subject and not any(ord(c) < 0x20 for c in subject):
        assert err.subject == subject.lower()


@fuzz
@given(any_text)
@example('Permissions Violation for Publish to "a\\UFFFFFFFF\\x4"')
def test_permission_error_never_raises(text):
    err = permission_error(text)
    assert isinstance(err, jssync.PermissionDeniedError)


@pytest.mark.parametrize("key", ["k\n", "a.b\n", "\n"])
def test_kv_keys_and_bucket_names_with_a_trailing_newline_are_refused(key):
    from jssync.kv.keyvalue import validate_bucket, validate_key, validate_key_filter

    with pytest.raises(jssync.InvalidKeyError, match="invalid key"):
        validate_key(key)
    with pytest.raises(jssync.InvalidKeyError, match="invalid key filter"):
        validate_key_filter(key)
    with pytest.raises(jssync.InvalidBucketNameError, match="invalid bucket name"):
        validate_bucket("b" + key)


@given(
    name=st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s),
    seq=st.integers(min_value=0, max_value=2**64 - 1),
    duplicate=st.sampled_from([None, True, False]),
    domain=st.sampled_from([None, "hub"]),
    ascii_only=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_pub_ack_fast_path_matches_the_json_path(name, seq, duplicate, domain, ascii_only):
    """The byte-pattern PubAck parser gives what JSON decoding gives, for any stream name."""
    from jssync.jetstream.context import _parse_pub_ack

    class _Reply:
        headers = None

        def __init__(self, data: bytes) -> None:
            self.data = data

    doc: dict[str, object] = {"stream": name}
    if domain:
        doc["domain"] = domain
    doc["seq"] = seq
    if duplicate is not None:
        doc["duplicate"] = duplicate
    data = json.dumps(doc, separators=(",", ":"), ensure_ascii=ascii_only).encode()
    got = _parse_pub_ack(_Reply(data))
    assert (got.stream, got.seq, got.domain) == (name, seq, domain)
    assert bool(got.duplicate) == bool(duplicate)


# -- the I/O thread's MSG/HMSG step (core/wire.py msg_parser) against nats-py's parser ----------

_proto_tokens = st.text(alphabet=string.ascii_letters + string.digits + "._-$>*", min_size=1,
                        max_size=12).map(str.encode)
_proto_payloads = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"\r\n", b"MSG a 1 3\r\nabc\r\n", b"HMSG x 2 4 4\r\n", b"PING\r\n", b"\r\n\r\n"]),
    st.integers(min_value=1000, max_value=5000).map(lambda n: b"MSG \r\n" * (n // 6)),
)
_proto_headers = st.one_of(
    st.just(None),
    st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0 404 No Messages\r\n\r\n", b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
                     b"NATS/1.0\r\nNats-Msg-Id: MSG 1 2\r\nX: \r\n\r\n"]),
    st.binary(min_size=1, max_size=40),  # (the parser does not read the block: any bytes)
)


@st.composite
def _proto_frames(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["msg", "msg", "msg", "ping", "pong", "ok", "err", "info"]))
    if kind == "msg":
        reply = draw(st.one_of(st.just(b""), _proto_tokens))
        return msg_frame(draw(_proto_tokens), draw(st.integers(1, 10**6)), reply, draw(_proto_payloads),
                         draw(_proto_headers), draw(st.sampled_from([b" ", b" ", b"\t", b"  "])))
    return {"ping": b"PING\r\n", "pong": b"PONG\r\n", "ok": b"+OK\r\n",
            "err": b"-ERR 'Stale Connection'\r\n", "info": b'INFO {"server_id":"S","max_payload":1048576}\r\n'}[kind]


#: nats-py's HMSG pattern with its last separator kept on the line: nats-py's own (``\\s+``
#: between the two sizes) runs on over the line's CR LF when there is no reply subject, so a
#: header block of digits (``HMSG s 1 1 1\r\n0\r\n``, which a server forwards as a bare
#: publisher wrote it) is misread there: its line's sizes taken for reply and header size, and
#: the block's digits for the total. The sizes on the line are what frames the message (what
#: jssync's step reads), so the reference the step is held to is nats-py's parser with this.
_HMSG_ON_THE_LINE = re.compile(
    rb"\AHMSG\s+([^\s]+)\s+([^\s]+)\s+(([^\s]+)[^\S\r\n]+)?([\d]+)(?:[^\S\r]|\r(?!\n))+(\d+)\r\n")


@fuzz
@given(st.lists(_proto_frames(), min_size=1, max_size=25).map(b"".join),
       st.lists(st.integers(0, 1 << 16), max_size=12))
@example(b"HMSG 0 1 1 1\r\n0\r\n", [])
@example(b"HMSG 0 1 1 1\r\n0\r\nPING\r\n", [14, 16])
def test_msg_parser_hands_over_what_natspy_does_for_any_cut_of_any_stream(stream: bytes, at: list[int]) -> None:
    """Any stream of MSG/HMSG/PING/PONG/+OK/-ERR/INFO, cut into reads anywhere: after every read
    jssync's step has handed over the same messages and lines as nats-py's parser (message
    with headers: with the same ``needed``), and both agree on whether they are between messages.
    (nats-py's parser with its HMSG sizes read on the line alone: ``_HMSG_ON_THE_LINE``.)"""
    from unittest import mock

    import nats.protocol.parser as npp

    cuts = sorted({a % (len(stream) + 1) for a in at})
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    with mock.patch.object(npp, "HMSG_RE", _HMSG_ON_THE_LINE):
        old, new = asyncio.run(feed_both(chunks))
    assert new.events == old.events


def test_a_header_block_of_digits_is_framed_by_the_sizes_on_its_line() -> None:
    """Where nats-py's own HMSG pattern misreads (see ``_HMSG_ON_THE_LINE``), jssync's step hands
    the message over as its line's sizes frame it, and is between messages after it."""
    from tests.unit.core.test_wire import jssync_step, natspy_step, parser_idle

    stream = b"HMSG s 1 1 1\r\n0\r\n"

    async def step(make: object) -> tuple[list[object], bool]:
        rec, ps, parse = make()  # type: ignore[operator]
        await parse(stream)
        return rec.events, parser_idle(ps)

    assert asyncio.run(step(jssync_step)) == ([("MSG", 1, b"s", b"", b"", b"0", 1)], True)
    # (nats-py's own: "1" taken for a reply, the block's "0" for the total, waiting for more)
    assert asyncio.run(step(natspy_step)) == ([], False)
