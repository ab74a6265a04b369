"""A write task's rows that no stream answered (503) are sent again and stored once (``write_batches``, real server).

The rows go out before the stream that captures them exists: the server answers each with
503 (no responders). The task sends them again on publish_async's schedule (after 0.25 s,
then 0.5 s) and the stream, created meanwhile, stores each row exactly once.
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]

import pyarrow as pa  # noqa: E402

from jssync import spark as jspark  # noqa: E402


def _batch(subjects: list[str], datas: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(subjects), pa.array(datas, type=pa.binary())],
                                      names=["subject", "data"])


def _in_msgs(server, name: str) -> int:
    """Messages the server received from the connection named ``name`` (0 before it connects)."""
    conns = server.varz("connz?limit=1024").get("connections") or []
    return sum(int(c.get("in_msgs", 0)) for c in conns if c.get("name") == name)


def test_rows_published_before_their_stream_exists_are_sent_again_and_stored_once(nats_server, js, unique):
    name = f"RS{unique}"
    conn_name = f"rs{unique}"
    rows = 50
    # (Spark hands the options over with lower-case keys)
    opts = jspark.WriteOptions.parse({"servers": nats_server.url, "connectionname": conn_name})
    created = []

    def batches():
        yield _batch([f"{name}.{i % 2}" for i in range(rows)], [f"r{i}".encode() for i in range(rows)])
        # (the task asks for its next batch on its publishing thread) the server has every
        # row of the first batch and answered each with 503: only now the stream appears
        wait_for(lambda: _in_msgs(nats_server, f"{conn_name}-writer-0") >= rows, 10,
                 what="the server to receive the first batch")
        created.append(js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory"))
        yield _batch([f"{name}.x"], [b"after"])

    try:
        res = jspark.write_batches(opts, batches(), "pfx", 0, 0)
        assert (res.rows, res.duplicates) == (rows + 1, 0)
        assert (res.first_seq, res.last_seq) == (1, rows + 1)
        st = created[0]
        assert st.info().state.messages == rows + 1
        stored = sorted(st.get_msg(seq).data for seq in range(1, rows + 2))
        assert stored == sorted([f"r{i}".encode() for i in range(rows)] + [b"after"])  # each row once
    finally:
        if created:
            js.delete_stream(name)
