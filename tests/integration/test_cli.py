"""The jssync command line, end to end against a local server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jssync.cli import main

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cli(nats_server):
    def run(*argv: str) -> tuple[int, str, str]:
        p = jssync_run(dict(os.environ), "-s", nats_server.url, *argv)
        return p.returncode, p.stdout, p.stderr

    return run


def test_stream_lifecycle(cli, unique, tmp_path):
    name = f"CLI{unique}"
    rc, out, _ = cli("stream", "add", name, "--subjects", f"{name}.*", "--storage", "memory")
    assert rc == 0 and f"created stream {name}" in out
    rc, out, _ = cli("pub", f"{name}.a", "hello", "--js", "--msg-id", "m1")
    assert rc == 0 and "seq 1" in out
    rc, out, _ = cli("pub", f"{name}.a", "hello", "--js", "--msg-id", "m1")
    assert "duplicate" in out
    rc, out, _ = cli("pub", f"{name}.b", "bulk", "--js", "--count", "50")
    assert rc == 0 and "published 50" in out
    rc, out, _ = cli("stream", "ls")
    assert rc == 0 and name in out and "MESSAGES" in out
    rc, out, _ = cli("--json", "stream", "ls")
    rows = json.loads(out)
    assert any(r["config"]["name"] == name and r["state"]["messages"] == 51 for r in rows)
    rc, out, _ = cli("stream", "info", name, "--subjects", ">")
    assert rc == 0 and "last_seq" in out and f"{name}.b" in out
    rc, out, _ = cli("stream", "get", name, "1")
    assert rc == 0 and "hello" in out
    rc, out, _ = cli("--json", "stream", "get", name, "--last-by-subject", f"{name}.b")
    assert json.loads(out)["seq"] == 51
    # export to JSON Lines and import into another stream
    f = tmp_path / "export.jsonl"
    rc, out, _ = cli("--progress", "stream", "export", name, str(f))
    assert rc == 0 and "exported 51" in out
    lines = f.read_text().splitlines()
    assert len(lines) == 51 and json.loads(lines[0])["subject"] == f"{name}.a"
    other = f"CLO{unique}"
    cli("stream", "add", other, "--subjects", f"{other}.>", "--storage", "memory")
    rc, out, _ = cli("stream", "import", str(f), "--subject-prefix", other)
    assert rc == 0 and "imported 51" in out
    rc, out, _ = cli("--json", "stream", "info", other)
    assert json.loads(out)["state"]["messages"] == 51
    rc, out, _ = cli("stream", "purge", name, "--subject", f"{name}.b")
    assert "purged 50" in out
    assert cli("stream", "rm", name)[0] == 0
    assert cli("stream", "rm", other)[0] == 0
    rc, _, err = cli("stream", "info", name)
    assert rc == 1 and "StreamNotFoundError" in err


def test_consumers(cli, js, unique):
    name = f"CC{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for i in range(3):
            js.publish(f"{name}.x", b"msg %d" % i)
        rc, out, _ = cli("consumer", "add", name, "WORK", "--filter", f"{name}.x")
        assert rc == 0 and "created consumer" in out
        rc, out, _ = cli("consumer", "ls", name)
        assert "WORK" in out and "PENDING" in out
        rc, out, _ = cli("--json", "consumer", "info", name, "WORK")
        assert json.loads(out)["num_pending"] == 3
        if hasattr(js.consumer(name, "WORK"), "fetch"):
            rc, out, _ = cli("consumer", "next", name, "WORK", "--count", "2")
            assert rc == 0 and "msg 0" in out and "msg 1" in out
        assert cli("consumer", "rm", name, "WORK")[0] == 0
        # a pull the server refuses says why instead of a bare "no messages"
        small = js.create_consumer(name, durable_name="SMALL", ack_policy="explicit", max_waiting=1,
                                   filter_subject=f"{name}.none")
        hold = small.fetch(1, expires=10)  # the one pull request this consumer may have waiting
        js.conn.flush()
        try:
            rc, out, err = cli("consumer", "next", name, "SMALL", "--count", "5", "--wait", "2")
        finally:
            hold.stop()
        assert rc == 1 and out == ""
        assert "pull ended early" in err and "MaxWaiting" in err, err
    finally:
        js.delete_stream(name)


def test_pub_sub_req(cli, nc, nats_server, tmp_path):
    sub = nc.subscribe("cli.core")
    nc.flush()
    rc, out, _ = cli("pub", "cli.core", "one", "-H", "A:1")
    assert rc == 0
    m = sub.next_msg(2)
    assert m.data == b"one" and m.headers == {"A": "1"}
    src = tmp_path / "lines.txt"
    src.write_text("a\nb\nc\n")
    rc, out, _ = cli("pub", "cli.core", "--file", str(src))
    assert "published 3" in out
    assert [sub.next_msg(2).data for _ in range(3)] == [b"a", b"b", b"c"]
    nc.subscribe("cli.svc", callback=lambda msg: msg.respond(b"answer:" + msg.data))
    rc, out, _ = cli("req", "cli.svc", "q")
    assert rc == 0 and out.strip() == "answer:q"
    rc, _, err = cli("--timeout", "0.5", "req", "cli.nobody", "q")
    assert rc == 1 and "NoRespondersError" in err


def test_sub_command_prints_messages(nats_server, nc):
    proc = subprocess.Popen([sys.executable, "-m", "jssync", "-s", nats_server.url, "--json", "sub", "cli.sub",
                             "--count", "2", "--wait", "20"], stdout=subprocess.PIPE, text=True)
    try:
        # publish until the subscriber is up and has taken two messages
        import time

        end = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < end:
            nc.publish("cli.sub", b"ping")
            nc.flush()
            time.sleep(0.1)  # poll: publish until the subscriber is up, inside the deadline
        out = proc.communicate(timeout=10)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [json.loads(x) for x in out.splitlines()]
    assert proc.returncode == 0 and len(lines) == 2 and lines[0]["data"] == "ping"


def test_bad_input_is_one_line(cli):
    rc, _, err = cli("stream", "add", "bad.name")
    assert rc == 2 and "stream name" in err


def test_console_script_help():
    proc = subprocess.run([sys.executable, "-m", "jssync", "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "stream" in proc.stdout and "consumer" in proc.stdout


def test_version_prints_jssync_nats_py_and_python_versions():
    proc = subprocess.run([sys.executable, "-m", "jssync", "--version"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    import jssync as _jssync

    assert proc.stdout.startswith(f"jssync {_jssync.__version__} (nats-py ")
    assert f"Python {sys.version.split()[0]})" in proc.stdout


# -- the real command, as nats CLI users type it ------------------------

import base64  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import nkeys  # noqa: E402

import jssync  # noqa: E402
from jssync.server import NatsServer, free_port  # noqa: E402
from tests.conftest import FACTOR, wait_for  # noqa: E402
from tests.integration.core.test_auth import operator  # noqa: E402, F401 - a fixture: an operator/JWT server
from tests.integration.core.test_security import _tls_config, pki  # noqa: E402, F401 - a fixture: a test CA

ROOT = Path(__file__).resolve().parents[2]
BINARY = b"\x00\xff\xfe bin\x80\x0a\x0dary \xc3"  # not UTF-8, holds a newline


@pytest.fixture
def env(tmp_path):
    """The environment of a `jssync` run: no NATS_* from outside, HOME and XDG_CONFIG_HOME in tmp_path."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("NATS_") or k == "NATS_SERVER_BIN"}
    (tmp_path / "home").mkdir()
    e.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    return e


