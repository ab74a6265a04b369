"""No class in jssync/ is over 500 lines: a newcomer can read any one of them in a sitting.

A class that grows past the limit is split into rooms, one job each, as plain modules with
delegation or a small base class (docs/threading.md: the Connection facade and its rooms,
liftbridge's Client, push's JetStreamSubscription). The classes over the limit today are
listed below with the reason, each capped at its size today; the list can only shrink: a
listed class that got under the limit (or is gone) must leave the list.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.timeout(10)

PKG = pathlib.Path(__file__).resolve().parents[3] / "jssync"

#: The most lines a class may have, from its ``class`` line to its last line.
MAX_LINES = 500

#: (module relative to jssync/, class) -> (its size today: it may not grow, why it is still over).
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {}


def class_sizes(source: str) -> dict[str, int]:
    """Class name (dotted for nested classes) -> its lines, decorators left out."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                assert child.end_lineno is not None
                out[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _all_sizes() -> dict[tuple[str, str], int]:
    return {(path.relative_to(PKG).as_posix(), name): n
            for path in sorted(PKG.rglob("*.py"))
            for name, n in class_sizes(path.read_text(encoding="utf-8")).items()}


def test_no_class_is_over_the_limit() -> None:
    over = {key: n for key, n in _all_sizes().items() if n > MAX_LINES and key not in ALLOWED}
    assert not over, (
        f"classes over {MAX_LINES} lines (split them into rooms, one job each):\n"
        + "\n".join(f"  jssync/{mod} {cls}: {n} lines" for (mod, cls), n in sorted(over.items())))


def test_the_allowed_classes_do_not_grow() -> None:
    sizes = _all_sizes()
    grown = {key: (sizes[key], cap) for key, (cap, _) in ALLOWED.items() if sizes.get(key, 0) > cap}
    assert not grown, "\n".join(f"jssync/{mod} {cls}: {n} lines, more than the {cap} it had when listed"
                                for (mod, cls), (n, cap) in sorted(grown.items()))


def test_the_allow_list_only_shrinks() -> None:
    sizes = _all_sizes()
    done = [key for key in ALLOWED if sizes.get(key, 0) <= MAX_LINES]
    assert not done, "under the limit now (or gone): take them off ALLOWED:\n" + "\n".join(
        f"  jssync/{mod} {cls}: {sizes.get((mod, cls), 'gone')}" for mod, cls in done)


def test_the_count_covers_nested_classes_and_leaves_out_decorators() -> None:
    source = "@dataclass\nclass A:\n    x = 1\n\n    class B:\n        y = 2\n        z = 3\n\n\ndef f():\n" \
             "    class C:\n        pass\n"
    assert class_sizes(source) == {"A": 6, "A.B": 3, "C": 2}
