"""The JetStream API seam: every ``$JS.API`` request goes through the context's one transport call.

The JetStream context sends its API requests with ``_api`` (jetstream/apicalls.py), which calls
its :class:`~jssync.jetstream.transport.APITransport` (jetstream/transport.py): the only place that
puts an API request on the connection. That is what lets the unit tests play recorded server
replies through the management, KV and Liftbridge code (tests/replay.py). These tests read every
module with :mod:`ast` and fail on any other way of sending an API request:

- an API subject built outside the seam: a literal ``$JS.API.<VERB>`` / ``$JS.<domain>.API.<VERB>``,
  or ``f"{<x>.prefix}.<VERB>..."`` (the context's prefix followed by an API verb); other modules
  pass the part after the prefix to ``js._api`` (or ``js._api_nowait``);
- ``<conn>.internal.request(...)`` outside the transport, except the publishes whose reply is a
  PubAck (``js.publish``, an atomic batch's commit), which are no API requests;
- a call of the transport (``._api_transport.request``) outside the API layer.

Two JetStream subjects under the API prefix are no API requests and are built where they are
used: the pull requests (``CONSUMER.MSG.NEXT``), answered with the stream's messages, and Direct
Get (``DIRECT.GET``), answered with a stored message, not JSON.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jssync
from jssync.jetstream.apicalls import APIRoom
from jssync.jetstream.context import JetStream

PACKAGE = Path(jssync.__file__).parent

#: the transport (the one call over the connection) and the API layer above it
SEAM = {"jetstream/transport.py", "jetstream/apicalls.py"}
#: JetStream subjects under the API prefix that are data paths, not API requests
DATA_PATHS = ("CONSUMER.MSG.NEXT.", "DIRECT.GET.")
#: modules that may call ``internal.request`` (a request that is no JetStream API request), and why
OTHER_REQUESTS = {
    "jetstream/transport.py": "the transport itself",
    "jetstream/context.py": "js.publish waits for its PubAck",
    "jetstream/msgfeatures.py": "an atomic batch's commit waits for its PubAck",
}

_API_LITERAL = re.compile(r"\$JS\.(?:[^.]+\.)?API\.([A-Z][A-Z.]*)")
_VERB = re.compile(r"\.([A-Z][A-Z]+(?:\.[A-Z][A-Z]+)*\.?)")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _is_prefix(node: ast.expr) -> bool:
    """``<something>.prefix``: the JetStream context's API prefix."""
    return isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Attribute) \
        and node.value.attr == "prefix"


def _data_path(verb: str) -> bool:
    return verb.startswith(DATA_PATHS)


def api_requests_outside_the_seam(root: Path = PACKAGE) -> list[str]:
    """``path:line: what`` for every way of sending an API request other than the seam's."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in SEAM:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                m = _API_LITERAL.search(node.value)
                if m and not _data_path(m.group(1)):
                    found.append(f"{rel}:{node.lineno}: API subject literal {node.value!r}")
            elif isinstance(node, ast.JoinedStr):
                parts = node.values
                for before, after in zip(parts, parts[1:], strict=False):
                    if not (_is_prefix(before) and isinstance(after, ast.Constant) and isinstance(after.value, str)):
                        continue
                    m = _VERB.match(after.value)
                    if m and not _data_path(m.group(1)):
                        found.append(f"{rel}:{node.lineno}: API subject built from the prefix: "
                                     f"{{...prefix}}{after.value}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "request" and isinstance(node.func.value, ast.Attribute):
                owner = node.func.value.attr
                if owner == "internal" and rel not in OTHER_REQUESTS:
                    found.append(f"{rel}:{node.lineno}: internal.request outside the transport")
                if owner == "_api_transport":
                    found.append(f"{rel}:{node.lineno}: the transport called outside the API layer")
    return found


def test_no_module_sends_a_jetstream_api_request_but_through_the_seam() -> None:
    found = api_requests_outside_the_seam()
    assert not found, ("JetStream API requests go through js._api (jetstream/apicalls.py) and its transport "
                       "(jetstream/transport.py):\n" + "\n".join(found))


def test_the_seam_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "jssync"
    (pkg / "jetstream").mkdir(parents=True)
    (pkg / "jetstream" / "apicalls.py").write_text('def f(self, s):\n    return f"{self.prefix}.{s}"\n')
    (pkg / "jetstream" / "other.py").write_text(
        '"""Sends $JS.API.INFO (a docstring: fine)."""\n'
        'def f(js, conn, name):\n'
        '    conn.internal.request(f"{js.prefix}.STREAM.INFO.{name}", b"", None, 1.0)\n'
        '    conn.request("$JS.API.INFO", b"")\n'
        '    conn.request(f"$JS.hub.API.CONSUMER.INFO.{name}", b"")\n'
        '    js._api_transport.request("x", b"", None, 1.0)\n'
        '    conn.internal.enqueue((f"{js.prefix}.CONSUMER.MSG.NEXT.{name}", b"", "", None))\n'
        '    conn.request(f"{js.prefix}.DIRECT.GET.{name}", b"")\n'
        '    return f"{js.prefix}.{name}"\n')
    found = api_requests_outside_the_seam(pkg)
    lines = sorted(h.split(": ")[0] for h in found)
    assert lines == ["jetstream/other.py:3", "jetstream/other.py:3", "jetstream/other.py:4",
                     "jetstream/other.py:5", "jetstream/other.py:6"], found


# -- the context in rooms -----------------------------------------------------------------------

#: Most lines a class of the JetStream context may take (the context and each of its rooms).
CONTEXT_MAX_LINES = 500


def _class_lines(cls: type) -> int:
    """The lines of the class ``cls`` defined under jssync/jetstream/ (jssync.JetStream says its module is jssync)."""
    for path in sorted((PACKAGE / "jetstream").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__ and node.end_lineno is not None:
                return node.end_lineno - node.lineno + 1
    raise AssertionError(f"class {cls.__name__} not found under jssync/jetstream/")


def test_the_jetstream_context_and_each_of_its_rooms_stay_under_the_limit() -> None:
    rooms = [k for k in JetStream.__mro__ if k is JetStream or issubclass(k, APIRoom)]
    assert len(rooms) >= 5, rooms  # JetStream, StreamAdmin, ConsumerAdmin, Factories, APIRoom
    sizes = {k.__qualname__: _class_lines(k) for k in rooms}
    big = {k: n for k, n in sizes.items() if n > CONTEXT_MAX_LINES}
    assert not big, (f"classes of the JetStream context over {CONTEXT_MAX_LINES} lines: {big}; put the work in a "
                     "room of its own (a module under jssync/jetstream/ with one job, a base of JetStream)")


def test_every_api_request_of_the_context_goes_through_its_transport() -> None:
    """The rooms hold no ``_api`` of their own: one request layer, one transport call."""
    owners = [k.__qualname__ for k in JetStream.__mro__ if "_api" in vars(k)]
    assert owners == ["APIRoom"], owners
