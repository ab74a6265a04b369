"""A write task's PubAcks, counted in bulk from its reply inbox (``write_batches`` outside Spark, real server).

Rows go out with a reply subject per row and their PubAcks are counted as they come: a failed
PubAck names its row, at most ``maxPending`` rows wait for one, a missing PubAck times out
naming its row, and a retried task with derived ids stores every row exactly once.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]

import pyarrow as pa  # noqa: E402

from jssync import spark as jspark  # noqa: E402


def _batch(subjects: list[str], datas: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(subjects), pa.array(datas, type=pa.binary())],
                                      names=["subject", "data"])


@pytest.fixture
def out(js, unique):
    name = f"W{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory", max_msgs=100, discard="new")
    try:
        yield st
    finally:
        js.delete_stream(name)


def test_a_failed_pubac_mid_stream_names_its_row_and_counts_what_was_stored(nats_server, out):
    # the stream takes 100 messages (discard new): row 100 is the first whose PubAck is an error
    name = out.name
    rows = 300
    rb = _batch([f"{name}.{'ab'[i % 2]}" for i in range(rows)], [f"r{i}".encode() for i in range(rows)])
    opts = jspark.WriteOptions.parse({"servers": nats_server.url})
    with pytest.raises(jspark.SparkWriteError) as ei:
        jspark.write_batches(opts, iter([rb]), "pfx", 0, 1)
    text = str(ei.value)
    assert text.startswith(f"publishing row 100 of partition 1 to '{name}.a' failed: "), text
    assert "100 row(s) of partition 1 are in the stream (0 of them were already there)" in text
    assert "msgIdPrefix='pfx'" in text
    assert out.info().state.messages == 100


def test_max_pending_rows_wait_for_their_pubacks_and_a_missing_one_times_out_naming_its_row(nats_server, nc, unique):
    """No stream captures the subject: the test answers the publishes itself (through the
    real server), so it decides when each PubAck comes. The task never has more than
    ``maxPending`` rows without one, goes on when the window drains, counts stored and
    duplicate PubAcks as answered, and fails naming the row whose PubAck never came."""
    subject = f"P{unique}.x"
    window = 40
    rows = 200
    got: list[tuple[int, str]] = []
    lock = threading.Lock()

    def on_msg(msg) -> None:
        with lock:
            got.append((len(got), msg.reply))

    sub = nc.subscribe(subject, callback=on_msg)
    nc.flush()
    # (Spark hands the options over with lower-case keys)
    opts = jspark.WriteOptions.parse({"servers": nats_server.url, "subject": subject, "maxpending": str(window),
                                      "publishtimeout": str(3 * FACTOR)})
    batches = iter([pa.RecordBatch.from_arrays([pa.array([f"d{i}".encode() for i in range(rows)])],
                                               names=["data"])])
    result: list[object] = []

    def task() -> None:
        try:
            result.append(jspark.write_batches(opts, batches, "pfx", 0, 4))
        except BaseException as exc:  # noqa: BLE001 - checked below
            result.append(exc)

    t = threading.Thread(target=task)
    t.start()
    try:
        wait_for(lambda: len(got) >= window, 10, what="a full window of rows")
        time.sleep(0.3 * FACTOR)  # behaviour: no more rows while the window is full
        assert len(got) == window
        # answer every row but row 0 (its PubAck never comes: it times out), every 2nd as a duplicate
        answered = 0
        nxt = 1
        while nxt < rows:
            with lock:
                todo = [reply for _, reply in got[nxt:]]
            for reply in todo:
                answered += 1
                body: dict[str, object] = {"stream": "FAKE", "seq": answered}
                if answered % 2 == 0:
                    body["duplicate"] = True
                nc.publish(reply, json.dumps(body, separators=(",", ":")).encode())
            nxt += len(todo)
            nc.flush()
            with lock:
                assert len(got) - answered <= window  # never more than maxPending without a PubAck
            if nxt < rows:
                wait_for(lambda n=nxt: len(got) > n, 10, what="more rows after PubAcks")
        t.join(20 * FACTOR)
        assert not t.is_alive()
    finally:
        t.join(30)
        sub.unsubscribe()
    assert len(got) == rows
    assert len(result) == 1 and isinstance(result[0], jspark.SparkWriteError), result
    text = str(result[0])
    assert text.startswith(f"publishing row 0 of partition 4 to {subject!r} failed: TimeoutError: no PubAck"), text
    # 199 answered: 100 stored (odd seqs), 99 duplicates
    assert f"{rows - 1} row(s) of partition 4 are in the stream (99 of them were already there)" in text


def test_a_retried_task_with_derived_ids_stores_every_row_exactly_once(nats_server, js, unique):
    """The first attempt fails after half its rows (the input breaks; what it had sent is
    stored); the retry gets the same rows in another order: every row is in the stream
    once, and the PubAcks the retry counts as duplicates are exactly the rows the first
    attempt stored."""
    name = f"R{unique}"
    st = js.create_stream(name=name, subjects=[f"{name}.*"], storage="memory")
    try:
        rows = 5000
        subjects = [f"{name}.{i % 8}" for i in range(rows)]
        datas = [f"v{i % 1000}".encode() for i in range(rows)]  # identical rows too (occurrences)
        opts = jspark.WriteOptions.parse({"servers": nats_server.url})

        def broken():
            yield _batch(subjects[:2500], datas[:2500])
            raise RuntimeError("the input broke")

        with pytest.raises(jspark.SparkWriteError, match="the input broke"):
            jspark.write_batches(opts, broken(), "pfx", 3, 0)
        # what the failed attempt had sent lands
        seen = {"n": -1, "since": time.monotonic()}

        def settled() -> bool:
            n = st.info().state.messages
            if n != seen["n"]:
                seen["n"], seen["since"] = n, time.monotonic()
            return time.monotonic() - seen["since"] >= 0.5 * FACTOR

        wait_for(settled, 20, what="the first attempt's rows to land")
        first = seen["n"]
        assert 0 < first <= 2500
        order = list(range(rows))[::-1]
        again = [_batch([subjects[i] for i in order[k:k + 1000]], [datas[i] for i in order[k:k + 1000]])
                 for k in range(0, rows, 1000)]
        res = jspark.write_batches(opts, iter(again), "pfx", 3, 0)
        assert (res.rows, res.duplicates) == (rows, first)
        assert (res.first_seq, res.last_seq) == (first + 1, rows)
        assert st.info().state.messages == rows
    finally:
        js.delete_stream(name)


def test_rows_no_stream_answers_are_sent_again_then_fail_naming_the_first_row(nats_server, unique):
    """No stream captures the subject: the server answers each row with 503 (no responders);
    like publish_async, each row is sent twice more (0.25 s and 0.5 s later) before the task
    fails, naming the first row."""
    subject = f"N{unique}.x"
    opts = jspark.WriteOptions.parse({"servers": nats_server.url, "subject": subject})
    rb = pa.RecordBatch.from_arrays([pa.array([b"a", b"b", b"c"])], names=["data"])
    t0 = time.monotonic()
    with pytest.raises(jspark.SparkWriteError) as ei:
        jspark.write_batches(opts, iter([rb]), "pfx", 0, 0)
    assert time.monotonic() - t0 >= 0.7  # the two resends' waits
    text = str(ei.value)
    assert text.startswith(f"publishing row 0 of partition 0 to {subject!r} failed: NoRespondersError"), text
    assert "0 row(s) of partition 0 are in the stream" in text
