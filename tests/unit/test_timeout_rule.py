"""One timeout rule (docs/threading.md "The timeout rule"): ``timeout=None`` means no limit,
except on the calls that table lists. Checked on signatures and docstrings, no server."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from jssync.base.deadline import DEFAULT

ROOT = Path(__file__).resolve().parents[2]

#: None (their default) means the JetStream context's timeout.
CONTEXT_CLASSES = {"JetStream", "Stream", "KeyValue", "ObjectStore", "Counter", "DirectBatch", "BatchPublisher"}
CONTEXT_METHODS = {"Consumer.info", "Consumer.delete", "Consumer.reset", "Consumer.unpin",
                   "JetStreamSubscription.consumer_info"}
NOT_CONTEXT = {"JetStream.publish_async_completed"}  # a number; None: no limit
#: None means "do not wait".
DONT_WAIT = {"ConsumeContext.drain", "OrderedConsumeContext.drain", "liftbridge.Client.publish"}


def _timeout_params() -> list[tuple[str, inspect.Parameter, str]]:
    out, seen = [], set()
    for modname in ("jssync", "jssync.micro", "jssync.liftbridge"):
        mod = importlib.import_module(modname)
        prefix = "liftbridge." if modname == "jssync.liftbridge" else ""
        for name in mod.__all__:
            cls = getattr(mod, name)
            if not inspect.isclass(cls):
                continue
            for attr, fn in vars(cls).items():
                if attr.startswith("_") or not inspect.isfunction(fn) or fn in seen:
                    continue
                seen.add(fn)
                param = inspect.signature(fn).parameters.get("timeout")
                if param is not None:
                    out.append((f"{prefix}{cls.__name__}.{attr}", param, inspect.getdoc(fn) or ""))
    return out


def test_every_timeout_follows_the_table():
    params = _timeout_params()
    assert len(params) > 100
    for qual, param, doc in params:
        cls = qual.rsplit(".", 1)[0]
        if qual in DONT_WAIT:
            assert param.default is None or param.default is DEFAULT, qual
            assert "timeout=None" in doc or "Without ``timeout``" in doc, qual
        elif (cls in CONTEXT_CLASSES or qual in CONTEXT_METHODS) and qual not in NOT_CONTEXT:
            assert param.default is None, f"{qual}: the context's timeout is spelled timeout=None"
        else:
            default = param.default
            assert default in (DEFAULT, None, param.empty) or isinstance(default, int | float), (qual, default)
            if default is None:  # its default waits without limit: the docstring must say so
                assert "no limit" in doc, f"{qual}: say '(None: no limit)'"
            if "None" in doc and "timeout" in doc:
                for line in doc.splitlines():
                    if "None" in line and "timeout" in line:
                        assert "no limit" in line or "timeout=None" not in line, (qual, line)


def test_the_rule_is_written_down():
    text = (ROOT / "docs" / "threading.md").read_text()
    rule = text[text.index("### The timeout rule"):]
    assert "`timeout=None` means **no limit**" in rule
    for name in ("`ConsumeContext.drain`", "`OrderedConsumeContext.drain`", "`liftbridge.Client.publish`",
                 "`Consumer.info`/`delete`/`reset`/`unpin`", "`JetStreamSubscription.consumer_info`",
                 *(f"`{c}`" for c in CONTEXT_CLASSES)):
        assert name in rule, name
    assert "publish_async_completed" in rule
