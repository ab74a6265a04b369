"""The jssync command line, end to end against a local server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jssync._cli import main

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cli(nats_server, capsys):
    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(["-s", nats_server.url, *argv])
        out, err = capsys.readouterr()
        return rc, out, err

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
            time.sleep(0.1)
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
