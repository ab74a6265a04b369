"""Authentication against servers that require it, and credentials that never leak.

user/password, token, nkey seed (string or file), creds (a user JWT made in the test for
an operator/account set up with a memory resolver). No credential may appear in a repr,
a log line (every logger captured at DEBUG) or an exception text, chain included.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

import nkeys
import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import wait_for

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


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


# -- creds (JWT): an operator, an account and a user made in the test ----------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _keypair(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _encode_jwt(claims: dict, signer: nkeys.KeyPair) -> str:
    """A NATS v2 JWT: base64url JSON header and claims, signed (ed25519) by ``signer``."""
    header = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = dict(claims, iss=signer.public_key.decode(), iat=int(time.time()), jti=uuid.uuid4().hex.upper())
    payload = _b64url(json.dumps(body).encode())
    signature = signer.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{_b64url(signature)}"


def _user_claims(user: nkeys.KeyPair, pub: dict | None = None) -> dict:
    return {"sub": user.public_key.decode(), "name": "jssync-user",
            "nats": {"type": "user", "version": 2, "pub": pub or {}, "sub": {}, "subs": -1, "data": -1,
                     "payload": -1}}


def _creds_text(user_jwt: str, user: nkeys.KeyPair) -> str:
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n"
    )


@dataclass
class Operator:
    server: NatsServer
    account: nkeys.KeyPair
    creds: Path  # a user of the account, denied publishing on "forbidden.>"
    user_jwt: str
    user_seed: str
    stranger_creds: Path  # a user signed by an account the server does not know


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("jwt")
    op = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    acc = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = _keypair(nkeys.PREFIX_BYTE_USER)
    op_jwt = _encode_jwt({"sub": op.public_key.decode(), "name": "jssync-op",
                          "nats": {"type": "operator", "version": 2}}, op)
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
              "conn": -1, "leaf": -1}
    acc_jwt = _encode_jwt({"sub": acc.public_key.decode(), "name": "jssync-acc",
                           "nats": {"type": "account", "version": 2, "limits": limits}}, op)
    user_jwt = _encode_jwt(_user_claims(user, {"deny": ["forbidden.>"]}), acc)
    (d / "op.jwt").write_text(op_jwt)
    creds = d / "user.creds"
    creds.write_text(_creds_text(user_jwt, user))
    other_acc = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    stranger = _keypair(nkeys.PREFIX_BYTE_USER)
    stranger_creds = d / "stranger.creds"
    stranger_creds.write_text(_creds_text(_encode_jwt(_user_claims(stranger), other_acc), stranger))
    config = (
        f'operator: "{d / "op.jwt"}"\n'
        "resolver: MEMORY\n"
        f'resolver_preload: {{\n  {acc.public_key.decode()}: "{acc_jwt}"\n}}\n'
    )
    with NatsServer(jetstream=False, config=config) as srv:
        yield Operator(srv, acc, creds, user_jwt, user.seed.decode(), stranger_creds)


def test_creds_jwt(operator):
    errs: list[BaseException] = []
    with jssync.connect(operator.server.url, creds=operator.creds, error_cb=errs.append) as nc:
        sub = nc.subscribe("jwt.hello")
        nc.publish("jwt.hello", b"signed in with a JWT")
        assert sub.next_msg(2).data == b"signed in with a JWT"
        # the user JWT's own permissions are enforced, and reported on the calling thread
        with pytest.raises(jssync.PermissionDeniedError):
            nc.request("forbidden.x", b"", timeout=5)
        assert nc.is_connected


def test_creds_of_an_unknown_account_are_refused(operator):
    with pytest.raises(jssync.AuthorizationError):
        jssync.connect(operator.server.url, creds=operator.stranger_creds, timeout=3)


def test_bad_credential_files_fail_before_connecting(operator, tmp_path):
    garbage = tmp_path / "garbage.creds"
    garbage.write_text("not a creds file")
    with pytest.raises(ValueError, match="holds no user JWT"):
        jssync.connect(operator.server.url, creds=garbage, timeout=1)
    with pytest.raises(ValueError, match="cannot read the creds file"):
        jssync.connect(operator.server.url, creds=tmp_path / "missing.creds", timeout=1)
    with pytest.raises(ValueError, match="holds no nkey seed"):
        jssync.connect(operator.server.url, nkeys_seed=str(garbage), timeout=1)


# -- no credential in a repr, a log line or an exception ----------------------------------------


def _secret(tag: str) -> str:
    return f"{tag}-{os.urandom(8).hex()}"


def _full_text(exc: BaseException) -> str:
    """The exception with its whole chain, as a traceback prints it."""
    return "".join(traceback.format_exception(exc))


@pytest.fixture
def all_logs(caplog):
    """Capture every logger (jssync, nats, asyncio) at DEBUG."""
    caplog.set_level(logging.DEBUG)
    return caplog


def _exercise(nc: jssync.Connection, texts: list[str]) -> None:
    """Do a bit of everything on ``nc`` and collect every repr, URL and error text it gives."""
    errs: list[BaseException] = []
    nc._links.error_cb = errs.append
    js = nc.jetstream()
    sub = nc.subscribe("leak.check")
    nc.publish("leak.check", b"payload")
    msg = sub.next_msg(2)
    texts += [repr(nc), str(nc), repr(js), repr(sub), repr(msg), str(nc.connected_url), repr(nc.server_info),
              repr(nc.stats)]
    for call in (lambda: nc.request("leak.nobody", b"", timeout=1),
                 lambda: js.account_info(timeout=1),
                 lambda: nc.publish("bad subject", b"")):
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - any error text is checked
            texts.append(_full_text(exc))

    def boom(m: jssync.Msg) -> None:
        raise RuntimeError("callback failed")

    nc.subscribe("leak.boom", callback=boom)
    nc.publish("leak.boom", b"")
    wait_for(lambda: errs, what="the callback error in error_cb")
    texts += [_full_text(e) for e in errs]


def _connect_failures(url: str, texts: list[str], **kwargs) -> None:
    from jssync.server import free_port

    try:
        jssync.connect(url, timeout=1.0, **kwargs).close()
        raise AssertionError("connected with wrong credentials")
    except (jssync.AuthorizationError, jssync.NoServersError) as exc:
        texts.append(_full_text(exc))
    dead = re.sub(r":\d+$", f":{free_port()}", url)
    with pytest.raises(jssync.NoServersError) as ei:
        jssync.connect(dead, timeout=0.5, **kwargs)
    texts.append(_full_text(ei.value))


def _assert_clean(texts: list[str], logs: str, secrets: list[str]) -> None:
    blob = "\n".join(texts) + "\n" + logs
    assert logs, "nothing was logged: the capture is not working"
    for s in secrets:
        assert s not in blob, "a credential leaked into a repr, a log line or an exception"


def test_password_and_token_never_leak(all_logs):
    password, token = _secret("pw"), _secret("tok")
    wrong_pw, wrong_tok = _secret("wrongpw"), _secret("wrongtok")
    secrets = [password, token, wrong_pw, wrong_tok]
    texts: list[str] = []
    cfg_pw = f"authorization {{ user: carol, password: {password} }}"
    with NatsServer(jetstream=True, config=cfg_pw) as srv:
        with jssync.connect(srv.url, user="carol", password=password) as nc:
            _exercise(nc, texts)
        url_pw = srv.url.replace("nats://", f"nats://carol:{password}@")
        with jssync.connect(url_pw) as nc:
            _exercise(nc, texts)
        _connect_failures(srv.url, texts, user="carol", password=wrong_pw)
        _connect_failures(srv.url.replace("nats://", f"nats://carol:{wrong_pw}@"), texts)
    with NatsServer(jetstream=True, config=f"authorization {{ token: {token} }}") as srv:
        with jssync.connect(srv.url, token=token) as nc:
            _exercise(nc, texts)
        with jssync.connect(srv.url.replace("nats://", f"nats://{token}@")) as nc:
            _exercise(nc, texts)
        _connect_failures(srv.url, texts, token=wrong_tok)
        _connect_failures(srv.url.replace("nats://", f"nats://{wrong_tok}@"), texts)
    _assert_clean(texts, all_logs.text, secrets)


def test_nkey_seed_and_creds_never_leak(all_logs, operator, tmp_path):
    user = _keypair(nkeys.PREFIX_BYTE_USER)
    wrong = _keypair(nkeys.PREFIX_BYTE_USER)
    seed, wrong_seed = user.seed.decode(), wrong.seed.decode()
    secrets = [seed, wrong_seed, operator.user_jwt, operator.user_seed]
    texts: list[str] = []
    with NatsServer(jetstream=True,
                    config=f"authorization {{ users: [ {{ nkey: {user.public_key.decode()} }} ] }}") as srv:
        with jssync.connect(srv.url, nkeys_seed=seed) as nc:
            _exercise(nc, texts)
        _connect_failures(srv.url, texts, nkeys_seed=wrong_seed)
        seed_file = tmp_path / "wrong.nk"
        seed_file.write_text(wrong_seed)
        _connect_failures(srv.url, texts, nkeys_seed=str(seed_file))
        # a value that is neither a seed nor a file is refused without being echoed
        mangled = wrong_seed[:20] + "!" + wrong_seed[21:]
        with pytest.raises(ValueError) as ei:
            jssync.connect(srv.url, nkeys_seed=mangled, timeout=1)
        texts.append(_full_text(ei.value))
        secrets.append(mangled)
    with jssync.connect(operator.server.url, creds=operator.creds) as nc:
        texts += [repr(nc), str(nc.connected_url)]
        with pytest.raises(jssync.PermissionDeniedError) as ei:
            nc.request("forbidden.y", b"", timeout=5)
        texts.append(_full_text(ei.value))
    _connect_failures(operator.server.url, texts, creds=operator.stranger_creds)
    _assert_clean(texts, all_logs.text, secrets)
