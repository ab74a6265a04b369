"""The pure parts of how a failed write counts the whole write (jssync/spark/aborting.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="jssync.spark needs PySpark (the spark extra)")

from jssync.spark import aborting


@pytest.mark.parametrize(("master", "configured", "attempts"), [
    ("local", "7", 1),
    ("local[2]", None, 1),
    ("local[*]", "3", 1),
    ("local[2,3]", None, 3),
    ("local[*, 5]", "9", 5),
    ("local-cluster[2,1,1024]", "2", 2),
    ("spark://host:7077", None, 4),
    ("yarn", "not a number", 4),
])
def test_the_attempts_a_task_has_follow_the_master_and_spark_task_max_failures(master, configured, attempts):
    assert aborting.task_max_failures(master, configured) == attempts


def _others(stopped=(), finished=(), asked=True, gone=True):
    o = aborting._Others()
    o.stopped = {r["partition"]: r for r in stopped}
    o.finished = {r["partition"]: r for r in finished}
    o.asked, o.gone = asked, gone
    return o


def test_the_whole_write_sentence_adds_the_failed_the_stopped_and_the_finished_tasks():
    o = _others(stopped=[{"partition": 1, "stored": 90, "duplicates": 10, "unsettled": 3}],
                finished=[{"partition": 0, "stored": 20, "duplicates": 0}, {"partition": 3, "stored": 5}])
    text = aborting.whole_write_text(600, 2, o)
    assert text.startswith("725 row(s) of this write are in the stream in all (600 of partition 2, 25 of 2 "
                           "finished task(s) [0, 3], 100 of 1 task(s) stopped by this failure [1]; 3 more were "
                           "published without a PubAck yet (they may be stored))"), text
    assert "not counted: tasks Spark killed" in text
    assert "were not stopped" not in text


def test_a_failure_that_stopped_nobody_says_the_running_tasks_are_not_counted():
    text = aborting.whole_write_text(7, 0, _others(asked=False, gone=False))
    assert text.startswith("7 row(s) of this write are in the stream in all")
    assert "tasks still running were not stopped from here and are not counted" in text
    late = aborting.whole_write_text(7, 0, _others(asked=True, gone=False))
    assert "some task of the write did not stop in time and is not counted" in late
    lossy = _others()
    lossy.lossy = True
    assert f"or long before this failure (a finished task relays the last {aborting.RELAYED}" in \
        aborting.whole_write_text(7, 0, lossy)


def test_finished_reports_relayed_by_other_tasks_are_merged_once_per_partition():
    into: dict[int, dict] = {}
    aborting._merge(into, [
        {"partition": 1, "stored": 10, "finished": [{"partition": 0, "stored": 4}]},
        {"partition": 0, "stored": 3, "duplicates": 2},  # the same partition, heard twice: the larger count
        "garbage",
        {"partition": "x"},
    ])
    assert {p: aborting.in_stream(r) for p, r in into.items()} == {0: 5, 1: 10}
    assert "finished" not in into[1]


def test_the_drivers_abort_counts_a_finished_partition_once_even_when_a_copy_of_it_was_stopped():
    reports = [
        {"partition": 1, "attempt": 1, "stored": 40, "duplicates": 0, "unsettled": 2},  # speculative copy
        {"partition": 2, "attempt": 0, "stored": 5, "duplicates": 0, "unsettled": 0},
        {"partition": 3, "attempt": 0, "rows": 9, "stored": 9, "duplicates": 0, "done": True},  # finished meanwhile
        {"partition": 3, "attempt": 1, "stored": 4, "duplicates": 0, "unsettled": 0},
    ]
    finished, stopped = aborting.abort_counts({1: 100, 0: 8}, reports)
    assert finished == {0: 8, 1: 100, 3: 9}
    assert sorted(stopped) == [2]
    assert aborting.in_stream(stopped[2]) == 5


def test_the_drivers_abort_counts_a_partition_stopped_in_two_attempts_once_with_the_larger_count():
    reports = [
        {"partition": 4, "attempt": 0, "stored": 30, "duplicates": 0, "unsettled": 0},
        {"partition": 4, "attempt": 1, "stored": 10, "duplicates": 30, "unsettled": 1},
    ]
    finished, stopped = aborting.abort_counts({}, reports)
    assert finished == {}
    assert list(stopped) == [4]
    assert stopped[4]["attempt"] == 1
    assert aborting.in_stream(stopped[4]) == 40
