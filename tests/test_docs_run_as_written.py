"""Every code block of README.md and docs/*.md runs as written, in reading order, against a real server.

One test per Markdown file: a nats-server with JetStream is started for the file, its URL put where
the text says ``nats://127.0.0.1:4222`` (or ``localhost:4222``) and in ``NATS_URL``; then the file's
```` ```python ```` blocks run one after the other in one namespace (a block sees what the blocks
above it made, as a reader who pastes them in order does), and the ``jssync ...`` command lines of
its ```` ```bash ```` / ```` ```console ```` blocks run as commands, in the same order: a page's first
command line as ``python -m jssync`` in a process of its own (the entry point, a fresh interpreter),
the others the way ``python -m jssync`` runs them but in this process (``jssync_run`` of
tests/integration/test_cli.py: its own environment, standard streams and working directory, no
thread left behind; an interpreter start per line cost a second each). Other shell lines
(``pip install``, ``git clone``, ``nats-server -js``) are instructions, not run.

A block that cannot run as written (it needs a Spark cluster, a Django project, a Celery worker
process, or it is a fragment of a settings file) has a marker on the line before it, with its reason::

    <!-- docs: no-run (needs a Spark cluster) -->

and a page whose blocks are no programs at all (docs/api.md: signatures) says so once, anywhere:
``<!-- docs: no-run-page (why) -->``. Everything else must run: fix the docs, not this runner.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from jssync.server import NatsServer

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)")
_NO_RUN = re.compile(r"^\s*<!--\s*docs:\s*no-run\s*(?:\((?P<why>[^)]*)\))?\s*-->\s*$")
_NO_RUN_PAGE = re.compile(r"<!--\s*docs:\s*no-run-page\s*(?:\((?P<why>[^)]*)\))?\s*-->")
#: the addresses the docs write for a local server, most specific first
_ADDRESSES = ("nats://127.0.0.1:4222", "nats://localhost:4222", "127.0.0.1:4222", "localhost:4222")
_SHELLS = ("bash", "sh", "console", "shell")


@dataclass
class Block:
    lang: str
    line: int  # 1-based line of the first line of code
    code: str
    no_run: str | None  # the reason given, when marked


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order, with their markers."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group("indent"), m.group("fence"), m.group("lang").lower()
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        code = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[start:j])
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = _NO_RUN.match(lines[k]) if k >= 0 else None
        why = None
        if marker:
            why = (marker.group("why") or "").strip()
            assert why, f"line {k + 1}: a no-run marker needs its reason: <!-- docs: no-run (why) -->"
        out.append(Block(lang, start + 1, code, why))
        i = j + 1
    return out


def _local(text: str, url: str) -> str:
    host_port = url.split("://", 1)[1]
    for address in _ADDRESSES:
        text = text.replace(address, url if address.startswith("nats://") else host_port)
    return text


def _commands(code: str) -> list[list[str]]:
    """The ``jssync ...`` command lines of a shell block (``$ `` prompts and comments dropped)."""
    out = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.strip().removeprefix("$ ")
        if not line.startswith("jssync "):
            continue
        for part in line.split("&&"):
            argv = shlex.split(part, comments=True)
            if argv and argv[0] == "jssync":
                out.append(argv)
    return out


def _run_python(page: str, block: Block, namespace: dict[str, object], url: str) -> None:
    filename = f"{page}:{block.line}"
    source = "\n" * (block.line - 1) + _local(block.code, url) + "\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
    except BaseException as exc:
        raise AssertionError(f"the python block at {filename} failed ({type(exc).__name__}: {exc}); "
                             f"it printed:\n{out.getvalue()[-2000:]}") from exc


def _run_command(page: str, block: Block, argv: list[str], env: dict[str, str], cwd: Path,
                 own_process: bool) -> None:
    if own_process:
        proc = subprocess.run([sys.executable, "-m", "jssync", *argv[1:]], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    else:
        from tests.integration.test_cli import jssync_run

        proc = jssync_run(env, *argv[1:], cwd=cwd)
    assert proc.returncode == 0, (f"{page}:{block.line}: `{shlex.join(argv)}` exited with {proc.returncode}:\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _runnable(path: Path) -> bool:
    text = path.read_text()
    if _NO_RUN_PAGE.search(text):
        return False
    return any(b.no_run is None and (b.lang == "python" or (b.lang in _SHELLS and _commands(b.code)))
               for b in blocks(text))


RUNNABLE = [p for p in PAGES if _runnable(p)]


@pytest.mark.parametrize("path", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_code_blocks_run_as_written(path, tmp_path, monkeypatch):
    from jssync.core import closing

    page = str(path.relative_to(ROOT))
    before = set(closing.live)
    with NatsServer(jetstream=True) as srv:
        env = dict(os.environ, NATS_URL=srv.url, PYTHONPATH=str(ROOT))
        monkeypatch.setenv("NATS_URL", srv.url)
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(ROOT))
        namespace: dict[str, object] = {"__name__": "__docs__"}
        commands = 0
        try:
            for block in blocks(path.read_text()):
                if block.no_run is not None:
                    continue
                if block.lang == "python":
                    _run_python(page, block, namespace, srv.url)
                elif block.lang in _SHELLS:
                    for argv in _commands(block.code):
                        _run_command(page, block, argv, env, tmp_path, own_process=commands == 0)
                        commands += 1
        finally:
            for conn in set(closing.live) - before:
                conn.close(timeout=5)


def test_markers_give_their_reasons_and_are_few():
    """Each no-run marker says why; most blocks run."""
    marked = total = 0
    for path in PAGES:
        text = path.read_text()
        if _NO_RUN_PAGE.search(text):
            assert (_NO_RUN_PAGE.search(text).group("why") or "").strip(), f"{path.name}: no-run-page needs a reason"
            continue
        for b in blocks(text):
            if b.lang == "python" or b.lang in _SHELLS and _commands(b.code):
                total += 1
                marked += b.no_run is not None
    assert total and marked <= total // 2, (marked, total)
