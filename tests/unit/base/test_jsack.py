"""Pure parsing of JetStream ack subjects (no server needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from jssync.base.jsack import NotJSMessageError, parse_ack_subject


def test_v1_subject():
    m = parse_ack_subject("$JS.ACK.ORDERS.DISPATCH.2.10.5.1700000000000000000.7")
    assert m.stream == "ORDERS" and m.consumer == "DISPATCH"
    assert m.num_delivered == 2 and m.sequence.stream == 10 and m.sequence.consumer == 5
    assert m.num_pending == 7 and m.domain is None
    assert m.timestamp == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)


def test_v2_subject_with_domain_and_extra_tokens():
    m = parse_ack_subject("$JS.ACK.hub.ACCHASH.S.C.1.3.4.1700000000000000000.0.rand.more")
    assert (m.domain, m.account_hash, m.stream, m.consumer) == ("hub", "ACCHASH", "S", "C")
    assert m.sequence.stream == 3 and m.sequence.consumer == 4


def test_v2_no_domain_underscore():
    assert parse_ack_subject("$JS.ACK._.H.S.C.1.3.4.1700000000000000000.0.r").domain is None


@pytest.mark.parametrize(
    "subject",
    ["", "foo", "$JS.ACK.S.C.1.2.3", "$JS.ACK.S.C.x.2.3.4.5", "$JS.NAK.S.C.1.2.3.4.5",
     "$JS.ACK.a.b.S.C.1.2.3.4", "$JS.ACK.S.C.1.-2.3.4.5", "$JS.ACK.S.C.+1.2.3.4.5", "$JS.ACK.S.C.1_0.2.3.4.5",
     "$JS.ACK.S.C.\u0661.2.3.4.5", "$JS.ACK.S.C.1.2.3. 4.5"],
)
def test_not_ack_subjects(subject):
    with pytest.raises(NotJSMessageError):
        parse_ack_subject(subject)


def test_timestamp_truncated_not_rounded():
    m = parse_ack_subject("$JS.ACK.S.C.1.1.1.1700000000123456789.0")
    assert m.timestamp.microsecond == 123456


def test_timestamp_past_year_9999_is_not_an_ack_subject():
    # was OverflowError from timedelta: not a jssync error, and it escaped Msg.metadata
    with pytest.raises(NotJSMessageError):
        parse_ack_subject(f"$JS.ACK.S.C.1.2.3.{10**30}.0")
