"""The JetStream backend of Django's Tasks framework and ``manage.py jssync_tasks_worker``, against a real server.

Runs where ``django.tasks`` (Django 6) or the ``django-tasks`` backport is installed (the
``test`` extra installs the backport); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import unittest
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test import SimpleTestCase

import jssync

from .helpers import FACTOR, manage, start_manage, stop, unique, wait_for

BACKEND = "jssync.contrib.django.tasks.JetStreamBackend"


def _lines(path: Path) -> list[list[str]]:
    """The task log's lines: [event, label, wall time, pid]."""
    return [ln.split(" ") for ln in path.read_text().splitlines()] if path.exists() else []


@unittest.skipUnless(settings.HAVE_DJANGO_TASKS, "needs django.tasks (Django 6) or the django-tasks backport")
class TaskBackendTests(SimpleTestCase):
    tasks_setting: dict[str, Any]

    def setUp(self) -> None:
        super().setUp()
        uid = unique()
        self.stream, self.bucket, self.prefix = f"T{uid}", f"R{uid}", f"t{uid}"
        self.use_tasks({"default": {"BACKEND": BACKEND, "QUEUES": ["default", "other"],
                                    "OPTIONS": {"stream": self.stream, "subject": f"t{uid}",
                                                "results_bucket": self.bucket, "ack_wait": 2.0 * FACTOR,
                                                "storage": "memory"}}})
        tmp = Path(tempfile.mkdtemp(prefix="jssync-tasks-"))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)  # last: after the workers are gone
        self.log, self.out = tmp / "tasks.log", tmp / "worker.txt"
        self.nc = jssync.connect(os.environ["NATS_URL"], name="test-helper")
        self.js = self.nc.jetstream()

    def tearDown(self) -> None:
        for delete, name in ((self.js.delete_stream, self.stream), (self.js.delete_key_value, self.bucket)):
            try:
                delete(name)
            except jssync.Error:
                pass
        self.nc.close()
        super().tearDown()

    def use_tasks(self, tasks: dict[str, Any]) -> None:
        """This test's TASKS setting, here (override_settings) and in the workers it starts (TEST_TASKS)."""
        self.tasks_setting = tasks
        self.enterContext(self.settings(TASKS=tasks))

    def env(self) -> dict[str, str]:
        return {"TEST_TASKS": json.dumps(self.tasks_setting), "TASKS_LOG": str(self.log), "JSSYNC_LOG_LEVEL": "INFO"}

    def worker(self, *args: str, out: Path | None = None):  # type: ignore[no-untyped-def]
        proc = start_manage("jssync_tasks_worker", *args, out=out or self.out, **self.env())
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait(10)))
        return proc

    def run_worker(self, *args: str) -> str:
        """Run the worker to its end (``--max-tasks``); return its output; fail unless it exits 0."""
        proc = manage("jssync_tasks_worker", *args, timeout=60, **self.env())
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stdout + proc.stderr

    def output(self, out: Path | None = None) -> str:
        path = out or self.out
        return path.read_text() if path.exists() else ""

    def consumer_info(self, band: str = "default", queue: str = "default") -> Any:
        return self.js.consumer(self.stream, f"{queue}-{band}").info()

    # -- the tests ---------------------------------------------------------------------------------------

    def test_round_trip_with_all_default_options(self) -> None:
        from taskapp.tasks import add

        self.stream, self.bucket = "DJANGO_TASKS_DEFAULT", "django_tasks_default"
        self.use_tasks({"default": {"BACKEND": BACKEND}})
        result = add.enqueue(2, 3)
        self.assertEqual(result.status, "READY")
        self.assertIsNotNone(result.enqueued_at)
        self.assertEqual(add.get_result(result.id).status, "READY")
        self.run_worker("--max-tasks", "1")
        done = add.get_result(result.id)
        self.assertEqual(done.status, "SUCCESSFUL")
        self.assertEqual(done.return_value, 5)
        self.assertEqual((done.args, done.kwargs), ([2, 3], {}))
        self.assertEqual(len(done.worker_ids), 1)
        self.assertEqual(done.attempts, 1)
        self.assertTrue(done.enqueued_at <= done.started_at <= done.finished_at)
        self.assertEqual(done.errors, [])
        result.refresh()
        self.assertEqual((result.status, result.return_value), ("SUCCESSFUL", 5))
        info = self.js.consumer("DJANGO_TASKS_DEFAULT", "default-default").info()
        self.assertEqual((info.num_pending, info.num_ack_pending, info.num_redelivered), (0, 0, 0))
        self.assertEqual(info.delivered.consumer_seq, 1, "delivered exactly once")
        self.assertEqual(self.js.stream("DJANGO_TASKS_DEFAULT").info().state.messages, 0, "work queue: acked = gone")

    def test_an_async_task_and_a_task_with_context(self) -> None:
        from taskapp.tasks import add_async, hang_on_first_attempt

        sum_result = add_async.enqueue(20, 22)
        # a task that takes the context sees its attempt: 1 here, so it would hang; attempt 2 is made up
        # by a worker id already in the result (as a redelivery after a killed worker leaves it)
        ctx_result = hang_on_first_attempt.enqueue("c")
        backend = ctx_result.task.get_backend()
        kv = backend.ensure()
        rec = json.loads(kv.get(ctx_result.id).value)
        rec["worker_ids"] = ["an-earlier-worker"]
        kv.put(ctx_result.id, json.dumps(rec).encode())
        self.run_worker("--max-tasks", "2")
        sum_result.refresh()
        ctx_result.refresh()
        self.assertEqual((sum_result.status, sum_result.return_value), ("SUCCESSFUL", 42))
        self.assertEqual((ctx_result.status, ctx_result.return_value, ctx_result.attempts), ("SUCCESSFUL", 2, 2))

    def test_get_result_of_an_unknown_id_raises_django_s_exception(self) -> None:
        from taskapp.tasks import add

        from jssync.contrib.django.tasks import TaskResultDoesNotExist

        with self.assertRaises(TaskResultDoesNotExist):
            add.get_backend().get_result("no-such-result")

    def test_the_backend_works_on_after_the_connection_is_closed(self) -> None:
        from taskapp.tasks import add

        from jssync.contrib.django import close

        result = add.enqueue(1, 1)
        close()  # the process's connection; the next use makes a new one
        self.assertEqual(add.get_result(result.id).status, "READY")
        add.enqueue(2, 2)
        self.assertEqual(self.js.stream(self.stream).info().state.messages, 2)

    def test_higher_priority_bands_run_first(self) -> None:
        from taskapp.tasks import record

        record.using(priority=-10).enqueue("low")
        record.enqueue("default1")
        record.using(priority=50).enqueue("high1")
        record.enqueue("default2")
        record.using(priority=1).enqueue("high2")
        record.using(priority=-100).enqueue("low2")
        self.run_worker("--max-tasks", "6")
        self.assertEqual([label for _, label, *_ in _lines(self.log)],
                         ["high1", "high2", "default1", "default2", "low", "low2"])

    def worker_waits(self) -> bool:
        """The worker's idle pull is open on the default band of the default queue."""
        try:
            return int(self.consumer_info().num_waiting or 0) > 0
        except jssync.NotFoundError:
            return False

    def check_run_after(self) -> None:
        """A task with run_after 2 s ahead and one without: the second runs at once, the first not before then."""
        from taskapp.tasks import record

        proc = self.worker()
        # the worker is up and waiting first: on a loaded machine its start can take longer than
        # run_after's 2 s, and a task past its run_after is rightly run in FIFO order
        wait_for(self.worker_waits, 30, "the worker waits for tasks")
        run_after = datetime.now(UTC) + timedelta(seconds=2 * FACTOR)
        later = record.using(run_after=run_after).enqueue("later")
        record.enqueue("now")
        wait_for(lambda: len(_lines(self.log)) == 2, 20, "both tasks run")
        (_, first, _, _), (_, second, ran_at, _) = _lines(self.log)
        self.assertEqual((first, second), ("now", "later"))
        self.assertGreaterEqual(float(ran_at), run_after.timestamp(), "not run before run_after")
        wait_for(lambda: later.task.get_backend().get_result(later.id).status == "SUCCESSFUL", 10, "its result")
        self.assertEqual(stop(proc, signal.SIGTERM, 30), 0, self.output())
        self.assertEqual(len(_lines(self.log)), 2, "each ran once")

    def test_run_after_is_a_server_schedule(self) -> None:
        self.check_run_after()
        self.assertTrue(self.js.stream(self.stream).info().config.allow_msg_schedules)
        info = self.consumer_info()
        self.assertEqual((info.delivered.consumer_seq, info.num_redelivered), (2, 0),
                         "the server published the deferred task at its time: no worker held it back")

    def test_run_after_is_held_back_by_the_worker_on_a_stream_without_schedules(self) -> None:
        self.js.create_stream(name=self.stream, subjects=[f"{self.prefix}.>"], retention="workqueue",
                              storage="memory")
        self.check_run_after()
        info = self.consumer_info()
        self.assertEqual(info.delivered.consumer_seq, 3, "the deferred task was nak'ed with a delay, then run")

    def test_a_task_that_raises_gets_a_failed_result_and_is_acked(self) -> None:
        from taskapp.tasks import fail

        result = fail.enqueue("boom")
        self.run_worker("--max-tasks", "1")
        result.refresh()
        self.assertEqual(result.status, "FAILED")
        self.assertIsNotNone(result.finished_at)
        (error,) = result.errors
        self.assertIs(error.exception_class, ValueError)
        self.assertIn("ValueError: boom", error.traceback)
        self.assertIn("taskapp/tasks.py", error.traceback)
        with self.assertRaises(ValueError):
            result.return_value  # noqa: B018 - Django raises for a failed task
        info = self.consumer_info()
        self.assertEqual((info.num_pending, info.num_ack_pending, info.num_redelivered), (0, 0, 0))

    def test_a_worker_killed_mid_task_leaves_it_to_the_next_worker(self) -> None:
        from taskapp.tasks import hang_on_first_attempt

        result = hang_on_first_attempt.enqueue("k")
        first = self.worker()
        wait_for(lambda: [ln[0] for ln in _lines(self.log)] == ["start"], 20, "the task started")
        result.refresh()
        self.assertEqual(result.status, "RUNNING")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second_out = self.out.with_name("second.txt")
        second = self.worker("--max-tasks", "1", out=second_out)
        self.assertEqual(stop(second, None, 30), 0, self.output(second_out))
        self.assertEqual([ln[0] for ln in _lines(self.log)], ["start", "ran"])
        self.assertNotEqual(_lines(self.log)[0][3], _lines(self.log)[1][3], "run again by another process")
        result.refresh()
        self.assertEqual((result.status, result.return_value), ("SUCCESSFUL", 2))
        self.assertEqual(result.attempts, 2)
        self.assertEqual(len(set(result.worker_ids)), 2)
        info = self.consumer_info()
        self.assertEqual((info.num_pending, info.num_ack_pending, info.num_redelivered), (0, 0, 0))
        self.assertEqual(info.delivered.consumer_seq, 2, "delivered twice: to the killed worker and the next")

    def test_sigterm_finishes_the_running_task_and_leaves_the_rest(self) -> None:
        from taskapp.tasks import slow

        # the first takes long enough for the signal to arrive while it runs, even on a loaded machine
        results = [slow.enqueue(f"s{i}", (4.0 if i == 0 else 0.1) * FACTOR) for i in range(3)]
        proc = self.worker()
        wait_for(lambda: len(_lines(self.log)) == 1, 20, "the first task started")
        code = stop(proc, signal.SIGTERM, 30)
        self.assertEqual(code, 0, self.output())
        self.assertEqual([ln[:2] for ln in _lines(self.log)], [["start", "s0"], ["done", "s0"]])
        statuses = [results[0].task.get_backend().get_result(r.id).status for r in results]
        self.assertEqual(statuses, ["SUCCESSFUL", "READY", "READY"])
        info = self.consumer_info()
        self.assertEqual((info.num_pending, info.num_ack_pending), (2, 0), "nothing held by the stopped worker")
        self.run_worker("--max-tasks", "2")
        self.assertEqual([ln[1] for ln in _lines(self.log) if ln[0] == "done"], ["s0", "s1", "s2"])

    def test_a_second_signal_interrupts_the_running_task(self) -> None:
        from taskapp.tasks import slow

        result = slow.enqueue("long", 600)
        proc = self.worker()
        wait_for(lambda: len(_lines(self.log)) == 1, 20, "the task started")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in self.output(), 10, "the first signal seen")
        self.assertEqual(stop(proc, signal.SIGTERM, 30), 1, self.output())
        self.assertIn("interrupted by a second signal", self.output())
        result.refresh()
        self.assertEqual(result.status, "RUNNING", "not finished: it runs again after ack_wait")
        info = self.consumer_info()
        self.assertEqual((info.num_ack_pending, info.num_pending), (1, 0), "left to the ack wait, not acked")

    def test_queues_are_kept_apart(self) -> None:
        from taskapp.tasks import record

        record.using(queue_name="other").enqueue("other")
        record.enqueue("default")
        self.run_worker("--queue", "other", "--max-tasks", "1")
        self.assertEqual([ln[1] for ln in _lines(self.log)], ["other"])
        with self.assertRaises(jssync.ConsumerNotFoundError):
            self.consumer_info()  # a worker reads only the queues it runs
        self.assertEqual(self.js.stream(self.stream).info().state.messages, 1, "the default queue's task waits")

    def test_the_worker_refuses_bad_arguments(self) -> None:
        for args, what in ((("--queue", "nope"), "--queue 'nope' is not in TASKS['default']['QUEUES']"),
                           (("--backend", "nope"), "--backend 'nope'"),
                           (("--max-tasks", "0"), "'0' is not a whole number >= 1")):
            proc = manage("jssync_tasks_worker", *args, **self.env())
            self.assertNotEqual(proc.returncode, 0, args)
            self.assertIn(what, proc.stderr)

    def test_enqueue_refuses_bad_input_before_sending(self) -> None:
        from taskapp.tasks import record

        backend = record.get_backend()
        with self.assertRaisesMessage(Exception, "Queue 'nope' is not valid"):
            record.using(queue_name="nope").enqueue("x")
        with self.assertRaises(TypeError):
            record.enqueue(object())
        with self.assertRaises(jssync.StreamNotFoundError):
            self.js.stream(self.stream)  # nothing was sent: not even the stream was made
        self.assertTrue(backend.supports_defer and backend.supports_priority and backend.supports_get_result)


