"""Pure classification of pull statuses, pull request bodies and message sizes (no server)."""

from __future__ import annotations

import json

import pytest

import jssync
from jssync.base.status import (
    Action,
    PullRequestError,
    PushAction,
    Status,
    classify,
    decide,
    decide_push,
    is_no_responders,
    message_size,
    pull_request,
    status_error,
)

pytestmark = pytest.mark.timeout(10)


def st(code: str, desc: str = "", **extra: str) -> dict[str, str]:
    h = {"Status": code}
    if desc:
        h["Description"] = desc
    h.update(extra)
    return h


def test_user_messages():
    assert classify(None, b"") is None
    assert classify(None, b"data") is None
    assert classify({"Foo": "bar"}, b"") is None
    # a payload makes it a user message even with a Status header
    assert classify(st("404", "No Messages"), b"x") is None


@pytest.mark.parametrize(
    ("code", "desc", "action"),
    [
        ("100", "Idle Heartbeat", Action.HEARTBEAT),
        ("404", "No Messages", Action.DONE),
        ("408", "Request Timeout", Action.DONE),
        ("409", "Message Size Exceeds MaxBytes", Action.DONE),
        ("409", "Batch Completed", Action.DONE),
        ("409", "Consumer Deleted", Action.TERMINAL),
        ("409", "Consumer is push based", Action.TERMINAL),
        ("409", "Exceeded MaxRequestBatch of 10", Action.WARNING),
        ("409", "Exceeded MaxRequestExpires of 1s", Action.WARNING),
        ("409", "Exceeded MaxRequestMaxBytes of 100", Action.WARNING),
        ("409", "Exceeded MaxWaiting", Action.WARNING),
        ("409", "Leadership Change", Action.RESET),
        ("409", "Something New", Action.WARNING),
        ("400", "Bad Request", Action.ERROR),
        ("503", "", Action.NO_RESPONDERS),
        ("423", "Nats-Pin-Id mismatch", Action.PIN_LOST),
        ("423", "Nats-Wrong-Pin-Id", Action.PIN_LOST),
    ],
)
def test_decide(code, desc, action):
    s = classify(st(code, desc), b"")
    assert s is not None and s.code == int(code) and s.description == desc
    assert decide(s) is action


def test_pending_headers():
    s = classify(st("408", "Request Timeout", **{"Nats-Pending-Messages": "7", "Nats-Pending-Bytes": "1024"}), b"")
    assert s == Status(408, "Request Timeout", 7, 1024)
    # malformed or negative values count as 0
    s = classify(st("408", "", **{"Nats-Pending-Messages": "x", "Nats-Pending-Bytes": "-5"}), b"")
    assert (s.pending_msgs, s.pending_bytes) == (0, 0)


def test_malformed_status_code():
    s = classify({"Status": "abc"}, b"")
    assert s is not None and s.code == 0 and decide(s) is Action.WARNING


def test_user_message_with_status_header_and_ack_reply():
    # a stored message with an empty payload and a Status header is delivered with an ack subject
    assert classify(st("100", "Idle Heartbeat"), b"", "$JS.ACK.S.C.1.1.1.0.0") is None
    assert classify({"Status": ""}, b"") is None


def test_flow_control_request():
    # ADR-15: "100 FlowControl Request" comes with a reply subject to answer
    s = classify(st("100", "FlowControl Request"), b"", "$JS.FC.S.C.xyz")
    assert s is not None and s.code == 100 and s.flow_control == "$JS.FC.S.C.xyz"
    assert decide_push(s) is PushAction.FLOW_CONTROL
    assert decide(s) is Action.HEARTBEAT


def test_idle_heartbeat_headers():
    h = st("100", "Idle Heartbeat", **{"Nats-Last-Consumer": "42", "Nats-Last-Stream": "99",
                                        "Nats-Consumer-Stalled": "$JS.FC.S.C.abc"})
    s = classify(h, b"")
    assert s is not None and s.flow_control == ""
    assert (s.last_consumer, s.last_stream, s.stalled) == (42, 99, "$JS.FC.S.C.abc")
    assert decide_push(s) is PushAction.HEARTBEAT
    # absent or malformed sequence headers read as -1; no stalled subject as ""
    s = classify(st("100", "Idle Heartbeat", **{"Nats-Last-Consumer": "x"}), b"")
    assert s is not None and (s.last_consumer, s.last_stream, s.stalled) == (-1, -1, "")
    # only a 100 carries them
    s = classify(st("404", "No Messages", **{"Nats-Last-Consumer": "3"}), b"", "_INBOX.x")
    assert s is not None and (s.last_consumer, s.flow_control) == (-1, "")


