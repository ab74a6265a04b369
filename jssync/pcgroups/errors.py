"""The partitioned consumer groups' errors (:mod:`jssync.pcgroups`): each under jssync's core tree,
exported from ``jssync`` and ``jssync.pcgroups``."""

from __future__ import annotations

from ..base.errors import JetStreamError, ValidationError


class ConsumerGroupError(JetStreamError):
    """Base class of the partitioned consumer group errors (:mod:`jssync.pcgroups`)."""


class ConsumerGroupNotFoundError(ConsumerGroupError):
    """No config for that stream and group in the group bucket (or no bucket at all)."""


class NotAMemberError(ConsumerGroupError):
    """A static group was joined under a member name its config does not list."""


class ConsumerGroupChangedError(ConsumerGroupError):
    """The group's config changed in a way a running member cannot follow (static: any change;
    elastic: the partitions, filters or buffer limits); the member stopped consuming."""


class ConsumerGroupConfigError(ConsumerGroupError, ValidationError):
    """A consumer group config, given or read from the bucket, is not valid (names what)."""
