"""The pure part of the fast-ingest publisher (ADR-50, jssync/jetstream/fastbatch.py): reply subjects,
the server's messages, the window."""

from __future__ import annotations

import pytest

import jssync
from jssync.jetstream.fastbatch import (
    OP_APPEND,
    OP_EOB,
    OP_PING,
    OP_START,
    Final,
    FlowAck,
    FlowError,
    Gap,
    check_options,
    parse_reply,
    reply_subject,
    window_open,
)

pytestmark = pytest.mark.timeout(10)


def test_reply_subject_carries_flow_gap_sequence_and_operation():
    prefix = "_INBOX.abc.100.fail."
    assert reply_subject(prefix, 1, OP_START) == "_INBOX.abc.100.fail.1.0.$FI"
    assert reply_subject(prefix, 7, OP_APPEND) == "_INBOX.abc.100.fail.7.1.$FI"
    assert reply_subject(prefix, 8, OP_EOB) == "_INBOX.abc.100.fail.8.3.$FI"
    assert reply_subject(prefix, 7, OP_PING) == "_INBOX.abc.100.fail.7.4.$FI"


@pytest.mark.parametrize(("data", "want"), [
    (b'{"type":"ack","seq":10,"msgs":15}', FlowAck(10, 15)),
    (b'{"type":"ack","seq":0,"msgs":100}', FlowAck(0, 100)),
    (b'{"type":"gap","last_seq":3,"seq":4}', Gap(3, 4)),
])
def test_flow_messages(data, want):
    assert parse_reply(data, None) == want


def test_error_report_keeps_the_codes():
    r = parse_reply(b'{"type":"err","seq":10,"error":{"code":400,"err_code":10071,'
                    b'"description":"wrong last sequence: 1"}}', None)
    assert isinstance(r, FlowError) and r.seq == 10
    assert isinstance(r.error, jssync.WrongLastSequenceError)
    assert (r.error.code, r.error.err_code) == (400, 10071)


def test_final_pub_ack_and_final_error():
    r = parse_reply(b'{"stream":"S","seq":50,"batch":"abc","count":50}', None)
    assert isinstance(r, Final) and r.error is None and r.ack is not None
    assert (r.ack.stream, r.ack.seq, r.ack.batch_id, r.ack.batch_size) == ("S", 50, "abc", 50)
    r = parse_reply(b'{"error":{"code":400,"err_code":10205,"description":"batch publish is disabled"},'
                    b'"stream":"N","seq":0}', None)
    assert isinstance(r, Final) and r.ack is None
    assert isinstance(r.error, jssync.APIError) and r.error.err_code == 10205


def test_no_responders_status_ends_the_batch():
    r = parse_reply(b"", {"Status": "503"})
    assert isinstance(r, Final) and isinstance(r.error, jssync.NoRespondersError)


@pytest.mark.parametrize("data", [b"", b"nope", b"[1]", b'{"type":"ack","seq":-1,"msgs":1}',
                                  b'{"type":"ack","seq":1,"msgs":0}', b'{"type":"gap","seq":4}',
                                  b'{"type":"what"}', b'{"stream":"S"}'])
def test_unreadable_replies_end_the_batch_with_an_error(data):
    r = parse_reply(data, None)
    assert isinstance(r, Final) and isinstance(r.error, jssync.APIError)


def test_window_holds_flow_times_outstanding_acks():
    # flow 10, 2 outstanding acks: 20 messages beyond the last ack may be in flight
    assert window_open(20, 0, 10, 2)
    assert not window_open(21, 0, 10, 2)
    assert window_open(21, 10, 10, 2)  # the ack for 10 moved the window
    assert window_open(2, 1, 1, 1) and not window_open(3, 1, 1, 1)


@pytest.mark.parametrize(("opts", "what"), [
    ({"gap": "yes"}, "gap"), ({"gap": None}, "gap"), ({"flow": 0}, "flow"), ({"flow": 65536}, "flow"),
    ({"flow": True}, "flow"), ({"flow": 1.5}, "flow"), ({"max_outstanding_acks": 0}, "max_outstanding_acks"),
    ({"max_outstanding_acks": 4}, "max_outstanding_acks"),
])
def test_bad_options(opts, what):
    args = {"gap": "fail", "flow": 100, "max_outstanding_acks": 2, **opts}
    with pytest.raises(jssync.ValidationError, match=what):
        check_options(args["gap"], args["flow"], args["max_outstanding_acks"])
