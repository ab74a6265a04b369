"""Style and types are part of the suite: ruff clean, mypy --strict clean on jssync/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "jssync", "tests", "bench", "examples"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_mypy_strict_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_test_files_are_named_by_what_they_test():
    """A newcomer finds a module's tests by name: no test file is named after a review round,
    a session, an issue or a kind of user."""
    import re

    history = re.compile(r"review|session|new_user|issue_?\d")
    bad = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if history.search(p.name)]
    assert not bad, bad


_TIME_CALLS = {"monotonic", "time", "perf_counter"}
_TIME_NAMES = {"took", "elapsed", "spent", "waited", "duration", "dt", "down", "failover", "kv_failover"}
_SCALES = {"FACTOR", "SLACK", "UNIT"}


def _names(node) -> set[str]:
    import ast

    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
    return out


def _measures_time(node) -> bool:
    import ast

    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _TIME_CALLS:
            return True
    return bool(_names(node) & _TIME_NAMES)


def unscaled_time_bounds(source: str) -> list[int]:
    """Lines of ``source`` asserting that something took at most N seconds, N not scaled by FACTOR."""
    import ast

    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        cmp = node.test
        sides = [cmp.left, *cmp.comparators]
        for op, left, right in zip(cmp.ops, sides, sides[1:], strict=False):
            if isinstance(op, (ast.Gt, ast.GtE)):
                left, right = right, left
            elif not isinstance(op, (ast.Lt, ast.LtE)):
                continue
            if not _measures_time(left) or _measures_time(right):
                continue
            if not any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) for n in ast.walk(right)):
                continue  # a bound computed from something else (a timeout variable) is the test's own business
            if not _names(right) & _SCALES:
                bad.append(node.lineno)
    return bad


def test_timing_bounds_scale_with_the_time_factor():
    """Every 'took at most N seconds' assertion multiplies N by ``FACTOR`` (JSSYNC_TEST_TIME_FACTOR,
    tests/conftest.py), so a slow or loaded machine fails no test for being slow."""
    bad = []
    for p in sorted((ROOT / "tests").rglob("*.py")):
        bad += [f"{p.relative_to(ROOT)}:{n}" for n in unscaled_time_bounds(p.read_text())]
    assert not bad, bad


def test_the_timing_bound_check_catches_an_unscaled_bound():
    src = "import time\nt0 = time.monotonic()\nassert time.monotonic() - t0 < 2\nassert 0.5 * FACTOR > took\n"
    assert unscaled_time_bounds(src) == [3]



#: The one marker form a sleep in tests/ carries on its line, saying why it is no wait on an event:
#: ``# nothing happens: <what>`` (the test gives something the chance to happen wrongly, then
#: asserts it did not), ``# behaviour: <what>`` (the sleep is part of what is under test: a slow
#: handler, a gap the code must notice, an outage that lasts) or ``# poll: <what>`` (a poll's
#: interval inside a deadline, as in wait_for).
_SLEEP_MARKER = r"#\s*(?:nothing happens|behaviour|poll): \S"


def unmarked_sleeps(source: str) -> list[int]:
    """Lines of ``source`` calling ``time.sleep`` (or ``sleep`` imported from ``time``) without the
    marker comment on the line; also such calls inside strings (the source of a subprocess), where
    the marker may be a comment in the string's line or after the string."""
    import io
    import re
    import tokenize

    marker = re.compile(_SLEEP_MARKER)
    in_string = re.compile(r"\b(?:time\.)?sleep\(")
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    comments = {t.start[0]: t.string for t in toks if t.type == tokenize.COMMENT}
    code = [t for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                                              tokenize.INDENT, tokenize.DEDENT)]
    bare = bool(re.search(r"^\s*from\s+time\s+import\s+.*\bsleep\b", source, re.M))
    strings = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())
    calls: list[tuple[int, str]] = []  # (line, the string's text on that line, or "" for code)
    for i, t in enumerate(code):
        if t.type == tokenize.NAME and t.string == "sleep" and i + 1 < len(code) and code[i + 1].string == "(":
            dotted = i >= 2 and code[i - 1].string == "." and code[i - 2].string.endswith("time")
            if dotted or (bare and (i == 0 or code[i - 1].string != ".")):
                calls.append((t.start[0], ""))
        elif t.type in strings:
            for k, line in enumerate(t.string.split("\n")):
                if re.search(r"\btime\.sleep\(", line) or (bare and in_string.search(line)):
                    calls.append((t.start[0] + k, line))
    return sorted({n for n, text in calls if not marker.search(text) and not marker.search(comments.get(n, ""))})


def test_every_sleep_in_the_tests_says_why_it_is_no_wait():
    """A sleep that waits for something to happen is a wait_for on the condition with a deadline
    (tests/conftest.py); the sleeps that stay say why on their line (``_SLEEP_MARKER``)."""
    bad = []
    for p in sorted((ROOT / "tests").rglob("*.py")):
        bad += [f"{p.relative_to(ROOT)}:{n}" for n in unmarked_sleeps(p.read_text())]
    assert not bad, bad


def test_the_sleep_check_catches_an_unmarked_sleep():
    call = "time" + ".sleep("  # spelt in two, so that this file has no such call of its own
    src = (
        "import time\n"
        f"{call}0.3)\n"  # line 2: unmarked
        f"{call}0.3 * FACTOR)  # nothing happens: no second report\n"
        f"{call}0.1)  # a comment without the marker\n"  # line 4
        f"x = 'import time; {call}1)'\n"  # line 5: a subprocess's source, unmarked
        f"x = 'import time; {call}1)  # behaviour: the callback never returns'\n"
        f"x = 'import time; {call}1)'  # poll: inside the deadline\n"
        f"def f():\n    {call}0.01)  # behaviour: the handler is slow\n"
        f"    _{call}0.01)\n"  # line 10: an alias of the module
        "    asyncio.sleep(1)\n"  # not a time.sleep
    )
    assert unmarked_sleeps(src) == [2, 4, 5, 10]
    bare = "from time import sleep\nsleep(1)\nsleep(1)  # poll: inside the deadline\nx.sleep(1)\n"
    assert unmarked_sleeps(bare) == [2]


#: Tests of the package as a whole (every layer at once), not of one module: they stay at the top.
_CROSS_CUTTING = {
    "unit": {"test_cli.py", "test_parsers_fuzz.py"},
    "integration": {
        "test_bad_input.py", "test_cli.py", "test_duration_options.py", "test_errors_typing_and_tracebacks.py",
        "test_examples.py", "test_framework_examples.py", "test_timeout_rule_server.py", "test_unknown_options.py",
    },
}


def test_tests_mirror_the_package():
    """tests/unit/<layer>/ and tests/integration/<layer>/ mirror jssync/<layer>/ (plus ``architecture``
    for the rules that span layers): a newcomer finds a module's tests under its layer's name."""
    pkg = ROOT / "jssync"
    layers = {p.name for p in pkg.iterdir() if p.is_dir() and not p.name.startswith("_")}
    layers |= {p.stem for p in pkg.glob("*.py") if not p.name.startswith("_")}
    bad = []
    for kind in ("unit", "integration"):
        top = ROOT / "tests" / kind
        for p in top.rglob("test_*.py"):
            rel = p.relative_to(top)
            if len(rel.parts) == 1:
                if rel.name not in _CROSS_CUTTING[kind]:
                    bad.append(f"tests/{kind}/{rel}: put it under the layer it tests")
            elif rel.parts[0] not in layers | {"architecture"}:
                bad.append(f"tests/{kind}/{rel}: {rel.parts[0]!r} is no layer of jssync/")
    assert not bad, bad
