"""connection() / jetstream(): one per process, shared by threads, remade after a fork or a close."""

from __future__ import annotations

import os
import threading
from unittest import mock

from django.test import SimpleTestCase, override_settings

import jssync
from jssync.contrib.django import close, connection, jetstream
from jssync.contrib.django.conf import connect_options

from .helpers import FACTOR, connz, wait_for


class ConnectionTests(SimpleTestCase):
    def tearDown(self) -> None:
        close()

    def test_every_thread_gets_the_one_connection(self) -> None:
        close()
        n = 8
        barrier = threading.Barrier(n)
        got: list[tuple[jssync.Connection, jssync.JetStream]] = []
        lock = threading.Lock()

        def use() -> None:
            barrier.wait(5 * FACTOR)
            pair = (connection(), jetstream())
            with lock:
                got.append(pair)

        threads = [threading.Thread(target=use) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10 * FACTOR)
        self.assertEqual(len(got), n)
        self.assertEqual(len({id(c) for c, _ in got}), 1)
        self.assertEqual(len({id(j) for _, j in got}), 1)
        nc = got[0][0]
        self.assertIs(nc, connection())
        name = f"django-{os.getpid()}"
        wait_for(lambda: [c.get("name") for c in connz()].count(name) == 1, 5, "the connection in connz")
        self.assertEqual([c.get("name") for c in connz()].count(name), 1, "exactly one connection was made")

    def test_a_closed_connection_is_replaced(self) -> None:
        first = connection()
        close()
        self.assertTrue(first.is_closed)
        second = connection()
        self.assertIsNot(first, second)
        second.flush(timeout=5 * FACTOR)

    def test_a_forked_child_makes_its_own_connection(self) -> None:
        parent = connection()
        parent.flush(timeout=5 * FACTOR)
        inbox = parent.new_inbox()
        sub = parent.subscribe(inbox)
        parent.flush(timeout=5 * FACTOR)
        pid = os.fork()
        if pid == 0:  # the child: report through the server, never return into the test runner
            code = 1
            try:
                nc = connection()
                if nc is not parent and not nc.is_closed:
                    nc.publish(inbox, f"{os.getpid()} {nc.name}".encode())
                    nc.flush(timeout=5 * FACTOR)
                    code = 0
                close()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        msg = sub.next_msg(timeout=5 * FACTOR)
        self.assertEqual(msg.data.decode(), f"{pid} django-{pid}")
        # the parent's connection is untouched by the child, and still the process's one
        self.assertIs(connection(), parent)
        self.assertTrue(parent.is_connected)
        parent.flush(timeout=5 * FACTOR)

    def test_bad_settings_raise_before_connecting(self) -> None:
        with override_settings(JSSYNC={"servers": "http://127.0.0.1:4222"}):
            with self.assertRaisesRegex(jssync.ValidationError, r"'http'.*jssync\.E003"):
                connection()
        with override_settings(JSSYNC={"options": {"timout": 1}}):
            with self.assertRaisesRegex(jssync.ValidationError, r"'timout'.*did you mean 'timeout'"):
                connection()

    def test_settings_fall_back_to_the_nats_cli_environment(self) -> None:
        env = {"NATS_URL": "nats://10.1.2.3:4222", "NATS_USER": "s3cret-token"}
        with mock.patch.dict(os.environ, env), override_settings(JSSYNC={}):
            servers, opts, js_opts = connect_options()
        self.assertEqual(servers, "nats://10.1.2.3:4222")
        self.assertEqual(opts["token"], "s3cret-token")  # NATS_USER alone is a token, as for the nats CLI
        self.assertNotIn("user", opts)
        env["NATS_PASSWORD"] = "pw"
        with mock.patch.dict(os.environ, env), override_settings(JSSYNC={"servers": "nats://h:1"}):
            servers, opts, _ = connect_options()
        self.assertEqual((servers, opts["user"], opts["password"]), ("nats://h:1", "s3cret-token", "pw"))
        # credentials in JSSYNC: none are taken from the environment
        with mock.patch.dict(os.environ, env), override_settings(JSSYNC={"token": "t0ken"}):
            _, opts, _ = connect_options()
        self.assertEqual(opts["token"], "t0ken")
        self.assertNotIn("user", opts)
        self.assertNotIn("password", opts)
