"""A write task that fails for another reason than a row: its connection closes while it waits for
PubAcks, or its input (the Arrow batches Spark hands over) raises (``write_batches`` outside
Spark, real server). Either way the task fails with :class:`jssync.spark.SparkWriteError` (the
cause chained), whose text counts the rows of its partition in the stream and names the id
prefix, and every row published before the failure reaches the server.
"""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

import jssync
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]

import pyarrow as pa  # noqa: E402

from jssync import spark as jspark  # noqa: E402

_OPENED: list[object] = []


@dataclasses.dataclass(frozen=True)
class _KeepsConnections(jspark.ConnectOptions):
    """Real connections, kept where the test can close one (as a dropped link would)."""

    def connect(self, role: str):  # type: ignore[no-untyped-def]
        conn = super().connect(role)
        _OPENED.append(conn)
        return conn


def _batch(subjects: list[str], datas: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(subjects), pa.array(datas, type=pa.binary())],
                                      names=["subject", "data"])


def _causes(exc: BaseException) -> list[type]:
    out: list[type] = []
    cur: BaseException | None = exc
    while cur is not None:
        out.append(type(cur))
        cur = cur.__cause__
    return out


def test_a_connection_closed_while_waiting_for_pubacks_fails_with_a_spark_write_error_that_counts_the_stored_rows(
        nats_server, nc, unique, monkeypatch):
    """No stream captures the subject: the test answers the first 30 rows itself (through the
    real server) and none after; once every row is out, the task's connection closes while it
    waits for the other PubAcks."""
    subject = f"C{unique}.x"
    rows, answered = 100, 30
    got: list[str] = []
    lock = threading.Lock()

    def on_msg(msg) -> None:
        with lock:
            got.append(msg.reply)

    sub = nc.subscribe(subject, callback=on_msg)
    nc.flush()
    base = jspark.WriteOptions.parse({"servers": nats_server.url, "subject": subject,
                                      "publishtimeout": str(30 * FACTOR)})
    opts = dataclasses.replace(base, conn=_KeepsConnections(servers=nats_server.url))
    batches = iter([pa.RecordBatch.from_arrays([pa.array([f"d{i}".encode() for i in range(rows)])],
                                               names=["data"])])
    result: list[object] = []
    _OPENED.clear()
    publishers: list[jspark.rowpub.RowPublisher] = []

    class _Seen(jspark.rowpub.RowPublisher):
        """The task's real publisher, kept where the test can read its counts."""

        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            publishers.append(self)

    monkeypatch.setattr(jspark.writing, "RowPublisher", _Seen)

    def task() -> None:
        try:
            result.append(jspark.write_batches(opts, batches, "pfx", 0, 4))
        except BaseException as exc:  # noqa: BLE001 - checked below
            result.append(exc)

    t = threading.Thread(target=task)
    t.start()
    try:
        wait_for(lambda: len(got) >= rows, 10, what="every row")
        with lock:
            replies = got[:answered]
        for i, reply in enumerate(replies):
            nc.publish(reply, json.dumps({"stream": "FAKE", "seq": i + 1}, separators=(",", ":")).encode())
        nc.flush()
        wait_for(lambda: len(publishers) == 1 and publishers[0].stored == answered, 10 * FACTOR,
                 what="the task counted the PubAcks answered")
        assert len(_OPENED) == 1
        _OPENED[0].close()  # type: ignore[attr-defined]
        t.join(20 * FACTOR)
        assert not t.is_alive()
    finally:
        t.join(30)
        sub.unsubscribe()
    assert len(result) == 1 and isinstance(result[0], jspark.SparkWriteError), result
    err = result[0]
    assert jssync.ConnectionClosedError in _causes(err), _causes(err)
    text = str(err)
    assert text.startswith(f"partition 4: waiting for {rows - answered} PubAck(s) failed: ConnectionClosedError"), text
    assert f"{answered} row(s) of partition 4 are in the stream (0 of them were already there)" in text
    assert "msgIdPrefix='pfx'" in text


def test_rows_published_before_the_input_failed_reach_the_stream_and_the_error_counts_them(nats_server, js, unique):
    """The input raises after 2,500 rows (all defaults but the server): every one of them is in
    the stream when the task's error is raised, and the error says so."""
    name = f"I{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    try:
        rows = 2500
        opts = jspark.WriteOptions.parse({"servers": nats_server.url})

        def broken():
            yield _batch([f"{name}.{i % 8}" for i in range(rows)], [f"v{i}".encode() for i in range(rows)])
            raise RuntimeError("the input broke")

        with pytest.raises(jspark.SparkWriteError) as ei:
            jspark.write_batches(opts, broken(), "pfx", 3, 0)
        in_stream = st.info().state.messages
        text = str(ei.value)
        assert RuntimeError in _causes(ei.value), _causes(ei.value)
        assert text.startswith(f"the input of partition 0 failed after {rows} row(s): RuntimeError: the input broke"), \
            text
        assert f"{rows} row(s) of partition 0 are in the stream (0 of them were already there)" in text
        assert "msgIdPrefix='pfx'" in text
        assert in_stream == rows
    finally:
        js.delete_stream(name)
