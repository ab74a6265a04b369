"""Whether two subject filters can match a common subject (pure, no server)."""

from __future__ import annotations

import pytest

from jssync.base.validate import subjects_overlap


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("ORDERS.a", "ORDERS.a", True),
        ("ORDERS.a", "ORDERS.b", False),
        ("ORDERS.*", "ORDERS.b", True),
        ("ORDERS.*", "ORDERS.b.c", False),
        ("ORDERS.>", "ORDERS.b.c", True),
        ("ORDERS.>", "ORDERS", False),
        ("ORDERS.*", "ORDERS.eu.>", False),
        ("ORDERS.*.x", "ORDERS.eu.>", True),
        ("*.a", "ORDERS.>", True),
        ("*.a", "ORDERS.b", False),
        (">", "anything.at.all", True),
        ("a.*.c", "a.b.*", True),
        ("a.*.c", "a.b.d", False),
        ("OTHER.a", "ORDERS.>", False),
        ("a.b", "a.b.c", False),
    ],
)
def test_subject_filters_overlap_when_a_subject_matches_both(a: str, b: str, overlap: bool) -> None:
    assert subjects_overlap(a, b) is overlap
    assert subjects_overlap(b, a) is overlap
