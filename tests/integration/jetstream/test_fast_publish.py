"""Fast-ingest batch publishing (ADR-50) against a real nats-server 2.15 (fast ingest: 2.14+).

A lost message is made by the publisher skipping a batch sequence (``_lose_next``): the real
server then sees the gap exactly as it would after a message lost on the way.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import jssync
from jssync.jetstream.fastbatch import Gap
from tests.conftest import FACTOR, wait_for

pytestmark = pytest.mark.timeout(120)


@contextmanager
def _stream(js: Any, name: str, **cfg: Any) -> Iterator[Any]:
    cfg.setdefault("storage", "memory")
    st = js.create_stream(name=name, subjects=[f"{name}.>"], allow_batched=True, **cfg)
    try:
        yield st
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def _stored(st: Any, n: int) -> list[bytes]:
    """The payloads of the stream's messages, in stream order (an ordered consumer reads them)."""
    out: list[bytes] = []
    oc = st.ordered_consumer()
    while len(out) < n:
        got = [m.data for m in oc.fetch(min(5000, n - len(out)), expires=5 * FACTOR)]
        assert got, f"the stream ran out after {len(out)} of {n} messages"
        out.extend(got)
    return out


def _lose_next(fp: Any) -> None:
    """Skip one batch sequence, as if that message were lost on the way to the server."""
    with fp._cond:
        fp._sent += 1


def test_twenty_thousand_messages_stored_once_in_order_with_defaults(js, unique):
    name = f"FI{unique}"
    n = 20_000
    with _stream(js, name) as st:
        progress = []
        with js.fast_publisher() as fp:
            for i in range(n):
                progress.append(fp.add(f"{name}.x", str(i).encode()))
        ack = fp.ack
        assert ack is not None and ack.stream == name
        assert (ack.batch_id, ack.batch_size, ack.seq) == (fp.batch_id, n, n)
        assert [p.batch_seq for p in progress] == list(range(1, n + 1))
        # flow control engaged: add waited for the server's acks, and never ran ahead of the window
        assert fp.stalls > 0
        window = 100 * 2  # default flow x default max_outstanding_acks
        assert all(p.batch_seq - p.ack_seq <= window for p in progress)
        assert progress[-1].ack_seq >= n - window
        assert fp.gaps == [] and fp.errors == []
        assert st.info().state.messages == n
        assert _stored(st, n) == [str(i).encode() for i in range(n)]


