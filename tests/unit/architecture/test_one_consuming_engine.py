"""STYLE.md section 4: one heartbeat monitor, one gap engine and one pull engine, used by every consumer.

The pure parts live in jssync/jetstream/consume/ (heartbeat.py: HeartbeatMonitor, gaps.py:
GapTracker, engine.py: PullEngine, which uses the HeartbeatMonitor, with its actions.py and
statuses.py); consume/runner.py turns their deadlines into alarms, and every alarm runs on the
connection's one timer thread, core/clock.py (a heap of deadlines on one Condition, posting to the
I/O thread): the only timer thread in the package. The consumers converted to them must not
carry a copy of their own: no ``threading.Timer`` (anywhere in the package), no heap of deadlines
outside core/clock.py, no loop timers (the runner's included), no "consumer sequence != last + 1"
checks, no idle-time arithmetic on the clock, no private sequence/activity counters.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

pytestmark = pytest.mark.timeout(10)

PKG = pathlib.Path(__file__).resolve().parents[3] / "jssync"

#: the engine and its runner: the only places heartbeat and gap logic may live
ENGINE = {"jetstream/consume/heartbeat.py", "jetstream/consume/gaps.py", "jetstream/consume/runner.py",
          "jetstream/consume/engine.py", "jetstream/consume/actions.py", "jetstream/consume/statuses.py"}
#: consumers moved onto the engine: nothing of their own may remain
CONVERTED = ["jetstream/push.py", "jetstream/push_resets.py", "jetstream/ordered.py", "kv/watcher.py",
             "liftbridge/sub.py", "liftbridge/consumer.py"]
#: the pull consumers (fetch, next; consume's runner and its state, the ordered consume's base): on PullEngine
PULL = ["jetstream/pull.py", "jetstream/consume/pulling.py", "jetstream/consume/state.py"]
#: the other rooms of consume (jetstream/consume/context.py and the modules it is made of)
CONSUME_ROOMS = ["jetstream/consume/common.py", "jetstream/consume/context.py", "jetstream/consume/ending.py",
                 "jetstream/consume/intake.py", "jetstream/consume/lane.py", "jetstream/consume/leasing.py",
                 "jetstream/consume/options.py"]

#: the one timer thread of a connection: the only module that may keep a heap of deadlines
CLOCK = "core/clock.py"

#: the private state the old hand-written copies kept
_OLD_STATE = {"_cseq", "_sseq", "_expected", "_next_seq", "_next_start", "_last_seen", "_last_activity",
              "_activity_at", "_idle_ticks"}


def _is_plus_one(node: ast.AST) -> bool:
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and isinstance(node.right, ast.Constant) and node.right.value == 1)


def _is_clock_minus(node: ast.AST) -> bool:
    """``time.monotonic() - x`` / ``now - self._last...``: idle time computed by hand."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
        return False
    left = node.left
    if isinstance(left, ast.Call):
        f = left.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name in ("monotonic", "_monotonic", "time")
    return False


def timers(source: str | ast.AST, name: str, engine: bool = False) -> list[str]:
    """The timers of its own ``source`` (module ``name``) keeps: ``threading.Timer`` anywhere, a heap
    of deadlines outside core/clock.py, and (``engine``: the consuming engine and its runner)
    loop timers."""
    out = []
    for node in ast.walk(ast.parse(source) if isinstance(source, str) else source):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr == "Timer" and isinstance(node.value, ast.Name) \
                and node.value.id == "threading":
            out.append(f"{where}: threading.Timer")
        if isinstance(node, ast.ImportFrom) and node.module == "threading" \
                and any(a.name == "Timer" for a in node.names):
            out.append(f"{where}: from threading import Timer")
        if name != CLOCK and (isinstance(node, ast.Import) and any(a.name == "heapq" for a in node.names)
                              or isinstance(node, ast.ImportFrom) and node.module == "heapq"):
            out.append(f"{where}: a heap of deadlines (heapq) outside {CLOCK}")
        if engine and isinstance(node, ast.Attribute) and node.attr in ("call_later", "call_at"):
            out.append(f"{where}: a loop timer ({node.attr}): heartbeat alarms arm on the clock ({CLOCK})")
    return out