def jssync_subprocess(env: dict[str, str], *argv: str, stdin: bytes | None = None,
                      timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `python -m jssync ARGV...` as a user would (stdout/stderr as text, stdin as bytes)."""
    p = subprocess.run([sys.executable, "-m", "jssync", *argv], env=env, input=stdin, capture_output=True,
                       timeout=timeout * FACTOR)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(errors="replace"),
                                       p.stderr.decode(errors="replace"))


def jssync_run(env: dict[str, str], *argv: str, stdin: bytes | None = None,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command as `python -m jssync ARGV...` would, in this process (no interpreter start per call):
    `env` is the whole environment, ``stdin`` the bytes on standard input (no terminal: empty when None),
    ``cwd`` the working directory of the run (this process's own when None),
    standard output and error are captured through pipes of their own (no terminal, 80 columns). A run
    that leaves a thread behind (an unclosed connection) fails the test. The real command runs in the
    tests that call `jssync_subprocess` or start `python -m jssync` themselves."""
    out, err = io.BytesIO(), io.BytesIO()
    fake_in = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    fake_out = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    fake_err = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    saved_env = dict(os.environ)
    saved_std = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    saved_log = root.handlers[:], root.level
    threads = set(threading.enumerate())
    os.environ.clear()
    os.environ.update({"COLUMNS": "80", **env} if "COLUMNS" not in env else env)
    sys.stdin, sys.stdout, sys.stderr = fake_in, fake_out, fake_err
    root.handlers = []  # the command's logging.basicConfig writes to its own stderr, as in its own process
    saved_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse: --help, usage errors
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        fake_out.flush()
        fake_err.flush()
    finally:
        os.chdir(saved_cwd)
        sys.stdin, sys.stdout, sys.stderr = saved_std
        root.handlers, level = saved_log
        root.setLevel(level)
        os.environ.clear()
        os.environ.update(saved_env)
    left = lambda: [t for t in threading.enumerate() if t not in threads and t.is_alive()]  # noqa: E731
    try:
        wait_for(lambda: not left(), 5, what="the threads of the command to end")
    except AssertionError:
        raise AssertionError(f"`jssync {' '.join(argv)}` left threads running: {left()}") from None
    return subprocess.CompletedProcess(["jssync", *argv], rc, out.getvalue().decode(errors="replace"),
                                       err.getvalue().decode(errors="replace"))


def _data(rec: dict) -> bytes:
    """A message's payload from its JSON record (base64 when marked so)."""
    if rec.get("data_encoding") == "base64":
        return base64.b64decode(rec["data"])
    assert "data_encoding" not in rec
    return rec["data"].encode()


def test_global_options_and_data_after_the_subcommand(env, nats_server, js, unique):
    name = f"CG{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        # nats CLI order: data after the options, global options after the subcommand
        p = jssync_run(env, "pub", f"{name}.a", "--js", "--count", "5", "hello", "-s", nats_server.url,
                       "--timeout", "3s")
        assert p.returncode == 0, p.stderr
        st = js.stream(name)
        assert st.info().state.messages == 5
        assert st.get_msg(5).data == b"hello"
        p = jssync_run(env, "stream", "ls", "--json", "--server", nats_server.url)
        assert p.returncode == 0, p.stderr
        assert any(r["config"]["name"] == name for r in json.loads(p.stdout))
        p = jssync_run(env, "kv", "add", f"KG{unique}", "-s", nats_server.url)
        assert p.returncode == 0, p.stderr
        p = jssync_run(env, "kv", "put", f"KG{unique}", "k", "v1", "-s", nats_server.url, "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["revision"] == 1, p.stderr
        # the old order still works
        p = jssync_run(env, "-s", nats_server.url, "--json", "stream", "info", name)
        assert p.returncode == 0 and json.loads(p.stdout)["state"]["messages"] == 5
        # a word that is no argument is still refused
        p = jssync_run(env, "stream", "info", name, "extra", "-s", nats_server.url)
        assert p.returncode == 2 and "unrecognized arguments: extra" in p.stderr
    finally:
        js.delete_stream(name)
        js.delete_key_value(f"KG{unique}")


def test_one_json_convention_with_binary_payloads(env, nats_server, js, unique, tmp_path):
    name = f"CJ{unique}"
    s = ["-s", nats_server.url]
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        js.publish(f"{name}.bin", BINARY, headers={"Kind": "binary"})
        js.publish(f"{name}.txt", "grüße".encode())
        # a stored message: one JSON Lines record, binary payload in base64 with the marker
        p = jssync_run(env, "stream", "get", name, "1", "--json", *s)
        rec = json.loads(p.stdout)
        assert rec["data_encoding"] == "base64" and _data(rec) == BINARY and rec["headers"] == {"Kind": "binary"}
        assert rec["subject"] == f"{name}.bin" and rec["seq"] == 1
        p = jssync_run(env, "stream", "get", name, "2", "--json", *s)
        rec = json.loads(p.stdout)
        assert rec["data"] == "grüße" and "data_encoding" not in rec
        # a pull consumer: JSON Lines, the same record plus the delivery metadata
        js.create_consumer(name, durable_name="W", ack_policy="explicit")
        p = jssync_run(env, "consumer", "next", name, "W", "--count", "2", "--json", *s)
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        assert [_data(r) for r in recs] == [BINARY, "grüße".encode()] and recs[0]["stream_seq"] == 1
        # export and import keep the bytes (an export is JSON Lines of the same records)
        f = tmp_path / "e.jsonl"
        p = jssync_run(env, "stream", "export", name, str(f), *s)
        assert p.returncode == 0, p.stderr
        assert [_data(json.loads(x)) for x in f.read_text().splitlines()] == [BINARY, "grüße".encode()]
        other = f"CK{unique}"
        js.create_stream(name=other, subjects=[f"{other}.>"], storage="memory")
        p = jssync_run(env, "stream", "import", str(f), "--subject-prefix", other, "--json", *s)
        assert p.returncode == 0 and json.loads(p.stdout) == {"imported": 2}, p.stderr
        assert js.stream(other).get_msg(1).data == BINARY
        js.delete_stream(other)
        # key-value entries: the value in the same convention
        bucket = f"KJ{unique}"
        p = jssync_run(env, "kv", "add", bucket, "--json", *s)
        assert p.returncode == 0 and json.loads(p.stdout)["bucket"] == bucket, p.stdout
        kv = js.key_value(bucket)
        kv.put("b", BINARY)
        p = jssync_run(env, "kv", "get", bucket, "b", "--json", *s)
        rec = json.loads(p.stdout)
        assert rec["key"] == "b" and rec["revision"] == 1 and rec["value_encoding"] == "base64"
        assert base64.b64decode(rec["value"]) == BINARY
        kv.put("t", b"text")
        p = jssync_run(env, "kv", "watch", bucket, "--count", "2", "--json", *s)
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        assert [(r["key"], r["operation"]) for r in recs] == [("b", "PUT"), ("t", "PUT")]
        assert recs[1]["value"] == "text" and "value_encoding" not in recs[1]
        p = jssync_run(env, "kv", "del", bucket, "t", "--json", *s)
        assert json.loads(p.stdout) == {"deleted": "t", "bucket": bucket}
        p = jssync_run(env, "kv", "ls", bucket, "--json", *s)
        assert json.loads(p.stdout) == ["b"]
        js.delete_key_value(bucket)
    finally:
        js.delete_stream(name)


def _subscriber(env: dict[str, str], *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "jssync", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _feed(proc: subprocess.Popen[bytes], nc, subject: str, data: bytes, headers=None,
          per_tick: int = 1) -> tuple[str, str]:
    """Publish (``per_tick`` messages every 0.1 s) until the subscriber process has had enough and exited;
    its output."""
    end = time.monotonic() + 20 * FACTOR
    while proc.poll() is None and time.monotonic() < end:
        for _ in range(per_tick):
            nc.publish(subject, data, headers=headers)
        nc.flush()
        time.sleep(0.1)  # poll: publish until the subscriber is up, inside the deadline
    try:
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.decode(errors="replace"), err.decode(errors="replace")


def test_sub_shows_headers_and_binary_payloads(env, nats_server, nc):
    # both subscribers start at once (each on a subject of its own): the second starts while the first is fed
    text = _subscriber(env, "sub", "cli.hdr", "--count", "1", "--wait", "20", "-s", nats_server.url)
    as_json = _subscriber(env, "sub", "cli.hdr.json", "--count", "1", "--wait", "20", "--json",
                          "-s", nats_server.url)
    try:
        out, err = _feed(text, nc, "cli.hdr", b"payload", headers={"Trace-Id": "t-1"})
        assert text.returncode == 0, err
        assert "cli.hdr" in out and "payload" in out and "Trace-Id: t-1" in out
        out, err = _feed(as_json, nc, "cli.hdr.json", BINARY, headers={"Trace-Id": "t-2"})
    finally:
        for proc in (text, as_json):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    rec = json.loads(out)
    assert rec["headers"] == {"Trace-Id": "t-2"} and _data(rec) == BINARY and rec["subject"] == "cli.hdr.json"


def test_pub_file_stdin_takes_binary(env, nats_server, nc):
    sub = nc.subscribe("cli.bin")
    nc.flush()
    # the whole of stdin as one message, bytes unchanged
    p = jssync_subprocess(env, "pub", "cli.bin", "--file", "-", "--send-on", "eof", "-s", nats_server.url,
                          stdin=BINARY)
    assert p.returncode == 0, p.stderr
    assert sub.next_msg(5).data == BINARY
    # one message per line (the default), bytes unchanged
    p = jssync_run(env, "pub", "cli.bin", "--file", "-", "-s", nats_server.url, stdin=b"\xff\x00a\n\xfeb\n")
    assert p.returncode == 0, p.stderr
    assert [sub.next_msg(5).data for _ in range(2)] == [b"\xff\x00a", b"\xfeb"]
    # as the nats CLI has it: --force-stdin sends the whole of stdin
    p = jssync_run(env, "pub", "cli.bin", "--force-stdin", "-s", nats_server.url, stdin=BINARY)
    assert p.returncode == 0, p.stderr
    assert sub.next_msg(5).data == BINARY


def test_stream_import_stops_at_the_first_missing_stream(env, nats_server, unique, tmp_path):
    subject = f"nostream{unique}.orders"
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"subject": subject, "data": f"m{i}", "stream": "ORDERS"}) + "\n"
                         for i in range(200)))
    before = nats_server.varz()["in_msgs"]
    p = jssync_run(env, "stream", "import", str(f), "-s", nats_server.url)
    assert p.returncode == 1
    assert "no stream" in p.stderr and subject in p.stderr and "jssync stream add ORDERS" in p.stderr, p.stderr
    assert "line 1 " in p.stderr and "after 0 messages" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    # the first message (and its resends while no stream answers), none of the 199 after it
    assert nats_server.varz()["in_msgs"] - before <= 5


