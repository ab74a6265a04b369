"""Consumer group configs: orbit's stored JSON read and written alike, partition maps, validation (pure)."""

from __future__ import annotations

import json

import pytest

import jssync
from jssync.pcgroups import (
    ElasticConsumerGroupConfig,
    MemberMapping,
    PartitioningFilter,
    StaticConsumerGroupConfig,
    balanced_assignment,
    partition_filters,
)
from jssync.pcgroups.config import partition_transform, strip_partition

# What orbit.go's json.Marshal writes for these configs (struct field order, omitempty on
# filters/members/member_mappings/max_buffered_*, and null for nil slices that are always written).
ORBIT_STATIC_BALANCED = b'{"max_members":4,"members":["m1","m2"]}'
ORBIT_STATIC_FILTERED = b'{"max_members":6,"filters":["orders.>"],"members":["m2","m1","m3"]}'
ORBIT_STATIC_MAPPED = (b'{"max_members":3,"member_mappings":[{"member":"m1","partitions":[0,2]},'
                       b'{"member":"m2","partitions":[1]}]}')
ORBIT_ELASTIC_NEW = b'{"max_members":10,"partitioning_filters":[{"filter":"foo.*","partitioning_wildcards":[1]}]}'
ORBIT_ELASTIC_NULLS = b'{"max_members":3,"partitioning_filters":null,"members":["a"]}'
ORBIT_ELASTIC_FULL = (b'{"max_members":4,"partitioning_filters":[{"filter":"foo.*.*","partitioning_wildcards":[2,1]},'
                      b'{"filter":"bar.>","partitioning_wildcards":null}],"max_buffered_msg":1000,'
                      b'"max_buffered_bytes":1048576,"members":["m1","m2","m3"]}')


@pytest.mark.parametrize("raw", [ORBIT_STATIC_BALANCED, ORBIT_STATIC_FILTERED, ORBIT_STATIC_MAPPED])
def test_static_configs_orbit_wrote_parse_and_are_written_back_byte_for_byte(raw):
    cfg = StaticConsumerGroupConfig.from_json(raw)
    assert cfg.to_json() == raw


@pytest.mark.parametrize("raw", [ORBIT_ELASTIC_NEW, ORBIT_ELASTIC_NULLS, ORBIT_ELASTIC_FULL])
def test_elastic_configs_orbit_wrote_parse_and_are_written_back_byte_for_byte(raw):
    cfg = ElasticConsumerGroupConfig.from_json(raw)
    assert cfg.to_json() == raw


def test_parsed_fields():
    cfg = ElasticConsumerGroupConfig.from_json(ORBIT_ELASTIC_FULL, revision=7)
    assert cfg.max_members == 4 and cfg.max_buffered_msgs == 1000 and cfg.max_buffered_bytes == 1048576
    assert cfg.partitioning_filters == [PartitioningFilter("foo.*.*", [2, 1]), PartitioningFilter("bar.>", None)]
    assert cfg.members == ["m1", "m2", "m3"] and cfg.revision == 7
    s = StaticConsumerGroupConfig.from_json(ORBIT_STATIC_MAPPED)
    assert s.member_mappings == [MemberMapping("m1", [0, 2]), MemberMapping("m2", [1])]
    assert s.is_in_membership("m2") and not s.is_in_membership("m3")


def test_written_json_uses_orbits_field_names():
    cfg = ElasticConsumerGroupConfig(2, [PartitioningFilter("a.*", [1])], 5, 6, None,
                                     [MemberMapping("x", [0]), MemberMapping("y", [1])])
    assert json.loads(cfg.to_json()) == {
        "max_members": 2, "partitioning_filters": [{"filter": "a.*", "partitioning_wildcards": [1]}],
        "max_buffered_msg": 5, "max_buffered_bytes": 6,
        "member_mappings": [{"member": "x", "partitions": [0]}, {"member": "y", "partitions": [1]}]}


def test_balanced_assignment_gives_equal_runs_and_the_remainder_round_robin():
    # 10 partitions over 3 members: runs of 3, partition 9 goes to the first member
    assert balanced_assignment(["c", "a", "b"], 10) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["a"]
    # 7 over 3: runs of 2 and one extra
    assert balanced_assignment(["a", "b", "c"], 7) == ["a", "a", "b", "b", "c", "c", "a"]
    # de-duplicated, sorted, capped at max_members
    assert balanced_assignment(["z", "y", "y", "x"], 2) == ["x", "y"]
    assert balanced_assignment([], 4) == []
    assert balanced_assignment(["m1", "m2"], 4) == ["m1", "m1", "m2", "m2"]


def test_partition_filters_of_a_member():
    assert partition_filters(["m1", "m2"], 4, None, "m2", ">") == ["2.>", "3.>"]
    assert partition_filters(["m1", "m2"], 4, None, "m3", ">") == []
    # mappings name partitions: each gives p.> whatever the filter
    mm = [MemberMapping("m1", [0, 2]), MemberMapping("m2", [1])]
    assert partition_filters(None, 3, mm, "m1", "foo.*") == ["0.>", "2.>"]
    s = StaticConsumerGroupConfig.from_json(ORBIT_STATIC_FILTERED)
    assert s.partition_filters("m1") == ["0.orders.>", "1.orders.>"]
    e = ElasticConsumerGroupConfig.from_json(ORBIT_ELASTIC_FULL)
    assert e.partition_filters("m1") == ["0.foo.*.*", "3.foo.*.*", "0.bar.>", "3.bar.>"]


