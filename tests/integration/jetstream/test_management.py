"""Management against a real nats-server (2.15.1): partial stream updates, consumer reset
(ADR-60), the server's API level (ADR-44), bucket and store listing, bucket updates,
KV mirrors and sources (ADR-8 / ADR-57) and conditional key purges."""

from __future__ import annotations

import datetime
import json

import pytest
from nats.js import api

import jssync
from jssync.kv.keyvalue import InvalidBucketNameError, KeyWrongLastSequenceError
from tests.conftest import wait_for
from tests.integration.jetstream.old_server import OldServer

pytestmark = pytest.mark.timeout(60)


def _drop_streams(js, *names):
    for n in names:
        try:
            js.delete_stream(n)
        except jssync.StreamNotFoundError:
            pass


# -- update_stream with keyword fields (nats stream edit) ---------------------------------------


def test_update_stream_keywords_keep_the_rest_of_the_config(js, stream):
    # a memory stream: a full-replace update from keyword fields alone would ask for file storage
    st = js.update_stream(name=stream.name, max_msgs=10)
    cfg = st.cached_info.config
    assert cfg.max_msgs == 10
    assert cfg.storage == api.StorageType.MEMORY
    assert cfg.subjects == [f"{stream.name}.>"]
    # a second edit keeps the first one
    cfg = js.update_stream(name=stream.name, max_bytes=4096).cached_info.config
    assert (cfg.max_msgs, cfg.max_bytes, cfg.storage) == (10, 4096, api.StorageType.MEMORY)


def test_create_or_update_stream_keywords_edit_an_existing_stream(js, stream, unique):
    cfg = js.create_or_update_stream(name=stream.name, max_msgs=7).cached_info.config
    assert (cfg.max_msgs, cfg.storage) == (7, api.StorageType.MEMORY)
    name = f"N{unique}"
    try:
        cfg = js.create_or_update_stream(name=name, subjects=[f"{name}.>"], storage="memory",
                                         max_msgs=3).cached_info.config
        assert (cfg.max_msgs, cfg.storage) == (3, api.StorageType.MEMORY)
    finally:
        _drop_streams(js, name)


def test_update_stream_full_config_replaces_everything(js, stream):
    js.update_stream(name=stream.name, max_msgs=10, description="edited")
    full = api.StreamConfig(name=stream.name, subjects=[f"{stream.name}.>"], storage=api.StorageType.MEMORY)
    cfg = js.update_stream(full).cached_info.config
    assert cfg.max_msgs == -1  # back to the default: the config object is the whole config
    assert not cfg.description
    # a config object plus keyword fields: still that object (with the fields set), not merged
    cfg = js.update_stream(full, max_msgs=5).cached_info.config
    assert cfg.max_msgs == 5 and not cfg.description


def test_update_stream_keywords_bad_input(js, stream):
    with pytest.raises(ValueError, match="name"):
        js.update_stream(max_msgs=10)  # no name: nothing to edit
    with pytest.raises(TypeError, match="no_such_option"):
        js.update_stream(name=stream.name, no_such_option=1)
    with pytest.raises(ValueError, match="'a b'"):
        js.update_stream(name="a b", max_msgs=1)
    with pytest.raises(jssync.StreamNotFoundError):
        js.update_stream(name=f"{stream.name}_missing", max_msgs=1)


# -- consumer reset (ADR-60) ---------------------------------------------------------------------


def _seqs(res):
    return [m.metadata.sequence.stream for m in res]


def test_consumer_reset_to_sequence(js, stream):
    for i in range(10):
        js.publish(f"{stream.name}.a", str(i).encode())
    c = stream.create_consumer(durable_name="R", ack_policy="explicit")
    for m in c.fetch(3, expires=1.0):
        m.ack_sync()
    assert c.reset(seq=7) == 7
    assert c.cached_info.delivered.stream_seq == 6
    assert c.cached_info.num_pending == 4
    assert _seqs(c.fetch(2, expires=1.0)) == [7, 8]
    # backwards, through the context
    assert js.reset_consumer(stream.name, "R", seq=2) == 2
    assert _seqs(c.fetch(2, expires=1.0)) == [2, 3]


