"""One owner of number validation (jssync/base/validate.py): every option check names the option.

Pure: the checks themselves, and the option checks of the layers that call them without a
server (request_many, the consume parameters, priority groups, Liftbridge partitions).
"""

from __future__ import annotations

import ast
import math
import pathlib

import pytest

import jssync
from jssync.base.validate import (
    MAX_I64,
    check_int,
    check_number,
    check_optional_int,
    check_optional_number,
)


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "1", None, 2**64])
def test_check_int_names_the_option_range_and_value(bad):
    with pytest.raises(jssync.ValidationError, match=rf"^batch must be an int from 1 to {MAX_I64}, got "):
        check_int(bad, "batch", maximum=MAX_I64)


def test_open_ended_wording_unless_over_the_maximum():
    with pytest.raises(jssync.ValidationError, match=r"^last must be an int >= 0, got -1$"):
        check_int(-1, "last", minimum=0, open_ended=True)
    with pytest.raises(jssync.ValidationError, match=rf"^last must be an int from 0 to {MAX_I64}, got "):
        check_int(MAX_I64 + 1, "last", minimum=0, maximum=MAX_I64, open_ended=True)


def test_optional_int_passes_none_and_says_so():
    assert check_optional_int(None, "revision") is None
    assert check_optional_int(3, "revision") == 3
    with pytest.raises(jssync.ValidationError, match=r"^revision must be an int >= 1 or None, got 0$"):
        check_optional_int(0, "revision", open_ended=True)


@pytest.mark.parametrize("bad", [0, -0.5, True, math.nan, math.inf, "1", None])
def test_check_number_names_the_option(bad):
    with pytest.raises(jssync.ValidationError, match=r"^max_wait must be a number of seconds > 0, got "):
        check_number(bad, "max_wait", unit="seconds")


def test_number_bounds():
    assert check_number(0, "retry_wait", above=None, minimum=0) == 0.0
    assert check_optional_number(None, "stall") is None
    with pytest.raises(jssync.ValidationError, match=r"^stall must be a number of seconds > 0 or None, got -1$"):
        check_optional_number(-1, "stall", unit="seconds")


def test_request_many_options_name_the_bad_one():
    from jssync.core.request_many import check_options

    with pytest.raises(jssync.ValidationError, match="^max_messages must be an int >= 1 or None, got 0$"):
        check_options(1.0, 0, None, None)
    with pytest.raises(jssync.ValidationError, match="^max_wait must be a number of seconds > 0, got -1$"):
        check_options(-1, None, None, None)


def test_liftbridge_partition_check():
    from jssync.liftbridge.codec import check_partition

    assert check_partition(0) == 0
    with pytest.raises(jssync.ValidationError, match="^partition must be an int >= 0, got -1$"):
        check_partition(-1)


#: The layers whose option checks go through validate.py.
_LAYERS = ["jetstream/pull.py", "jetstream/consume/options.py", "jetstream/consume/engine.py",
           "jetstream/context.py", "jetstream/priority.py",
           "jetstream/push.py", "jetstream/push_checks.py", "liftbridge/__init__.py", "liftbridge/admin.py",
           "liftbridge/routing.py", "liftbridge/publishing.py", "liftbridge/start.py", "liftbridge/codec.py",
           "core/request_many.py", "kv/entries.py",
           "kv/admin.py", "kv/handle.py", "kv/watcher.py"]


@pytest.mark.parametrize("path", _LAYERS)
def test_layers_raise_no_hand_written_int_message(path):
    """No ``ValidationError(f"... must be an int ...")`` outside validate.py: one wording, one owner."""
    pkg = pathlib.Path(jssync.__file__).parent
    tree = ast.parse((pkg / path).read_text())
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ValidationError" and node.args:
            text = ast.unparse(node.args[0])
            if "must be an int" in text or "must be a number" in text:
                offenders.append(f"{path}:{node.lineno}: {text[:80]}")
    assert offenders == []
