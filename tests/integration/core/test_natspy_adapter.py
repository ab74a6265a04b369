"""The nats-py adapter (jssync/core/natspy.py): a nats-py that changes an internal costs a fast path, not delivery.

Each test simulates a nats-py whose internals moved: a new keyword in its ``Msg``
construction call, a renamed parser attribute, a renamed parser state. The connection
must still deliver everything (core subscribe, request, fetch, consume), report the fast
path(s) it lost in ``_fast_paths()`` and log exactly one ``jssync`` warning naming each.
A last test requires that no module but the adapter touches a private nats-py name.
"""

from __future__ import annotations

import logging
import pathlib
import re
from typing import Any

import nats.aio.client
import pytest

import jssync
from jssync.core import natspy as _natspy
from tests.conftest import echo, needs_fast_paths, wait_for

pytestmark = [pytest.mark.timeout(60), needs_fast_paths]


def _build_with_new_keyword(self: Any, sid: int, subject: bytes, reply: bytes, data: bytes, headers: Any) -> Any:
    # what a nats-py that passes one more keyword to its message class would do
    return self.msg_class(subject=subject.decode(), reply=reply.decode(), data=data, headers=headers,
                          _client=self, _sid=sid, _received_at=123.0)


def _new_msg_keyword(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(nats.aio.client.Client, "_build_message", _build_with_new_keyword)


def _renamed_parser(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(_natspy, "_PARSER", "_parser")  # the attribute the adapter reads is gone


def _renamed_parser_state(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(_natspy, "_STATE", "stage")


def _changed_msg_pattern(mp: pytest.MonkeyPatch) -> None:
    # a nats-py whose MSG line pattern reads differently (here: the same lines, written another way)
    import nats.protocol.parser as npp

    mp.setattr(npp, "MSG_RE", re.compile(npp.MSG_RE.pattern.replace(rb"[^\s]+", rb"\S+")))


def _no_caller_socket(mp: pytest.MonkeyPatch) -> None:
    mp.setenv("JSSYNC_NO_CALLER_SOCKET", "1")  # the bench's switch: the I/O thread owns the socket


CASES = {
    "no_caller_socket": (_no_caller_socket, {"direct_write", "direct_read"}),
    "new_msg_keyword": (_new_msg_keyword, {"msg_class"}),
    "changed_msg_pattern": (_changed_msg_pattern, {"msg_parse"}),
    "renamed_parser": (_renamed_parser, {"direct_read", "wire_header_len", "msg_parse"}),
    "renamed_parser_state": (_renamed_parser_state, {"direct_read", "msg_parse"}),
}


def _warnings_naming(caplog: pytest.LogCaptureFixture, path: str) -> int:
    return sum(1 for r in caplog.records
               if r.name == "jssync" and r.levelno == logging.WARNING and f"fast path {path!r}" in r.getMessage())


@pytest.mark.parametrize("case", sorted(CASES))
def test_delivery_survives_a_changed_natspy(case: str, nats_server: Any, unique: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    simulate, disabled = CASES[case]
    simulate(monkeypatch)
    caplog.set_level(logging.WARNING, logger="jssync")
    nc = jssync.connect(nats_server.url)
    try:
        paths = nc._fast_paths()
        assert {name for name, on in paths.items() if not on} == disabled
        for path in _natspy.FAST_PATHS:
            assert _warnings_naming(caplog, path) == (1 if path in disabled else 0), path

        # core subscribe
        sub = nc.subscribe(f"C.{unique}")
        nc.publish(f"C.{unique}", b"core", headers={"H": "1"})
        m = sub.next_msg(timeout=5)
        assert m.data == b"core" and m.headers == {"H": "1"}
        # request (with and without headers: the caller may read its reply itself)
        echo(nc, f"R.{unique}")
        for i in range(50):
            r = nc.request(f"R.{unique}", b"%d" % i, headers={"K": "v"} if i % 2 else None, timeout=5)
            assert r.data == b"%d" % i and r.headers == ({"K": "v"} if i % 2 else None)
        # fetch and consume (messages with headers: their size counts against max_bytes)
        js = nc.jetstream()
        st = js.create_stream(name=f"S{unique}", subjects=[f"S{unique}.>"], storage="memory")
        try:
            for i in range(20):
                js.publish(f"S{unique}.m", b"%d" % i, headers={"N": str(i)})
            c = st.create_consumer(durable_name="D", ack_policy="explicit")
            got = []
            for msg in c.fetch(10, max_bytes=1 << 20, expires=5):
                got.append(msg.data)
                msg.ack()
            with c.consume(max_messages=5, expires=2) as it:
                for msg in it:
                    assert msg.headers == {"N": msg.data.decode()}
                    got.append(msg.data)
                    msg.ack()
                    if len(got) == 20:
                        it.stop()
            assert got == [b"%d" % i for i in range(20)]
            wait_for(lambda: c.info().num_ack_pending == 0, what="all acked")
        finally:
            js.delete_stream(f"S{unique}")
        # nothing more was logged about the fast paths while it ran
        for path in disabled:
            assert _warnings_naming(caplog, path) == 1
    finally:
        nc.close()


#: nats-py's private names jssync uses (the project checklist greps for these too)
PRIVATE = re.compile(
    r"\._(ps|pending_queue|transport|pending_data_size|flush_pending|send_unsubscribe|remove_sub|server_info"
    r"|process_headers|io_writer|bare_io_writer|sock|pending|to_utc_iso|parse_utc_iso)\b|\.msg_class\b"
    r"|\bnsub\._(closed|id)\b|\bnc\._status\b"
)


def test_only_the_adapter_touches_natspy_internals() -> None:
    pkg = pathlib.Path(jssync.__file__).parent
    offenders = []
    for path in sorted(pkg.rglob("*.py")):
        if path.name == "natspy.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PRIVATE.search(line):
                offenders.append(f"{path.relative_to(pkg)}:{n}: {line.strip()}")
    assert offenders == [], "private nats-py names outside jssync/core/natspy.py:\n" + "\n".join(offenders)
    assert PRIVATE.search((pkg / "core" / "natspy.py").read_text(encoding="utf-8"))  # (the pattern finds them)
