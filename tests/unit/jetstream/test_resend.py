"""The one schedule of resends after a 503 (publish_async, the Spark sink's rows): pure."""

from __future__ import annotations

from jssync.jetstream.resend import RESEND_MARGIN, resend_delay


def test_each_resend_waits_one_wait_longer_than_the_last():
    assert [resend_delay(n, 3, 0.25, 100.0, 200.0) for n in range(3)] == [0.25, 0.5, 0.75]


def test_no_resend_once_the_attempts_are_used_up():
    assert resend_delay(2, 2, 0.25, 100.0, 200.0) is None
    assert resend_delay(0, 0, 0.25, 100.0, 200.0) is None


def test_no_resend_whose_reply_could_not_come_before_the_deadline():
    assert resend_delay(0, 2, 0.25, 100.0, 100.25 + RESEND_MARGIN) is None
    assert resend_delay(0, 2, 0.25, 100.0, 100.25 + RESEND_MARGIN + 0.01) == 0.25
