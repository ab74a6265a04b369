"""Key-value buckets with ``mirror`` and ``sources`` (nats.go's KeyValueConfig), against a real nats-server.

Ported from nats.go jetstream/test/kv_test.go: TestKeyValueWithSources (kv -> kv, streams -> kv),
TestKeyValueMirrorDirectGet, and the same-domain parts of TestKeyValueMirrorCrossDomains (a mirror
bucket's stream, writes through the mirror reaching the origin, get / keys / watch reading through
the mirror).
"""

from __future__ import annotations

import copy

import pytest
from nats.js import api

import jssync
from jssync.kv.keyvalue import KeyNotFoundError, KeyValueOp
from tests.conftest import wait_for

pytestmark = pytest.mark.timeout(60)


def _has(kv, key: str, value: bytes) -> bool:
    try:
        return kv.get(key).value == value
    except KeyNotFoundError:
        return False


def _gone(kv, key: str) -> bool:
    try:
        kv.get(key)
    except KeyNotFoundError:
        return True
    return False


@pytest.fixture
def buckets(js):
    made: list[str] = []
    yield made
    for name in reversed(made):
        try:
            js.delete_key_value(name)
        except jssync.Error:
            pass


def test_sources_bring_other_buckets_keys_into_a_bucket(js, unique, buckets):
    s1, s2, sourced = f"SOURCE1{unique}", f"SOURCE2{unique}", f"SOURCED{unique}"
    kv1 = js.create_key_value(bucket=s1, history=5)
    buckets.append(s1)
    kv2 = js.create_key_value(bucket=s2, history=5)
    buckets.append(s2)
    # the second source named with the stream's KV_ prefix: the same bucket
    kv3 = js.create_key_value(bucket=sourced, history=5,
                              sources=[api.StreamSource(name=s1), api.StreamSource(name=f"KV_{s2}")])
    buckets.append(sourced)
    kv1.put("key1", b"value1")
    kv2.put("key2", b"value2")
    wait_for(lambda: _has(kv3, "key1", b"value1"), 5, what="key1 sourced")
    wait_for(lambda: _has(kv3, "key2", b"value2"), 5, what="key2 sourced")
    info = js.stream(f"KV_{sourced}").info()
    assert len(info.config.sources) == 2
    for src in info.config.sources:
        assert len(src.subject_transforms) == 1, src
    by_name = {src.name: src.subject_transforms[0] for src in info.config.sources}
    assert by_name[f"KV_{s1}"].src == f"$KV.{s1}.>" and by_name[f"KV_{s1}"].dest == f"$KV.{sourced}.>"
    assert by_name[f"KV_{s2}"].src == f"$KV.{s2}.>"
    assert info.config.subjects == [f"$KV.{sourced}.>"]
    assert kv3.keys() == ["key1", "key2"]
    # the sourced bucket is a bucket of its own: its writes stay in it
    kv3.put("own", b"x")
    assert _gone(kv1, "own")


def test_sources_from_plain_streams_with_their_own_transforms(js, unique, buckets):
    sourced = f"SOURCED{unique}"
    names = [f"SOURCE1{unique}", f"SOURCE2{unique}"]
    for i, name in enumerate(names, 1):
        js.create_stream(name=name, subjects=[f"S{i}{unique}.>"], storage="memory")
    try:
        kv = js.create_key_value(bucket=sourced, history=5, sources=[
            api.StreamSource(name=name, subject_transforms=[
                api.SubjectTransform(src=f"S{i}{unique}.>", dest=f"$KV.{sourced}.>")])
            for i, name in enumerate(names, 1)])
        buckets.append(sourced)
        js.publish(f"S1{unique}.key1", b"value1")
        js.publish(f"S2{unique}.key2", b"value2")
        wait_for(lambda: _has(kv, "key1", b"value1"), 5, what="key1 sourced from a stream")
        wait_for(lambda: _has(kv, "key2", b"value2"), 5, what="key2 sourced from a stream")
        # kept exactly as given: the names are not taken for buckets
        srcs = js.stream(f"KV_{sourced}").info().config.sources
        assert sorted(s.name for s in srcs) == sorted(names)
    finally:
        for name in names:
            js.delete_stream(name)


def test_a_source_with_a_key_filter_brings_only_those_keys(js, unique, buckets):
    origin, sourced = f"o{unique}", f"s{unique}"
    kv = js.create_key_value(bucket=origin, history=5)
    buckets.append(origin)
    skv = js.create_key_value(bucket=sourced, sources=[api.StreamSource(name=origin, filter_subject="a.*")])
    buckets.append(sourced)
    kv.put("a.x", b"1")
    kv.put("b.x", b"2")
    kv.put("a.y", b"3")
    wait_for(lambda: _has(skv, "a.y", b"3"), 5, what="a.y sourced")
    assert skv.keys() == ["a.x", "a.y"]


