"""Ordered consumers with deliver_policy last_per_subject, re-created while the initial values are read.

The initial values are the latest message of each subject. A consumer re-created meanwhile
(here: the ephemeral consumer deleted under it) must ask again for the latest per subject and
pass over those delivered already: re-created from a start sequence it would deliver older
revisions as if they were the latest. Once the initial values are read, a re-created consumer
goes on from the next stream sequence (every later message, not only the latest per subject).
"""

from __future__ import annotations

import pytest

import jssync
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)

KEYS = 10


def _two_revisions(js, stream) -> None:
    """s.k0 v1, s.k0 v2, s.k1 v1, s.k1 v2, ...: the latest of each key has an older one just before it."""
    for i in range(KEYS):
        js.publish(f"{stream.name}.k{i}", b"v1")
        js.publish(f"{stream.name}.k{i}", b"v2")


def _got(msgs, stream) -> list[tuple[str, bytes]]:
    n = len(stream.name) + 1
    return [(m.subject[n:], m.data) for m in msgs]


LATEST = [(f"k{i}", b"v2") for i in range(KEYS)]


def test_next_recreated_during_initial_values(js, stream):
    _two_revisions(js, stream)
    oc = stream.ordered_consumer(deliver_policy="last_per_subject", filter_subjects=f"{stream.name}.>")
    got = [oc.next(timeout=5), oc.next(timeout=5)]
    js.delete_consumer(stream.name, oc.name)
    first = oc.name
    while len(got) < KEYS:
        got.append(oc.next(timeout=5))
    assert oc.name != first  # it was re-created
    assert _got(got, stream) == LATEST


def test_fetch_recreated_during_initial_values(js, stream):
    _two_revisions(js, stream)
    oc = stream.ordered_consumer(deliver_policy="last_per_subject", filter_subjects=f"{stream.name}.>")
    got = list(oc.fetch(3, expires=1))
    assert len(got) == 3
    js.delete_consumer(stream.name, oc.name)
    first = oc.name
    for _ in range(20):
        if len(got) >= KEYS:
            break
        got += list(oc.fetch(KEYS, expires=1))
    assert oc.name != first
    assert _got(got, stream) == LATEST


def test_consume_recreated_during_initial_values(js, stream):
    _two_revisions(js, stream)
    oc = stream.ordered_consumer(deliver_policy="last_per_subject", filter_subjects=f"{stream.name}.>")
    warnings: list[BaseException] = []
    # a pull request that reached the consumer while it was deleted gets no status: the
    # missed heartbeat (after 1 s) is what replaces it then
    cc = oc.consume(max_messages=1, expires=2, idle_heartbeat=0.5, error_cb=warnings.append)
    try:
        got = [cc.next(timeout=5)]
        js.delete_consumer(stream.name, oc.name)
        while len(got) < KEYS:
            got.append(cc.next(timeout=5))
        wait_for(lambda: cc.resets >= 1, what="the consumer re-created")
        assert cc.resets == 1
    finally:
        cc.stop()
    assert _got(got, stream) == LATEST


def test_after_initial_values_recreated_from_sequence(js, stream):
    """Past the initial values a re-created consumer delivers every later revision, not just the latest."""
    _two_revisions(js, stream)
    oc = stream.ordered_consumer(deliver_policy="last_per_subject", filter_subjects=f"{stream.name}.>")
    got = [oc.next(timeout=5) for _ in range(KEYS)]
    assert _got(got, stream) == LATEST
    for v in (b"v3", b"v4", b"v5"):
        js.publish(f"{stream.name}.k0", v)
    assert _got([oc.next(timeout=5)], stream) == [("k0", b"v3")]
    js.delete_consumer(stream.name, oc.name)
    assert _got([oc.next(timeout=5), oc.next(timeout=5)], stream) == [("k0", b"v4"), ("k0", b"v5")]
    with pytest.raises(jssync.TimeoutError):
        oc.next(timeout=0.5)


def test_nothing_initial_then_recreated_keeps_every_revision(js, stream):
    """No message when the consumer is created: every later revision counts, also across a re-create."""
    oc = stream.ordered_consumer(deliver_policy="last_per_subject", filter_subjects=f"{stream.name}.>")
    with pytest.raises(jssync.TimeoutError):
        oc.next(timeout=0.3)
    js.delete_consumer(stream.name, oc.name)
    js.publish(f"{stream.name}.k0", b"v1")
    js.publish(f"{stream.name}.k0", b"v2")
    assert _got([oc.next(timeout=5), oc.next(timeout=5)], stream) == [("k0", b"v1"), ("k0", b"v2")]
