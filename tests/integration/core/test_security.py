"""Security against real servers: TLS (server and mutual), and permission violations.

Certificates are made in the test with ``cryptography`` (a CA, a server certificate for
127.0.0.1/localhost, a server certificate for another host name, a client certificate,
and an unrelated CA). Permission violations must raise
:class:`jssync.PermissionDeniedError` on the calling thread for subscribe and request,
and reach ``error_cb`` for fire-and-forget publishes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

x509 = pytest.importorskip("cryptography.x509", reason="the test extra installs cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


# -- a small PKI, made per module -----------------------------------------------------------


@dataclass
class Pki:
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    named_cert: Path  # only valid for the host name "nats.jssync.test"
    named_key: Path
    client_cert: Path
    client_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _make_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _make_leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, cn: str,
               names: list[x509.GeneralName], usage: x509.ObjectIdentifier,
               ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    pem = serialization.Encoding.PEM
    ca, ca_key = _make_ca("jssync test CA")
    other, _ = _make_ca("some other CA")
    loopback = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    srv, srv_key = _make_leaf(ca, ca_key, "localhost", loopback, ExtendedKeyUsageOID.SERVER_AUTH)
    named, named_key = _make_leaf(ca, ca_key, "nats.jssync.test", [x509.DNSName("nats.jssync.test")],
                                  ExtendedKeyUsageOID.SERVER_AUTH)
    cli, cli_key = _make_leaf(ca, ca_key, "jssync client", [], ExtendedKeyUsageOID.CLIENT_AUTH)
    p = Pki(ca=d / "ca.pem", other_ca=d / "other-ca.pem", server_cert=d / "server.pem", server_key=d / "server.key",
            named_cert=d / "named.pem", named_key=d / "named.key", client_cert=d / "client.pem",
            client_key=d / "client.key")
    p.ca.write_bytes(ca.public_bytes(pem))
    p.other_ca.write_bytes(other.public_bytes(pem))
    p.server_cert.write_bytes(srv.public_bytes(pem))
    _write_key(p.server_key, srv_key)
    p.named_cert.write_bytes(named.public_bytes(pem))
    _write_key(p.named_key, named_key)
    p.client_cert.write_bytes(cli.public_bytes(pem))
    _write_key(p.client_key, cli_key)
    return p


def _tls_config(cert: Path, key: Path, ca: Path, verify: bool = False) -> str:
    return (
        "tls {\n"
        f'  cert_file: "{cert}"\n'
        f'  key_file: "{key}"\n'
        f'  ca_file: "{ca}"\n'
        f"  verify: {'true' if verify else 'false'}\n"
        "  timeout: 2\n"
        "}\n"
    )


def _client_ctx(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


@pytest.fixture(scope="module")
def tls_server(pki: Pki):
    with NatsServer(jetstream=True, config=_tls_config(pki.server_cert, pki.server_key, pki.ca)) as srv:
        yield srv


@pytest.fixture(scope="module")
def mtls_server(pki: Pki):
    with NatsServer(jetstream=False, config=_tls_config(pki.server_cert, pki.server_key, pki.ca, verify=True)) as srv:
        yield srv


def _tls_conns(srv: NatsServer) -> list[dict]:
    return [c for c in srv.varz("connz").get("connections", []) if c.get("tls_version")]  # type: ignore[union-attr]


# -- TLS -------------------------------------------------------------------------------------


def test_tls_server_with_test_ca(tls_server, pki, unique):
    assert tls_server.url.startswith("tls://")
    with jssync.connect(tls_server.url, tls=_client_ctx(pki.ca), name="tls-client") as nc:
        assert nc.server_info.get("tls_required") is True
        assert nc.connected_url == tls_server.url
        sub = nc.subscribe(f"tls.{unique}")
        nc.publish(f"tls.{unique}", b"over tls")
        assert sub.next_msg(2).data == b"over tls"
        # JetStream works over TLS as well
        js = nc.jetstream()
        js.create_stream(name=f"TLS{unique}", subjects=[f"tlsjs.{unique}"], storage="memory")
        try:
            assert js.publish(f"tlsjs.{unique}", b"x").seq == 1
        finally:
            js.delete_stream(f"TLS{unique}")
        conns = [c for c in _tls_conns(tls_server) if c.get("name") == "tls-client"]
        assert conns and conns[0]["tls_version"].startswith("1.")


def test_tls_required_refuses_client_without_the_ca(tls_server, pki):
    t0 = time.monotonic()
    # no context: the system CAs do not know the test CA
    with pytest.raises(jssync.NoServersError) as ei:
        jssync.connect(tls_server.url.replace("tls://", "nats://"), timeout=1.0)
    assert "CERTIFICATE_VERIFY_FAILED" in str(ei.value) or "certificate verify failed" in str(ei.value)
    # a context that trusts another CA
    with pytest.raises(jssync.NoServersError) as ei:
        jssync.connect(tls_server.url, tls=_client_ctx(pki.other_ca), timeout=1.0)
    assert "certificate verify failed" in str(ei.value).lower()
    assert time.monotonic() - t0 < 6 * FACTOR


def test_tls_hostname_option(pki):
    with NatsServer(jetstream=False, config=_tls_config(pki.named_cert, pki.named_key, pki.ca)) as srv:
        ctx = _client_ctx(pki.ca)
        with pytest.raises(jssync.NoServersError, match="(?i)mismatch|doesn't match|not valid for"):
            jssync.connect(srv.url, tls=ctx, timeout=1.0)
        with jssync.connect(srv.url, tls=ctx, tls_hostname="nats.jssync.test") as nc:
            nc.flush()
            assert nc.is_connected


def test_mutual_tls(mtls_server, pki):
    # without a client certificate the server ends the handshake
    with pytest.raises(jssync.NoServersError):
        jssync.connect(mtls_server.url, tls=_client_ctx(pki.ca), timeout=1.0)
    ctx = _client_ctx(pki.ca, pki.client_cert, pki.client_key)
    with jssync.connect(mtls_server.url, tls=ctx, name="mtls-client") as nc:
        sub = nc.subscribe("mtls.x")
        nc.publish("mtls.x", b"mutual")
        assert sub.next_msg(2).data == b"mutual"
        assert any(c.get("name") == "mtls-client" for c in _tls_conns(mtls_server))


def test_tls_client_reconnects_after_restart(pki, tmp_path):
    cfg = _tls_config(pki.server_cert, pki.server_key, pki.ca)
    with NatsServer(jetstream=False, config=cfg) as srv:
        reconnected = threading.Event()
        with jssync.connect(srv.url, tls=_client_ctx(pki.ca), reconnect_time_wait=0.1,
                            reconnected_cb=reconnected.set) as nc:
            sub = nc.subscribe("tls.re")
            srv.restart()
            assert reconnected.wait(10 * FACTOR)
            nc.publish("tls.re", b"after restart")
            assert sub.next_msg(5).data == b"after restart"


# -- permissions --------------------------------------------------------------------------------

_PERMS = """
authorization {
  users: [
    {user: alice, password: alicepw, permissions: {
        publish: {deny: ["secret.>", "Mixed.Case", "$JS.API.STREAM.CREATE.FORBIDDEN"]},
        subscribe: {deny: ["secret.>", "Hidden.*"]}}}
    {user: bob, password: bobpw, permissions: {subscribe: {deny: ["_INBOX.>"]}}}
  ]
}
"""


@pytest.fixture(scope="module")
def perm_server():
    with NatsServer(jetstream=True, config=_PERMS) as srv:
        yield srv


class _Errors:
    """An error_cb that records what it gets and lets the test wait for a kind of error."""

    def __init__(self) -> None:
        self.items: list[BaseException] = []
        self.cond = threading.Condition()

    def __call__(self, exc: BaseException) -> None:
        with self.cond:
            self.items.append(exc)
            self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 5.0) -> BaseException:
        end = time.monotonic() + timeout * FACTOR
        with self.cond:
            while True:
                for e in self.items:
                    if pred(e):
                        return e
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching error; got {self.items!r}")
                self.cond.wait(min(left, 0.1))


@pytest.fixture
def alice(perm_server):
    errs = _Errors()
    nc = jssync.connect(perm_server.url, user="alice", password="alicepw", error_cb=errs)
    nc.errors = errs  # type: ignore[attr-defined]
    try:
        yield nc
    finally:
        nc.close()


def test_subscribe_denied_raises_on_calling_thread(alice):
    t0 = time.monotonic()
    with pytest.raises(jssync.PermissionDeniedError) as ei:
        alice.subscribe("secret.plans")
    assert time.monotonic() - t0 < 2 * FACTOR
    assert ei.value.operation == "subscribe"
    assert ei.value.subject == "secret.plans"
    assert "secret.plans" in str(ei.value)
    # queue subscriptions and wildcard denials, with mixed case subjects
    with pytest.raises(jssync.PermissionDeniedError):
        alice.subscribe("secret.>", queue="workers")
    with pytest.raises(jssync.PermissionDeniedError) as ei:
        alice.subscribe("Hidden.Thing", callback=lambda m: None)
    assert ei.value.subject == "Hidden.Thing"
    # the connection is still fine, other subscriptions work
    sub = alice.subscribe("open.things")
    alice.publish("open.things", b"ok")
    assert sub.next_msg(2).data == b"ok"
    assert alice.is_connected
    # each refusal was reported once: raised here, not also handed to error_cb (a later
    # fire-and-forget refusal, which nothing raises, does reach error_cb)
    alice.publish("secret.after", b"x")
    alice.errors.wait_for(lambda e: isinstance(e, jssync.PermissionDeniedError) and e.subject == "secret.after")
    subs = [e for e in alice.errors.items if getattr(e, "operation", None) == "subscribe"]
    assert not subs, subs


def test_subscribe_denied_from_many_threads_at_once(alice):
    results: list[object] = []

    def worker(i: int) -> None:
        subj = f"secret.t{i}" if i % 2 else f"open.t{i}"
        try:
            results.append(alice.subscribe(subj))
        except jssync.PermissionDeniedError as exc:
            results.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    denied = [r for r in results if isinstance(r, jssync.PermissionDeniedError)]
    ok = [r for r in results if isinstance(r, jssync.Subscription)]
    assert len(denied) == 8 and len(ok) == 8
    assert sorted(int(d.subject.split(".t")[1]) % 2 for d in denied) == [1] * 8


def test_request_denied_raises_at_once(alice):
    t0 = time.monotonic()
    with pytest.raises(jssync.PermissionDeniedError) as ei:
        alice.request("secret.question", b"?", timeout=5)
    assert time.monotonic() - t0 < 2 * FACTOR, "the request waited for its timeout instead of failing"
    assert ei.value.operation == "publish" and ei.value.subject == "secret.question"
    with pytest.raises(jssync.PermissionDeniedError) as ei:
        alice.request("Mixed.Case", b"?", timeout=5)
    assert ei.value.subject == "Mixed.Case"
    # requests that are allowed still work
    alice.subscribe("svc.echo", callback=lambda m: m.respond(m.data))
    assert alice.request("svc.echo", b"hi", timeout=2).data == b"hi"


def test_fire_and_forget_publish_denied_goes_to_error_cb(alice, caplog):
    caplog.set_level(logging.WARNING, logger="jssync")
    alice.publish("secret.leak", b"x")  # returns at once
    err = alice.errors.wait_for(lambda e: isinstance(e, jssync.PermissionDeniedError))
    assert err.operation == "publish" and err.subject == "secret.leak"
    wait_for(lambda: "secret.leak" in caplog.text, what="the warning in the jssync log")
    alice.flush()
    assert alice.is_connected


def test_jetstream_calls_denied_raise_permission_error(alice, unique):
    js = alice.jetstream()
    t0 = time.monotonic()
    with pytest.raises(jssync.PermissionDeniedError):
        js.create_stream(name="FORBIDDEN", subjects=[f"forbidden.{unique}"], storage="memory")
    with pytest.raises(jssync.PermissionDeniedError):
        js.publish("secret.js", b"x", timeout=5)
    assert time.monotonic() - t0 < 3 * FACTOR
    # allowed JetStream calls go on
    js.create_stream(name=f"PERM{unique}", subjects=[f"perm.{unique}"], storage="memory")
    try:
        assert js.publish(f"perm.{unique}", b"x").seq == 1
    finally:
        js.delete_stream(f"PERM{unique}")


def test_reply_inbox_denied_names_the_inbox(perm_server):
    errs = _Errors()
    with jssync.connect(perm_server.url, user="bob", password="bobpw", error_cb=errs) as nc:
        t0 = time.monotonic()
        with pytest.raises(jssync.PermissionDeniedError, match="_INBOX") as ei:
            nc.request("anything", b"", timeout=5)
        assert ei.value.operation == "subscribe"
        # JetStream API calls need the inbox as well
        with pytest.raises(jssync.PermissionDeniedError, match="_INBOX"):
            nc.jetstream().account_info(timeout=5)
        assert time.monotonic() - t0 < 3 * FACTOR
        # core publish/subscribe outside the inbox still work
        sub = nc.subscribe("bob.box")
        nc.publish("bob.box", b"1")
        assert sub.next_msg(2).data == b"1"


def test_custom_inbox_prefix_avoids_denied_inbox(perm_server):
    with jssync.connect(perm_server.url, user="bob", password="bobpw", inbox_prefix="_BOB") as nc:
        nc.subscribe("bob.svc", callback=lambda m: m.respond(b"pong"))
        assert nc.request("bob.svc", b"", timeout=2).data == b"pong"