def test_subject_transforms_put_the_partition_first():
    assert partition_transform(PartitioningFilter("foo.*", [1]), 10) == "{{Partition(10,1)}}.foo.{{Wildcard(1)}}"
    assert (partition_transform(PartitioningFilter("a.*.b.*", [2, 1]), 3)
            == "{{Partition(3,2,1)}}.a.{{Wildcard(1)}}.b.{{Wildcard(2)}}")
    assert partition_transform(PartitioningFilter("x.>", None), 5) == "{{Partition(5)}}.x.>"
    assert ElasticConsumerGroupConfig(4).subject_transforms() == [{"src": ">", "dest": "{{Partition(4)}}.>"}]
    assert strip_partition("3.orders.eu") == "orders.eu" and strip_partition("plain") == "plain"


@pytest.mark.parametrize(("raw", "words"), [
    (b'{"max_members":0}', "max_members"),
    (b'{"max_members":2,"members":["a"],"member_mappings":[{"member":"b","partitions":[0,1]}]}', "not both"),
    (b'{"max_members":2,"member_mappings":[{"member":"a","partitions":[0]},{"member":"b","partitions":[0]}]}',
     "mapped twice"),
    (b'{"max_members":2,"member_mappings":[{"member":"a","partitions":[0]}]}', "unassigned"),
    (b'{"max_members":2,"member_mappings":[{"member":"a","partitions":[0,5]}]}', "out of range"),
    (b'{"max_members":2,"member_mappings":[{"member":"a","partitions":[0]},{"member":"a","partitions":[1]}]}',
     "two mappings"),
    (b'not json', "not valid JSON"),
    (b'[1]', "not a JSON object"),
])
def test_invalid_static_configs_are_refused_naming_the_problem(raw, words):
    with pytest.raises(jssync.ConsumerGroupConfigError, match=words):
        StaticConsumerGroupConfig.from_json(raw)


@pytest.mark.parametrize(("pf", "words"), [
    ({"filter": "", "partitioning_wildcards": None}, "non-empty"),
    ({"filter": "foo.bar", "partitioning_wildcards": None}, "wildcard"),
    ({"filter": "foo.*", "partitioning_wildcards": [1, 2]}, "fewer than"),
    ({"filter": "foo.*.*", "partitioning_wildcards": [1, 1]}, "repeat"),
    ({"filter": "foo.*.*", "partitioning_wildcards": [3]}, "out of range"),
    ({"filter": "foo.*", "partitioning_wildcards": [0]}, "out of range"),
])
def test_invalid_partitioning_filters_are_refused(pf, words):
    raw = json.dumps({"max_members": 2, "partitioning_filters": [pf]})
    with pytest.raises(jssync.ConsumerGroupConfigError, match=words):
        ElasticConsumerGroupConfig.from_json(raw)


def test_config_errors_are_validation_errors_and_consumer_group_errors():
    assert issubclass(jssync.ConsumerGroupConfigError, jssync.ValidationError)
    assert issubclass(jssync.ConsumerGroupConfigError, jssync.ConsumerGroupError)
    assert issubclass(jssync.NotAMemberError, jssync.Error)


def test_balanced_assignment_covers_every_partition_and_is_nearly_even():
    for max_members in range(1, 25):
        for n in range(1, 30):
            names = [f"m{i:02d}" for i in range(n)]
            owners = balanced_assignment(names, max_members)
            assert len(owners) == max_members
            counts = {m: owners.count(m) for m in set(owners)}
            assert len(counts) == min(n, max_members)
            assert max(counts.values()) - min(counts.values()) <= 1


def test_missing_and_empty_lists_compare_alike_but_are_written_back_as_read():
    a = ElasticConsumerGroupConfig.from_json(b'{"max_members":2,"partitioning_filters":null}')
    b = ElasticConsumerGroupConfig.from_json(b'{"max_members":2,"partitioning_filters":[]}')
    assert a.same_shape(b)
    assert a.to_json().endswith(b"null}") and b.to_json().endswith(b"[]}")
    c = ElasticConsumerGroupConfig.from_json(
        b'{"max_members":2,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":null}]}')
    d = ElasticConsumerGroupConfig.from_json(
        b'{"max_members":2,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":[]}]}')
    assert c.same_shape(d) and not c.same_shape(ElasticConsumerGroupConfig(3, c.partitioning_filters))
    s1 = StaticConsumerGroupConfig.from_json(b'{"max_members":2,"members":["a"]}')
    assert s1.same_as(StaticConsumerGroupConfig(2, [], ["a"], []))
    assert not s1.same_as(StaticConsumerGroupConfig(2, None, ["a", "b"]))
