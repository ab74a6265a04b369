"""The system checks say what is wrong with JSSYNC (and its NATS_* environment defaults)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any
from unittest import mock

from django.core.checks import run_checks
from django.test import SimpleTestCase, override_settings

from .helpers import manage


def _errors(jssync_setting: Any, env: dict[str, str] | None = None) -> list[Any]:
    with mock.patch.dict(os.environ, env or {}), override_settings(JSSYNC=jssync_setting):
        return list(run_checks(tags=["jssync"]))


class CheckTests(SimpleTestCase):
    def test_good_settings_pass(self) -> None:
        self.assertEqual(_errors({"servers": ["nats://a:4222", "tls://b:4222", "c:4222"], "name": "web",
                                  "options": {"timeout": 3.0, "max_reconnect_attempts": 5},
                                  "jetstream": {"domain": "hub"}}), [])

    def test_not_a_dict(self) -> None:
        self.assertEqual([e.id for e in _errors("nats://a:4222")], ["jssync.E001"])

    def test_unknown_key_with_a_suggestion(self) -> None:
        errors = _errors({"servrs": "nats://a:4222"})
        self.assertEqual([e.id for e in errors], ["jssync.E002"])
        self.assertIn("'servrs'", errors[0].msg)
        self.assertEqual(errors[0].hint, "did you mean 'servers'?")

    def test_bad_url_scheme(self) -> None:
        errors = _errors({"servers": "nats://ok:4222,http://user:pw@web:80"})
        self.assertEqual([e.id for e in errors], ["jssync.E003"])
        self.assertIn("'http'", errors[0].msg)
        self.assertNotIn("pw", errors[0].msg)  # the password is redacted
        self.assertEqual([e.id for e in _errors({"servers": 4222})], ["jssync.E003"])

    def test_missing_creds_file(self) -> None:
        errors = _errors({"creds": "/nonexistent/app.creds"})
        self.assertEqual([e.id for e in errors], ["jssync.E004"])
        self.assertIn("/nonexistent/app.creds", errors[0].msg)
        errors = _errors({}, env={"NATS_CREDS": "/nonexistent/env.creds"})
        self.assertEqual([e.id for e in errors], ["jssync.E004"])
        self.assertIn("$NATS_CREDS", errors[0].msg)
        with tempfile.NamedTemporaryFile(suffix=".creds") as f:
            self.assertEqual(_errors({"creds": f.name}), [])

    def test_unknown_connect_and_jetstream_options(self) -> None:
        errors = _errors({"options": {"reconect_time_wait": 1}, "jetstream": {"domian": "x"}})
        self.assertEqual([e.id for e in errors], ["jssync.E005", "jssync.E010"])
        self.assertEqual(errors[0].hint, "did you mean 'reconnect_time_wait'?")
        self.assertEqual(errors[1].hint, "did you mean 'domain'?")

    def test_option_given_twice_and_wrong_types(self) -> None:
        errors = _errors({"name": "a", "options": {"name": "b"}})
        self.assertEqual([e.id for e in errors], ["jssync.E009"])
        self.assertEqual([e.id for e in _errors({"options": ["timeout"]})], ["jssync.E006"])

    def test_connect_options_of_the_wrong_type(self) -> None:
        errors = _errors({"options": {"timeout": "5", "callback_workers": 2.5, "no_echo": "yes", "error_cb": 3}})
        self.assertEqual([e.id for e in errors], ["jssync.E006"] * 4)
        self.assertIn("JSSYNC['options']['timeout'] must be a number of seconds, got '5'", errors[0].msg)
        self.assertEqual(_errors({"options": {"timeout": 5, "reconnect_buffer_size": None}}), [])

    def test_manage_py_check_fails_on_an_option_of_the_wrong_type(self) -> None:
        bad = manage("check", TEST_JSSYNC=json.dumps({"options": {"timeout": "5"}}))
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("jssync.E006", bad.stderr)

    def test_manage_py_check_fails_on_bad_settings(self) -> None:
        bad = manage("check", TEST_JSSYNC=json.dumps({"servers": "redis://x:6379", "credz": "x"}))
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("jssync.E002", bad.stderr)
        self.assertIn("did you mean 'creds'?", bad.stderr)
        self.assertIn("jssync.E003", bad.stderr)
        good = manage("check")
        self.assertEqual(good.returncode, 0, good.stderr)