class TaskBackendCheckTests(SimpleTestCase):
    """Wrong OPTIONS of a JetStreamBackend fail ``manage.py check`` (no Tasks framework needed)."""

    def check(self, tasks: dict[str, Any]) -> str:
        proc = manage("check", TEST_TASKS=json.dumps(tasks))
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return proc.stderr

    def test_an_option_of_the_wrong_type(self) -> None:
        err = self.check({"default": {"BACKEND": BACKEND, "OPTIONS": {"timeout": "5"}}})
        self.assertIn("jssync.E012", err)
        self.assertIn("TASKS['default']['OPTIONS']['timeout'] must be a number of seconds > 0, got '5' (str)", err)

    def test_an_unknown_option_with_a_suggestion(self) -> None:
        err = self.check({"default": {"BACKEND": BACKEND, "OPTIONS": {"ack_wiat": 5}}})
        self.assertIn("jssync.E011", err)
        self.assertIn("did you mean 'ack_wait'?", err)

    def test_a_queue_name_that_is_not_a_subject_token(self) -> None:
        err = self.check({"default": {"BACKEND": BACKEND, "QUEUES": ["default", "a.b"]}})
        self.assertIn("jssync.E013", err)
        self.assertIn("'a.b'", err)

    # Django 6 runs the backends' checks only once something imported django.tasks; the backport's
    # app registers them at startup
    @unittest.skipUnless("django_tasks" in settings.INSTALLED_APPS, "needs the django-tasks backport's app")
    def test_the_backend_checks_its_options_itself_without_the_app(self) -> None:
        proc = manage("check", TEST_TASKS=json.dumps({"default": {"BACKEND": BACKEND, "OPTIONS": {"timeout": "5"}}}),
                      TEST_WITHOUT_JSSYNC_APP="1")
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(proc.stderr.count("jssync.E012"), 1, proc.stderr)
        self.assertEqual(self.check({"default": {"BACKEND": BACKEND, "OPTIONS": {"timeout": "5"}}}).count(
            "jssync.E012"), 1, "with the app: reported once, by its check")

    def test_good_options_pass(self) -> None:
        proc = manage("check", TEST_TASKS=json.dumps({"default": {"BACKEND": BACKEND, "QUEUES": ["default", "x-1"],
                                                                  "OPTIONS": {"ack_wait": 10, "timeout": 2.5,
                                                                              "storage": "memory"}}}))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