def test_errors_never_end_in_err_code_none(env, nats_server, js, unique):
    bucket = f"KE{unique}"
    js.create_key_value(bucket=bucket)
    try:
        p = jssync_run(env, "kv", "get", bucket, "nokey", "-s", nats_server.url)
        assert p.returncode == 1 and "KeyNotFoundError" in p.stderr and "None" not in p.stderr, p.stderr
    finally:
        js.delete_key_value(bucket)
    p = jssync_run(env, "kv", "get", f"NO{unique}", "k", "-s", nats_server.url)
    assert p.returncode == 1 and "BucketNotFoundError" in p.stderr and "None" not in p.stderr, p.stderr
    p = jssync_run(env, "stream", "info", f"NO{unique}", "-s", nats_server.url)
    assert p.returncode == 1 and "err_code=10059" in p.stderr and "None" not in p.stderr, p.stderr


# -- the nats CLI's environment and context files --------------------------------------------------


@pytest.fixture(scope="module")
def auth_server():
    with NatsServer(jetstream=True, config="authorization { user: ann, password: annpw }") as srv:
        yield srv


def _write_context(env: dict[str, str], name: str, select: bool = False, base: str | None = None,
                   **settings: str) -> Path:
    root = Path(base or env["XDG_CONFIG_HOME"]) / "nats"
    (root / "context").mkdir(parents=True, exist_ok=True)
    path = root / "context" / f"{name}.json"
    path.write_text(json.dumps({"description": "", **settings}))
    if select:
        (root / "context.txt").write_text(name)
    return path


def test_environment_like_the_nats_cli(env, auth_server):
    p = jssync_run(env, "stream", "ls", "--timeout", "2s", "--connect-timeout", "2", "-s", auth_server.url)
    assert p.returncode == 1 and "Authorization" in p.stderr
    env.update(NATS_URL=auth_server.url, NATS_USER="ann", NATS_PASSWORD="annpw")
    p = jssync_run(env, "stream", "ls", "--json")
    assert p.returncode == 0 and json.loads(p.stdout) is not None, p.stderr
    # a flag wins over the environment
    p = jssync_run(env, "stream", "ls", "--password", "wrong")
    assert p.returncode == 1 and "Authorization" in p.stderr
    env["NATS_PASSWORD"] = "wrong"
    p = jssync_run(env, "stream", "ls", "--password", "annpw")
    assert p.returncode == 0, p.stderr


def test_nats_timeout_environment(env, nats_server, nc):
    nc.subscribe("cli.silent")  # a responder that never answers
    nc.flush()
    env.update(NATS_URL=nats_server.url, NATS_TIMEOUT="300ms")
    p = jssync_run(env, "req", "cli.silent", "q")
    assert p.returncode == 1 and "TimeoutError" in p.stderr and "within 0.3s" in p.stderr, p.stderr
    p = jssync_run(env, "req", "cli.silent", "q", "--timeout", "0.4")  # the flag wins
    assert p.returncode == 1 and "within 0.4s" in p.stderr, p.stderr
    p = jssync_run(env, "req", "cli.silent", "q", "--timeout", "nonsense")
    assert p.returncode == 2 and "--timeout" in p.stderr