def offenders(source: str, name: str, converted: bool) -> list[str]:
    """What in ``source`` (module ``name``) is heartbeat or gap logic of its own."""
    tree = ast.parse(source)
    out = timers(tree, name, engine=converted)
    if not converted:
        return out
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops) and any(_is_plus_one(s) for s in sides):
                out.append(f"{where}: a sequence check (== / != x + 1)")
            if any(_is_clock_minus(s) for s in sides):
                out.append(f"{where}: idle time computed from the clock")
        if isinstance(node, ast.Attribute) and node.attr in _OLD_STATE and isinstance(node.ctx, ast.Store):
            out.append(f"{where}: private sequence/activity state {node.attr}")
    return out


def test_no_heartbeat_timer_or_gap_logic_outside_the_engine() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in ENGINE:
            found += timers(path.read_text(), rel, engine=True)  # its alarms too are the clock's
            continue
        found += offenders(path.read_text(), rel, rel in CONVERTED or rel in PULL or rel in CONSUME_ROOMS)
    assert found == [], "heartbeat or gap logic outside jssync/jetstream/consume/:\n" + "\n".join(found)


def test_the_runner_arms_every_alarm_on_the_connections_one_timer_thread() -> None:
    runner = (PKG / "jetstream/consume/runner.py").read_text()
    assert runner.count("self._clock.at(") == 2, "HeartbeatTimer and LoopTimer each arm on loop.clock"
    clock = (PKG / CLOCK).read_text()
    assert "threading.Condition" in clock and "heapq" in clock and "call_soon_threadsafe" in clock
    assert timers(clock, CLOCK, engine=True) == []


@pytest.mark.parametrize("rel", CONVERTED)
def test_converted_consumers_use_the_engine(rel: str) -> None:
    text = (PKG / rel).read_text()
    assert "GapTracker" in text, f"{rel} does not use GapTracker"
    if rel != "jetstream/ordered.py":  # its heartbeats are its PullEngine's (ConsumeContext, pull.py)
        assert "HeartbeatMonitor" in text or "HeartbeatTimer" in text, f"{rel} does not use HeartbeatMonitor"


@pytest.mark.parametrize("rel", PULL)
def test_pull_consumers_run_the_pull_engine(rel: str) -> None:
    text = (PKG / rel).read_text()
    assert "PullEngine" in text, f"{rel} does not run PullEngine"
    assert "_tick" not in text.replace("_lease_tick", ""), f"{rel} still has heartbeat ticks of its own"


@pytest.mark.parametrize("rel", CONSUME_ROOMS)
def test_consume_rooms_keep_no_heartbeat_ticks(rel: str) -> None:
    text = (PKG / rel).read_text()
    assert "_tick" not in text.replace("_lease_tick", ""), f"{rel} has heartbeat ticks of its own"


def test_the_patterns_catch_the_old_forms() -> None:
    old = {
        "t = threading.Timer(1.0, f)": "threading.Timer",
        "from threading import Timer": "import Timer",
        "h = loop.call_later(hb / 4, self._tick)": "loop timer",
        "import heapq": "heap of deadlines",
        "from heapq import heappush": "heap of deadlines",
        "if cseq != last + 1:\n    pass": "sequence check",
        "if meta.sequence.consumer != self._cseq + 1:\n    pass": "sequence check",
        "if time.monotonic() - self._last_activity > 2 * self._hb:\n    pass": "idle time",
        "idle = _monotonic() - x\nif _monotonic() - self._last_seen >= alarm:\n    pass": "idle time",
        "self._expected = t[2] + 1": "private sequence",
        "self._next_seq = sseq + 1": "private sequence",
    }
    for src, what in old.items():
        found = offenders(src, "old.py", converted=True)
        assert any(what in f for f in found), (src, found)
    assert offenders("if msg.reply.startswith(x):\n    n = len(a) + 1", "ok.py", converted=True) == []
