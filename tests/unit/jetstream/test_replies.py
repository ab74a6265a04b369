"""JetStream API replies (jssync/jetstream/replies.py): the PubAck parse, pure, no server."""

from __future__ import annotations

import dataclasses

import pytest

from jssync.jetstream.replies import PubAck, _parse_pub_ack

pytestmark = pytest.mark.timeout(60)


class _Reply:
    headers = None
    reply = ""

    def __init__(self, data: bytes) -> None:
        self.data = data


@pytest.mark.parametrize("data, expected", [
    (b'{"stream":"S","seq":7}', PubAck("S", 7, None, False)),
    (b'{"stream":"S","seq":7,"duplicate":true}', PubAck("S", 7, None, True)),
    (b'{"stream":"S","domain":"hub","seq":7}', PubAck("S", 7, "hub", False)),
])
def test_the_usual_pub_ack_is_the_same_object_the_dataclass_builds(data: bytes, expected: PubAck) -> None:
    got = _parse_pub_ack(_Reply(data))  # type: ignore[arg-type]
    assert type(got) is PubAck
    assert got == expected and repr(got) == repr(expected)
    assert vars(got) == vars(expected) and list(vars(got)) == list(vars(expected))
    assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    assert got.duplicate is expected.duplicate


_ack_bits = [b'{"stream":"', b'","seq":', b'"', b"\\", b"S", b"\xc3\xa9", b"7", b"0", b"-1", b"",
             b',"duplicate":true', b',"duplicate":false', b"}", b" ", b',"domain":"d"']


@pytest.mark.parametrize("parts", [
    (0, 4, 1, 6, 12), (0, 4, 1, 6, 10, 12), (0, 4, 1, 6, 11, 12), (0, 1, 6, 12), (0, 4, 2, 4, 1, 6, 12),
    (0, 4, 3, 4, 1, 6, 12), (0, 4, 1, 8, 12), (0, 4, 1, 6, 12, 13), (0, 4, 1, 12), (0, 5, 1, 6, 7, 12),
    (0, 4, 1, 6, 14, 12), (0, 4, 1, 6, 10, 10, 12), (0, 4, 1, 1, 6, 12),
])
def test_the_byte_level_pub_ack_parse_gives_what_json_gives(parts: tuple[int, ...]) -> None:
    import json

    data = b"".join(_ack_bits[i] for i in parts)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    try:
        got: PubAck | type[BaseException] = _parse_pub_ack(_Reply(data))  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - compared below
        got = type(exc)
    if isinstance(doc, dict) and type(doc.get("stream")) is str and type(doc.get("seq")) is int:
        assert isinstance(got, PubAck), data
        assert (got.stream, got.seq, got.domain, got.duplicate) == (
            doc["stream"], doc["seq"], doc.get("domain"), doc.get("duplicate") is True), data
    else:
        assert not isinstance(got, PubAck), data
