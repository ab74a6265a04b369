"""One error module: every exception class of jssync is defined in jssync/base/errors.py."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import jssync
import jssync.base.errors as errors

PACKAGE = Path(jssync.__file__).parent


def _exception_classes_defined(path: Path) -> list[str]:
    """Names of the classes ``path`` defines (at any depth) that derive from BaseException.

    A base is an exception if it is a builtin exception, a class of ``jssync.base.errors``, or a
    class defined earlier in the same file that is one.
    """
    tree = ast.parse(path.read_text(), str(path))
    local: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if name is None:
                continue
            known = getattr(builtins, name, None) or getattr(errors, name, None)
            if name in local or (inspect.isclass(known) and issubclass(known, BaseException)):
                local.add(node.name)
                found.append(f"{path.name}:{node.lineno} {node.name}")
                break
    return found


def test_no_module_but_errors_defines_an_exception():
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "errors.py"
                 for hit in _exception_classes_defined(path)]
    assert offenders == [], "define these in jssync/base/errors.py and import them from there"


def test_the_check_finds_an_exception_class(tmp_path):
    """The walk above can fail: it sees direct, aliased-module and indirect exception bases."""
    bad = tmp_path / "bad.py"
    bad.write_text("import builtins\nfrom ._errors import JetStreamError\n\n"
                   "class A(JetStreamError): ...\nclass B(A): ...\nclass C(builtins.ValueError): ...\n"
                   "class D:\n    class E(Exception): ...\nclass F: ...\n")
    assert [hit.split()[1] for hit in _exception_classes_defined(bad)] == ["A", "B", "C", "E"]


def test_errors_imports_nothing_from_jssync_at_run_time():
    tree = ast.parse((PACKAGE / "base" / "errors.py").read_text())
    for node in tree.body:  # top level only: the TYPE_CHECKING block is skipped below
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("jssync"), ast.unparse(node)
        elif isinstance(node, ast.Import):
            assert all(not a.name.startswith("jssync") for a in node.names), ast.unparse(node)
        elif isinstance(node, ast.If):
            assert ast.unparse(node.test) == "TYPE_CHECKING", ast.unparse(node.test)


def test_old_homes_still_offer_the_same_classes():
    """``from jssync.kv.keyvalue import KeyNotFoundError`` (and the like) is the class in _errors."""
    for module, names in {
        "jssync.kv.keyvalue": ["KeyNotFoundError", "KeyDeletedError", "BucketNotFoundError", "KeyValueError"],
        "jssync.jetstream.push": ["PushSubscribeError", "StatusError", "HeartbeatAlarmError"],
        "jssync.objectstore.objectstore": ["ObjectStoreError", "ObjectNotFoundError", "ObjectChangedError"],
        "jssync.jetstream.direct": ["BadRequestError", "TooManySubjectsError"],
        "jssync.base.status": ["PullRequestError"],
        "jssync.base.jsack": ["NotJSMessageError"],
        "jssync.micro": ["ServiceError"],
        "jssync.server": ["ServerError"],
        "jssync.liftbridge": ["StreamExistsError", "NoSuchPartitionError", "InvalidAckError"],
    }.items():
        mod = importlib.import_module(module)
        for name in names:
            assert getattr(mod, name) is getattr(errors, name), (module, name)
    import jssync.liftbridge as lb

    assert lb.NotSupportedError is errors.LiftbridgeNotSupportedError
    assert lb.NotSupportedError.__name__ == "NotSupportedError"
    assert lb.NotSupportedError.__module__ == "jssync.liftbridge"
    assert issubclass(lb.NotSupportedError, jssync.NotSupportedError)
    assert jssync.micro.ServiceError.__module__ == "jssync.micro"
    assert jssync.KeyNotFoundError.__module__ == "jssync"
