"""An ordered fetch(expires=...) on a stalled link (sockets open, nothing moving) ends within
``expires`` + 1 s, as every fetch does, also when it has to re-create its consumer first."""

from __future__ import annotations

import time

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def test_ordered_fetch_ends_within_expires_plus_one_second_on_a_stalled_link(proxy, js, unique):
    name = f"OS{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        js.publish(f"{name}.x", b"1")
        # no PING for a minute: the stall is not noticed as a lost connection
        with jssync.connect(proxy.url, ping_interval=60, timeout=2.0) as nc:
            oc = nc.jetstream(timeout=5.0).stream(name).ordered_consumer()
            assert [m.data for m in oc.fetch(1, expires=2)] == [b"1"]
            proxy.stall()
            took = []
            try:
                # the first fetch's pull goes unanswered; the next ones re-create the consumer first
                for _ in range(3):
                    t0 = time.monotonic()
                    try:
                        res = oc.fetch(1, expires=2)
                        assert list(res) == []
                    except jssync.TimeoutError:
                        pass
                    took.append(time.monotonic() - t0)
            finally:
                proxy.forward()
            assert max(took) < 2 + 1 + 0.5 * FACTOR, f"fetch(expires=2) took {took}"
            # and it works again once the link moves
            js.publish(f"{name}.x", b"2")
            end = time.monotonic() + 20 * FACTOR
            got: list[bytes] = []
            while not got and time.monotonic() < end:
                try:
                    got = [m.data for m in oc.fetch(1, expires=1)]
                except jssync.TimeoutError:
                    pass
            assert got == [b"2"]
    finally:
        js.delete_stream(name)
