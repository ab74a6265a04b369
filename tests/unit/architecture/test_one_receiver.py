"""The one receiving base: jssync.core.natspy.Receiver is the only thing that plays nats-py's queue.

nats-py puts a subscription's messages on ``sub._pending_queue`` (an asyncio.Queue); jssync
replaces that queue, and only with a Receiver. These tests read nats-py's own source for
the queue methods it calls, so a nats-py that calls one more fails here.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import nats
import pytest
from nats.aio.subscription import Subscription as NatsSubscription

import jssync
from jssync.core import natspy as _natspy
from jssync.core.natspy import Receiver

_DIRECT = re.compile(r"_pending_queue\.(\w+)")
_ALIAS = re.compile(r"^\s*([\w.]+)(?:\s*:\s*[^=]+)?\s*=\s*[\w.]+\._pending_queue\s*$", re.M)


def _queue_methods_nats_py_calls() -> dict[str, list[str]]:
    """Queue method name -> the nats-py files that call it on a subscription's queue."""
    found: dict[str, list[str]] = {}
    root = Path(nats.__file__).parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        names = set(_DIRECT.findall(text))
        for alias in _ALIAS.findall(text):  # queue = self._sub._pending_queue; queue.get_nowait()
            names.update(re.findall(re.escape(alias) + r"\.(\w+)\(", text))
        for n in names:
            found.setdefault(n, []).append(str(path.relative_to(root)))
    return found


def test_the_scan_finds_nats_py_uses() -> None:
    found = _queue_methods_nats_py_calls()
    # the scan itself works: nats-py's message hand-off and its drain are found
    assert "put_nowait" in found and "join" in found, found


def test_receiver_implements_every_queue_method_nats_py_calls() -> None:
    found = _queue_methods_nats_py_calls()
    missing = {n: files for n, files in found.items() if n not in vars(Receiver)}
    assert not missing, f"nats-py calls these on a subscription's queue; Receiver lacks them: {missing}"
    for name in found:
        assert callable(getattr(Receiver, name))


def test_receiver_is_an_always_empty_queue() -> None:
    class R(Receiver):
        __slots__ = ("got",)

        def __init__(self) -> None:
            self.got: list[object] = []

        def put_nowait(self, msg: object) -> None:
            self.got.append(msg)

    r = R()
    assert bool(r)  # nats-py's drain tests ``if self._pending_queue:`` before join()
    assert r.qsize() == 0 and r.empty()
    with pytest.raises(asyncio.QueueEmpty):
        r.get_nowait()
    r.task_done()

    async def run() -> None:
        await r.join()
        get = asyncio.ensure_future(r.get())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not get.done()  # nothing ever stays in it: get() waits until cancelled
        get.cancel()
        with pytest.raises(asyncio.CancelledError):
            await get

    asyncio.run(run())


def test_a_subclass_must_define_the_delivery_hook() -> None:
    with pytest.raises(TypeError, match="put_nowait"):
        class NoHook(Receiver):  # noqa: F841
            pass


def test_set_sub_queue_takes_only_receivers() -> None:
    nsub = NatsSubscription(conn=None, id=1, subject="x")
    for bad in (asyncio.Queue(), object(), None):
        with pytest.raises(TypeError, match="Receiver"):
            _natspy.set_sub_queue(nsub, bad)  # type: ignore[arg-type]
    assert _natspy.sub_queue(nsub).__class__ is asyncio.Queue


def test_set_sub_queue_hands_over_what_nats_py_queued() -> None:
    nsub = NatsSubscription(conn=None, id=1, subject="x")
    for i in range(3):
        _natspy.sub_queue(nsub).put_nowait(i)

    class R(Receiver):
        __slots__ = ("got",)

        def __init__(self) -> None:
            self.got: list[object] = []

        def put_nowait(self, msg: object) -> None:
            self.got.append(msg)

    r = R()
    _natspy.set_sub_queue(nsub, r)
    assert r.got == [0, 1, 2]
    assert _natspy.sub_queue(nsub) is r


def test_no_other_class_plays_the_queue() -> None:
    """Every jssync class with a ``put_nowait`` nats-py could be handed is a Receiver."""
    offenders = []
    for info in pkgutil.iter_modules(jssync.__path__, "jssync."):
        if info.name.endswith(("__main__", "pytest_plugin", "spark")):
            continue
        mod = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and "put_nowait" in vars(cls) and not issubclass(cls, Receiver):
                offenders.append(f"{cls.__module__}.{cls.__qualname__}")
    assert not offenders, offenders