def test_consumer_reset_to_ack_floor(js, stream):
    for i in range(6):
        js.publish(f"{stream.name}.a", str(i).encode())
    c = stream.create_consumer(durable_name="R", ack_policy="explicit")
    for m in c.fetch(2, expires=1.0):
        m.ack_sync()
    assert _seqs(c.fetch(2, expires=1.0)) == [3, 4]  # delivered, never acked
    assert c.reset() == 3  # back to the ack floor: 3 and 4 come again
    assert _seqs(c.fetch(3, expires=1.0)) == [3, 4, 5]


def test_consumer_reset_errors(js, stream):
    c = stream.create_consumer(durable_name="R", ack_policy="explicit")
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match=repr(bad)):
            c.reset(seq=bad)
    with pytest.raises(ValueError, match="'a.b'"):
        js.reset_consumer(stream.name, "a.b", seq=1)
    with pytest.raises(jssync.ConsumerNotFoundError, match="NOPE"):
        js.reset_consumer(stream.name, "NOPE", seq=1, timeout=1.0)
    # the server refuses a reset before the start of a by_start_sequence consumer
    c2 = stream.create_consumer(durable_name="R2", deliver_policy="by_start_sequence", opt_start_seq=5)
    with pytest.raises(jssync.APIError) as ei:
        c2.reset(seq=2)
    assert ei.value.err_code == 10204


# -- the server's API level (ADR-44) -----------------------------------------------------------


def test_api_level_is_read_and_cached(nc, js):
    level = js.api_level()
    assert level == 5  # nats-server 2.15
    assert level == nc.server_info["api_lvl"]
    seen = []
    sub = nc.subscribe("$JS.API.INFO", callback=lambda m: seen.append(m))
    nc.flush()
    try:
        assert js.api_level() == 5
        assert nc.jetstream().api_level() == 5  # cached per connection, not per context
        nc.flush()
        assert seen == []
        assert js.api_level(refresh=True) == 5
        wait_for(lambda: len(seen) == 1, what="one INFO request")
    finally:
        sub.unsubscribe()


def test_feature_needing_newer_server_is_refused_before_sending(nc, unique):
    old = OldServer(nc, f"OLD{unique}.API", level=1)  # a 2.11 server
    js = nc.jetstream(api_prefix=f"OLD{unique}.API", timeout=1.0)
    try:
        assert js.api_level() == 1
        with pytest.raises(jssync.NotSupportedError, match=r"consumer reset.*2\.14.*level 4.*level 1") as ei:
            js.reset_consumer("S", "C", seq=3)
        assert (ei.value.feature, ei.value.required_level, ei.value.server_level) == ("consumer reset", 4, 1)
        with pytest.raises(jssync.NotSupportedError, match="counter"):
            js.create_stream(name="S", subjects=["s.>"], allow_msg_counter=True)
        with pytest.raises(jssync.NotSupportedError, match="atomic"):
            js.update_stream(api.StreamConfig(name="S", subjects=["s.>"], allow_atomic=True))
        with pytest.raises(jssync.NotSupportedError, match="schedul"):
            js.create_stream(name="S", subjects=["s.>"], allow_msg_schedules=True)
        with pytest.raises(jssync.NotSupportedError, match=r"fast batch publish needs nats-server 2\.14"):
            js.create_stream(name="S", subjects=["s.>"], allow_batched=True)
        nc.flush()
        assert old.requests == []
        # what a 2.11 server has goes through to it
        with pytest.raises(jssync.TimeoutError):
            js.create_stream(name="S", subjects=["s.>"], allow_msg_ttl=True, timeout=0.3)
        nc.flush()
        assert old.requests == [f"OLD{unique}.API.STREAM.CREATE.S"]
    finally:
        old.sub.unsubscribe()