def test_nkey_and_creds_from_environment_and_context(env, operator, tmp_path):  # noqa: F811
    kp = nkeys.from_seed(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
    seed = tmp_path / "user.nk"
    seed.write_text(kp.seed.decode())
    with NatsServer(jetstream=False, config=f"authorization {{ users: [ {{ nkey: {kp.public_key.decode()} }} ] }}"
                    ) as srv:
        p = jssync_run(env, "req", "x", "y", "--timeout", "1", "-s", srv.url)
        assert p.returncode == 1 and "Authorization" in p.stderr
        p = jssync_run(env, "req", "x", "y", "--timeout", "1", "-s", srv.url, "--nkey", str(seed))
        assert "NoRespondersError" in p.stderr, p.stderr  # connected: nobody answers
        p = jssync_run({**env, "NATS_NKEY": str(seed)}, "req", "x", "y", "--timeout", "1", "-s", srv.url)
        assert "NoRespondersError" in p.stderr, p.stderr
        _write_context(env, "nk", select=True, url=srv.url, nkey=str(seed))
        p = jssync_run(env, "req", "x", "y", "--timeout", "1")
        assert "NoRespondersError" in p.stderr, p.stderr
    p = jssync_run({**env, "NATS_CREDS": str(operator.creds)}, "req", "x", "y", "--timeout", "1",
                   "-s", operator.server.url)
    assert "NoRespondersError" in p.stderr, p.stderr
    _write_context(env, "jwt", url=operator.server.url, creds=str(operator.creds))
    p = jssync_run(env, "req", "x", "y", "--timeout", "1", "--context", "jwt")
    assert "NoRespondersError" in p.stderr, p.stderr


def test_tls_files_from_environment_and_context(env, pki):  # noqa: F811
    with NatsServer(jetstream=False, config=_tls_config(pki.server_cert, pki.server_key, pki.ca, verify=True)) as srv:
        p = jssync_run(env, "req", "x", "y", "--timeout", "1", "--connect-timeout", "2", "-s", srv.url)
        assert p.returncode == 1 and "NoRespondersError" not in p.stderr
        tls = {"NATS_CA": str(pki.ca), "NATS_CERT": str(pki.client_cert), "NATS_KEY": str(pki.client_key)}
        p = jssync_run({**env, **tls, "NATS_URL": srv.url}, "req", "x", "y", "--timeout", "1")
        assert "NoRespondersError" in p.stderr, p.stderr
        p = jssync_run(env, "req", "x", "y", "--timeout", "1", "-s", srv.url, "--tlsca", str(pki.ca),
                       "--tlscert", str(pki.client_cert), "--tlskey", str(pki.client_key))
        assert "NoRespondersError" in p.stderr, p.stderr
        _write_context(env, "tls", select=True, url=srv.url, ca=str(pki.ca), cert=str(pki.client_cert),
                       key=str(pki.client_key))
        p = jssync_run(env, "req", "x", "y", "--timeout", "1")
        assert "NoRespondersError" in p.stderr, p.stderr


def test_context_files(env, auth_server, nats_server, tmp_path):
    # the selected context (context.txt) is used by default
    _write_context(env, "prod", select=True, url=auth_server.url, user="ann", password="annpw")
    p = jssync_run(env, "stream", "ls", "--json")
    assert p.returncode == 0, p.stderr
    # --context NAME picks another one (and NATS_CONTEXT, as in the nats CLI)
    _write_context(env, "bad", url=auth_server.url, user="ann", password="nope")
    p = jssync_run(env, "stream", "ls", "--context", "bad", "--connect-timeout", "2")
    assert p.returncode == 1 and "Authorization" in p.stderr
    p = jssync_run({**env, "NATS_CONTEXT": "bad"}, "stream", "ls", "--connect-timeout", "2")
    assert p.returncode == 1 and "Authorization" in p.stderr
    # precedence: flag > environment > context
    p = jssync_run({**env, "NATS_PASSWORD": "annpw"}, "stream", "ls", "--context", "bad")
    assert p.returncode == 0, p.stderr
    p = jssync_run({**env, "NATS_PASSWORD": "nope"}, "stream", "ls", "--password", "annpw", "--context", "bad")
    assert p.returncode == 0, p.stderr
    p = jssync_run({**env, "NATS_URL": nats_server.url}, "--json", "stream", "ls", "--context", "bad")
    assert p.returncode == 0, p.stderr  # the environment's URL: the server without authorization
    # an unknown context is an error that names the file
    p = jssync_run(env, "stream", "ls", "--context", "nosuch")
    assert p.returncode == 2 and "nosuch.json" in p.stderr
    # without XDG_CONFIG_HOME: ~/.config/nats
    home = {k: v for k, v in env.items() if k != "XDG_CONFIG_HOME"}
    _write_context(home, "h", select=True, base=str(Path(env["HOME"]) / ".config"), url=nats_server.url)
    p = jssync_run(home, "--json", "stream", "ls")
    assert p.returncode == 0, p.stderr


# -- jssync server ---------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_server_command(env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], str, int, str]:
    """Run `jssync server`; its process, URL, nats-server pid and store directory."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jssync", "server", "--port", str(port), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    assert f"127.0.0.1:{port}" in line, (line, proc.poll())
    store = line.split("store ", 1)[1].split()[0] if "store " in line else ""
    wait_for(lambda: _children(proc.pid), 10, what="the nats-server child")
    return proc, f"nats://127.0.0.1:{port}", _children(proc.pid)[0], store


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_server_command_stops_its_server_on_signals(env, sig):
    proc, url, child, store = _start_server_command(env)
    try:
        assert store and os.path.isdir(store)
        proc.send_signal(sig)
        proc.wait(30 * FACTOR)
        assert not _alive(child), "nats-server outlived `jssync server`"
        assert not os.path.exists(store), "the temporary store was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_server_command_store_dir_keeps_data(env, tmp_path):
    store = tmp_path / "store"
    for round_ in range(2):
        proc, url, child, shown = _start_server_command(env, "--store-dir", str(store))
        try:
            assert shown == str(store)
            if round_ == 0:
                assert jssync_run(env, "stream", "add", "KEEP", "-s", url).returncode == 0
                assert jssync_run(env, "pub", "KEEP", "kept", "--js", "-s", url).returncode == 0
            else:
                p = jssync_run(env, "stream", "get", "KEEP", "1", "--json", "-s", url)
                assert p.returncode == 0 and _data(json.loads(p.stdout)) == b"kept", p.stderr
            proc.send_signal(signal.SIGTERM)
            proc.wait(30 * FACTOR)
            assert not _alive(child) and store.is_dir()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if _alive(child):
                os.kill(child, signal.SIGKILL)


def test_server_command_port_in_use_is_one_line(env):
    """A taken port: one line naming the port and suggesting --port, no traceback, no server log; exit 1."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = jssync_subprocess(env, "server", "--port", str(port))
    assert p.returncode != 0
    assert p.stdout == "", p.stdout
    assert p.stderr.count("\n") == 1, p.stderr
    assert str(port) in p.stderr and "--port" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_server_command_help_says_the_store_is_temporary(env):
    p = jssync_run(env, "server", "--help")
    assert p.returncode == 0 and "--store-dir" in p.stdout and "temporary" in p.stdout


# -- micro services, message TTL, priority groups (python -m jssync) ----------------------------


def test_micro_ls_info_stats(env, nats_server, nc):
    from jssync import micro

    name = f"cli{os.getpid()}"
    a = micro.add_service(nc, name=name, version="1.2.3", description="adds", metadata={"team": "math"})
    a.add_endpoint("add", lambda r: r.respond(b"3"), subject=f"{name}.add", metadata={"input": "list"})
    b = micro.add_service(nc, name=name, version="1.2.3", description="adds")
    b.add_endpoint("add", lambda r: r.respond_error(503, "busy"), subject=f"{name}.add", queue_group=None)
    nc.flush()
    # with no queue group on b, every request reaches b (and one instance of the group "q": a)
    for _ in range(2):
        nc.request(f"{name}.add", b"[1, 2]", timeout=5)
    wait_for(lambda: b.stats()["endpoints"][0]["num_requests"] == 2, what="b counted both requests")
    url = nats_server.url
    ids = sorted([a.info()["id"], b.info()["id"]])

    p = jssync_run(env, "micro", "ls", "-s", url)
    assert p.returncode == 0, p.stderr
    assert "NAME" in p.stdout and "VERSION" in p.stdout and all(i in p.stdout for i in ids)
    p = jssync_run(env, "micro", "ls", name, "--json", "-s", url)
    docs = json.loads(p.stdout)
    assert [d["id"] for d in docs] == ids and {d["name"] for d in docs} == {name}
    assert all(d["type"] == "io.nats.micro.v1.info_response" for d in docs)

    p = jssync_run(env, "micro", "info", name, a.info()["id"], "-s", url)
    assert p.returncode == 0, p.stderr
    assert a.info()["id"] in p.stdout and b.info()["id"] not in p.stdout
    assert "team=math" in p.stdout and f"{name}.add" in p.stdout and "input=list" in p.stdout
    p = jssync_run(env, "micro", "info", name, "--json", "-s", url)
    docs = json.loads(p.stdout)
    assert len(docs) == 2 and {d["endpoints"][0]["queue_group"] for d in docs} == {"q", ""}

    p = jssync_run(env, "micro", "stats", name, "-s", url)
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if b.info()["id"] in line)
    assert "503:busy" in row and " 2 " in row
    p = jssync_run(env, "micro", "stats", name, b.info()["id"], "--json", "-s", url)
    (doc,) = json.loads(p.stdout)
    ep = doc["endpoints"][0]
    assert (ep["num_requests"], ep["num_errors"], ep["last_error"]) == (2, 2, "503:busy")

    # nothing answers: ls is an empty list, info/stats say so and exit 1; a bad name exits 2
    p = jssync_run(env, "micro", "ls", "nosuch", "--json", "--wait", "500ms", "-s", url)
    assert p.returncode == 0 and json.loads(p.stdout) == []
    p = jssync_run(env, "micro", "stats", "nosuch", "--wait", "500ms", "-s", url)
    assert p.returncode == 1 and "no service nosuch answered" in p.stderr and p.stdout == ""
    p = jssync_run(env, "micro", "info", "bad.name", "-s", url)
    assert p.returncode == 2 and "bad.name" in p.stderr
    a.stop()
    b.stop()


