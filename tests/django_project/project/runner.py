"""A test runner that starts a nats-server (jssync.testing.NatsServer) for the run and sets $NATS_URL."""

from __future__ import annotations

import os
from typing import Any

from django.test.runner import DiscoverRunner

from jssync.contrib.django import close
from jssync.testing.server import NatsServer


class NatsServerRunner(DiscoverRunner):
    server: NatsServer | None = None

    def setup_test_environment(self, **kwargs: Any) -> None:
        self.server = NatsServer(jetstream=True)
        self.server.start()
        os.environ["NATS_URL"] = self.server.url
        os.environ["TEST_NATS_HTTP"] = f"http://127.0.0.1:{self.server.http_port}"
        super().setup_test_environment(**kwargs)

    def teardown_test_environment(self, **kwargs: Any) -> None:
        super().teardown_test_environment(**kwargs)
        close()
        if self.server is not None:
            self.server.stop()
            self.server.cleanup()