def test_server_before_api_levels_is_level_0(nc, unique):
    old = OldServer(nc, f"OLD{unique}.API", level=0)
    js = nc.jetstream(api_prefix=f"OLD{unique}.API", timeout=1.0)
    try:
        assert js.api_level() == 0
        with pytest.raises(jssync.NotSupportedError, match=r"subject delete markers needs nats-server 2\.11"):
            js.create_key_value(bucket="b", limit_marker_ttl=5)
        with pytest.raises(jssync.NotSupportedError, match="per-message TTL"):
            js.create_key_value(bucket="b", allow_msg_ttl=True)
        with pytest.raises(jssync.NotSupportedError, match=r"consumer pause needs nats-server 2\.11"):
            js.pause_consumer("S", "C", datetime.datetime.now(datetime.UTC))
        nc.flush()
        assert old.requests == []
    finally:
        old.sub.unsubscribe()


def test_feature_table_is_one_place():
    from jssync.jetstream.features import FEATURES

    assert FEATURES["consumer reset"] == (4, "2.14")
    assert FEATURES["per-message TTL"] == (1, "2.11")
    for name in ("counters", "atomic batch publish", "message schedules"):
        assert FEATURES[name] == (2, "2.12")


# -- listing buckets and stores ------------------------------------------------------------------


def test_list_key_value_buckets_and_object_stores(js, unique):
    a, b, o = f"ka{unique}", f"kb{unique}", f"o{unique}"
    js.create_key_value(bucket=a, storage="memory")
    js.create_key_value(bucket=b, storage="memory", history=3)
    js.create_object_store(bucket=o, storage="memory")
    plain = js.create_stream(name=f"P{unique}", subjects=[f"p{unique}.>"], storage="memory")
    try:
        names = list(js.key_value_store_names())
        assert {a, b} <= set(names) and o not in names and plain.name not in names
        statuses = {s.bucket: s for s in js.key_value_stores()}
        assert statuses[b].history == 3
        assert isinstance(statuses[a], jssync.KeyValueStatus)
        assert o in set(js.object_store_names())
        assert a not in set(js.object_store_names())
        ostat = {s.bucket: s for s in js.object_stores()}
        assert ostat[o].storage == api.StorageType.MEMORY
    finally:
        js.delete_key_value(a)
        js.delete_key_value(b)
        js.delete_object_store(o)
        js.delete_stream(plain.name)


# -- bucket updates, mirrors and sources ---------------------------------------------------------


def test_update_key_value(js, unique):
    bucket = f"u{unique}"
    js.create_key_value(bucket=bucket, storage="memory", history=2)
    try:
        kv = js.update_key_value(bucket=bucket, storage="memory", history=5, description="more history")
        assert kv.status().history == 5
        assert kv.stream.cached_info.config.description == "more history"
        with pytest.raises(jssync.BucketNotFoundError, match=f"'{bucket}x'"):
            js.update_key_value(bucket=f"{bucket}x", storage="memory")
        with pytest.raises(InvalidBucketNameError, match="'a.b'"):
            js.update_key_value(bucket="a.b")
        kv = js.create_or_update_key_value(bucket=bucket, storage="memory", history=4)
        assert kv.status().history == 4
        kv2 = js.create_or_update_key_value(bucket=f"{bucket}n", storage="memory")
        assert kv2.bucket == f"{bucket}n"
        js.delete_key_value(f"{bucket}n")
    finally:
        js.delete_key_value(bucket)