def test_pub_ttl(env, nats_server, js, unique):
    name = f"TTL{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", allow_msg_ttl=True)
    try:
        url = nats_server.url
        # the 1 s message can be gone before the next CLI process ran (a loaded machine):
        # its header is read off a core subscription that sees it as published
        seen = js.conn.subscribe(f"{name}.a")
        js.conn.flush()
        p = jssync_run(env, "pub", f"{name}.a", "short", "--js", "--ttl", "1s", "-s", url)
        assert p.returncode == 0 and "seq 1" in p.stdout, p.stderr
        assert seen.next_msg(10).headers["Nats-TTL"] == "1s"
        seen.unsubscribe()
        p = jssync_run(env, "pub", f"{name}.b", "--js", "--ttl", "never", "--count", "3", "x", "-s", url)
        assert p.returncode == 0 and "published 3" in p.stdout, p.stderr
        st = js.stream(name)
        assert [st.get_msg(s).headers["Nats-TTL"] for s in (2, 3, 4)] == ["never"] * 3
        # the stream removes the 1 s message; the others stay
        wait_for(lambda: st.info().state.messages == 3, 10, what="the TTL'd message removed")
        # refused before sending: without --js, below 1 s, not a duration
        for argv, text in (((), "--ttl needs --js"), (("--js", "--ttl", "500ms"), ">= 1"),
                           (("--js", "--ttl", "soon"), "not a duration")):
            if not argv:
                argv = ("--ttl", "5s")
            p = jssync_run(env, "pub", f"{name}.c", "x", *argv, "-s", url)
            assert p.returncode == 2 and text in p.stderr, (argv, p.stderr)
        assert st.info().state.messages == 3
    finally:
        js.delete_stream(name)


def test_consumer_priority_groups(env, nats_server, js, unique):
    name = f"PG{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        url = nats_server.url
        for i in range(3):
            js.publish(f"{name}.x", b"job %d" % i)
        p = jssync_run(env, "consumer", "add", name, "W", "--pinned-groups", "jobs", "--pinned-ttl", "30s",
                       "-s", url)
        assert p.returncode == 0, p.stderr
        c = js.consumer(name, "W")
        assert c.priority == ("pinned_client", ("jobs",), 30.0)
        p = jssync_run(env, "consumer", "next", name, "W", "--group", "jobs", "--wait", "2", "-s", url)
        assert p.returncode == 0 and "job 0" in p.stdout, p.stderr
        p = jssync_run(env, "consumer", "info", name, "W", "-s", url)
        assert "pinned_client" in p.stdout and "pinned (jobs)" in p.stdout and "priority_timeout  30s" in p.stdout
        p = jssync_run(env, "consumer", "info", name, "W", "--json", "-s", url)
        doc = json.loads(p.stdout)
        assert doc["config"]["priority_policy"] == "pinned_client" and doc["config"]["priority_groups"] == ["jobs"]
        assert doc["priority_groups"][0]["pinned_client_id"]
        p = jssync_run(env, "consumer", "unpin", name, "W", "jobs", "-s", url)
        assert p.returncode == 0 and "unpinned group jobs" in p.stdout, p.stderr
        assert not js.consumer(name, "W").cached_info.priority_groups[0].get("pinned_client_id")
        # a pull without the group, or with a group the consumer lacks: refused before sending
        p = jssync_run(env, "consumer", "next", name, "W", "--wait", "1", "-s", url)
        assert p.returncode == 2 and "group" in p.stderr
        p = jssync_run(env, "consumer", "next", name, "W", "--group", "other", "--wait", "1", "-s", url)
        assert p.returncode == 2 and "not one of" in p.stderr
        # overflow: --min-pending is honoured (2 pending < 5: nothing comes)
        p = jssync_run(env, "consumer", "add", name, "O", "--overflow-groups", "jobs", "-s", url)
        assert p.returncode == 0, p.stderr
        p = jssync_run(env, "consumer", "next", name, "O", "--group", "jobs", "--min-pending", "5",
                       "--wait", "1", "-s", url)
        assert p.returncode == 1 and "no messages" in p.stderr
        p = jssync_run(env, "consumer", "next", name, "O", "--group", "jobs", "--min-pending", "3", "--wait", "1",
                       "-s", url)
        assert p.returncode == 0 and "job 0" in p.stdout, p.stderr
        for argv, text in ((("--pinned-groups", "a", "--overflow-groups", "b"), "give one of"),
                           (("--pinned-ttl", "5s"), "--pinned-ttl goes with --pinned-groups"),
                           (("--prioritized-groups", "bad.group"), "invalid priority group")):
            p = jssync_run(env, "consumer", "add", name, "BAD", *argv, "-s", url)
            assert p.returncode == 2 and text in p.stderr, (argv, p.stderr)
        assert sorted(js.consumer_names(name)) == ["O", "W"]
    finally:
        js.delete_stream(name)


def test_pub_js_many_says_how_many_were_stored(env, nats_server, js, unique, tmp_path):
    """Every PubAck decides `pub --js --count N`: a message not stored fails the command, saying how many were."""
    url = nats_server.url
    lines = tmp_path / "lines.txt"
    lines.write_text("a\nb\nc\nd\ne\n")
    # no stream captures the subject: nothing is stored
    for argv in (("--count", "5", "x"), ("--file", str(lines)), ("--json", "--count", "5", "x")):
        p = jssync_run(env, "pub", f"nostream{unique}.x", "--js", *argv, "-s", url, "--timeout", "1s")
        assert p.returncode == 1, (argv, p.stdout, p.stderr)
        if "--json" in argv:
            rec = json.loads(p.stdout)
            assert rec["published"] == 0 and rec["failed"] == 5, rec
        else:
            assert "published" not in p.stdout, (argv, p.stdout)
        assert "0 of 5 message(s) stored" in p.stderr and "NoRespondersError" in p.stderr, (argv, p.stderr)
    # a stream that takes only 2: the other 3 fail, and the output says so
    name = f"PART{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", max_msgs=2, discard="new")
    try:
        p = jssync_run(env, "pub", f"{name}.x", "--js", "--count", "5", "x", "-s", url)
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert "2 of 5 message(s) stored" in p.stderr and "maximum messages exceeded" in p.stderr, p.stderr
        assert js.stream(name).info().state.messages == 2
        p = jssync_run(env, "--json", "pub", f"{name}.x", "--js", "--count", "3", "x", "-s", url)
        assert p.returncode == 1, (p.stdout, p.stderr)
        rec = json.loads(p.stdout)
        assert rec["published"] == 0 and rec["failed"] == 3 and rec["subject"] == f"{name}.x", rec
        # all stored: exit 0, as before
        js.purge_stream(name) if hasattr(js, "purge_stream") else js.stream(name).purge()
        p = jssync_run(env, "pub", f"{name}.x", "--js", "--count", "2", "x", "-s", url)
        assert p.returncode == 0 and "published 2 message(s)" in p.stdout, p.stderr
    finally:
        js.delete_stream(name)


def test_cli_duration_options_take_go_durations(env, nats_server, js, unique):
    """`--max-age 1h` works as `--timeout 5s` does; a bad one exits 2 naming the option."""
    name = f"CD{unique}"
    url = nats_server.url
    p = jssync_run(env, "stream", "add", name, "--subjects", f"{name}.>", "--storage", "memory",
                   "--max-age", "1h30m", "-s", url)
    try:
        assert p.returncode == 0, p.stderr
        assert js.stream(name).info().config.max_age == 5400.0
        js.create_consumer(name, durable_name="W")
        t0 = time.monotonic()
        p = jssync_run(env, "consumer", "next", name, "W", "--wait", "500ms", "-s", url)
        assert p.returncode == 1 and "no messages" in p.stderr, p.stderr
        assert time.monotonic() - t0 < 10 * FACTOR
        for bad in ("1 hour", "-1s", "nan"):
            p = jssync_run(env, "stream", "add", f"{name}X", "--subjects", f"{name}X.>", f"--max-age={bad}",
                           "-s", url)
            assert p.returncode == 2 and "--max-age" in p.stderr and repr(bad) in p.stderr, (bad, p.stderr)
    finally:
        js.delete_stream(name)


