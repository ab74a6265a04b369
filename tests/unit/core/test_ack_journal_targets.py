"""Which consumer an ack reply subject belongs to (the ack journal groups its resends by it)."""

from __future__ import annotations

import pytest

from jssync.core.ackjournal import ack_target

pytestmark = pytest.mark.timeout(10)


def test_an_ack_subject_without_a_domain_names_stream_and_consumer() -> None:
    assert ack_target("$JS.ACK.ORDERS.worker.1.22.7.1700000000000000000.0") == ("$JS.API", "ORDERS", "worker")


def test_an_ack_subject_with_a_domain_names_the_domain_api() -> None:
    reply = "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.22.7.1700000000000000000.0.tok"
    assert ack_target(reply) == ("$JS.hub.API", "ORDERS", "worker")
    assert ack_target(reply.replace(".hub.", "._.")) == ("$JS.API", "ORDERS", "worker")


def test_a_subject_that_is_no_ack_is_none() -> None:
    assert ack_target("_INBOX.abc.def") is None
    assert ack_target("$JS.ACK.too.short") is None
