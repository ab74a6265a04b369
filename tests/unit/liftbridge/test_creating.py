"""The pure parts of the Liftbridge CreateStream (jssync.liftbridge.creating), on server replies recorded
from nats-server (tests/unit/liftbridge/replies/liftbridge.json; tools/record_api_replies.py).

``Client.create_stream`` creates each partition's stream from :func:`partition_config` through
the JetStream context and maps a refusal with :func:`create_error`; these tests run the same
steps over the recorded replies.
"""

from __future__ import annotations

import pytest
from nats.js import api

import jssync
from jssync.base.errors import check_api_response
from jssync.liftbridge import StreamExistsError
from jssync.liftbridge.codec import (
    META_CREATED,
    META_PARTITION,
    META_PARTITIONS,
    META_STREAM,
    META_SUBJECT,
    partition_stream_name,
)
from jssync.liftbridge.creating import create_error, partition_config
from tests.replay import load, recorded_context

pytestmark = pytest.mark.timeout(30)

#: the token the recording used (tools/record_api_replies.py LIFTBRIDGE_TOKEN)
TOKEN = "4f1c2a9e0d6b4e8aa1c3f5e7d9b0a2c4"


def _config(name: str, subject: str, p: int, partitions: int) -> api.StreamConfig:
    return partition_config(name, subject, p, partitions, js_name=partition_stream_name(name, p),
                            replication_factor=1, storage="memory", limits={"max_msgs": 1000}, token=TOKEN)


def _create(js: jssync.JetStream, name: str, subject: str, p: int, partitions: int) -> jssync.Stream:
    try:
        return js.create_stream(_config(name, subject, p, partitions))
    except jssync.APIError as exc:
        if (mapped := create_error(exc, name, partition_stream_name(name, p), subject, p)) is exc:
            raise
        raise mapped from exc


def test_each_partition_is_a_stream_on_its_own_subject_marked_with_the_liftbridge_stream():
    js, replay = recorded_context("liftbridge", "liftbridge", "create_partitions")
    streams = [_create(js, "events", "events", p, 2) for p in range(2)]
    assert [s.name for s in streams] == ["events-0", "events-1"]
    assert [s.cached_info.config.subjects for s in streams] == [["events"], ["events.1"]]
    for p, s in enumerate(streams):
        md = s.cached_info.config.metadata or {}
        assert (md[META_STREAM], md[META_SUBJECT], md[META_PARTITION], md[META_PARTITIONS], md[META_CREATED]) == \
            ("events", "events", str(p), "2", TOKEN)
        assert s.cached_info.config.max_msgs == 1000 and s.cached_info.config.storage == api.StorageType.MEMORY
    assert replay.done()


def test_a_partition_stream_that_exists_raises_stream_exists():
    js, replay = recorded_context("liftbridge", "liftbridge", "create_partition_name_in_use")
    with pytest.raises(StreamExistsError) as err:
        _create(js, "events", "other-events", 1, 2)
    assert isinstance(err.value, jssync.StreamNameInUseError) and err.value.err_code == 10058
    assert "'events'" in str(err.value) and "'events-1'" in str(err.value)
    assert replay.done()


def test_a_partition_subject_held_by_another_stream_says_streams_cannot_share_subjects():
    js, replay = recorded_context("liftbridge", "liftbridge", "create_partition_subject_taken")
    with pytest.raises(jssync.APIError) as err:
        _create(js, "clash", "events", 0, 1)
    assert err.value.err_code == 10065 and not isinstance(err.value, StreamExistsError)
    assert "'events' of partition 0 is already captured" in str(err.value)
    assert err.value.__cause__ is not None and "events-0" in str(err.value.__cause__)  # the holder, looked up
    assert replay.done()


def test_other_refusals_are_raised_as_they_are():
    # the server's refusal of replicas on a single server (recorded for the kv tests)
    reply = load("kv", "kv")["scenarios"]["create_bucket_replicas"][0]["reply"]
    with pytest.raises(jssync.APIError) as err:
        check_api_response(reply.encode())
    assert err.value.err_code == 10074
    assert create_error(err.value, "events", "events-0", "events", 0) is err.value