# -- stream import / edit, rm confirmation, stream add defaults -------------------------------------


def test_stream_import_into_an_existing_stream_suggests_a_command_that_works(env, nats_server, js, unique,
                                                                             tmp_path):
    """The export's stream exists: the hint adds the subject to it (stream edit), and that command works."""
    import shlex

    name = f"T{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for i in range(3):
            js.publish(f"{name}.a", b"m%d" % i)
        f = tmp_path / "t.jsonl"
        assert jssync_run(env, "stream", "export", name, str(f), "-s", url).returncode == 0
        prefix = f"COPY{unique}"
        p = jssync_run(env, "stream", "import", str(f), "--subject-prefix", prefix, "-s", url)
        assert p.returncode == 1 and "no stream captures" in p.stderr, p.stderr
        hint = p.stderr.split("e.g. ", 1)[1].strip()
        argv = shlex.split(hint)
        assert argv[0] == "jssync" and "stream add " + name not in hint, hint
        q = jssync_run(env, *argv[1:], "-s", url)
        assert q.returncode == 0, (hint, q.stderr)
        p = jssync_run(env, "stream", "import", str(f), "--subject-prefix", prefix, "-s", url)
        assert p.returncode == 0 and "imported 3" in p.stdout, p.stderr
        assert js.stream(name).info().state.messages == 6
    finally:
        js.delete_stream(name)


def test_stream_edit_changes_subjects_and_limits(env, nats_server, js, unique):
    name = f"SE{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.a"], storage="memory", max_msgs=100)
    try:
        p = jssync_run(env, "stream", "edit", name, "--subjects", f"{name}.a,{name}.b", "--max-age", "1h",
                       "--max-bytes", "1048576", "-s", url)
        assert p.returncode == 0, p.stderr
        c = js.stream(name).info().config
        assert c.subjects == [f"{name}.a", f"{name}.b"] and c.max_age == 3600.0 and c.max_bytes == 1048576
        assert c.max_msgs == 100, "a field not given was changed"
        assert "memory" in str(c.storage)
        p = jssync_run(env, "stream", "edit", name, "--max-age", "an hour", "-s", url)
        assert p.returncode == 2 and "--max-age" in p.stderr, p.stderr
        p = jssync_run(env, "stream", "edit", f"NO{name}", "--max-msgs", "5", "-s", url)
        assert p.returncode == 1 and "StreamNotFoundError" in p.stderr, p.stderr
        p = jssync_run(env, "stream", "edit", name, "-s", url)
        assert p.returncode == 2 and "nothing to change" in p.stderr, p.stderr
    finally:
        js.delete_stream(name)


def _run_on_a_terminal(env: dict[str, str], argv: list[str], answer: bytes | None) -> tuple[int, str]:
    """Run `python -m jssync ARGV` with stdin, stdout and stderr on a pseudo-terminal; type ``answer`` once
    it asks (None: expect no question). Its exit status and everything it wrote."""
    import pty
    import select

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "jssync", *argv], env=env, stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    seen = b""
    answered = False
    deadline = time.monotonic() + 30 * FACTOR
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([leader], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                seen += chunk
            if answer is not None and not answered and b"[y/N]" in seen:
                os.write(leader, answer)
                answered = True
            if proc.poll() is not None and not r:
                break
        rc = proc.wait(10 * FACTOR)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return rc, seen.decode(errors="replace")


def test_rm_asks_on_a_terminal_unless_forced(env, nats_server, js, unique):
    """`stream rm` / `consumer rm` / `kv del` ask on a terminal; `-f`/`--force` skips the question;
    without a terminal (scripts) they delete without asking, as before."""
    name = f"RM{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        js.create_consumer(name, durable_name="C")
        rc, seen = _run_on_a_terminal(env, ["stream", "rm", name, "-s", url], b"n\n")
        assert "[y/N]" in seen and name in seen and rc == 1, seen
        assert js.stream(name).name == name  # still there
        rc, seen = _run_on_a_terminal(env, ["consumer", "rm", name, "C", "-s", url], b"y\n")
        assert "[y/N]" in seen and rc == 0, seen
        with pytest.raises(jssync.ConsumerNotFoundError):
            js.consumer(name, "C")
        js.create_consumer(name, durable_name="C2")
        rc, seen = _run_on_a_terminal(env, ["consumer", "rm", name, "C2", "--force", "-s", url], None)
        assert rc == 0 and "[y/N]" not in seen, seen
        # not a terminal: a script deletes without a question (and -f, the nats CLI's force, is taken)
        p = jssync_run(env, "stream", "rm", name, "-f", "-s", url)
        assert p.returncode == 0 and "[y/N]" not in p.stdout + p.stderr, p.stderr
        with pytest.raises(jssync.StreamNotFoundError):
            js.stream(name)
    finally:
        try:
            js.delete_stream(name)
        except jssync.StreamNotFoundError:
            pass


def test_stream_add_subjects_default_to_the_stream_name(env, nats_server, js, unique):
    """As `nats stream add NAME` does: with no --subjects the stream captures the subject NAME."""
    name = f"PLAIN{unique}"
    p = jssync_run(env, "stream", "add", name, "--storage", "memory", "-s", nats_server.url)
    try:
        assert p.returncode == 0, p.stderr
        assert js.stream(name).info().config.subjects == [name]
    finally:
        js.delete_stream(name)


def test_stream_and_consumer_info_read_like_the_nats_cli(env, nats_server, js, unique):
    """Limits say "unlimited", sizes are KiB/MiB, durations Go style; per-subject counts are rows, not a dict;
    no colour codes into a pipe."""
    name = f"SI{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory", duplicate_window=90)
    try:
        for i in range(20):
            js.publish(f"{name}.{i % 2}", b"x" * 200)
        js.create_consumer(name, durable_name="W", ack_wait=90 * 60)
        p = jssync_run(env, "stream", "info", name, "--subjects", ">", "-s", url)
        assert p.returncode == 0, p.stderr
        out = p.stdout
        assert "\x1b" not in out, "colour codes in a pipe"
        rows = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.splitlines() if len(ln.split()) > 1}
        assert "{" not in out and not {"-1", "0.0"} & set(rows.values()), out
        assert rows["max_msgs"] == "unlimited" and rows["max_bytes"] == "unlimited", out
        assert rows["max_age"] == "unlimited" and rows["duplicate_window"] == "1m30s", out
        assert rows["bytes"].endswith("KiB"), out
        assert rows[f"{name}.0"] == "10" and rows[f"{name}.1"] == "10", out
        p = jssync_run(env, "stream", "edit", name, "--max-age", "90m", "--max-bytes", "1MiB", "-s", url)
        assert p.returncode == 0, p.stderr
        out = jssync_run(env, "stream", "info", name, "-s", url).stdout
        rows = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.splitlines() if len(ln.split()) > 1}
        assert rows["max_age"] == "1h30m0s" and rows["max_bytes"] == "1.0 MiB", out
        p = jssync_run(env, "consumer", "info", name, "W", "-s", url)
        assert p.returncode == 0 and "\x1b" not in p.stdout, p.stderr
        rows = {ln.split()[0]: ln.split(None, 1)[1] for ln in p.stdout.splitlines() if len(ln.split()) > 1}
        assert rows["ack_wait"] == "1h30m0s" and rows["max_deliver"] == "unlimited", p.stdout
    finally:
        js.delete_stream(name)


def test_a_bad_option_value_prints_the_subcommands_own_usage(env):
    """The usage line of `stream add` shows its own options, not the 15 global ones."""
    p = jssync_run(env, "stream", "add", "X", "--max-age", "an hour")
    assert p.returncode == 2 and "--max-age" in p.stderr, p.stderr
    usage = p.stderr.split("error:", 1)[0]
    assert usage.startswith("usage: jssync stream add"), p.stderr
    for flag in ("--tlscert", "--creds", "--connect-timeout", "--password"):
        assert flag not in usage, usage
    assert "--max-age" in usage and "name" in usage, usage
    # the global options are still taken after the subcommand, and --help still lists them
    h = jssync_run(env, "stream", "add", "--help")
    assert h.returncode == 0 and "--tlscert" in h.stdout and "global options" in h.stdout, h.stdout