def test_key_value_mirror_and_source(js, unique):
    origin, mirror, agg = f"or{unique}", f"mi{unique}", f"ag{unique}"
    kv = js.create_key_value(bucket=origin, storage="memory")
    try:
        kv.put("a", b"1")
        m = js.create_key_value(bucket=mirror, storage="memory", mirror=api.StreamSource(name=origin))
        cfg = m.stream.cached_info.config
        assert cfg.mirror.name == f"KV_{origin}" and cfg.mirror_direct
        wait_for(lambda: _try_get(m, "a") == b"1", what="the mirror to have key a")
        assert m.keys() == ["a"]
        rev = m.put("b", b"2")  # writes go to the origin bucket
        # Direct Gets on the origin may be answered by the mirror (mirror_direct), which can
        # lag behind the origin's PubAck: read the origin's own copy first, then wait.
        assert kv.stream.get_msg(rev).data == b"2"
        wait_for(lambda: _try_get(kv, "b") == b"2", what="key b through the origin's Direct Get")
        wait_for(lambda: _try_get(m, "b") == b"2", what="the mirror to have key b")
        kv.put("x.1.y", b"3")
        s = js.create_key_value(bucket=agg, storage="memory",
                                sources=[api.StreamSource(name=origin, filter_subject="a"),
                                         api.StreamSource(name=f"KV_{origin}", filter_subject="x.*.>")])
        src = s.stream.cached_info.config.sources
        assert [x.name for x in src] == [f"KV_{origin}", f"KV_{origin}"]
        assert (src[0].subject_transforms[0].src, src[0].subject_transforms[0].dest) == (
            f"$KV.{origin}.a", f"$KV.{agg}.a")
        assert (src[1].subject_transforms[0].src, src[1].subject_transforms[0].dest) == (
            f"$KV.{origin}.x.*.>", f"$KV.{agg}.x.{{{{wildcard(1)}}}}.>")
        wait_for(lambda: _try_get(s, "a") == b"1", what="the sourced bucket to have key a")
        wait_for(lambda: _try_get(s, "x.1.y") == b"3", what="the sourced bucket to have key x.1.y")
        assert s.keys() == ["a", "x.1.y"]  # not b: outside both filters
        assert mirror in set(js.key_value_store_names())
    finally:
        for b in (agg, mirror, origin):
            try:
                js.delete_key_value(b)
            except jssync.BucketNotFoundError:
                pass


def _try_get(kv, key):
    try:
        return kv.get(key).value
    except jssync.KeyNotFoundError:
        return None


def test_key_value_mirror_bad_input(js):
    with pytest.raises(ValueError, match="mirror"):
        js.create_key_value(bucket="x", mirror=api.StreamSource(name="a"), sources=[api.StreamSource(name="b")])
    with pytest.raises(TypeError, match="StreamSource"):
        js.create_key_value(bucket="x", mirror="origin")
    with pytest.raises(TypeError, match="sources"):
        js.create_key_value(bucket="x", sources=api.StreamSource(name="b"))
    with pytest.raises(InvalidBucketNameError, match="'a.b'"):
        js.create_key_value(bucket="x", mirror=api.StreamSource(name="a.b"))


# -- purge(key, last=) ---------------------------------------------------------------------------


def test_purge_with_expected_last_revision(js, unique):
    kv = js.create_key_value(bucket=f"p{unique}", storage="memory", history=5)
    try:
        r1 = kv.put("k", b"1")
        r2 = kv.put("k", b"2")
        with pytest.raises(KeyWrongLastSequenceError):
            kv.purge("k", last=r1)
        assert kv.get("k").value == b"2"
        kv.purge("k", last=r2)
        with pytest.raises(jssync.KeyDeletedError):
            kv.get("k")
        assert [e.operation for e in kv.history("k")] == ["PURGE"]
        for bad in (-1, "1", 1.0, True):
            with pytest.raises(ValueError, match=repr(bad)):
                kv.purge("k", last=bad)
    finally:
        js.delete_key_value(f"p{unique}")


# -- the command line ----------------------------------------------------------------------------


def test_cli_kv_ls_lists_buckets(nats_server, js, unique, capsys):
    from jssync.cli import main

    a, b = f"ca{unique}", f"cb{unique}"
    js.create_key_value(bucket=a, storage="memory", history=2)
    js.create_key_value(bucket=b, storage="memory")
    try:
        js.key_value(a).put("k", b"v")
        assert main(["-s", nats_server.url, "kv", "ls"]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["BUCKET", "VALUES", "BYTES", "HISTORY", "TTL", "STORAGE", "MIRROR"]
        assert any(line.split()[:2] == [a, "1"] for line in out.splitlines())
        assert main(["kv", "ls", "--json", "-s", nats_server.url]) == 0
        rows = {r["bucket"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows[a]["values"] == 1 and rows[a]["history"] == 2 and rows[a]["storage"] == "memory"
        assert rows[b]["values"] == 0 and rows[b]["mirror"] is None
        # with a bucket: its keys, as before
        assert main(["-s", nats_server.url, "--json", "kv", "ls", a]) == 0
        assert json.loads(capsys.readouterr().out) == ["k"]
    finally:
        js.delete_key_value(a)
        js.delete_key_value(b)
