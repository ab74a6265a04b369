"""``manage.py jssync_consume``: acks after the handler, naks on errors, stops cleanly on SIGTERM."""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

from django.test import SimpleTestCase

from .helpers import FACTOR, StreamMixin, manage, start_manage, stop, wait_for


def _lines(path: Path, event: str) -> list[list[str]]:
    """The handler log's lines of ``event``: [stream seq, delivery, time, data]."""
    if not path.exists():
        return []
    return [ln.split(" ")[1:] for ln in path.read_text().splitlines() if ln.split(" ")[0] == event]


class ConsumeCommandTests(StreamMixin, SimpleTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.tmp = Path(tempfile.mkdtemp(prefix="jssync-consume-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)  # last: after the processes are gone
        self.log = self.tmp / "handled.log"
        self.out = self.tmp / "out.txt"

    def consume(self, handler: str, *args: str):  # type: ignore[no-untyped-def]
        proc = start_manage("jssync_consume", self.stream, "C", "--handler", f"consumerapp.handlers.{handler}", *args,
                            out=self.out, HANDLED_LOG=str(self.log), JSSYNC_LOG_LEVEL="INFO")
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait(10)))
        return proc

    def output(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def test_consumes_acks_and_exits_cleanly_on_sigterm(self) -> None:
        sent = self.publish(5)
        proc = self.consume("record", "--workers", "2")
        wait_for(lambda: len(_lines(self.log, "handled")) == 5, 20, "5 messages handled")
        code = stop(proc, signal.SIGTERM, 30)
        self.assertEqual(code, 0, self.output())
        self.assertEqual(sorted(d for *_, d in _lines(self.log, "handled")), sorted(sent))
        info = self.js.consumer(self.stream, "C").info()
        self.assertEqual((info.num_ack_pending, info.num_pending, info.num_redelivered), (0, 0, 0))
        self.assertEqual(info.ack_floor.stream_seq, 5)
        self.assertIn("consuming", self.output())  # through Django's LOGGING, logger "jssync"

    def test_sigterm_naks_the_buffered_messages_and_finishes_the_running_ones(self) -> None:
        sent = self.publish(20)
        proc = self.consume("slow", "--workers", "2")
        wait_for(lambda: len(_lines(self.log, "handled")) >= 2, 20, "two messages handled")
        code = stop(proc, signal.SIGTERM, 30)
        self.assertEqual(code, 0, self.output())
        started = {d for *_, d in _lines(self.log, "start")}
        handled = [d for *_, d in _lines(self.log, "handled")]
        self.assertEqual(set(handled), started, "every handler that started finished within the grace")
        self.assertEqual(len(handled), len(set(handled)))
        self.assertLess(len(handled), 20, "stopped before the end: the test needs buffered messages")
        info = self.js.consumer(self.stream, "C").info()
        self.assertEqual(info.ack_floor.consumer_seq, len(handled), "every handled message was acked")
        # the rest was nak'ed, not stranded: redelivered at once (delivery 2; the ack wait is 30 s),
        # each exactly once (a nak'ed message counts as ack pending until it is redelivered)
        cons = self.js.consumer(self.stream, "C")
        rest = list(cons.fetch(20 - len(handled), expires=5 * FACTOR))
        for m in rest:
            m.ack_sync()
        self.assertEqual(list(cons.fetch_no_wait(20)), [])
        self.assertEqual(sorted(m.data.decode() for m in rest), sorted(set(sent) - set(handled)))
        self.assertEqual([m.metadata.num_delivered for m in rest], [2] * len(rest))
        info = self.js.consumer(self.stream, "C").info()
        self.assertEqual((info.num_ack_pending, info.num_pending), (0, 0), "nothing stranded")

    def test_a_handler_that_raises_gets_its_message_nak_ed_with_the_delay(self) -> None:
        self.publish(1, prefix="boom")
        proc = self.consume("fail_first_delivery", "--nak-delay", "1")
        wait_for(lambda: len(_lines(self.log, "handled")) == 1, 20, "the redelivered message handled")
        code = stop(proc, signal.SIGINT, 30)
        self.assertEqual(code, 0, self.output())
        (failed,), (handled,) = _lines(self.log, "failed"), _lines(self.log, "handled")
        self.assertEqual((failed[1], handled[1]), ("1", "2"))
        self.assertGreaterEqual(float(handled[2]) - float(failed[2]), 0.9, "redelivered after --nak-delay")
        self.assertIn("RuntimeError: first delivery of b'boom0'", self.output())  # the traceback is logged
        info = self.js.consumer(self.stream, "C").info()
        self.assertEqual((info.num_ack_pending, info.num_pending), (0, 0))

    def test_exits_non_zero_when_the_consumer_is_deleted(self) -> None:
        proc = self.consume("record")
        wait_for(lambda: self.js.consumer(self.stream, "C").info().num_waiting > 0, 20, "the command's pull")
        self.js.delete_consumer(self.stream, "C")
        code = stop(proc, None, 20)
        self.assertNotEqual(code, 0, self.output())
        self.assertIn("ConsumerDeletedError", self.output())

    def test_exits_non_zero_on_a_missing_consumer_or_a_bad_handler(self) -> None:
        env = {"HANDLED_LOG": str(self.log)}
        proc = manage("jssync_consume", self.stream, "NOPE", "--handler", "consumerapp.handlers.record", **env)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("ConsumerNotFoundError", proc.stderr)
        proc = manage("jssync_consume", self.stream, "C", "--handler", "consumerapp.handlers.nothing", **env)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("cannot be imported", proc.stderr)
        proc = manage("jssync_consume", self.stream, "C", "--handler", "consumerapp.handlers.not_callable", **env)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("is not callable", proc.stderr)