def test_consumer_edit_changes_what_it_is_given(env, nats_server, js, unique):
    name = f"CE{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        js.create_consumer(name, durable_name="W", filter_subject=f"{name}.a", max_deliver=5,
                           priority_policy="pinned_client", priority_groups=["jobs"])
        p = jssync_run(env, "consumer", "edit", name, "W", "--ack-wait", "2m", "--max-ack-pending", "50",
                       "--filter", f"{name}.a,{name}.b", "-s", url)
        assert p.returncode == 0, p.stderr
        info = js.consumer(name, "W").info()
        c = info.config
        assert c.ack_wait == 120.0 and c.max_ack_pending == 50 and c.filter_subjects == [f"{name}.a", f"{name}.b"]
        assert c.max_deliver == 5 and getattr(c, "priority_groups", None) == ["jobs"], "a field not given changed"
        p = jssync_run(env, "consumer", "edit", name, "W", "--ack-wait", "soon", "-s", url)
        assert p.returncode == 2 and "--ack-wait" in p.stderr, p.stderr
        p = jssync_run(env, "consumer", "edit", name, "NOPE", "--max-deliver", "3", "-s", url)
        assert p.returncode == 1 and "ConsumerNotFoundError" in p.stderr, p.stderr
        p = jssync_run(env, "consumer", "edit", name, "W", "-s", url)
        assert p.returncode == 2 and "nothing to change" in p.stderr, p.stderr
    finally:
        js.delete_stream(name)


def test_stream_view_prints_messages_without_leaving_a_consumer(env, nats_server, js, unique):
    name = f"CV{unique}"
    s = ["-s", nats_server.url]
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for i in range(1, 6):
            js.publish(f"{name}.a", f"text {i}".encode(), headers={"Trace": str(i)} if i == 2 else None)
        js.publish(f"{name}.b", BINARY)  # seq 6
        js.stream(name).delete_msg(4)  # a hole: seq 4 is gone
        # for people: sequence, subject, time, headers, data (as text when printable)
        p = jssync_run(env, "stream", "view", name, *s)
        assert p.returncode == 0, p.stderr
        assert "[1] Subject: " + f"{name}.a" in p.stdout and "Received: " in p.stdout
        assert "Trace: 2" in p.stdout and "text 5" in p.stdout and "[4]" not in p.stdout
        assert "[6]" in p.stdout and "binary" in p.stdout and "bin\x80" not in p.stdout
        # --json: one record per message, in stream order
        p = jssync_run(env, "--json", "stream", "view", name, *s)
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        assert [r["seq"] for r in recs] == [1, 2, 3, 5, 6]
        assert recs[1]["headers"] == {"Trace": "2"} and _data(recs[4]) == BINARY and recs[0]["time"]
        # a subject filter, a start sequence with a count, the last N, a start time
        p = jssync_run(env, "--json", "stream", "view", name, "--subject", f"{name}.b", *s)
        assert [json.loads(x)["seq"] for x in p.stdout.splitlines()] == [6]
        p = jssync_run(env, "--json", "stream", "view", name, "--start-seq", "2", "--count", "2", *s)
        assert [json.loads(x)["seq"] for x in p.stdout.splitlines()] == [2, 3]
        p = jssync_run(env, "--json", "stream", "view", name, "--last", "3", *s)
        assert [json.loads(x)["seq"] for x in p.stdout.splitlines()] == [3, 5, 6]
        p = jssync_run(env, "--json", "stream", "view", name, "--subject", f"{name}.a", "--last", "2", *s)
        assert [json.loads(x)["seq"] for x in p.stdout.splitlines()] == [3, 5]
        p = jssync_run(env, "--json", "stream", "view", name, "--since", "1h", "--count", "1", *s)
        assert [json.loads(x)["seq"] for x in p.stdout.splitlines()] == [1]
        # --raw: the payloads alone, one per line
        p = jssync_run(env, "stream", "view", name, "--subject", f"{name}.a", "--raw", *s)
        assert p.stdout.splitlines() == ["text 1", "text 2", "text 3", "text 5"]
        # nothing matches: says so, exit 0
        p = jssync_run(env, "stream", "view", name, "--subject", f"{name}.none", *s)
        assert p.returncode == 0 and "no messages" in p.stdout + p.stderr
        # no consumer is left behind
        assert js.stream(name).info().state.consumer_count == 0
        # bad input: one line, exit 1 (unknown stream) or 2 (usage)
        p = jssync_run(env, "stream", "view", f"NO{unique}", *s)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and f"NO{unique}" in p.stderr
        p = jssync_run(env, "stream", "view", name, "--since", "1h", "--start-seq", "2", *s)
        assert p.returncode == 2 and "usage: jssync stream view" in p.stderr
    finally:
        js.delete_stream(name)


def test_kv_history_lists_every_revision(env, nats_server, js, unique):
    bucket = f"KH{unique}"
    s = ["-s", nats_server.url]
    kv = js.create_key_value(bucket=bucket, history=10)
    try:
        kv.put("a", b"one")
        kv.put("a", b"two")
        kv.delete("a")
        kv.put("b", BINARY)
        kv.put("c", b"gone")
        kv.purge("c")
        p = jssync_run(env, "kv", "history", bucket, "a", *s)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0].split() == ["KEY", "REVISION", "OP", "CREATED", "LENGTH", "VALUE"]
        rows = [ln.split() for ln in lines[2:]]
        assert [(r[0], r[1], r[2]) for r in rows] == [("a", "1", "PUT"), ("a", "2", "PUT"), ("a", "3", "DEL")]
        assert rows[0][-1] == "one" and rows[1][-1] == "two"
        p = jssync_run(env, "--json", "kv", "history", bucket, "c", *s)
        recs = [json.loads(x) for x in p.stdout.splitlines()]
        assert [(r["key"], r["revision"], r["operation"]) for r in recs] == [("c", 6, "PURGE")]
        p = jssync_run(env, "--json", "kv", "history", bucket, "b", *s)
        rec = json.loads(p.stdout)
        assert rec["value_encoding"] == "base64" and base64.b64decode(rec["value"]) == BINARY and rec["created"]
        # bad input: one line naming it, exit 1
        p = jssync_run(env, "kv", "history", bucket, "nokey", *s)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "nokey" in p.stderr
        p = jssync_run(env, "kv", "history", f"NO{unique}", "a", *s)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and f"NO{unique}" in p.stderr
    finally:
        js.delete_key_value(bucket)