def test_mirror_bucket_reads_and_writes_through_to_its_origin(js, unique, buckets):
    origin, mirror = f"TEST{unique}", f"MIRROR{unique}"
    kv = js.create_key_value(bucket=origin)
    buckets.append(origin)
    kv.put("name", b"derek")
    kv.put("age", b"22")
    kv.put("v", b"v")
    kv.delete("v")

    source = api.StreamSource(name=origin)
    before = copy.deepcopy(source)
    js.create_key_value(bucket=mirror, mirror=source)
    buckets.append(mirror)
    assert source == before, "the caller's mirror is not altered"

    stream = js.stream(f"KV_{mirror}")
    cfg = stream.cached_info.config
    assert cfg.mirror_direct is True
    assert cfg.mirror.name == f"KV_{origin}"
    assert not cfg.subjects
    wait_for(lambda: js.stream(f"KV_{mirror}").info().state.messages == 3, 5, what="the mirror synced")

    mkv = js.key_value(mirror)
    status = mkv.status()
    assert status.mirror is not None and status.mirror.name == f"KV_{origin}"
    assert status.sources == []
    # writes through the mirror bucket go to the origin
    mkv.put("name", b"rip")
    mkv.put("v", b"vv")
    # the origin's gets are direct gets the mirror answers too (mirror_direct): read until it caught up
    wait_for(lambda: _has(kv, "v", b"vv"), 5, what="v written through the mirror")
    assert kv.stream.get_msg(last_by_subject=f"$KV.{origin}.v").data == b"vv"  # the leader has it at once
    mkv.delete("v")
    wait_for(lambda: _gone(kv, "v"), 5, what="v deleted at the origin")
    wait_for(lambda: _has(kv, "name", b"rip"), 5, what="name written through the mirror")

    # the mirror caught up with those writes (its own direct gets: only it answers them)
    wait_for(lambda: _has(mkv, "name", b"rip") and _gone(mkv, "v"), 5, what="the mirror caught up")
    # a watcher on the mirror bucket sees the origin's keys, under their own names
    with mkv.watch() as w:
        initial = {}
        while True:
            e = w.next(timeout=5)
            if e is None:
                break
            initial[e.key] = e
        assert initial["name"].value == b"rip" and initial["age"].value == b"22"
        assert all(e.bucket == mirror for e in initial.values())
        kv.put("name", b"ivan")
        update = w.next(timeout=5)
        assert update is not None and (update.key, update.value) == ("name", b"ivan")

    # reads through the mirror (direct get on the mirror's stream)
    wait_for(lambda: _has(mkv, "name", b"ivan"), 5, what="name read through the mirror")
    kv.put("v", b"vv")
    wait_for(lambda: _has(mkv, "v", b"vv"), 5, what="v read through the mirror")
    assert mkv.get("v").operation is KeyValueOp.PUT
    kv.delete("v")
    wait_for(lambda: _gone(mkv, "v"), 5, what="v deleted, read through the mirror")
    assert mkv.keys() == ["age", "name"]
    assert [e.value for e in mkv.history("name")] == [b"ivan"]


def test_mirror_with_a_key_filter_copies_only_those_keys(js, unique, buckets):
    origin, mirror = f"o{unique}", f"m{unique}"
    kv = js.create_key_value(bucket=origin)
    buckets.append(origin)
    mkv = js.create_key_value(bucket=mirror, mirror=api.StreamSource(name=origin, filter_subject="a.>"))
    buckets.append(mirror)
    kv.put("a.1", b"1")
    kv.put("b.1", b"2")
    kv.put("a.2", b"3")
    wait_for(lambda: _has(mkv, "a.2", b"3"), 5, what="a.2 mirrored")
    assert mkv.keys() == ["a.1", "a.2"]


def test_a_plain_mirror_with_mirror_direct_does_not_break_the_buckets_gets(js, unique, buckets):
    bucket = f"TEST{unique}"
    kv = js.create_key_value(bucket=bucket)
    buckets.append(bucket)
    js.create_stream(name=f"MIRROR{unique}", mirror=api.StreamSource(name=f"KV_{bucket}"), mirror_direct=True)
    try:
        for i in range(100):
            kv.put(f"KEY.{i}", b"42")
        for _ in range(100):
            kv.get("KEY.22")
    finally:
        js.delete_stream(f"MIRROR{unique}")


@pytest.mark.parametrize("options, match", [
    ({"mirror": api.StreamSource(name="x"), "sources": [api.StreamSource(name="y")]}, "a mirror or sources"),
    ({"mirror": "x"}, "mirror must be a nats.js.api.StreamSource"),
    ({"sources": [api.StreamSource(name="bad name")]}, "invalid bucket name"),
    ({"sources": [api.StreamSource(name="y", filter_subject="a..b")]}, "key filter"),
])
def test_bad_mirror_or_sources_are_refused_before_sending(js, unique, options, match):
    with pytest.raises((jssync.ValidationError, TypeError), match=match):
        js.create_key_value(bucket=f"b{unique}", **options)
    with pytest.raises(jssync.BucketNotFoundError):
        js.key_value(f"b{unique}")
