"""Partitioned consumer groups, in the format of orbit.go's ``pcgroups`` (and its Java and .NET ports).

A consumer group spreads a stream's messages over named members by partition: every
message belongs to one partition, every partition to one member, and each member's
consumer has at most ``max_ack_pending`` messages of its partitions in flight, so messages
with the same partition key are processed in order, one member at a time, while the group
as a whole scales out. Several instances of a member can run; one is pinned and gets the
messages, the others stand by (priority groups, nats-server 2.11+).

Static groups (:func:`create_static`, :func:`static_consume`) run on a stream whose
subjects already start with the partition number (a subject transform on the stream puts
it there); their membership is fixed. Elastic groups (:func:`create_elastic`,
:func:`elastic_consume`) run on any stream: the group gets a work-queue stream that sources
it and adds the partition number, and members can be added and dropped at any time
(:func:`add_members`, :func:`delete_members`, :func:`set_member_mappings`).

Configs live in the KV buckets ``static-consumer-groups`` / ``elastic-consumer-groups``
under ``<stream>.<group>``, as the other clients of the format keep them, so a Python
member joins a group that a Go, Java or .NET service made, and the other way round.
See docs/consumer-groups.md.
"""

from .config import (
    ELASTIC_BUCKET,
    PRIORITY_GROUP,
    STATIC_BUCKET,
    ElasticConsumerGroupConfig,
    MemberMapping,
    PartitioningFilter,
    StaticConsumerGroupConfig,
    balanced_assignment,
    partition_filters,
)
from .errors import (
    ConsumerGroupChangedError,
    ConsumerGroupConfigError,
    ConsumerGroupError,
    ConsumerGroupNotFoundError,
    NotAMemberError,
)
from .group import (
    ConsumerGroupContext,
    add_members,
    create_elastic,
    create_static,
    delete_elastic,
    delete_member_mappings,
    delete_members,
    delete_static,
    elastic_active_members,
    elastic_config,
    elastic_consume,
    elastic_step_down,
    list_elastic,
    list_static,
    set_member_mappings,
    static_active_members,
    static_config,
    static_consume,
    static_step_down,
)

__all__ = [
    "ConsumerGroupChangedError",
    "ConsumerGroupConfigError",
    "ConsumerGroupContext",
    "ConsumerGroupError",
    "ConsumerGroupNotFoundError",
    "ELASTIC_BUCKET",
    "ElasticConsumerGroupConfig",
    "MemberMapping",
    "NotAMemberError",
    "PRIORITY_GROUP",
    "PartitioningFilter",
    "STATIC_BUCKET",
    "StaticConsumerGroupConfig",
    "add_members",
    "balanced_assignment",
    "create_elastic",
    "create_static",
    "delete_elastic",
    "delete_member_mappings",
    "delete_members",
    "delete_static",
    "elastic_active_members",
    "elastic_config",
    "elastic_consume",
    "elastic_step_down",
    "list_elastic",
    "list_static",
    "partition_filters",
    "set_member_mappings",
    "static_active_members",
    "static_config",
    "static_consume",
    "static_step_down",
]