def test_obj_commands_store_read_list_and_delete_objects(env, nats_server, js, unique, tmp_path):
    bucket = f"OB{unique}"
    url = nats_server.url
    s = ["-s", url]
    src = tmp_path / "photo.bin"
    src.write_bytes(BINARY * 20000)  # about 240 KiB: more than one chunk
    try:
        p = jssync_run(env, "obj", "add", bucket, *s)
        assert p.returncode == 0 and bucket in p.stdout, p.stderr
        p = jssync_run(env, "obj", "put", bucket, str(src), *s)
        assert p.returncode == 0 and "photo.bin" in p.stdout, p.stderr
        p = jssync_run(env, "obj", "put", bucket, str(src), "--name", "copy/two", *s)
        assert p.returncode == 0, p.stderr
        store = js.object_store(bucket)
        assert store.get_bytes("photo.bin") == src.read_bytes() == store.get_bytes("copy/two")
        # ls: a table of the objects; info: one object's size, chunks, digest
        p = jssync_run(env, "obj", "ls", bucket, *s)
        assert p.returncode == 0 and p.stdout.splitlines()[0].split()[:2] == ["NAME", "SIZE"], p.stdout
        assert "photo.bin" in p.stdout and "copy/two" in p.stdout and "KiB" in p.stdout
        p = jssync_run(env, "--json", "obj", "ls", bucket, *s)
        assert sorted(o["name"] for o in json.loads(p.stdout)) == ["copy/two", "photo.bin"]
        p = jssync_run(env, "obj", "info", bucket, "photo.bin", *s)
        assert p.returncode == 0 and "SHA-256=" in p.stdout and "chunks" in p.stdout, p.stdout
        p = jssync_run(env, "--json", "obj", "info", bucket, "photo.bin", *s)
        assert json.loads(p.stdout)["size"] == len(BINARY) * 20000
        # get: into -O FILE, to stdout with -O -, by default into ./NAME (never over an existing file)
        out = tmp_path / "out.bin"
        p = jssync_run(env, "obj", "get", bucket, "copy/two", "-O", str(out), *s)
        assert p.returncode == 0 and out.read_bytes() == src.read_bytes(), p.stderr
        r = subprocess.run([sys.executable, "-m", "jssync", "obj", "get", bucket, "photo.bin", "-O", "-", *s],
                           env=env, capture_output=True, timeout=60 * FACTOR)
        assert r.returncode == 0 and r.stdout == src.read_bytes()
        work = tmp_path / "cwd"
        work.mkdir()
        p = jssync_run(env, "obj", "get", bucket, "photo.bin", *s, cwd=work)
        assert p.returncode == 0 and (work / "photo.bin").read_bytes() == src.read_bytes(), p.stderr
        p = jssync_run(env, "obj", "get", bucket, "photo.bin", *s, cwd=work)
        assert p.returncode == 1 and "exists" in p.stderr and len(p.stderr.strip().splitlines()) == 1
        # watch: the objects there, then stops after --count
        p = jssync_run(env, "obj", "watch", bucket, "--count", "2", *s)
        assert p.returncode == 0 and "photo.bin" in p.stdout and "copy/two" in p.stdout, p.stderr
        # rm asks on a terminal; -f does not; a script is not asked
        rc, seen = _run_on_a_terminal(env, ["obj", "rm", bucket, "photo.bin", *s], b"n\n")
        assert "[y/N]" in seen and "photo.bin" in seen and rc == 1, seen
        assert store.get_info("photo.bin").size > 0
        rc, seen = _run_on_a_terminal(env, ["obj", "rm", bucket, "photo.bin", "-f", *s], None)
        assert rc == 0 and "[y/N]" not in seen, seen
        with pytest.raises(jssync.ObjectNotFoundError):
            store.get_info("photo.bin")
        # bad input: one line naming what was wrong, exit 1
        p = jssync_run(env, "obj", "info", bucket, "photo.bin", *s)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "photo.bin" in p.stderr
        p = jssync_run(env, "obj", "ls", f"NO{unique}", *s)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and f"NO{unique}" in p.stderr
        p = jssync_run(env, "obj", "put", bucket, str(tmp_path / "missing.txt"), *s)
        assert p.returncode == 1 and "missing.txt" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    finally:
        try:
            js.delete_object_store(bucket)
        except jssync.Error:
            pass


def test_bench_reports_rates_and_cleans_up(env, nats_server, js, nc, unique):
    s = ["-s", nats_server.url]
    subj = f"bench{unique}"
    streams_before = set(js.stream_names())
    # core: 2 publishers, 1 subscriber in the same run
    p = jssync_run(env, "--json", "bench", "pub", f"{subj}.core", "--msgs", "2000", "--size", "16", "--pubs", "2",
                   "--subs", "1", *s)
    assert p.returncode == 0, p.stderr
    rows = {r["kind"]: r for r in json.loads(p.stdout)}
    assert rows["pub"]["msgs"] == 2000 and rows["pub"]["clients"] == 2 and rows["pub"]["msgs_per_sec"] > 0
    assert rows["sub"]["msgs"] == 2000 and rows["pub"]["bytes"] == 2000 * 16
    p = jssync_run(env, "bench", "pub", f"{subj}.core", "--msgs", "100", "--size", "8", *s)
    assert p.returncode == 0 and "MSGS/S" in p.stdout and "MB/S" in p.stdout, p.stderr
    # core sub: waits for --msgs messages from someone else
    proc = _subscriber(env, "--json", "bench", "sub", f"{subj}.s", "--msgs", "50", *s)
    out, err = _feed(proc, nc, f"{subj}.s", b"x" * 10, per_tick=10)
    assert proc.returncode == 0, err
    assert json.loads(out)[0]["msgs"] == 50
    # JetStream: a stream of its own when none captures the subject, removed at the end
    p = jssync_run(env, "--json", "bench", "js", "pub", f"{subj}.js", "--msgs", "500", "--size", "64", *s)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["msgs"] == 500
    assert set(js.stream_names()) == streams_before
    # one PubAck at a time: a request-style run, with latencies
    p = jssync_run(env, "--json", "bench", "js", "pub", f"{subj}.js", "--msgs", "50", "--sync", *s)
    row = json.loads(p.stdout)[0]
    assert p.returncode == 0 and row["msgs"] == 50 and 0 < row["latency_p50_ms"] <= row["latency_max_ms"]
    # consume: from an existing stream, through a consumer that is not left behind
    name = f"BN{unique}"
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        for _ in range(300):
            js.publish_async(f"{name}.x", b"y" * 32)
        js.publish_async_completed(timeout=10 * FACTOR)
        p = jssync_run(env, "--json", "bench", "js", "consume", f"{name}.x", "--msgs", "300", *s)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)[0]["msgs"] == 300
        assert js.stream(name).info().state.consumer_count == 0
        p = jssync_run(env, "--json", "bench", "js", "pub", f"{name}.x", "--msgs", "10", *s)
        assert p.returncode == 0 and js.stream(name).info().state.messages == 310  # the existing stream
    finally:
        js.delete_stream(name)
    # bad input
    p = jssync_run(env, "bench", "pub", subj, "--msgs", "10", "--size", "0", *s)
    assert p.returncode == 2 and "usage: jssync bench pub" in p.stderr
    p = jssync_run(env, "bench", "js", "consume", f"NOSTREAM{unique}.x", "--msgs", "10", *s)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and f"NOSTREAM{unique}.x" in p.stderr


def test_consumer_add_edit_info_take_and_show_the_pull_request_limits(env, nats_server, js, unique):
    name = f"CL{unique}"
    url = nats_server.url
    js.create_stream(name=name, subjects=[f"{name}.>"], storage="memory")
    try:
        p = jssync_run(env, "consumer", "add", name, "W", "--max-batch", "10", "--max-expires", "5s",
                       "--max-bytes", "4096", "-s", url)
        assert p.returncode == 0, p.stderr
        raw = json.loads(js.conn.request(f"$JS.API.CONSUMER.INFO.{name}.W", b"", timeout=5.0).data)["config"]
        assert (raw.get("max_batch"), raw.get("max_expires"), raw.get("max_bytes")) == (10, 5_000_000_000, 4096)
        p = jssync_run(env, "consumer", "edit", name, "W", "--max-batch", "20", "-s", url)
        assert p.returncode == 0, p.stderr
        raw = json.loads(js.conn.request(f"$JS.API.CONSUMER.INFO.{name}.W", b"", timeout=5.0).data)["config"]
        assert (raw.get("max_batch"), raw.get("max_expires"), raw.get("max_bytes")) == (20, 5_000_000_000, 4096)
        p = jssync_run(env, "consumer", "info", name, "W", "-s", url)
        assert p.returncode == 0, p.stderr
        rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines() if line.strip()}
        assert rows["max_batch"] == ["20"] and rows["max_expires"] == ["5s"] and rows["max_bytes"] == ["4096"]
        p = jssync_run(env, "--json", "consumer", "info", name, "W", "-s", url)
        cfg = json.loads(p.stdout)["config"]
        assert (cfg["max_batch"], cfg["max_expires"], cfg["max_bytes"]) == (20, 5.0, 4096)
    finally:
        js.delete_stream(name)
