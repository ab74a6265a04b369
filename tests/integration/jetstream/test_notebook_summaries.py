"""In a notebook, streams, consumers, their infos and messages show a short table, not a handle or a dump.

The objects are given to IPython's own DisplayFormatter (what Jupyter and the IPython console use to
show a cell's value): the HTML and text it makes are checked, for real objects from a real server.
"""

from __future__ import annotations

import types

import pytest

from jssync.base.reprs import register_ipython

pytestmark = pytest.mark.timeout(60)

DisplayFormatter = pytest.importorskip("IPython.core.formatters").DisplayFormatter


@pytest.fixture
def formatter():
    fmt = DisplayFormatter()
    assert register_ipython(types.SimpleNamespace(display_formatter=fmt))
    return fmt


def _shown(fmt, obj) -> tuple[str, str]:
    data, _ = fmt.format(obj)
    return data.get("text/html", ""), data["text/plain"]


@pytest.fixture
def orders(js, unique):
    name = f"NB{unique}"
    stream = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", description="notebook")
    for i in range(3):
        js.publish(f"{name}.new", b"order %d" % i, headers={"Authorization": "Bearer s3cret-token"})
    yield stream
    js.delete_stream(name)


def test_stream_and_its_info_show_the_stream_info_table(formatter, orders):
    stream = orders.info()  # noqa: F841 - refreshes cached_info (3 messages)
    for obj in (orders, orders.cached_info):
        html, text = _shown(formatter, obj)
        assert html.startswith("<table") and orders.name in html, html
        for field in ("subjects", "storage", "messages", "last_seq", "consumers"):
            assert f">{field}<" in html, (field, html)
        assert "<td style=\"text-align:left\">3</td>" in html, html  # 3 messages, last_seq 3
        assert orders.name in text and "messages" in text and len(text) < 800, text
        assert len(text.splitlines()) < 20, text


def test_consumer_and_its_info_show_their_state(formatter, orders):
    consumer = orders.create_consumer(durable_name="NB", ack_policy="explicit")
    for obj in (consumer, consumer.info()):
        html, text = _shown(formatter, obj)
        assert html.startswith("<table") and "NB" in html and orders.name in html, html
        for field in ("ack_policy", "pending", "ack pending", "filter"):
            assert f">{field}<" in html, (field, html)
        assert "explicit" in html, html
        assert "pending" in text and len(text) < 900, text


def test_message_shows_subject_size_and_metadata_never_header_values(formatter, orders):
    consumer = orders.create_consumer(durable_name="NBMSG", ack_policy="explicit")
    msg = next(iter(consumer.fetch(1, expires=5)))
    html, text = _shown(formatter, msg)
    assert f"{orders.name}.new" in html and "Authorization" in html and "order 0" in html, html
    assert ">stream seq<" in html and ">delivered<" in html, html
    assert "s3cret" not in html and "s3cret" not in text, (html, text)
    assert f"{orders.name}.new" in text and "stream seq" in text and len(text) < 600, text
    msg.ack()


def test_a_core_message_shows_its_reply_and_a_cut_payload(formatter, nc):
    sub = nc.subscribe("nb.core")
    nc.publish("nb.core", b"x" * 5000, reply="nb.reply")
    msg = sub.next_msg(timeout=5)
    html, text = _shown(formatter, msg)
    assert "nb.core" in html and "nb.reply" in html and "5,000 B" in html, html
    assert len(html) < 1000 and len(text) < 400, (len(html), text)
    sub.unsubscribe()


def test_without_ipython_running_nothing_is_registered():
    assert register_ipython() is False
