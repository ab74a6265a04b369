"""Authentication options against servers that require them."""

from __future__ import annotations

import logging

import nkeys
import pytest

import jssync
from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def userpass_server():
    with NatsServer(jetstream=False, config="authorization { user: bob, password: s3cretpw }") as srv:
        yield srv


def test_user_password(userpass_server, caplog):
    caplog.set_level(logging.DEBUG, logger="jssync")
    with jssync.connect(userpass_server.url, user="bob", password="s3cretpw") as nc:
        nc.flush()
        assert "s3cretpw" not in repr(nc)
    url = userpass_server.url.replace("nats://", "nats://bob:s3cretpw@")
    with jssync.connect(url) as nc:
        assert "s3cretpw" not in repr(nc)
        assert "s3cretpw" not in (nc.connected_url or "")
        nc.flush()
    assert "s3cretpw" not in caplog.text


def test_wrong_password_raises_authorization_error(userpass_server):
    with pytest.raises(jssync.AuthorizationError) as ei:
        jssync.connect(userpass_server.url, user="bob", password="wrong-pw", timeout=3)
    assert "wrong-pw" not in str(ei.value)


def test_token():
    with NatsServer(jetstream=False, config="authorization { token: tok3n }") as srv:
        with jssync.connect(srv.url, token="tok3n") as nc:
            nc.flush()
        with pytest.raises(jssync.AuthorizationError):
            jssync.connect(srv.url, token="nope", timeout=3)


def test_nkeys_seed(tmp_path):
    import os

    kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
    seed = kp.seed.decode()
    pub = kp.public_key.decode()
    with NatsServer(jetstream=False, config=f"authorization {{ users: [ {{ nkey: {pub} }} ] }}") as srv:
        with jssync.connect(srv.url, nkeys_seed=seed) as nc:
            nc.flush()
        f = tmp_path / "user.nk"
        f.write_text(seed)
        with jssync.connect(srv.url, nkeys_seed=str(f)) as nc:
            nc.flush()
