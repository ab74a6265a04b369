"""health() and the readiness view: 200 when the server and JetStream answer, 503 when not."""

from __future__ import annotations

import time

from django.test import SimpleTestCase, override_settings
from django.urls import reverse

from jssync.contrib.django import close, health
from jssync.server import NatsServer, free_port

from .helpers import FACTOR, wait_for


class HealthTests(SimpleTestCase):
    def tearDown(self) -> None:
        close()

    def test_the_view_says_ok_when_connected(self) -> None:
        r = self.client.get(reverse("health"))
        self.assertEqual(r.status_code, 200, r.content)
        body = r.json()
        self.assertEqual((body["ok"], body["status"], body["connected"], body["jetstream"]), (True, "ok", True, True))
        self.assertIsInstance(body["rtt_ms"], float)
        self.assertNotIn("error", body)
        self.assertEqual(self.client.post(reverse("health")).status_code, 405)

    def test_the_view_says_503_when_no_server_answers(self) -> None:
        with override_settings(JSSYNC={"servers": f"nats://127.0.0.1:{free_port()}", "options": {"timeout": 1.0}}):
            start = time.monotonic()
            r = self.client.get(reverse("health"))
            self.assertLess(time.monotonic() - start, 5 * FACTOR)
        self.assertEqual(r.status_code, 503, r.content)
        body = r.json()
        self.assertEqual((body["ok"], body["status"], body["connected"]), (False, "error", False))
        self.assertIn("NoServersError", body["error"])

    def test_the_view_says_503_when_the_settings_are_wrong(self) -> None:
        with override_settings(JSSYNC={"options": {"timeout": "5"}}):
            r = self.client.get(reverse("health"))
        self.assertEqual(r.status_code, 503, r.content)
        body = r.json()
        self.assertEqual((body["ok"], body["connected"]), (False, False))
        self.assertIn("ValidationError", body["error"])
        self.assertIn("timeout", body["error"])

    def test_health_reports_a_lost_server_and_its_return(self) -> None:
        with NatsServer(jetstream=True) as srv, override_settings(JSSYNC={"servers": srv.url,
                                                                         "options": {"reconnect_time_wait": 0.1}}):
            self.assertTrue(health()["ok"])
            srv.stop()
            wait_for(lambda: not health(timeout=0.5)["ok"], 10, "health to see the server gone")
            body = health(timeout=0.5)
            self.assertFalse(body["connected"])
            self.assertIn("disconnected", body["error"])
            self.assertEqual(self.client.get(reverse("health")).status_code, 503)
            srv.start()
            wait_for(lambda: health(timeout=0.5)["ok"], 15, "health to see the server back")
            self.assertEqual(self.client.get(reverse("health")).status_code, 200)

    def test_jetstream_disabled_is_not_healthy(self) -> None:
        with NatsServer(jetstream=False) as srv, override_settings(JSSYNC={"servers": srv.url}):
            body = health(timeout=1.0)
            self.assertEqual((body["ok"], body["connected"], body["jetstream"]), (False, True, False))
            self.assertTrue(health(timeout=1.0, jetstream=False)["ok"])