@pytest.mark.parametrize(
    ("code", "desc", "action"),
    [
        ("404", "No Messages", PushAction.END),
        ("408", "Request Timeout", PushAction.END),
        ("409", "Consumer Deleted", PushAction.CONSUMER_DELETED),
        ("409", "Exceeded MaxWaiting", PushAction.OTHER),
        ("400", "Bad Request", PushAction.OTHER),
        ("503", "", PushAction.OTHER),
        ("abc", "", PushAction.OTHER),
    ],
)
def test_decide_push(code, desc, action):
    s = classify(st(code, desc), b"")
    assert s is not None and decide_push(s) is action


def test_direct_get_end_of_batch():
    # ADR-31: a batch ends with "204 EOB" carrying the batch's counters
    s = classify(st("204", "EOB", **{"Nats-Num-Pending": "0", "Nats-Last-Sequence": "5"}), b"")
    assert s is not None and s.code == 204 and s.description == "EOB"


def test_request_statuses():
    for code in ("404", "408", "409"):
        s = classify(st(code, "x"), b"")
        assert s is not None and s.code == int(code)
    assert is_no_responders(st("503"), b"")
    assert not is_no_responders(st("503"), b"data")
    assert not is_no_responders(st("404", "Not Found"), b"")
    assert not is_no_responders(None, b"")
    assert not is_no_responders({"Foo": "1"}, b"")


def test_status_errors():
    e = status_error(Status(409, "Consumer Deleted", 0, 0), "S", "C")
    assert isinstance(e, jssync.ConsumerDeletedError) and "'C'" in str(e)
    e = status_error(Status(409, "Consumer is push based", 0, 0), "S", "C")
    assert isinstance(e, jssync.ConsumerIsPushBasedError)
    e = status_error(Status(409, "Exceeded MaxWaiting", 0, 0), "S", "C")
    assert isinstance(e, PullRequestError) and isinstance(e, jssync.APIError)
    assert e.code == 409 and "Exceeded MaxWaiting" in e.description
    e = status_error(Status(400, "Bad Request", 0, 0), "S", "C")
    assert isinstance(e, PullRequestError) and e.code == 400
    assert isinstance(status_error(Status(503, "", 0, 0), "S", "C"), jssync.NoRespondersError)


def test_pull_request_body():
    assert json.loads(pull_request(10)) == {"batch": 10}
    body = json.loads(pull_request(5, expires_ns=30_000_000_000, max_bytes=100, heartbeat_ns=500_000_000))
    assert body == {"batch": 5, "expires": 30_000_000_000, "max_bytes": 100, "idle_heartbeat": 500_000_000}
    assert json.loads(pull_request(3, no_wait=True)) == {"batch": 3, "no_wait": True}


def test_pull_request_body_priority_groups():
    # ADR-42: group, then only the options that are set; the pin id as "id"
    assert json.loads(pull_request(1, group="jobs")) == {"batch": 1, "group": "jobs"}
    body = json.loads(pull_request(2, group="a/b=c-_", min_pending=5, min_ack_pending=7, priority=3,
                                   pin_id='x"y'))
    assert body == {"batch": 2, "group": "a/b=c-_", "min_pending": 5, "min_ack_pending": 7, "priority": 3,
                    "id": 'x"y'}
    assert "min_pending" not in json.loads(pull_request(1, group="g", min_pending=0, pin_id=None))


def test_message_size_like_the_server():
    # len(subject) + len(reply) + len(header block) + len(payload)
    assert message_size("a.b", "$JS.ACK.x", None, b"hello") == 3 + 9 + 5
    hdr = b"NATS/1.0\r\nK: v1\r\n\r\n"
    assert message_size("a", "r", {"K": "v1"}, b"") == 1 + 1 + len(hdr)


def test_ordered_ack_tokens():
    from jssync.jetstream.ordered import _ack_tokens

    assert _ack_tokens("$JS.ACK.S.C.1.10.5.1700000000000000000.0") == ("C", 10, 5)
    assert _ack_tokens("$JS.ACK._.HASH.S.C.2.11.6.1700000000000000000.3.tok") == ("C", 11, 6)
    assert _ack_tokens("$JS.ACK.S.C.x.10.5.1.0") == ("C", 10, 5)  # only the sequences must be numbers
    assert _ack_tokens("$JS.ACK.S.C.1.ten.5.1.0") is None
    assert _ack_tokens("$JS.ACK.S.C.1.2") is None
    assert _ack_tokens("") is None
