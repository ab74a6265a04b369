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
