"""The package is layered: imports only go down, and no module imports itself back.

Every module under ``jssync/`` is parsed with :mod:`ast`; every import counts wherever it is written:
at module level, inside a function or method (the old way of holding an import circle apart),
``from . import x``, ``from ..x import y``, ``import jssync.x`` and ``importlib.import_module("jssync.x")``
with a literal name. Only imports under ``if TYPE_CHECKING:`` are exempt: they never run, they only
name types for mypy (annotations are strings under ``from __future__ import annotations``).

An import names its target module: ``from .pkg import mod`` is the module ``pkg.mod`` when that is a
module, else the package ``pkg`` (its ``__init__``). Importing a submodule also runs its parent
packages' ``__init__`` files; that is not counted (the subpackages' ``__init__`` files are empty, and
``jssync/__init__.py`` is the facade at the top that imports everything).

The layers, bottom to top (``LAYERS``): a module may import modules of its own layer (no cycle) or of
a lower one, never of a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import jssync

PACKAGE = Path(jssync.__file__).parent

#: module-name prefix (after ``jssync.``) -> layer; the longest matching prefix wins
LAYERS: dict[str, int] = {
    "base": 0,  # errors, deadline, status headers, ack subjects: no client state
    "core": 1,  # loop, nats-py adapter, wire, msg, subscription, workers, connection and its rooms
    "jetstream": 2,  # context, streams, consumers, pull, push, ordered, direct, publish, features
    "kv": 3,
    "objectstore": 4,  # uses the kv layer's bucket helpers
    "micro": 5,  # needs only core
    "liftbridge": 5,
    "pcgroups": 5,  # partitioned consumer groups: uses core, jetstream and kv
    "spark": 6,
    "kombu": 6,  # the kombu/Celery transport: uses core, jetstream and kv
    "": 7,  # jssync/__init__.py: the public facade, imports every layer
    "testing": 8,  # nats-server processes, pytest plugin
    "server": 8,  # public name of testing.server
    "pytest_plugin": 8,  # public name of testing.pytest_plugin
    "contrib": 8,  # framework integrations (contrib.django): use the facade, never used by it
    "otel": 8,  # OpenTelemetry tracing: sets core.hooks.HOOKS.tracer; core never imports it
    "cli": 9,
    "__main__": 9,
}


def layer_of(module: str) -> int:
    """The layer of ``jssync.<...>``."""
    rest = module.removeprefix("jssync").removeprefix(".")
    best = ""
    for prefix in LAYERS:
        if (rest == prefix or rest.startswith(prefix + ".")) and len(prefix) >= len(best):
            best = prefix
    if best == "" and rest:
        raise AssertionError(f"module {module} has no layer in LAYERS: add it")
    return LAYERS[best]


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(["jssync", *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: Path, modules: set[str]) -> list[tuple[str, int]]:
    """(target jssync module, line) for every import in ``path`` that runs (TYPE_CHECKING blocks skipped)."""
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: list[tuple[str, int]] = []

    def target(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "jssync" or alias.name.startswith("jssync."):
                    found.append((target(alias.name) or "jssync", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: -(node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
                if not (base == "jssync" or base.startswith("jssync.")):
                    continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in modules else (target(base) or base), node.lineno))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("jssync"):
                    found.append((target(arg.value) or arg.value, node.lineno))
    return [(t, line) for t, line in found if t != module]


def import_graph(root: Path = PACKAGE) -> dict[str, list[tuple[str, int]]]:
    mods = module_names(root)
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


def _where(module: str, line: int, root: Path = PACKAGE) -> str:
    return f"{module_names(root)[module].relative_to(root.parent)}:{line}"


def upward_imports(root: Path = PACKAGE) -> list[str]:
    out = []
    for mod, edges in import_graph(root).items():
        for target, line in edges:
            if layer_of(target) > layer_of(mod):
                out.append(f"{_where(mod, line, root)}: {mod} (layer {layer_of(mod)}) imports {target} "
                           f"(layer {layer_of(target)})")
    return out


def cycles(root: Path = PACKAGE) -> list[str]:
    """One line per import circle (a strongly connected component), with the imports that close it."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _ in graph.get(v, []):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        members = set(comp)
        edges = [f"{_where(m, line, root)} -> {t}" for m in comp for t, line in graph[m] if t in members]
        out.append(f"circle of {len(comp)} modules {comp}:\n    " + "\n    ".join(edges))
    return out