def test_small_window_waits_for_every_ack(js, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        fp = js.fast_publisher(flow=1, max_outstanding_acks=1)
        progress = [fp.add(f"{name}.x", b"%d" % i) for i in range(200)]
        assert fp.flow == 1
        assert all(p.batch_seq - p.ack_seq <= 1 for p in progress)
        assert fp.stalls > 0
        ack = fp.close()
        assert ack is not None and ack.batch_size == 200
        assert st.info().state.messages == 200


def test_gap_fail_ends_the_batch_before_the_lost_message(js, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        fp = js.fast_publisher(gap="fail")
        for i in range(1, 6):
            fp.add(f"{name}.x", b"%d" % i)
        _lose_next(fp)  # message 6 never reaches the server
        fp.add(f"{name}.x", b"7")
        with pytest.raises(jssync.FastPublishGapError) as ei:
            fp.flush(timeout=5 * FACTOR)  # the gap report and the final PubAck come before the ping's answer
        with pytest.raises(jssync.FastPublishGapError):
            fp.add(f"{name}.x", b"8")
        err = ei.value
        assert (err.first_missing, err.seq) == (6, 7)
        assert err.ack is not None and err.ack.batch_size == 5 and err.ack is fp.ack
        assert fp.gaps == [Gap(6, 7)]
        assert fp.closed
        with pytest.raises(jssync.FastPublishGapError):
            fp.close()
        assert [m for m in _stored(st, 5)] == [b"1", b"2", b"3", b"4", b"5"]
        assert st.info().state.messages == 5


def test_gap_ok_reports_the_gap_and_goes_on(js, unique):
    name = f"FI{unique}"
    reported: list[BaseException] = []
    with _stream(js, name) as st:
        fp = js.fast_publisher(gap="ok", error_cb=reported.append)
        for i in range(1, 6):
            fp.add(f"{name}.x", b"%d" % i)
        _lose_next(fp)
        for i in range(7, 11):
            fp.add(f"{name}.x", b"%d" % i)
        fp.flush()
        ack = fp.close()
        assert ack is not None and ack.seq == 9
        assert fp.gaps == [Gap(6, 7)]
        wait_for(lambda: len(reported) == 1, 5 * FACTOR, what="the gap handed to error_cb")
        assert isinstance(reported[0], jssync.FastPublishGapError)
        assert (reported[0].first_missing, reported[0].seq) == (6, 7)
        assert _stored(st, 9) == [b"1", b"2", b"3", b"4", b"5", b"7", b"8", b"9", b"10"]


def test_failed_expected_check_ends_a_gap_fail_batch(js, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        fp = js.fast_publisher()
        fp.add(f"{name}.x", b"1")
        fp.add(f"{name}.x", b"2", expected_last_seq=999)
        with pytest.raises(jssync.WrongLastSequenceError, match="message 2"):
            for _ in range(100):
                fp.add(f"{name}.x", b"more", timeout=5 * FACTOR)
                fp.flush(timeout=5 * FACTOR)
        assert [e.seq for e in fp.errors] == [2]
        assert fp.ack is not None and fp.ack.batch_size == 1
        with pytest.raises(jssync.WrongLastSequenceError):
            fp.close()
        assert st.info().state.messages == 1


def test_failed_expected_check_is_reported_in_a_gap_ok_batch(js, unique):
    name = f"FI{unique}"
    reported: list[BaseException] = []
    with _stream(js, name) as st:
        with js.fast_publisher(gap="ok", error_cb=reported.append) as fp:
            fp.add(f"{name}.x", b"1")
            fp.add(f"{name}.x", b"2", expected_last_seq=999)
            fp.add(f"{name}.x", b"3")
            fp.flush()
        assert [e.seq for e in fp.errors] == [2]
        assert isinstance(fp.errors[0].error, jssync.WrongLastSequenceError)
        wait_for(lambda: len(reported) == 1, 5 * FACTOR, what="the error handed to error_cb")
        assert _stored(st, 2) == [b"1", b"3"]


def test_duplicate_msg_id_is_not_stored_again(js, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        js.publish(f"{name}.x", b"0", msg_id="seen")
        with js.fast_publisher() as fp:
            fp.add(f"{name}.x", b"1", msg_id="one")
            fp.add(f"{name}.x", b"dup", msg_id="seen")
            fp.add(f"{name}.x", b"2", msg_id="two")
        assert fp.ack is not None and fp.ack.batch_size == 3  # the batch's length
        assert fp.errors == [] and fp.gaps == []
        assert _stored(st, 3) == [b"0", b"1", b"2"]


def test_bad_input_is_refused_before_sending(js, nc, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        for opts, what in (({"gap": "maybe"}, "gap"), ({"flow": 0}, "flow"), ({"flow": 70000}, "flow"),
                           ({"max_outstanding_acks": 4}, "max_outstanding_acks"), ({"timeout": -1}, "timeout"),
                           ({"error_cb": 3}, "error_cb")):
            with pytest.raises(jssync.ValidationError, match=what):
                js.fast_publisher(**opts)
        fp = js.fast_publisher()
        with pytest.raises(jssync.BadSubjectError):
            fp.add(f"{name}.*", b"x")
        with pytest.raises(jssync.BadSubjectError):
            fp.add("", b"x")
        with pytest.raises(jssync.BadHeaderError):
            fp.add(f"{name}.x", b"x", headers={"bad name": "v"})
        with pytest.raises(jssync.MaxPayloadError):
            fp.add(f"{name}.x", b"x" * (nc.max_payload + 1))
        with pytest.raises(jssync.ValidationError, match="Nats-Batch"):
            fp.add(f"{name}.x", b"x", headers={"Nats-Batch-Id": "b"})
        assert fp.sent == 0 and fp._nsub is None
        fp.add(f"{name}.x", b"ok")
        with pytest.raises(jssync.BadSubjectError):  # a bad message in an open batch: not sent either
            fp.add(f"{name}.>", b"x")
        assert fp.close() is not None and fp.ack is not None and fp.ack.batch_size == 1
        with pytest.raises(jssync.ValidationError, match="closed"):
            fp.add(f"{name}.x", b"late")
        assert st.info().state.messages == 1


def test_stream_without_allow_batched_refuses_the_batch(js, stream):
    fp = js.fast_publisher()
    with pytest.raises(jssync.APIError, match="allow_batched") as ei:
        fp.add(f"{stream.name}.x", b"x")
    assert ei.value.err_code == 10205
    assert fp.closed
    assert stream.info().state.messages == 0


def test_no_stream_for_the_subject(js, unique):
    with pytest.raises(jssync.NoRespondersError):
        js.fast_publisher().add(f"NOSTREAM{unique}.x", b"x")


def test_add_times_out_while_the_server_does_not_ack_and_goes_on_after(js, proxy, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st, jssync.connect(proxy.url) as pnc:
        fp = pnc.jetstream().fast_publisher(flow=1, max_outstanding_acks=1)
        fp.add(f"{name}.x", b"1")
        assert fp.flush() == 1
        proxy.stall()
        fp.add(f"{name}.x", b"2")  # fits the window (1 outstanding); it and its ack are held up
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError, match="not sent"):
            fp.add(f"{name}.x", b"3", timeout=0.5 * FACTOR)
        took = time.monotonic() - t0
        assert 0.5 * FACTOR <= took < 0.5 * FACTOR + 1.0 * FACTOR
        assert fp.sent == 2 and not fp.closed
        proxy.forward()
        fp.add(f"{name}.x", b"3", timeout=5 * FACTOR)
        ack = fp.close(timeout=5 * FACTOR)
        assert ack is not None and ack.batch_size == 3
        assert _stored(st, 3) == [b"1", b"2", b"3"]


def test_close_times_out_without_a_final_ack(js, proxy, unique):
    name = f"FI{unique}"
    with _stream(js, name), jssync.connect(proxy.url) as pnc:
        fp = pnc.jetstream().fast_publisher()
        fp.add(f"{name}.x", b"1")
        proxy.stall()
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError, match="final PubAck"):
            fp.close(timeout=0.5 * FACTOR)
        assert time.monotonic() - t0 < 0.5 * FACTOR + 1.0 * FACTOR
        assert fp.closed
        proxy.forward()


def test_flush_confirms_what_the_server_acknowledged(js, unique):
    name = f"FI{unique}"
    with _stream(js, name):
        fp = js.fast_publisher(flow=10)
        assert fp.flush() == 0  # nothing sent yet
        for i in range(25):
            fp.add(f"{name}.x", b"%d" % i)
        assert fp.flush() == 20  # flow acks at 10 and 20; 21-25 are confirmed by close
        assert fp.close().batch_size == 25  # type: ignore[union-attr]


def test_block_left_by_an_exception_abandons_the_batch(js, unique):
    name = f"FI{unique}"
    with _stream(js, name) as st:
        with pytest.raises(RuntimeError, match="boom"):
            with js.fast_publisher() as fp:
                fp.add(f"{name}.x", b"1")
                raise RuntimeError("boom")
        assert fp.closed and fp.ack is None
        assert fp.close() is None
        assert st.info().state.messages == 1  # not atomic: what was sent is stored


def test_threads_adding_and_flushing_at_once_each_keep_their_order(js, unique):
    name = f"FI{unique}"
    per, threads = 2500, 4
    with _stream(js, name) as st:
        with js.fast_publisher() as fp:  # gap="fail": a ping overtaking a message would end the batch
            adding = threading.Event()
            adding.set()
            flushes = [0]

            def run(t: int) -> None:
                for i in range(per):
                    fp.add(f"{name}.t{t}", f"{t}:{i}".encode())

            def flusher() -> None:
                while adding.is_set():
                    fp.flush(timeout=10 * FACTOR)
                    flushes[0] += 1

            ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
            fl = threading.Thread(target=flusher)
            for th in ts:
                th.start()
            fl.start()
            for th in ts:
                th.join(60 * FACTOR)
            adding.clear()
            fl.join(30 * FACTOR)
        assert flushes[0] > 0 and fp.gaps == []
        assert fp.ack is not None and fp.ack.batch_size == per * threads
        got = _stored(st, per * threads)
        for t in range(threads):
            mine = [d for d in got if d.startswith(f"{t}:".encode())]
            assert mine == [f"{t}:{i}".encode() for i in range(per)]


class _OldJetStream:
    """A JetStream API prefix answered at a given API level (as a server before 2.14 would)."""

    def __init__(self, nc: Any, prefix: str, level: int) -> None:
        def answer(msg: Any) -> None:
            msg.respond(json.dumps({"type": "io.nats.jetstream.api.v1.account_info_response", "memory": 0,
                                    "storage": 0, "streams": 0, "consumers": 0, "limits": {},
                                    "api": {"level": level, "total": 0, "errors": 0}}).encode())

        self.sub = nc.subscribe(f"{prefix}.INFO", callback=answer)
        nc.flush()


def test_server_before_fast_ingest_is_refused_before_sending(nc, unique):
    _OldJetStream(nc, f"OLD{unique}.API", level=3)  # 2.13: atomic batches, no fast ingest
    js = nc.jetstream(api_prefix=f"OLD{unique}.API", timeout=2.0)
    seen = nc.subscribe(f"DATA{unique}.>")
    fp = js.fast_publisher()
    with pytest.raises(jssync.NotSupportedError, match=r"fast batch publish needs nats-server 2\.14") as ei:
        fp.add(f"DATA{unique}.x", b"x")
    assert (ei.value.required_level, ei.value.server_level) == (4, 3)
    nc.flush()
    assert seen.pending_msgs == 0
    seen.unsubscribe()


def test_plain_pub_ack_to_the_first_message_means_not_supported(nc, js, unique):
    # a stream on a server that does not know fast ingest answers the first message with an
    # ordinary PubAck: it stored it as a plain publish
    def old_stream(msg: Any) -> None:
        msg.respond(b'{"stream":"OLD","seq":1}')

    sub = nc.subscribe(f"PLAIN{unique}.x", callback=old_stream)
    nc.flush()
    fp = js.fast_publisher()
    with pytest.raises(jssync.NotSupportedError, match=r"2\.14"):
        fp.add(f"PLAIN{unique}.x", b"x", timeout=5 * FACTOR)
    assert fp.closed and fp.ack is not None
    sub.unsubscribe()


@pytest.mark.timeout(180)
def test_r3_stream_on_a_cluster(nats_cluster, unique):
    name = f"FI{unique}"
    n = 5000
    with jssync.connect(nats_cluster.url) as nc:
        js = nc.jetstream(timeout=10 * FACTOR)
        with _stream(js, name, num_replicas=3, storage="file") as st:
            with js.fast_publisher() as fp:
                for i in range(n):
                    fp.add(f"{name}.x", str(i).encode())
            assert fp.ack is not None and (fp.ack.batch_size, fp.ack.seq) == (n, n)
            assert fp.stalls > 0
            info = st.info()
            assert info.state.messages == n and len(info.cluster.replicas or []) == 2
            assert _stored(st, n) == [str(i).encode() for i in range(n)]
            wait_for(lambda: all(r.current for r in st.info().cluster.replicas or []), 10 * FACTOR,
                     what="both followers current")


@pytest.mark.timeout(60)
def test_the_server_drops_a_batch_idle_for_ten_seconds_and_keeps_a_slow_one_that_flushes(js, unique):
    """The server's fixed 10 s idle limit (its clock, not ours), both sides in the same 12 s: a slow
    batch that flushes every 3 s (a ping, never 10 s without one) is alive at the end and commits;
    a batch left alone all that time is dropped (10208), its publisher closed, its second message
    refused."""
    idle_name, slow_name = f"FI{unique}", f"FS{unique}"
    with _stream(js, idle_name) as idle_st, _stream(js, slow_name) as slow_st:
        idle = js.fast_publisher()
        idle.add(f"{idle_name}.x", b"1")
        slow = js.fast_publisher()
        slow.add(f"{slow_name}.x", b"1")
        for _ in range(4):  # 12 s in all: the idle batch is past 10 s, the slow one never 10 s without a ping
            time.sleep(3)  # behaviour: a slow batch, each gap under the server's fixed 10 s
            slow.flush()
        slow.add(f"{slow_name}.x", b"2")
        ack = slow.close()
        assert ack is not None and ack.batch_size == 2
        assert slow_st.info().state.messages == 2
        idle.add(f"{idle_name}.x", b"2")
        with pytest.raises(jssync.APIError) as ei:
            idle.flush(timeout=5 * FACTOR)
        assert ei.value.err_code == 10208
        assert idle.closed
        assert idle_st.info().state.messages == 1


def test_ctrl_c_while_add_waits_for_the_window(js, proxy, unique, sigint):
    import os
    import signal

    name = f"FI{unique}"
    with _stream(js, name) as st, jssync.connect(proxy.url) as pnc:
        fp = pnc.jetstream().fast_publisher(flow=1, max_outstanding_acks=1)
        fp.add(f"{name}.x", b"1")
        fp.flush()
        proxy.stall()
        fp.add(f"{name}.x", b"2")
        timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            fp.add(f"{name}.x", b"3", timeout=30)
        elapsed = time.monotonic() - t0
        timer.join()
        assert elapsed < 0.3 + 0.2 * FACTOR + 0.1, elapsed
        proxy.forward()
        fp.add(f"{name}.x", b"3", timeout=5 * FACTOR)  # the publisher and the connection still work
        assert fp.close(timeout=5 * FACTOR).batch_size == 3  # type: ignore[union-attr]
        assert st.info().state.messages == 3


def test_add_from_a_subscription_callback(js, nc, unique):
    name = f"FI{unique}"
    done = threading.Event()
    errors: list[BaseException] = []
    with _stream(js, name) as st:
        fp = js.fast_publisher(flow=1, max_outstanding_acks=1)  # every add past the first waits for an ack

        def handler(msg: Any) -> None:
            try:
                for i in range(50):
                    fp.add(f"{name}.x", b"%d" % i, timeout=10 * FACTOR)
                fp.close(timeout=10 * FACTOR)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                done.set()

        nc.subscribe(f"GO{unique}", callback=handler)
        nc.publish(f"GO{unique}")
        assert done.wait(30 * FACTOR)
        assert errors == []
        assert fp.ack is not None and fp.ack.batch_size == 50
        assert st.info().state.messages == 50


def _publish_through(fp: Any, subject: str, n: int, fault_at: int, fault: Any) -> jssync.FastPublishGapError | None:
    """Add ``n`` messages (payload: the index), calling ``fault()`` before message ``fault_at``; close."""
    try:
        for i in range(n):
            if i == fault_at:
                fault()
            fp.add(subject, str(i).encode())
        fp.close()
    except jssync.FastPublishGapError as exc:
        return exc
    return None


def _check_gap_promise(st: Any, fp: Any, failed: jssync.FastPublishGapError | None, n: int) -> None:
    """gap='fail': the stream holds a gap-free prefix, in order; gap='ok': every loss was reported."""
    ack = fp.ack
    assert ack is not None
    stored = _stored(st, st.info().state.messages)
    if fp.gap == "fail":
        assert stored == [str(i).encode() for i in range(len(stored))]  # no gap, in order
        assert ack.batch_size == len(stored)
        if failed is None:
            assert len(stored) == n and fp.gaps == []
        else:
            assert failed.first_missing == len(stored) + 1 and failed.ack is ack
    else:
        assert failed is None
        assert ack.batch_size == n  # the batch's length, lost messages included
        lost = {i for g in fp.gaps for i in range(g.first_missing, g.seq)}
        assert stored == [str(i - 1).encode() for i in range(1, n + 1) if i not in lost]


@pytest.mark.parametrize("gap", ["fail", "ok"])
def test_dropped_connection_mid_batch_leaves_what_the_gap_mode_promises(js, proxy, unique, gap):
    """Messages on the wire when the link drops are lost (how many is up to timing)."""
    name = f"FI{unique}"
    n = 10_000
    with _stream(js, name) as st, jssync.connect(proxy.url, reconnect_time_wait=0.05) as pnc:
        fp = pnc.jetstream().fast_publisher(gap=gap, timeout=20 * FACTOR)
        failed = _publish_through(fp, f"{name}.x", n, n // 2, proxy.drop)
        _check_gap_promise(st, fp, failed, n)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("gap", ["fail", "ok"])
def test_stream_leader_change_mid_batch_leaves_what_the_gap_mode_promises(nats_cluster, unique, gap):
    """A stream leader stepping down while the batch runs: messages sent during the election
    reach no leader (503) and the new leader reports the gap (ADR-50, leader changes)."""
    name = f"FI{unique}"
    n = 20_000
    with jssync.connect(nats_cluster.url) as nc:
        js = nc.jetstream(timeout=10 * FACTOR)
        with _stream(js, name, num_replicas=3, storage="file") as st:
            fp = js.fast_publisher(gap=gap, timeout=20 * FACTOR)
            done: list[Any] = []

            def stepdown() -> None:
                threading.Thread(target=lambda: done.append(
                    js._api(f"STREAM.LEADER.STEPDOWN.{name}", None, 10 * FACTOR))).start()

            failed = _publish_through(fp, f"{name}.x", n, n // 4, stepdown)
            wait_for(lambda: bool(done), 15 * FACTOR, what="the stepdown's answer")
            assert done[0].get("success") is True
            _check_gap_promise(st, fp, failed, n)
