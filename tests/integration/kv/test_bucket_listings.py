"""Bucket listings name only buckets: a stream named KV_* / OBJ_* without the bucket's subjects,
or with them under another name, is left out (the decoys nats.go's listing tests make)."""

from __future__ import annotations

import json

import pytest
from nats.js import api

import jssync

pytestmark = pytest.mark.timeout(60)


def _create_raw(nc, name: str, subjects: list[str]) -> None:
    body = {"name": name, "subjects": subjects, "storage": "memory"}
    reply = json.loads(nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode(), timeout=5.0).data)
    assert "error" not in reply, reply


def test_key_value_listings_leave_out_streams_that_are_not_buckets(nc, js, unique):
    real, mirror = f"kv{unique}", f"km{unique}"
    js.create_key_value(bucket=real, storage="memory")
    js.create_key_value(bucket=mirror, storage="memory", mirror=api.StreamSource(name=real))
    decoys = [(f"KV_d{unique}", [f"d{unique}.*"]),          # the prefix, not the subjects
              (f"X{unique}", [f"$KV.x{unique}.>"]),          # the subjects, not the prefix
              (f"KV_w{unique}", [f"$KV.other{unique}.>"])]   # another bucket's subjects
    for name, subjects in decoys:
        _create_raw(nc, name, subjects)
    try:
        names = set(js.key_value_store_names())
        assert {real, mirror} <= names
        assert not names & {f"d{unique}", f"x{unique}", f"w{unique}", f"X{unique}"}, names
        statuses = {s.bucket for s in js.key_value_stores()}
        assert {real, mirror} <= statuses and not statuses & {f"d{unique}", f"w{unique}"}, statuses
        for bucket in (real, mirror):  # what is listed opens
            js.key_value(bucket)
    finally:
        for name, _ in decoys:
            js.delete_stream(name)
        js.delete_key_value(mirror)
        js.delete_key_value(real)


def test_object_store_listings_leave_out_streams_that_are_not_stores(nc, js, unique):
    real = f"ob{unique}"
    js.create_object_store(bucket=real, storage="memory")
    decoys = [(f"OBJ_d{unique}", [f"d{unique}.*"]), (f"Y{unique}", [f"$O.y{unique}.C.>"]),
              (f"OBJ_w{unique}", [f"$O.other{unique}.C.>", f"$O.other{unique}.M.>"])]
    for name, subjects in decoys:
        _create_raw(nc, name, subjects)
    try:
        names = set(js.object_store_names())
        assert real in names and not names & {f"d{unique}", f"y{unique}", f"w{unique}"}, names
        statuses = {s.bucket for s in js.object_stores()}
        assert real in statuses and not statuses & {f"d{unique}", f"w{unique}"}, statuses
    finally:
        for name, _ in decoys:
            js.delete_stream(name)
        js.delete_object_store(real)


def test_a_decoy_stream_still_raises_bad_bucket_when_opened_by_name(nc, js, unique):
    name = f"KV_b{unique}"
    _create_raw(nc, name, [f"b{unique}.*"])
    try:
        with pytest.raises(jssync.BadBucketError):
            js.key_value(f"b{unique}")
    finally:
        js.delete_stream(name)
