"""One timeout rule (docs/threading.md "The timeout rule"): ``timeout=None`` means no limit,
everywhere; leaving ``timeout`` out means the call's default, spelled with the typed sentinel
``jssync.DEFAULT`` and resolved by ``jssync.base.deadline.resolve_timeout``. Checked on every public
``timeout`` parameter (signatures, docstrings) and on the source, no server."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import jssync
from jssync.base.deadline import DEFAULT, Default, resolve_timeout
from jssync.jetstream.apicalls import APIRoom

ROOT = Path(__file__).resolve().parents[3]

#: Left out, these wait the JetStream context's timeout (the table in docs/threading.md).
CONTEXT_CLASSES = {"JetStream", "Stream", "KeyValue", "ObjectStore", "Counter", "DirectBatch", "BatchPublisher"}
CONTEXT_METHODS = {"Consumer.info", "Consumer.delete", "Consumer.reset", "Consumer.unpin",
                   "JetStreamSubscription.consumer_info"}
NOT_CONTEXT = {"JetStream.publish_async_completed"}  # a number
#: Left out, these start and return without waiting.
DONT_WAIT = {"ConsumeContext.drain", "OrderedConsumeContext.drain"}
#: Left out, the liftbridge.Client's own timeout.
CLIENT_DEFAULT = {"liftbridge.Client.create_stream", "liftbridge.Client.delete_stream", "liftbridge.Client.publish",
                  "liftbridge.Client.subscribe", "liftbridge.Client.fetch_metadata"}
#: The one exception, made by a spec: the Liftbridge client guide's "timeout not set" returns as
#: soon as the message is published; documented in docs/threading.md.
SPEC_EXCEPTION = {"liftbridge.Client.publish"}
#: A setting, not a wait: the JetStream context's default timeout (a number > 0).
SETTINGS = {"Connection.jetstream"}
#: Calls whose docstring may leave out "(None: no limit)" (none; never add one).
DOC_LEFT: set[str] = set()


def _timeout_params() -> list[tuple[str, inspect.Parameter, str]]:
    out, seen = [], set()
    for modname in ("jssync", "jssync.micro", "jssync.liftbridge"):
        mod = importlib.import_module(modname)
        prefix = "liftbridge." if modname == "jssync.liftbridge" else ""
        for name in mod.__all__:
            cls = getattr(mod, name)
            if not inspect.isclass(cls):
                continue
            # the class's own methods and those of the rooms it is made of (JetStream's)
            own = [k for k in cls.__mro__ if k is cls or issubclass(k, APIRoom)]
            for attr, fn in [item for k in own for item in vars(k).items()]:
                if attr.startswith("_") or not inspect.isfunction(fn) or fn in seen:
                    continue
                seen.add(fn)
                param = inspect.signature(fn).parameters.get("timeout")
                if param is not None:
                    out.append((f"{prefix}{cls.__name__}.{attr}", param, inspect.getdoc(fn) or ""))
    return out


def test_the_sentinel_is_typed_and_exported():
    assert jssync.DEFAULT is DEFAULT and jssync.Default is Default and isinstance(DEFAULT, Default)
    assert list(Default) == [DEFAULT] and repr(DEFAULT) == "DEFAULT"
    assert resolve_timeout(DEFAULT, 5.0) == 5.0
    assert resolve_timeout(None, 5.0) is None
    assert resolve_timeout(0.5, 5.0) == 0.5
    for bad in (-1, "1", True):
        with pytest.raises(jssync.ValidationError):
            resolve_timeout(bad, 5.0)  # type: ignore[arg-type]


def test_every_timeout_follows_the_one_rule():
    params = _timeout_params()
    assert len(params) > 100
    defaults = {}
    for qual, param, doc in params:
        cls = qual.rsplit(".", 1)[0]
        ann = str(param.annotation)
        default = param.default
        defaults[qual] = default
        if default is DEFAULT:
            # left out: the call's default; None: no limit; the type says so to mypy users
            assert ann == "float | None | Default", (qual, ann)
        else:
            assert default is None or default is param.empty or isinstance(default, int | float), (qual, default)
            if default is None:  # its default waits without limit: the docstring must say so
                assert "no limit" in doc, f"{qual}: say '(None: no limit)'"
        if qual not in SETTINGS:
            # every wait takes timeout=None (no limit): the annotation says so to mypy users ...
            assert "None" in ann.split(" | "), f"{qual}: annotate 'timeout: float | None = ...', got {ann!r}"
            # ... and so does the docstring of every call whose default is a number
            if isinstance(default, int | float) and qual not in DOC_LEFT:
                assert "no limit" in doc, f"{qual}: say '(None: no limit)' in its docstring"
        # nowhere does timeout=None mean anything but no limit
        for line in doc.splitlines():
            if "timeout=None" in line and qual not in SPEC_EXCEPTION:
                assert "no limit" in line, (qual, line)
        if (cls in CONTEXT_CLASSES or qual in CONTEXT_METHODS) and qual not in NOT_CONTEXT:
            assert default is DEFAULT, f"{qual}: the context's timeout is the default (DEFAULT), not None"
        if qual in DONT_WAIT or qual in CLIENT_DEFAULT:
            assert default is DEFAULT, qual
    for qual in CONTEXT_METHODS | DONT_WAIT | CLIENT_DEFAULT | SETTINGS:
        assert qual in defaults, f"{qual} has no timeout parameter any more: update the table"


def test_no_call_reads_none_as_a_default():
    """The defaults are resolved in one place: no ``x if timeout is None else timeout`` left."""
    bad = re.compile(r"(?<!None )if timeout is None else|timeout is None:\n\s+(?:return|timeout =) (?!None)")
    offenders = []
    for path in sorted((ROOT / "jssync").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.name}: {m.group(0)!r}" for m in bad.finditer(text)]
    assert not offenders, offenders


def test_the_rule_is_written_down():
    text = (ROOT / "docs" / "threading.md").read_text()
    rule = text[text.index("### The timeout rule"):]
    assert "`timeout=None` means **no limit**" in rule
    assert "`jssync.DEFAULT`" in rule
    for name in ("`ConsumeContext.drain`", "`OrderedConsumeContext.drain`", "`liftbridge.Client`",
                 "`Consumer.info`/`delete`/`reset`/`unpin`", "`JetStreamSubscription.consumer_info`",
                 *(f"`{c}`" for c in CONTEXT_CLASSES)):
        assert name in rule, name
    assert "publish_async_completed" in rule
    assert "`jssync.liftbridge.Client.publish(..., timeout=None)` does not wait" in rule


def test_zero_means_no_wait_and_a_setting_is_above_zero():
    from jssync.base.deadline import check_setting, no_wait

    assert resolve_timeout(0, 5.0) == 0
    with pytest.raises(jssync.TimeoutError, match="timeout=0"):
        no_wait(0, "a round trip")
    no_wait(0.5, "a round trip")
    no_wait(None, "a round trip")
    assert check_setting(5) == 5.0
    for bad in (0, -1, "5", True, None, float("nan")):
        with pytest.raises(jssync.ValidationError, match="timeout"):
            check_setting(bad)
    text = (ROOT / "docs" / "threading.md").read_text()
    assert "`timeout=0` means **no wait**" in text[text.index("### The timeout rule"):]
