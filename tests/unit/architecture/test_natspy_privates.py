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
