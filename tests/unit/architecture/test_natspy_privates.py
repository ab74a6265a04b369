"""Only jssync/core/natspy.py reads nats-py's private names: an AST check, getattr-by-string included.

The private names are taken from nats-py's own source (every ``_name`` it defines as a method,
assigns on ``self`` or lists in ``__slots__``), less the ones jssync defines itself (``self._closed``
of a jssync class is not nats-py's). Any other module of jssync that reads, writes or looks up
by string one of the remaining names is reaching into nats-py and must go through the adapter.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import nats

import jssync

PKG = pathlib.Path(jssync.__file__).parent
ADAPTER = PKG / "core" / "natspy.py"


def _defined_private_names(root: pathlib.Path) -> set[str]:
    """Every ``_name`` (not dunder) defined under ``root``: methods, ``self._x = ...``, slots."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:  # pragma: no cover - a file of another Python version
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                        names.add(elt.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _uses(path: pathlib.Path, names: frozenset[str]) -> list[str]:
    """The places in ``path`` that touch one of ``names``: ``x._name`` or ``getattr(x, "_name")``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        hit = None
        if isinstance(node, ast.Attribute) and node.attr in names:
            hit = node.attr
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            hit = node.args[1].value
        if hit is not None:
            out.append(f"{path.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
    return out


@functools.cache
def natspy_only_names() -> frozenset[str]:
    """nats-py's private names that jssync does not define itself."""
    return frozenset(_defined_private_names(pathlib.Path(nats.__file__).parent) - _defined_private_names(PKG))


def test_only_the_adapter_reads_natspy_private_names() -> None:
    names = natspy_only_names()
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path != ADAPTER:
            offenders += _uses(path, names)
    assert offenders == [], "nats-py private names outside jssync/core/natspy.py:\n" + "\n".join(offenders)


def test_the_check_sees_natspy_names_the_adapter_uses() -> None:
    """The check can fail: the adapter itself uses names it would flag anywhere else."""
    found = _uses(ADAPTER, natspy_only_names())
    assert any("_server_pool" in f for f in found), found
    assert any("_current_server" in f for f in found), found


# -- CPython's privates: only jssync/base/cpython.py reads them ----------------------------------------

CPYTHON_ADAPTER = PKG / "base" / "cpython.py"
#: The standard library modules whose internals jssync could reach into.
_STDLIB_FILES = ("asyncio/tasks.py", "asyncio/futures.py", "asyncio/base_events.py", "asyncio/events.py",
                 "concurrent/futures/_base.py", "concurrent/futures/thread.py", "threading.py", "queue.py")
#: Private names not defined as attributes there: the private module itself.
_STDLIB_EXTRA = frozenset({"_base", "_must_cancel"})
#: A Condition's internals, flagged when read on anything named like a condition (``cond._lock``):
#: jssync's own classes have ``_lock`` and ``_waiters`` too, so the generic check leaves them out.
_CONDITION_PRIVATES = frozenset({"_lock", "_waiters", "_is_owned", "_release_save", "_acquire_restore"})


@functools.cache
def cpython_only_names() -> frozenset[str]:
    """CPython's private names of those modules that jssync (the adapters aside) does not define."""
    import sysconfig

    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    names: set[str] = set()
    for rel in _STDLIB_FILES:
        names |= _defined_private_names_in([stdlib / rel])
    own = _defined_private_names_in([p for p in PKG.rglob("*.py") if p not in (CPYTHON_ADAPTER, ADAPTER)])
    return frozenset((names - own) | _STDLIB_EXTRA)


def _defined_private_names_in(paths: list[pathlib.Path]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        names |= _defined_private_names_file(path)
    return names


def _defined_private_names_file(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _cpython_uses(path: pathlib.Path) -> list[str]:
    """``x._name`` of a CPython private, ``cond._lock``-like reads, ``from concurrent.futures import _base``."""
    out = _uses(path, cpython_only_names())
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _CONDITION_PRIVATES:
            owner = ast.unparse(node.value).lower()
            if "cond" in owner.rsplit(".", 1)[-1]:
                out.append(f"{path.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in (
                "asyncio", "concurrent", "threading", "queue"):
            out += [f"{path.relative_to(PKG)}:{node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith("_")]
    return out


def test_only_the_cpython_adapter_reads_cpython_private_names() -> None:
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path not in (CPYTHON_ADAPTER, ADAPTER):
            offenders += _cpython_uses(path)
    assert offenders == [], "CPython private names outside jssync/base/cpython.py:\n" + "\n".join(offenders)


def test_the_check_sees_cpython_names_the_adapter_uses() -> None:
    """The check can fail: the adapter itself uses what it would flag anywhere else."""
    found = "\n".join(_cpython_uses(CPYTHON_ADAPTER))
    for what in ("_must_cancel", "import _base", "cond._lock", "cond._waiters", "_invoke_callbacks"):
        assert what in found, (what, found)


def test_the_adapter_checks_its_capabilities_at_import() -> None:
    from jssync.base import cpython

    assert set(cpython.CAPABILITIES) == {"task_must_cancel", "lean_future"}
    assert all(isinstance(v, bool) for v in cpython.CAPABILITIES.values())
