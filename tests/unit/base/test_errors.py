"""Error modules: every exception class of jssync is defined in an ``errors.py``: the core tree in
jssync/base/errors.py, each feature layer's own errors (KV, object store, Liftbridge, Spark) in
that layer's errors.py, under the core tree."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pickle
from pathlib import Path

import pytest

import jssync
import jssync.base.errors as errors
import jssync.kv.errors as kv_errors
import jssync.liftbridge.errors as lb_errors
import jssync.objectstore.errors as obj_errors

try:
    import jssync.spark.errors as spark_errors
except ImportError:  # no PySpark (the spark extra): the checks of the Spark layer's errors skip
    spark_errors = None

PACKAGE = Path(jssync.__file__).parent
ERROR_MODULES = tuple(m for m in (errors, kv_errors, obj_errors, lb_errors, spark_errors) if m is not None)
#: for the checks that need jssync.spark (its package needs PySpark to import)
needs_spark = pytest.mark.skipif(spark_errors is None, reason="PySpark is not installed (the spark extra)")


def _known(name: str) -> object:
    """``name`` in builtins or in one of jssync's error modules, else None."""
    for mod in (builtins, *ERROR_MODULES):
        if hasattr(mod, name):
            return getattr(mod, name)
    return None


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
            known = _known(name)
            if name in local or (inspect.isclass(known) and issubclass(known, BaseException)):
                local.add(node.name)
                found.append(f"{path.name}:{node.lineno} {node.name}")
                break
    return found


def test_no_module_but_errors_defines_an_exception():
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py")) if path.name != "errors.py"
                 for hit in _exception_classes_defined(path)]
    assert offenders == [], "define these in jssync/base/errors.py (or the layer's errors.py) and import them"


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
    """``from jssync.kv.keyvalue import KeyNotFoundError`` (and the like) is the class of its errors module."""
    homes = {"jssync.kv.keyvalue": kv_errors, "jssync.objectstore.objectstore": obj_errors,
             "jssync.liftbridge": lb_errors}
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
        home = homes.get(module, errors)
        for name in names:
            assert getattr(mod, name) is getattr(home, name), (module, name)
    import jssync.liftbridge as lb

    assert lb.NotSupportedError is lb_errors.LiftbridgeNotSupportedError
    assert lb.NotSupportedError.__name__ == "NotSupportedError"
    assert lb.NotSupportedError.__module__ == "jssync.liftbridge"
    assert issubclass(lb.NotSupportedError, jssync.NotSupportedError)
    assert jssync.micro.ServiceError.__module__ == "jssync.micro"
    assert jssync.KeyNotFoundError.__module__ == "jssync"


@needs_spark
def test_the_spark_package_offers_the_classes_of_its_errors_module():
    import jssync.spark as spark

    assert spark_errors is not None
    assert spark.SparkWriteError is spark_errors.SparkWriteError
    assert spark.SparkWriteError.__module__ == "jssync.spark"


@pytest.mark.parametrize("layer", ["kv", "objectstore", pytest.param("spark", marks=needs_spark)])
def test_feature_errors_live_in_their_layers_under_the_core_tree(layer):
    mod = {"kv": kv_errors, "objectstore": obj_errors, "spark": spark_errors}[layer]
    classes = [c for c in vars(mod).values() if inspect.isclass(c) and issubclass(c, Exception)
               and getattr(errors, c.__name__, None) is not c and not c.__name__.startswith("_")]
    assert classes, mod
    for cls in classes:
        assert issubclass(cls, jssync.JetStreamError), cls
        assert not hasattr(errors, cls.__name__), f"{cls.__name__} is still in base/errors.py"


def test_liftbridge_errors_live_in_their_layer_under_the_core_tree():
    for name in ("StreamExistsError", "NoSuchPartitionError", "InvalidAckError", "LiftbridgeNotSupportedError"):
        assert issubclass(getattr(lb_errors, name), jssync.Error)
        assert not hasattr(errors, name)


@pytest.mark.parametrize("make", [
    lambda: jssync.KeyNotFoundError("key 'a' not found"),
    lambda: jssync.BucketNotFoundError(404, 10059, "stream not found"),
    lambda: jssync.ObjectNotFoundError("object 'x' not found"),
    lambda: jssync.StreamExistsError(400, 10058, "stream name already in use"),
    lambda: lb_errors.LiftbridgeNotSupportedError("group is not supported"),
    pytest.param(lambda: spark_errors.DataLossError("sequences 1-3 of stream S were removed"), marks=needs_spark),
    lambda: jssync.KeyWrongLastSequenceError("wrong last sequence: 4"),
])
def test_moved_errors_pickle_and_keep_their_bases(make):
    exc = make()
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc) and back.__dict__ == exc.__dict__
    assert isinstance(back, jssync.Error)