def test_no_import_circle() -> None:
    found = cycles()
    assert not found, "import circles (function-level imports included):\n" + "\n".join(found)


def test_imports_only_go_down() -> None:
    found = upward_imports()
    assert not found, "imports from a lower layer to a higher one:\n" + "\n".join(found)


def test_every_module_has_a_layer() -> None:
    for mod in module_names():
        layer_of(mod)


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checks can fail: function-level, relative, absolute and importlib imports all count."""
    pkg = tmp_path / "jssync"
    for sub in ("base", "core", "jetstream"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .core import connection\n")
    (pkg / "base" / "errors.py").write_text("def f():\n    import importlib\n"
                                            "    importlib.import_module('jssync.core.connection')\n")
    (pkg / "core" / "connection.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..jetstream.context import JetStream\n"
        "def jetstream():\n    from ..jetstream.context import JetStream\n")
    (pkg / "jetstream" / "context.py").write_text("from ..core import connection\nimport jssync.base.errors\n")
    ups = upward_imports(pkg)
    assert any("jssync/base/errors.py:3" in u and "imports jssync.core.connection" in u for u in ups), ups
    assert any("jssync/core/connection.py:5" in u and "jssync.jetstream.context" in u for u in ups), ups
    assert not any("connection.py:3" in u for u in ups), ups  # TYPE_CHECKING only: exempt
    circles = cycles(pkg)
    assert len(circles) == 1 and "jssync.core.connection" in circles[0] and "context.py:1" in circles[0], circles


# -- Connection's internal interface ------------------------------------------------------------

#: Names an upper layer calls a Connection by (variables, attributes: ``conn``, ``self._conn``, ...).
_CONN_NAMES = {"conn", "_conn", "connection", "_connection", "nc", "_nc"}

#: Private accesses still allowed, by module (none left; never add one).
ALLOWED_PRIVATE: dict[str, int] = {}


def connection_private_names(root: Path = PACKAGE) -> set[str]:
    """Connection's ``_private`` methods and attributes (``self._x`` in its class), dunders excluded."""
    tree = ast.parse((root / "core" / "connection.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Connection")
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _is_connection(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Name) and expr.id in _CONN_NAMES) or (
        isinstance(expr, ast.Attribute) and expr.attr in _CONN_NAMES)


