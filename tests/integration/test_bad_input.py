"""Bad input against a real server: junk API replies, junk messages, oversize payloads,
callbacks that raise.

A fake responder on a core subject stands in for the JetStream API
(``nc.jetstream(api_prefix="FAKE.API")``) and answers with junk: every call must fail with
a clear jssync error within its timeout, and the connection (its I/O thread included)
must keep working afterwards.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR, wait_for

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

#: Replies a broken or hostile responder could send to a JetStream API request.
JUNK_REPLIES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("not json", b"garbage \x00\xff"),
    ("json list", b"[1, 2, 3]"),
    ("json string", b'"hello"'),
    ("json null", b"null"),
    ("error as text", b'{"error": "something broke"}'),
    ("error with junk types", b'{"error": {"code": "x", "err_code": [1], "description": 5}}'),
    ("empty object", b"{}"),
    ("wrong field types", b'{"config": 5, "state": "x", "created": 7, "streams": 3, "total": "many"}'),
    ("deep nesting", b"[" * 100_000),
    ("truncated", b'{"config": {"name": "X", "subjects": ["a"'),
]


def _api_calls(js: jssync.JetStream) -> list[tuple[str, object]]:
    t = 1.0
    return [
        ("account_info", lambda: js.account_info(timeout=t)),
        ("stream", lambda: js.stream("S", timeout=t)),
        ("create_stream", lambda: js.create_stream(name="S", subjects=["s.x"], timeout=t)),
        ("delete_stream", lambda: js.delete_stream("S", timeout=t)),
        ("stream_names", lambda: list(js.stream_names(timeout=t))),
        ("streams", lambda: list(js.streams(timeout=t))),
        ("consumer", lambda: js.consumer("S", "C", timeout=t)),
        ("create_consumer", lambda: js.create_consumer("S", durable_name="C", timeout=t)),
        ("consumer_names", lambda: list(js.consumer_names("S", timeout=t))),
    ]


class FakeApi:
    """A responder on ``FAKE.API.>`` that answers with ``self.reply`` (and optional headers)."""

    def __init__(self, nc: jssync.Connection) -> None:
        self.reply = b""
        self.headers: dict[str, str] | None = None
        self.requests = 0
        self.sub = nc.subscribe("FAKE.API.>", callback=self._answer)

    def _answer(self, msg: jssync.Msg) -> None:
        self.requests += 1
        msg.respond(self.reply, headers=self.headers)


@pytest.fixture
def fake(nats_server) -> Iterator[tuple[jssync.Connection, jssync.JetStream, FakeApi]]:
    errors: list[BaseException] = []
    with jssync.connect(nats_server.url, error_cb=errors.append) as nc:
        fake = FakeApi(nc)
        nc.flush()
        yield nc, nc.jetstream(api_prefix="FAKE.API"), fake


def _still_healthy(nc: jssync.Connection) -> None:
    assert nc.is_connected
    assert nc._loop.thread.is_alive(), "the I/O thread died"
    inbox = nc.new_inbox()
    sub = nc.subscribe(inbox)
    nc.publish(inbox, b"alive")
    assert sub.next_msg(2).data == b"alive"
    sub.unsubscribe()


#: Why some junk is not turned into a jssync error yet (reported, not fixed here): the layer
#: that turns API replies into models (nats-py's ``from_response`` called from
#: jssync/jetstream/context.py, ``Stream(...)`` in jssync/jetstream/streams.py, ``JetStream._paged``) trusts
#: the reply's fields, so a JSON object with missing or mistyped fields raises
#: TypeError/AttributeError instead of jssync.APIError.
KNOWN_BUG = ("a JSON object reply with missing or mistyped fields raises TypeError/AttributeError from the "
             "reply-to-model conversion (jssync/jetstream/context.py, jssync/jetstream/streams.py, "
             "nats-py from_response) "
             "instead of jssync.APIError")
_CONVERSION_FILES = ("nats/js/api.py", "jssync/jetstream/context.py", "jssync/jetstream/streams.py",
                     "jssync/jetstream/consumers.py")


def _from_nats_py_api(exc: BaseException) -> bool:
    """True if ``exc`` is the known bug: a TypeError/AttributeError/KeyError/ValueError raised
    where a reply is converted to a model."""
    if not isinstance(exc, TypeError | AttributeError | KeyError | ValueError):
        return False
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        tb = tb.tb_next
    return last is not None and last.endswith(_CONVERSION_FILES)


@pytest.mark.parametrize("label,reply", JUNK_REPLIES, ids=[j[0] for j in JUNK_REPLIES])
def test_junk_api_replies_give_clear_errors(fake, label, reply):
    nc, js, api = fake
    api.reply = reply
    wrong: list[str] = []
    known: list[str] = []
    for name, call in _api_calls(js):
        t0 = time.monotonic()
        try:
            call()  # type: ignore[operator]
        except jssync.Error as exc:
            assert str(exc), f"{name}: an error without a message"
        except Exception as exc:  # noqa: BLE001 - the point of the test
            (known if _from_nats_py_api(exc) else wrong).append(f"{name}: {type(exc).__name__}: {exc}"[:200])
        # (a JSON object without "error" may be taken as a success with fields missing:
        # delete_stream() -> False, consumer_names() -> nothing)
        elapsed = time.monotonic() - t0
        assert elapsed < 1.0 + 0.5 * FACTOR, f"{name} took {elapsed:.2f}s on a junk reply: it waited for a timeout"
    _still_healthy(nc)
    assert not wrong, "junk API replies must raise a jssync error:\n" + "\n".join(wrong)
    assert not known, KNOWN_BUG + ":\n" + "\n".join(known)


def test_status_only_replies(fake):
    nc, js, api = fake
    api.reply = b""
    api.headers = {"Status": "503"}
    with pytest.raises(jssync.Error):
        js.account_info(timeout=1)
    _still_healthy(nc)


def test_api_reply_as_a_huge_message(fake, nats_server):
    nc, js, api = fake
    api.reply = b'{"error": {"code": 500, "description": "' + b"x" * 500_000 + b'"}}'
    with pytest.raises(jssync.APIError) as ei:
        js.account_info(timeout=2)
    assert len(str(ei.value)) < 2000, "the error message should not carry half a megabyte"
    _still_healthy(nc)


def test_no_reply_at_all_is_a_timeout_not_a_hang(nats_server):
    with jssync.connect(nats_server.url) as nc:
        nc.subscribe("SILENT.API.>")  # takes the requests, never answers
        js = nc.jetstream(api_prefix="SILENT.API")
        t0 = time.monotonic()
        with pytest.raises(jssync.TimeoutError):
            js.account_info(timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + 0.5 * FACTOR
        _still_healthy(nc)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(reply=st.one_of(st.binary(max_size=50),
                       st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans()),
                                    lambda c: st.one_of(st.lists(c, max_size=3),
                                                        st.dictionaries(st.sampled_from(
                                                            ["error", "config", "state", "streams", "total",
                                                             "code", "err_code", "name", "seq", "stream"]),
                                                            c, max_size=4)),
                                    max_leaves=8).map(lambda v: json.dumps(v).encode())))
def test_random_api_replies(nats_server, reply):
    with jssync.connect(nats_server.url) as nc:
        fake = FakeApi(nc)
        js = nc.jetstream(api_prefix="FAKE.API")
        fake.reply = reply
        for name, call in _api_calls(js)[:3]:
            try:
                call()  # type: ignore[operator]
            except jssync.Error:
                pass
            except Exception as exc:  # noqa: BLE001
                if not _from_nats_py_api(exc):  # the known bug is pinned by the test above
                    pytest.fail(f"{name} on reply {reply[:60]!r}: {type(exc).__name__}: {exc}")
        assert nc._loop.thread.is_alive()


# -- JetStream publish acks --------------------------------------------------------------------


@pytest.mark.parametrize("reply,headers", [
    (b"", None),
    (b"nonsense", None),
    (b'{"stream": "S"}', None),
    (b'{"error": {"code": 400, "err_code": 10071, "description": "wrong last sequence"}}', None),
    (b"", {"Status": "503"}),
    (b"", {"Status": "abc"}),
], ids=["empty", "not json", "no seq", "api error", "503", "junk status"])
def test_junk_pub_acks(nats_server, unique, reply, headers):
    with jssync.connect(nats_server.url) as nc:
        subject = f"fakepub.{unique}"
        nc.subscribe(subject, callback=lambda m: m.respond(reply, headers=headers))
        js = nc.jetstream()
        with pytest.raises(jssync.Error):
            js.publish(subject, b"x", timeout=1)
        fut = js.publish_async(subject, b"x", timeout=1)
        with pytest.raises(jssync.Error):
            fut.result(3)
        _still_healthy(nc)


# -- junk from other clients ---------------------------------------------------------------------


def _raw_client(port: int) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port))
    raw.recv(4096)
    raw.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n')
    return raw


@pytest.mark.parametrize("block", [
    b"XXXXX\r\n\r\n",
    b"NATS/1.0\r\nNoColonHere\r\n\r\n",
    b"NATS/1.0 abc\r\n\r\n",
    b"NATS/1.0\r\n\xff\xfe: \xff\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
    b"NATS/1.0\r\n: empty name\r\n\r\n",
    b"NATS/1.0\r\n" + b"A: b\r\n" * 2000 + b"\r\n",
], ids=["no version", "no colon", "junk status", "not utf8", "status 503", "empty name", "many"])
def test_junk_header_blocks_from_another_client(nats_server, unique, block):
    """A hostile peer publishes header blocks the server passes through; we keep going."""
    errors: list[BaseException] = []
    with jssync.connect(nats_server.url, error_cb=errors.append) as nc:
        subject = f"junk.{unique}"
        sub = nc.subscribe(subject)
        cb_got: list[jssync.Msg] = []
        nc.subscribe(subject, callback=cb_got.append)
        nc.flush()
        raw = _raw_client(nats_server.port)
        try:
            payload = b"body"
            raw.sendall(b"HPUB %s %d %d\r\n" % (subject.encode(), len(block), len(block) + len(payload))
                        + block + payload + b"\r\nPUB %s 4\r\nnext\r\n" % subject.encode())
            received = [sub.next_msg(2), sub.next_msg(2)]
        finally:
            raw.close()
        assert received[-1].data == b"next"
        assert received[0].data == b"body"
        assert received[0].headers is None or isinstance(received[0].headers, dict)
        wait_for(lambda: len(cb_got) == 2, 3, what="the callback subscription to get both")
        # a junk status header on a core message is not a JetStream message
        with pytest.raises(jssync.Error):
            received[0].metadata  # noqa: B018
        _still_healthy(nc)


def test_forged_ack_subjects_are_refused_by_the_server(nats_server, unique):
    """A client cannot hand out ``$JS.ACK`` reply subjects: the server refuses the publish
    (reported to error_cb as a PermissionDeniedError), and nothing else breaks."""
    errors: list[BaseException] = []
    with jssync.connect(nats_server.url, error_cb=errors.append) as nc:
        sub = nc.subscribe(f"acks.{unique}")
        forged = ["$JS.ACK.a.b.c", f"$JS.ACK.s.c.1.2.3.{10**30}.0", "$JS.ACK.s.c.x.2.3.4.5"]
        for reply in forged:
            nc.publish(f"acks.{unique}", b"forged", reply=reply)
        nc.publish(f"acks.{unique}", b"plain", reply="plain.reply")
        nc.flush()
        msg = sub.next_msg(2)
        assert msg.data == b"plain"
        with pytest.raises(jssync.Error, match="not a JetStream message"):
            msg.metadata  # noqa: B018
        wait_for(lambda: len([e for e in errors if isinstance(e, jssync.PermissionDeniedError)]) == 3, 3,
                 what="three refusals in error_cb")
        assert {e.subject for e in errors} == {r.lower() for r in forged}
        _still_healthy(nc)


# -- oversize payloads -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server():
    with NatsServer(jetstream=True, config="max_payload: 1024") as srv:
        yield srv


def test_oversize_payloads_refused_before_sending(small_server, unique):
    errors: list[BaseException] = []
    with jssync.connect(small_server.url, error_cb=errors.append) as nc:
        assert nc.max_payload == 1024
        js = nc.jetstream()
        js.create_stream(name=f"BIG{unique}", subjects=[f"big.{unique}"], storage="memory")
        try:
            big = b"x" * 1025
            with pytest.raises(jssync.MaxPayloadError, match="1025 bytes"):
                nc.publish(f"big.{unique}", big)
            with pytest.raises(jssync.MaxPayloadError):
                nc.request(f"big.{unique}", big, timeout=1)
            with pytest.raises(jssync.MaxPayloadError):
                js.publish(f"big.{unique}", big, timeout=1)
            with pytest.raises(jssync.MaxPayloadError):
                js.publish_async(f"big.{unique}", big)
            # headers count too: the server would close the connection on this one
            with pytest.raises(jssync.MaxPayloadError, match="headers included"):
                nc.publish(f"big.{unique}", b"x" * 1000, headers={"K": "v" * 100})
            with pytest.raises(jssync.MaxPayloadError, match="headers included"):
                js.publish(f"big.{unique}", b"x" * 1000, headers={"K": "v" * 100}, timeout=1)
            # exactly at the limit is fine, and nothing above was sent
            nc.flush()
            assert js.publish(f"big.{unique}", b"x" * 1024).seq == 1
            assert js.stream(f"BIG{unique}").info().state.messages == 1
            assert nc.is_connected and nc.stats["reconnects"] == 0
            assert not [e for e in errors if "payload" in str(e).lower()]
        finally:
            js.delete_stream(f"BIG{unique}")


def test_publish_async_counts_headers_in_max_payload(small_server, unique):
    with jssync.connect(small_server.url) as nc:
        with pytest.raises(jssync.MaxPayloadError):
            nc.jetstream().publish_async(f"big.{unique}", b"x" * 1000, headers={"K": "v" * 100})
        nc.flush()
        assert nc.stats["reconnects"] == 0


# -- callbacks that raise ---------------------------------------------------------------------------


def test_callbacks_that_raise_are_logged_reported_and_consumption_goes_on(nats_server, unique, caplog):
    caplog.set_level(logging.DEBUG, logger="jssync")
    errors: list[BaseException] = []
    lock = threading.Lock()

    def on_error(exc: BaseException) -> None:
        with lock:
            errors.append(exc)
        if len(errors) == 1:
            raise RuntimeError("the error callback itself fails")  # must not break anything

    seen: list[int] = []

    def handler(msg: jssync.Msg) -> None:
        n = int(msg.data)
        seen.append(n)
        if n % 3 == 0:
            raise ValueError(f"bad message {n}")
        if n == 50:
            raise SystemExit("a callback calling sys.exit() must not kill a worker")
        if n == 52:
            raise KeyError("k")

    with jssync.connect(nats_server.url, error_cb=on_error, callback_workers=2,
                        disconnected_cb=lambda: 1 / 0) as nc:
        nc.subscribe(f"raise.{unique}", callback=handler)
        for i in range(300):
            nc.publish(f"raise.{unique}", str(i).encode())
        nc.flush()
        wait_for(lambda: len(seen) == 300, 10, what="every message to reach the callback")
        assert seen == list(range(300)), "callbacks stay in order after failures"
        expected = sum(1 for i in range(300) if i % 3 == 0) + 1  # + the KeyError of 52
        wait_for(lambda: len(errors) >= expected, 5, what="every failure in error_cb")
        assert {type(e) for e in errors} == {ValueError, KeyError}
        assert "bad message 3" in caplog.text
        assert "error_cb raised" in caplog.text or "the error callback itself fails" in caplog.text
        # the pool still works for other subscriptions
        ok = threading.Event()
        nc.subscribe(f"after.{unique}", callback=lambda m: ok.set())
        nc.publish(f"after.{unique}", b"")
        assert ok.wait(2)
        _still_healthy(nc)
