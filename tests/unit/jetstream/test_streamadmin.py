"""The JetStream context's stream room, driven with server replies recorded from nats-server
(tests/unit/jetstream/replies/management.json, paging.json; tools/record_api_replies.py).

Each test runs the real stream management code over a transport that checks every request
against the recorded one (subject, JSON body, headers) and answers with the server's reply.
"""

from __future__ import annotations

import pytest
from nats.js import api

import jssync
from tests.replay import recorded_context, reply_of

pytestmark = pytest.mark.timeout(30)

MEM = api.StorageType.MEMORY


def test_account_info_reads_the_accounts_usage_and_limits():
    js, replay = recorded_context("jetstream", "management", "account_info")
    info = js.account_info()
    assert isinstance(info, api.AccountInfo)
    assert info.streams == reply_of("jetstream", "management", "account_info")["streams"]
    assert replay.done()


def test_create_stream_sends_the_config_and_returns_the_stream():
    js, replay = recorded_context("jetstream", "management", "create_stream")
    stream = js.create_stream(name="ORDERS", subjects=["orders.>"], storage=MEM)
    assert isinstance(stream, jssync.Stream)
    assert stream.name == "ORDERS"
    assert stream.cached_info.config.subjects == ["orders.>"]
    assert stream.cached_info.config.storage == MEM
    assert replay.done()


def test_creating_a_stream_again_with_the_same_config_returns_it():
    js, replay = recorded_context("jetstream", "management", "create_stream_same_config")
    assert js.create_stream(name="ORDERS", subjects=["orders.>"], storage=MEM).name == "ORDERS"
    assert replay.done()


def test_a_stream_name_in_use_with_another_config_raises_its_error_with_code_10058():
    js, replay = recorded_context("jetstream", "management", "create_stream_name_in_use")
    with pytest.raises(jssync.StreamNameInUseError) as err:
        js.create_stream(name="ORDERS", subjects=["other.>"], storage=MEM)
    assert (err.value.code, err.value.err_code) == (400, 10058)
    assert replay.done()


def test_overlapping_subjects_name_the_stream_that_holds_them():
    js, replay = recorded_context("jetstream", "management", "create_stream_subjects_overlap")
    with pytest.raises(jssync.APIError) as err:
        js.create_stream(name="SHADOW", subjects=["orders.new"], storage=MEM)
    assert err.value.err_code == 10065
    assert "stream 'ORDERS' holds subjects that overlap 'orders.new'" in str(err.value)
    # the lookup that found the holder: one STREAM.NAMES request for the subject
    assert replay.sent[1] == ("$JS.API.STREAM.NAMES", {"subject": "orders.new"}, None)
    assert replay.done()


def test_stream_looks_up_the_stream_info():
    js, replay = recorded_context("jetstream", "management", "stream_info")
    stream = js.stream("ORDERS")
    assert stream.name == "ORDERS" and stream.cached_info.state is not None
    assert replay.done()


def test_a_missing_stream_raises_stream_not_found_with_code_10059_naming_it():
    js, replay = recorded_context("jetstream", "management", "stream_not_found")
    with pytest.raises(jssync.StreamNotFoundError) as err:
        js.stream("MISSING")
    assert (err.value.code, err.value.err_code) == (404, 10059)
    assert "'MISSING'" in str(err.value) and err.value.description == "stream not found"
    assert replay.done()


def test_update_with_fields_reads_the_config_and_sends_it_back_with_those_fields_set():
    js, replay = recorded_context("jetstream", "management", "update_stream_fields")
    stream = js.update_stream(name="ORDERS", max_msgs=10)
    assert stream.cached_info.config.max_msgs == 10
    (info_subject, _, _), (update_subject, body, _) = replay.sent
    assert (info_subject, update_subject) == ("$JS.API.STREAM.INFO.ORDERS", "$JS.API.STREAM.UPDATE.ORDERS")
    current = reply_of("jetstream", "management", "update_stream_fields")["config"]
    # every other field goes back as the server sent it, the server's own metadata left out
    assert {k: v for k, v in body.items() if k not in ("max_msgs", "metadata")} == \
        {k: v for k, v in current.items() if k not in ("max_msgs", "metadata")}
    assert not any(k.startswith("_nats.") for k in body.get("metadata") or {})
    assert replay.done()


def test_updating_a_missing_stream_raises_stream_not_found():
    js, replay = recorded_context("jetstream", "management", "update_stream_not_found")
    with pytest.raises(jssync.StreamNotFoundError):
        js.update_stream(api.StreamConfig(name="MISSING", subjects=["m.>"], storage=MEM))
    assert replay.done()


def test_find_stream_name_by_subject_asks_for_the_names_of_the_streams_capturing_it():
    js, replay = recorded_context("jetstream", "management", "find_stream_name_by_subject")
    assert js.find_stream_name_by_subject("orders.new") == "ORDERS"
    assert replay.done()


def test_delete_stream_returns_the_servers_success_and_a_missing_one_raises_10059():
    js, replay = recorded_context("jetstream", "management", "delete_stream")
    assert js.delete_stream("TEMP") is True
    assert replay.done()
    js, replay = recorded_context("jetstream", "management", "delete_stream_not_found")
    with pytest.raises(jssync.StreamNotFoundError) as err:
        js.delete_stream("TEMP")
    assert err.value.err_code == 10059 and "'TEMP'" in str(err.value)
    assert replay.done()


def test_streams_walks_every_page_of_the_list():
    js, replay = recorded_context("jetstream", "paging", "streams_paged")
    first = reply_of("jetstream", "paging", "streams_paged", 0)
    infos = list(js.streams())
    assert len(infos) == first["total"] > first["limit"]  # more than one page
    assert all(isinstance(i, api.StreamInfo) and i.config.name for i in infos)
    assert [body for _, body, _ in replay.sent] == [{"offset": 0}, {"offset": first["limit"]}]
    assert replay.done()


def test_stream_names_walks_every_page_and_the_pages_are_asked_for_as_the_iteration_reaches_them():
    js, replay = recorded_context("jetstream", "paging", "stream_names_paged")
    first = reply_of("jetstream", "paging", "stream_names_paged", 0)
    names = js.stream_names()
    assert replay.sent == []  # nothing is sent before the iteration starts
    got = [next(names) for _ in range(first["limit"])]
    assert len(replay.sent) == 1
    got += list(names)
    assert len(got) == len(set(got)) == first["total"] > first["limit"]
    assert [body for _, body, _ in replay.sent] == [{"offset": 0}, {"offset": first["limit"]}]
    assert replay.done()


def test_stream_names_by_subject_sends_the_filter():
    js, replay = recorded_context("jetstream", "paging", "stream_names_by_subject")
    assert list(js.stream_names("pg.7")) == ["PG0007"]
    assert replay.sent == [("$JS.API.STREAM.NAMES", {"subject": "pg.7", "offset": 0}, None)]


def test_bad_names_and_filters_are_refused_before_anything_is_sent():
    js, replay = recorded_context("jetstream", "management", "stream_info")
    with pytest.raises(ValueError):
        js.stream("bad.name")
    with pytest.raises(jssync.BadSubjectError):
        list(js.stream_names("bad subject"))
    assert replay.sent == []
