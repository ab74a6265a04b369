"""One lease manager: every reader that holds JetStream messages with explicit acks (the pull
consume, the push subscription) renews their leases through consume/leasing.py's Leasing,
and only that module decides (plan_leases) or sends the +WPI of a lease."""

from __future__ import annotations

import pathlib

import pytest

from jssync.jetstream.consume.context import ConsumeContext
from jssync.jetstream.consume.leasing import Leasing
from jssync.jetstream.push import JetStreamSubscription

pytestmark = pytest.mark.timeout(10)

PKG = pathlib.Path(__file__).resolve().parents[3] / "jssync"
HOME = "jetstream/consume/leasing.py"


def test_the_pull_consume_and_the_push_subscription_share_the_lease_manager() -> None:
    assert issubclass(ConsumeContext, Leasing)
    assert issubclass(JetStreamSubscription, Leasing)
    # neither has a tick of its own
    assert ConsumeContext._lease_tick is Leasing._lease_tick
    assert JetStreamSubscription._lease_tick is Leasing._lease_tick


def test_leases_are_planned_in_one_module() -> None:
    users = sorted(path.relative_to(PKG).as_posix() for path in PKG.rglob("*.py")
                   if "plan_leases(" in path.read_text(encoding="utf-8"))
    assert users == ["jetstream/consume/leasing.py", "jetstream/leases.py"], users