def private_connection_accesses(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Per module outside core/: the places that touch a private member of a Connection."""
    private = connection_private_names(root)
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "core":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            member = isinstance(node, ast.Attribute) and node.attr in private and _is_connection(node.value)
            by_name = (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr")
                       and len(node.args) >= 2 and _is_connection(node.args[0])
                       and isinstance(node.args[1], ast.Constant) and node.args[1].value in private)
            if member or by_name:
                out.setdefault(str(rel), []).append(f"{rel}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return out


def test_upper_layers_use_the_connections_internal_interface() -> None:
    """Outside core/, a Connection is used through its public API or ``conn.internal`` (core/internal.py)."""
    found = private_connection_accesses()
    wrong = []
    for module, hits in sorted(found.items()):
        allowed = ALLOWED_PRIVATE.get(module, 0)
        if len(hits) > allowed:
            wrong.append(f"{module}: {len(hits)} private Connection accesses (allowed {allowed}); "
                         "use conn.internal (jssync/core/internal.py):\n    " + "\n    ".join(hits))
    for module, allowed in ALLOWED_PRIVATE.items():
        if len(found.get(module, [])) < allowed:
            wrong.append(f"{module}: {len(found.get(module, []))} private accesses left: lower ALLOWED_PRIVATE "
                         f"from {allowed}")
    assert not wrong, "\n".join(wrong)


def test_the_internal_interface_offers_what_it_documents(nats_server: Any) -> None:
    """Every member core/internal.py declares is set, and is the connection's own object or a bound
    method of the connection or of one of its rooms (the same one the connection calls)."""
    from jssync.core.internal import ConnectionInternal

    with jssync.connect(nats_server.url) as nc:
        ci = nc.internal
        rooms = (nc, nc._out, nc._req, nc._links, nc._perms, nc._subscriptions)
        for name in ConnectionInternal.__slots__:
            value = getattr(ci, name)
            if callable(value) and hasattr(value, "__self__"):
                assert any(value.__self__ is room for room in rooms), name
                assert getattr(nc, "_" + name) == value, name
        assert ci.loop is nc._loop and ci.subs is nc._subs and not ci.closed and not ci.closing
    assert ci.closed


def test_the_private_access_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "jssync"
    (pkg / "core").mkdir(parents=True)
    (pkg / "jetstream").mkdir()
    (pkg / "core" / "connection.py").write_text(
        "class Connection:\n    def __init__(self):\n        self._loop = 1\n    def _enqueue(self):\n        pass\n")
    (pkg / "jetstream" / "pull.py").write_text(
        "def f(conn, self):\n    conn._enqueue()\n    self._conn._loop\n    getattr(conn, '_loop')\n"
        "    conn.internal.enqueue()\n    self._other._loop\n")
    found = private_connection_accesses(pkg)
    assert sorted(h.split(": ")[0] for h in found["jetstream/pull.py"]) == [
        "jetstream/pull.py:2", "jetstream/pull.py:3", "jetstream/pull.py:4"], found


# -- one wire encoder ---------------------------------------------------------------------------

#: The one module that builds PUB/HPUB protocol lines (every writer to the socket uses its encode_burst).
WIRE_MODULE = "core/wire.py"


def publish_line_builders(root: Path = PACKAGE) -> list[str]:
    """Every place outside core/wire.py with a str or bytes literal (f-string parts too) starting a PUB/HPUB line."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root))
        if rel == WIRE_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                text = node.value if isinstance(node.value, bytes) else node.value.encode("utf-8", "replace")
                if text.startswith((b"PUB ", b"HPUB ")):
                    out.append(f"{rel}:{node.lineno}: {text[:30]!r}")
    return out


def test_only_the_wire_module_builds_publish_lines() -> None:
    found = publish_line_builders()
    assert not found, f"PUB/HPUB lines are built only by jssync/{WIRE_MODULE}:\n" + "\n".join(found)


def test_the_publish_line_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "jssync"
    (pkg / "core").mkdir(parents=True)
    (pkg / "core" / "wire.py").write_text('def f(s):\n    return f"PUB {s} 0\\r\\n"\n')
    (pkg / "core" / "other.py").write_text('def f(s, r):\n    x = b"HPUB " + s\n    return f"PUB {s} {r}"\n')
    found = publish_line_builders(pkg)
    assert sorted(h.split(": ")[0] for h in found) == ["core/other.py:2", "core/other.py:3"], found


# -- the Connection facade ---------------------------------------------------------------------

#: Most lines the Connection class may take: the public API and delegation to its rooms
#: (core/options.py, links.py, outbound.py, permissions.py, requests.py, subscribing.py, closing.py).
CONNECTION_MAX_LINES = 500


def class_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    assert cls.end_lineno is not None
    return cls.end_lineno - cls.lineno + 1


def test_the_connection_class_stays_a_facade() -> None:
    n = class_lines(PACKAGE / "core" / "connection.py", "Connection")
    assert n <= CONNECTION_MAX_LINES, (
        f"the Connection class has {n} lines (at most {CONNECTION_MAX_LINES}): put the work in a room of its own "
        "(a module under jssync/core/ with one job) and bind its methods in Connection.__init__")
