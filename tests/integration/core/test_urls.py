"""connect() refuses a URL it can never use at once, before any connect attempt, naming what is wrong."""

from __future__ import annotations

import time

import pytest

import jssync
from tests.conftest import FACTOR

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("url", ["http://127.0.0.1:4222", "https://demo.nats.io", "redis://127.0.0.1:4222",
                                 "NATS//127.0.0.1:4222"])
def test_unknown_scheme_is_refused_at_once(url):
    t0 = time.monotonic()
    with pytest.raises(jssync.ValidationError) as ei:
        _connect_expecting_failure(url, timeout=10)
    assert time.monotonic() - t0 < 1 * FACTOR
    text = str(ei.value)
    assert "nats://" in text and "tls://" in text and "ws://" in text and "wss://" in text, text


def _connect_expecting_failure(*args, **kwargs) -> None:
    nc = jssync.connect(*args, **kwargs)  # the expected error: no connection to close
    nc.close()


def test_unknown_scheme_in_a_list_is_refused(nats_server):
    with pytest.raises(jssync.ValidationError, match="http"):
        _connect_expecting_failure([nats_server.url, "http://127.0.0.1:4222"], timeout=10)


def test_host_that_does_not_resolve_fails_at_once():
    t0 = time.monotonic()
    with pytest.raises(jssync.NoServersError) as ei:
        _connect_expecting_failure("nats://no-such-host.invalid:4222", timeout=10)
    assert time.monotonic() - t0 < 3 * FACTOR
    assert "no-such-host.invalid" in str(ei.value) and "resolve" in str(ei.value), ei.value
    assert "gaierror" not in str(ei.value)


def test_one_unresolvable_host_among_good_ones_still_connects(nats_server):
    nc = jssync.connect(["nats://no-such-host.invalid:4222", nats_server.url], timeout=10)
    try:
        assert nc.is_connected
        nc.flush(timeout=5)
    finally:
        nc.close()


@pytest.mark.parametrize("form", ["{hp}", "nats://{hp}", "NATS://{hp}", "localhost:{port}"])
def test_accepted_forms_still_work(nats_server, form):
    hp = nats_server.url.split("://", 1)[1]
    nc = jssync.connect(form.format(hp=hp, port=hp.rsplit(":", 1)[1]), timeout=10)
    try:
        nc.flush(timeout=5)
    finally:
        nc.close()


@pytest.mark.parametrize(("url", "why"), [
    ("nats://127.0.0.1:42x2", "the port '42x2'"),
    ("127.0.0.1:42x2", "the port '42x2'"),
    ("nats://127.0.0.1:99999", "the port '99999'"),
    ("nats://127.0.0.1:0", "the port '0'"),
    ("nats://localhost:", "the port ''"),
    ("nats://:4222", "no host"),
    ("nats://[::1", "Invalid IPv6"),
    ("nats://a b:4222", "white space"),
])
def test_bad_host_or_port_is_a_validation_error_naming_the_url(url, why):
    t0 = time.monotonic()
    with pytest.raises(jssync.ValidationError) as ei:
        _connect_expecting_failure(url, timeout=10)
    assert time.monotonic() - t0 < 1 * FACTOR
    assert repr(url) in str(ei.value) and why in str(ei.value), ei.value


def test_bad_port_with_a_password_names_the_url_without_the_password():
    with pytest.raises(jssync.ValidationError) as ei:
        _connect_expecting_failure("nats://joe:s3cret@127.0.0.1:42x2", timeout=10)
    assert "'nats://joe:***@127.0.0.1:42x2'" in str(ei.value) and "s3cret" not in str(ei.value), ei.value
