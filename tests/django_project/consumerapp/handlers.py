"""Handlers for ``jssync_consume`` in the tests: each appends a line to the file $HANDLED_LOG.

A line is ``<event> <stream seq> <delivery> <monotonic time> <data>``.
"""

from __future__ import annotations

import os
import time

import jssync


def _log(event: str, msg: jssync.Msg) -> None:
    meta = msg.metadata
    line = f"{event} {meta.sequence.stream} {meta.num_delivered} {time.monotonic():.3f} {msg.data.decode()}\n"
    with open(os.environ["HANDLED_LOG"], "a", encoding="utf-8") as f:
        f.write(line)


def record(msg: jssync.Msg) -> None:
    """Record the message (acked by the command when this returns)."""
    _log("handled", msg)


def slow(msg: jssync.Msg) -> None:
    """Take 0.3 s, then record the message."""
    _log("start", msg)
    time.sleep(0.3)  # behaviour: the handler is slow
    _log("handled", msg)


def fail_first_delivery(msg: jssync.Msg) -> None:
    """Raise on a message's first delivery (the command naks it), record it on the next."""
    if msg.metadata.num_delivered == 1:
        _log("failed", msg)
        raise RuntimeError(f"first delivery of {msg.data!r}")
    _log("handled", msg)


not_callable = 42
