"""Notebook summaries of streams and consumers: the rows of the CLI's ``stream info`` table.

``Stream`` and ``Consumer`` handles show their cached info this way (``_repr_html_`` /
``_repr_pretty_``, no I/O); nats-py's ``StreamInfo`` and ``ConsumerInfo`` get the same summaries by
registration with IPython (``base/reprs.py``), so an info in a notebook cell is a table, not a
1,200-character dataclass dump.
"""

from __future__ import annotations

from typing import Any

from nats.js import api

from ..base.reprs import Rows, add_foreign, limit_text, seconds_text, size_text


def stream_rows(info: api.StreamInfo) -> Rows:
    """The config and state of a stream, as ``jssync stream info`` shows them."""
    c, s = info.config, info.state
    rows: list[tuple[str, object]] = [("name", c.name)]
    if c.description:
        rows.append(("description", c.description))
    rows += [
        ("subjects", c.subjects or []), ("storage", c.storage), ("retention", c.retention),
        ("replicas", c.num_replicas), ("max_msgs", limit_text(c.max_msgs)),
        ("max_bytes", size_text(c.max_bytes)), ("max_age", seconds_text(c.max_age)),
        ("messages", s.messages), ("bytes", size_text(s.bytes)),
        ("first_seq", s.first_seq), ("last_seq", s.last_seq), ("consumers", s.consumer_count),
    ]
    return rows


def consumer_rows(info: api.ConsumerInfo) -> Rows:
    """The config and state of a consumer, as ``jssync consumer info`` shows them."""
    c = info.config
    filters = c.filter_subjects or ([c.filter_subject] if c.filter_subject else [])
    rows: list[tuple[str, object]] = [
        ("stream", info.stream_name), ("name", info.name), ("durable", bool(c.durable_name)),
        ("pull", not c.deliver_subject), ("filter", filters or "(all)"), ("ack_policy", c.ack_policy),
        ("deliver_policy", c.deliver_policy), ("ack_wait", seconds_text(c.ack_wait)),
        ("max_deliver", limit_text(c.max_deliver)),
        ("delivered (stream seq)", info.delivered.stream_seq if info.delivered else None),
        ("ack floor (stream seq)", info.ack_floor.stream_seq if info.ack_floor else None),
        ("pending", info.num_pending), ("ack pending", info.num_ack_pending),
        ("redelivered", info.num_redelivered), ("waiting pulls", info.num_waiting),
    ]
    if info.paused:
        rows.append(("paused", True))
    return rows


def stream_info_summary(info: Any) -> tuple[str, Rows]:
    return f"StreamInfo {info.config.name!r}", stream_rows(info)


def consumer_info_summary(info: Any) -> tuple[str, Rows]:
    return f"ConsumerInfo {info.stream_name!r}/{info.name!r}", consumer_rows(info)


add_foreign(api.StreamInfo.__module__, api.StreamInfo.__name__, stream_info_summary)
add_foreign(api.ConsumerInfo.__module__, api.ConsumerInfo.__name__, consumer_info_summary)
