"""The consume's lease decisions (jssync/jetstream/leases.py): pure, no server, no clock."""

from __future__ import annotations

import pytest

from jssync.jetstream.leases import MAX_EXTENSION, MAX_PERIOD, MIN_PERIOD, Lease, check_period, plan_leases


def _plan(leases, now, ack_wait=2.0, max_extension=600.0, done=()):
    return plan_leases(leases, now, ack_wait, max_extension, lambda item: item in done)


def test_a_lease_is_renewed_once_half_its_ack_wait_passed():
    young, old = Lease("young", 10.0), Lease("old", 9.5)
    plan = _plan([young, old], now=10.4)
    assert plan.extend == []
    assert plan.keep == [young, old]
    plan = _plan([young, old], now=10.5)
    assert plan.extend == [old]
    assert plan.keep == [young, old]


def test_the_renewal_time_counts_not_the_receipt():
    lease = Lease("m", 0.0)
    lease.renewed = 100.0
    assert _plan([lease], now=100.5).extend == []
    assert _plan([lease], now=101.0).extend == [lease]


def test_acked_messages_are_dropped():
    a, b = Lease("acked", 0.0), Lease("open", 0.0)
    plan = _plan([a, b], now=5.0, done={"acked"})
    assert plan.keep == [b]
    assert plan.extend == [b]
    assert plan.expired == 0


def test_leases_past_the_maximum_extension_are_given_up():
    old, new = Lease("old", 0.0), Lease("new", 50.0)
    plan = _plan([old, new], now=60.0, max_extension=60.0)
    assert plan.keep == [new]
    assert plan.extend == [new]
    assert plan.expired == 1


@pytest.mark.parametrize(("ack_wait", "period"), [(2.0, 0.25), (30.0, 3.75), (0.1, MIN_PERIOD), (3600.0, MAX_PERIOD)])
def test_check_period_follows_the_ack_wait(ack_wait, period):
    assert check_period(ack_wait) == pytest.approx(period)


def test_a_consume_keeps_a_lease_ten_minutes_from_receipt():
    """The consume passes MAX_EXTENSION: a message held 10 minutes is no longer renewed."""
    assert MAX_EXTENSION == 600.0
    kept, gone = Lease("kept", 0.5), Lease("gone", 0.0)
    plan = plan_leases([kept, gone], 600.0, 30.0, MAX_EXTENSION, lambda item: False)
    assert plan.keep == [kept] and plan.extend == [kept] and plan.expired == 1
