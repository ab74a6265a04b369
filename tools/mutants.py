# ruff: noqa: E501  (the mutants are a table of code snippets, one per line)
"""Hand-written mutants of the pure consuming modules, run against their unit and model tests.

Each mutant changes one thing a user could notice (a count, a comparison, a rule of ADR-37 /
ADR-15 / ADR-42) in one of the sans-I/O modules: ``jetstream/consume/engine.py``,
``statuses.py``, ``heartbeat.py``, ``gaps.py``, ``writeoffs.py``, ``jetstream/leases.py`` and
``base/status.py``. The tool copies ``jssync/``, ``tests/`` and ``pyproject.toml`` to a
scratch directory once, applies one mutant at a time there (the work tree is never
touched), runs the unit and model tests of those modules (``-x``: the first failure kills
it) and reports which mutants survived. A mutant marked ``equivalent`` says why no test can
tell it from the original; the kill rate counts the others.

    python3 tools/mutants.py              # all mutants (a few minutes; one pytest each)
    python3 tools/mutants.py --list       # the mutants, numbered
    python3 tools/mutants.py 3 17         # only these
    python3 tools/mutants.py --min-rate 95  # exit 1 below this kill rate (CI)

Exit status 1 when the kill rate is below ``--min-rate`` (default 95), a mutant no longer
applies (its text is not found exactly once: update the list with the code), or a mutant
marked equivalent was killed (it is not equivalent: drop the mark).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: the tests that guard the pure consuming modules (unit rows, hypothesis machines, random walks)
TESTS = [
    "tests/unit/jetstream/consume",
    "tests/unit/jetstream/test_leases.py",
    "tests/unit/base/test_status.py",
]
#: a smaller model run per mutant (a killed mutant dies in the first few walks)
ENV = {"JSSYNC_MODEL_WALKS": "3000", "JSSYNC_MODEL_EXAMPLES": "100", "JSSYNC_MODEL_SEED": "0"}


class Mutant(NamedTuple):
    path: str  # relative to jssync/
    old: str  # must occur exactly once in the file
    new: str
    what: str  # what a user would see
    equivalent: str = ""  # why no test can tell it apart ("" : it must be killed)


E = "jetstream/consume/engine.py"
S = "jetstream/consume/statuses.py"
H = "jetstream/consume/heartbeat.py"
G = "jetstream/consume/gaps.py"
W = "jetstream/consume/writeoffs.py"
L = "jetstream/leases.py"
B = "base/status.py"

MUTANTS: list[Mutant] = [
    # -- engine: counts and thresholds
    Mutant(E, "return self.req - self.taken_n - self.disc\n\n    def _pend_b",
           "return self.req - self.taken_n - self.disc + 1\n\n    def _pend_b", "pending one too many: a pull late"),
    Mutant(E, "        return self.req - t - self.disc <= self.thr", "        return self.req - t - self.disc < self.thr",
           "taken() says a pull is due one message late"),
    Mutant(E, "            return self.req_b - self.taken_b - self.disc_b <= self.thr_b",
           "            return self.req_b - self.taken_b - self.disc_b < self.thr_b", "bytes: a pull due one byte late"),
    Mutant(E, "            if pend > self.thr:", "            if pend >= self.thr:", "no pull at the threshold"),
    Mutant(E, "            batch = self.max_messages - max(pend, 0)", "            batch = self.max_messages - max(pend, 0) + 1",
           "asks for one more than max_messages"),
    Mutant(E, "            batch = self.max_messages - max(pend, 0)", "            batch = self.max_messages",
           "asks for max_messages whatever is buffered"),
    Mutant(E, "            max_bytes = self.max_bytes - max(pend_b, 0)", "            max_bytes = self.max_bytes",
           "bytes: asks for max_bytes whatever is buffered"),
    Mutant(E, "            if pend_b > self.thr_b:", "            if pend_b >= self.thr_b:", "bytes: no pull at the threshold"),
    Mutant(E, "            batch = BYTES_ONLY_BATCH\n", "            batch = 100\n",
           "bytes mode asks for 100 messages, not 1,000,000 (ADR-37)"),
    Mutant(E, "        self.disc += pending_msgs\n        self.disc_b += pending_bytes\n        if act is StatusAction.DONE:",
           "        self.disc_b += pending_bytes\n        if act is StatusAction.DONE:",
           "Nats-Pending-Messages of a status ignored: pending stays high"),
    Mutant(E, "        self.disc += pending_msgs\n        self.disc_b += pending_bytes\n        if act is StatusAction.DONE:",
           "        self.disc += pending_msgs\n        if act is StatusAction.DONE:",
           "Nats-Pending-Bytes ignored (bytes mode stalls)"),
    Mutant(E, "        self.disc = self.req - self.rx\n        self.disc_b = self.req_b - self.rx_b\n        if self.resetting:",
           "        self.disc = self.req - self.rx\n        if self.resetting:", "bytes mode: a write-off keeps the bytes"),
    Mutant(E, "        self.disc = self.req - self.rx\n        self.disc_b = self.req_b - self.rx_b\n        if self.resetting:",
           "        self.disc_b = self.req_b - self.rx_b\n        if self.resetting:", "a write-off keeps the messages"),
    Mutant(E, "        self.disc -= 1\n        self.disc_b -= size\n", "        self.disc_b -= size\n",
           "a late message of a written-off pull not counted again"),
    Mutant(E, "            self.rx_b += size\n            self.min_pull_b = 0", "            self.min_pull_b = 0",
           "bytes received not counted"),
    Mutant(E, "            if size > self.big_b:\n                self.big_b = size", "            if size > self.big_b:\n                pass",
           "the biggest message is forgotten: 409 Message Size loop"),
    Mutant(E, "        self.rx += 1\n        self.rx_b += size\n        self.taken_n = next(self._count)",
           "        self.rx_b += size\n        self.taken_n = next(self._count)",
           "skipped (ordered) messages not counted received: an ordered fetch never fills"),
    Mutant(E, "        self.taken_n = next(self._count)\n        self.taken_b += size\n        if self.single and",
           "        self.disc += 1\n        self.disc_b += size\n        if self.single and",
           "skipped messages written off, not taken: pending stays high after a recreation (stall)"),
    # -- engine: statuses
    Mutant(E, "            self.last_warning = \"\"\n", "", "after a normal end the same warning is not reported again"),
    Mutant(E, "                    self.min_pull_b = self.last_pull_b + 1", "                    self.min_pull_b = self.last_pull_b",
           "409 Message Size: the top-up asks for the same again (loop)"),
    Mutant(E, "                if self.last_pull_b < self.max_bytes:", "                if self.last_pull_b <= self.max_bytes:",
           "409 Message Size on a full-size pull: a loop of pulls"),
    Mutant(E, "                self.hold = True  # it does not fit", "                self.hold = False  # it does not fit",
           "a message bigger than max_bytes: a loop of pulls"),
    Mutant(E, "                if not self.size_warned:\n                    self.size_warned = True",
           "                if True:\n                    self.size_warned = True", "the too-big warning repeated",
           ""),
    Mutant(E, "        if written_off:  # a pull the counts", "        if False:  # a pull the counts",
           "statuses of written-off pulls counted again"),
    Mutant(E, "            if act is StatusAction.TERMINAL:\n                return end_with(self, status_error(st, self.stream, self.consumer))\n            return NOTHING",
           "            return NOTHING", "409 Consumer Deleted on an old inbox ignored: the consume never ends"),
    Mutant(E, "        self.open -= 1\n        if self.wo.ghost_n", "        if self.wo.ghost_n",
           "a pull ended by a status still counted open (needless inbox swaps)"),
    Mutant(E, "            pending_msgs, pending_bytes = self.wo.absorb(pending_msgs, pending_bytes)",
           "            pass", "after a failed inbox swap a written-off pull's pending counted twice"),
    Mutant(E, "        if act is StatusAction.HEARTBEAT:\n            return NOTHING\n        if self.single:",
           "        if self.single:", "a heartbeat ends a pull"),
    # -- engine: ticks, heartbeats, retries
    Mutant(E, "        if act != self.last_act or in_flight <= 0 or self.resetting:",
           "        if act != self.last_act or self.resetting:", "a missed heartbeat reported with nothing in flight"),
    Mutant(E, "        if act != self.last_act or in_flight <= 0 or self.resetting:",
           "        if act != self.last_act or in_flight <= 0:", "a miss reported while the inbox swap is under way",
           "while an inbox swap is under way nothing is in flight (the write-off zeroed it, no pull is sent), "
           "so in_flight <= 0 holds; a recreation in progress answers a miss with nothing (start_recreate)"),
    Mutant(E, "            self.last_act = act\n            self.monitor.seen(now)", "            self.monitor.seen(now)",
           "traffic counted once only: a miss reported while messages come"),
    Mutant(E, "            out.extend(self.write_off())\n            in_flight = self.in_flight",
           "            in_flight = self.in_flight", "a missed heartbeat writes nothing off: the consume stalls"),
    Mutant(E, "            if now < retry - 1e-3:", "            if now < retry - 1.0:", "a refused pull sent again at once"),
    Mutant(E, "            self.retry_at = None\n        if self.hold:", "        if self.hold:",
           "the retry pause never ends: pulls at every tick",
           "the tick's extra refill finds nothing to send: a pull that is due was sent by taken()/refill() or "
           "a status already, and _pull clears retry_at when it sends"),
    Mutant(E, "            if self._tick_n % (TICKS // 2) == 0:", "            if self._tick_n % (TICKS * 100) == 0:",
           "a message too big for max_bytes retried only every 100 heartbeats"),
    Mutant(E, "        elif in_flight <= 0 or retry is not None:", "        elif retry is not None:",
           "nothing in flight and at the threshold: no pull (stall)"),
    Mutant(E, "        return now + self.heartbeat / TICKS", "        return now + self.heartbeat * TICKS",
           "the timer fires every 10 heartbeats: a miss seen 10x late"),
    Mutant(E, "        self.monitor = HeartbeatMonitor(2 * self.heartbeat if self.heartbeat else 1.0, 0.0)",
           "        self.monitor = HeartbeatMonitor(3 * self.heartbeat if self.heartbeat else 1.0, 0.0)",
           "a miss after 3 heartbeats, not 2 (ADR-37)"),
    # -- engine: connection
    Mutant(E, "        self.paused = True\n        self.monitor.paused(now)\n        return _CANCEL",
           "        self.monitor.paused(now)\n        return _CANCEL", "pulls go out while disconnected"),
    Mutant(E, "        self.paused = False\n        self.monitor.resumed(now)\n        self.last_act",
           "        self.paused = False\n        self.last_act", "after a reconnect the heartbeat monitor stays paused"),
    Mutant(E, "        return (*self.write_off(), *self.refill(), arm)", "        return (*self.refill(), arm)",
           "a reconnect writes nothing off: no new pull (the old died with the connection)"),
    Mutant(E, "        self.open += self.wo.swapped(ok)", "        self.wo.swapped(ok)",
           "a failed inbox swap: the written-off pulls not open again"),
    Mutant(E, "        if alive and not self.resetting and self.state is _RUNNING:",
           "        if alive and self.state is _RUNNING:", "a second inbox swap while one is under way",
           "while a swap is under way no pull is open on the inbox in use (open was set to 0 and no pull is "
           "sent until inbox_swapped), so alive is False"),
    Mutant(E, "            self.open = 0\n            self.resetting = True\n            return (SwapInbox(),)",
           "            self.open = 0\n            return (SwapInbox(),)", "pulls go out before the new inbox is ready"),
    Mutant(E, "        alive = self.req - self.rx - self.disc > 0 and self.open > 0",
           "        alive = False", "no inbox swap: late messages of written-off pulls over-fill the buffer"),
    # -- engine: ends
    Mutant(E, "        self.state = _STOPPED\n        return (ArmTimer(None), NakBuffered(), End(None), Unsubscribe(wait=not self.grouped))",
           "        self.state = _STOPPED\n        return (ArmTimer(None), End(None), Unsubscribe(wait=not self.grouped))",
           "stop leaves the buffer un-nak'ed"),
    Mutant(E, "Unsubscribe(wait=not self.grouped))", "Unsubscribe(wait=True))",
           "a stopped consume in a priority group keeps its pulls waiting (takes the pin)"),
    Mutant(E, "        if state is _STOPPED:\n            return _NAK\n        return _DROP",
           "        return _DROP", "messages after stop dropped, not nak'ed"),
    Mutant(E, "        if state is _DRAINING:\n            return NOTHING\n        if state is _STOPPED:",
           "        if state is _STOPPED:", "drain drops what is still in flight"),
    Mutant(E, "        if self.rx >= self.max_messages or (self.max_bytes and self.rx_b >= self.max_bytes):",
           "        if self.rx > self.max_messages or (self.max_bytes and self.rx_b >= self.max_bytes):",
           "a fetch does not end when its batch is full"),
    Mutant(E, "        if self.state is not _RUNNING or self.paused or self.hold or self.resetting:\n            return None\n        if self.bytes_mode:",
           "        if self.state is not _RUNNING or self.hold or self.resetting:\n            return None\n        if self.bytes_mode:",
           "a pull while disconnected"),
    # -- engine: recreate, early
    Mutant(E, "        self.resetting = False\n        self.open = 0\n        self.wo.clear()",
           "        self.open = 0\n        self.wo.clear()", "after the ordered consumer is made again, no pull"),
    Mutant(E, "            return self.req - self.rx - self.disc + max(0, self.rx - self.taken_n - self.max_messages)",
           "            return self.req - self.rx - self.disc", "a priority-group buffer grows without bound"),
    Mutant(E, "        if self.early:\n            return self.due()\n", "",
           "early engines: taking messages says no pull is due when one is"),
    # -- statuses.py
    Mutant(S, "    if st.description != e.last_warning:", "    if True:",
           "the same warning reported at every refused pull"),
    Mutant(S, "        out.extend(e.write_off())\n        if state is _RUNNING:\n            out.append(CheckConsumer())",
           "        if state is _RUNNING:\n            out.append(CheckConsumer())", "503 writes nothing off: stall"),
    Mutant(S, "        if not e.nr_outage:\n            e.nr_outage = True\n            out.append(Warn(err))",
           "        if True:\n            e.nr_outage = True\n            out.append(Warn(err))", "503 reported at every pull"),
    Mutant(S, "    e.retry_at = now + min(RETRY_PAUSE, e.heartbeat / 2)", "    e.retry_at = None",
           "a refused pull sent again at once (a loop of 409s)"),
    Mutant(S, "        return (Warn(status_error(st, e.stream, e.consumer)), *e.write_off(), *e.refill())",
           "        return (Warn(status_error(st, e.stream, e.consumer)), *e.refill())",
           "409 Leadership Change writes nothing off: stall"),
    Mutant(S, "    if e.resetting or e.state is not _RUNNING:\n        return NOTHING\n    e.resetting = True",
           "    if e.state is not _RUNNING:\n        return NOTHING\n    e.resetting = True",
           "the ordered consumer made again several times for one loss"),
    Mutant(S, "    if (e.state is not _RUNNING and e.state is not _DRAINING) or e.error is not None:",
           "    if e.state is not _RUNNING and e.state is not _DRAINING:", "two terminal errors: the consume ends twice"),
    Mutant(S, "    e.state = _DRAINING\n    e.error = err\n    return (ArmTimer(None), End(err), Unsubscribe(wait=False))",
           "    e.state = _DRAINING\n    e.error = err\n    return (ArmTimer(None), Unsubscribe(wait=False))",
           "409 Consumer Deleted never ends the consume"),
    Mutant(S, "    fatal = act is StatusAction.ERROR or act is StatusAction.TERMINAL",
           "    fatal = act is StatusAction.TERMINAL", "a fetch answered 400 does not raise"),
    Mutant(S, "    if e.activity != e.last_act:\n        e.last_act = e.activity\n        e.monitor.seen(now)\n        return NOTHING",
           "    if e.activity != e.last_act:\n        e.monitor.seen(now)\n        return NOTHING",
           "a fetch never misses a heartbeat once something arrived"),
    Mutant(S, "    if not e.heartbeat:\n        return NOTHING\n    if e.activity", "    if e.activity",
           "a fetch without heartbeats ends at a 'miss'"),
    Mutant(S, "    if act is StatusAction.PIN_LOST:\n        return (PinLost(st.description),)",
           "    if act is StatusAction.PIN_LOST:\n        return NOTHING", "423: the pin id kept (every pull refused)"),
    # -- heartbeat.py
    Mutant(H, "        if self._paused or now - self._last < self.interval - _EARLY:",
           "        if now - self._last < self.interval - _EARLY:", "misses reported while paused"),
    Mutant(H, "        if self._paused or now - self._last < self.interval - _EARLY:",
           "        if self._paused or now - self._last <= self.interval + _EARLY:", "a miss reported late"),
    Mutant(H, "            return False\n        self._last = now\n        self.misses += 1",
           "            return False\n        self.misses += 1", "a storm of misses (one per check)"),
    Mutant(H, "        self._paused = False\n        self._last = now", "        self._paused = False",
           "resumed: a miss at once for the time paused"),
    Mutant(H, "        return self._last + self.interval", "        return self._last + 2 * self.interval",
           "the timer armed one interval late"),
    Mutant(H, "    def seen(self, now: float) -> None:\n        \"\"\"Any message or status arrived at ``now``: the current interval starts again.\"\"\"\n        self._last = now",
           "    def seen(self, now: float) -> None:\n        \"\"\"Any message or status arrived at ``now``: the current interval starts again.\"\"\"",
           "traffic does not reset the heartbeat timer"),
    # -- gaps.py
    Mutant(G, "        if last is not None and consumer_seq != last + 1:", "        if last is not None and consumer_seq > last + 1:",
           "a consumer sequence going back is not a gap"),
    Mutant(G, "        if stream_seq < self.next_stream_seq and self.recover:\n            return SKIP",
           "        if stream_seq < self.next_stream_seq and self.recover:\n            return DELIVER",
           "a recreated consumer's repeats delivered twice"),
    Mutant(G, "            gap = Gap(self.next_stream_seq or 1, consumer_seq, last)\n            self.last_consumer_seq = consumer_seq",
           "            gap = Gap(self.next_stream_seq or 1, consumer_seq, last)",
           "recover=False: after a gap every message is a gap"),
    Mutant(G, "        if last is None:  # an existing consumer: the first count we see\n            self.last_consumer_seq = last_consumer_seq\n            return IGNORE",
           "        if last is None:  # an existing consumer: the first count we see\n            return IGNORE",
           "an existing consumer's first heartbeat sets nothing: the next message is a gap"),
    Mutant(G, "        self.last_consumer_seq = last_consumer_seq\n        return Gap(", "        return Gap(",
           "recover=False: a heartbeat gap reported again at every heartbeat"),
    Mutant(G, "        return self._reset(\"missed heartbeats\") if self.recover else IGNORE",
           "        return IGNORE", "ordered: a missed heartbeat never resets"),
    Mutant(G, "        return self._reset(\"reconnected\") if self.recover else IGNORE",
           "        return self._reset(\"reconnected\")", "recover=False: a reconnect resets a plain push subscription"),
    Mutant(G, "        if generation != self.generation or not self.recover:", "        if generation != self.generation:",
           "recover=False: a deleted consumer resets"),
    Mutant(G, "        self.generation += 1\n        self.last_consumer_seq = 0\n        self.resets += 1",
           "        self.last_consumer_seq = 0\n        self.resets += 1", "a reset keeps the generation: the old consumer's messages delivered"),
    Mutant(G, "        if generation != self.generation or last_consumer_seq < 0:", "        if generation != self.generation:",
           "a heartbeat without Nats-Last-Consumer is a gap"),
    Mutant(G, "        if stream_seq > 0 and (self.next_stream_seq == 0 or stream_seq < self.next_stream_seq):",
           "        if stream_seq > 0:", "rewind moves forward (messages lost)"),
    # -- writeoffs.py
    Mutant(W, "        g = min(pending_msgs, self.ghost_n)", "        g = 0", "a failed swap: pending counted twice"),
    Mutant(W, "            self.ghost_n += self.wo_n", "            pass", "a failed swap: the budget not kept"),
    Mutant(W, "        if self.wo_n:\n            self.wo_n -= 1", "        if False:\n            self.wo_n -= 1",
           "late messages during the swap leave the budget too big: a top-up asks for too little"),
    Mutant(W, "            if now >= self.ghost_until:\n                self.clear()", "            if False:\n                self.clear()",
           "the budget never forgotten: a live pull's end taken for a ghost's (no pull)"),
    # -- leases.py
    Mutant(L, "MAX_EXTENSION = 600.0", "MAX_EXTENSION = 60.0", "leases given up after 1 minute, not 10"),
    Mutant(L, "        if now - lease.renewed >= renew_after:", "        if now - lease.renewed > renew_after:",
           "a lease renewed one check late"),
    Mutant(L, "        if lease.received <= give_up_before:", "        if lease.received < give_up_before:",
           "a lease kept one check past max_extension"),
    Mutant(L, "        if done(lease.item):\n            continue", "        if False:\n            continue",
           "+WPI for acked messages"),
    Mutant(L, "    return min(MAX_PERIOD, max(MIN_PERIOD, ack_wait * PERIOD_SHARE))",
           "    return min(MAX_PERIOD, ack_wait * PERIOD_SHARE)", "a tiny ack_wait: a busy lease timer"),
    Mutant(L, "RENEW_AT = 0.5", "RENEW_AT = 0.9", "leases renewed too late (redeliveries)"),
    # -- base/status.py
    Mutant(B, "    if code in (404, 408):\n        return Action.DONE", "    if code in (404,):\n        return Action.DONE",
           "408 Request Timeout reported as a warning"),
    Mutant(B, "        if \"message size exceeds maxbytes\" in d or \"batch completed\" in d:",
           "        if \"message size exceeds maxbytes\" in d:", "409 Batch Completed reported as a warning"),
    Mutant(B, "        if \"consumer deleted\" in d or \"consumer is push based\" in d:",
           "        if \"consumer deleted\" in d:", "409 Consumer is push based does not end the consume"),
    Mutant(B, "        if \"leadership change\" in d:\n            return Action.RESET",
           "        if \"leadership change\" in d:\n            return Action.WARNING", "409 Leadership Change: a pause, no reset"),
    Mutant(B, "    if code == 423:\n        return Action.PIN_LOST", "    if code == 423:\n        return Action.WARNING",
           "423: the pin id kept"),
    Mutant(B, "    if code == 503:\n        return Action.NO_RESPONDERS", "    if code == 503:\n        return Action.WARNING",
           "503 not looked into"),
    Mutant(B, "    if code == 400:\n        return Action.ERROR", "    if code == 400:\n        return Action.WARNING",
           "400 Bad Request not raised by fetch"),
]


def _scratch() -> pathlib.Path:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jssync-mutants-"))
    shutil.copytree(ROOT / "jssync", tmp / "jssync", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", tmp / "tests", ignore=shutil.ignore_patterns("__pycache__", "integration"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def _run_tests(tmp: pathlib.Path, timeout: float) -> bool:
    """True when the tests pass (the mutant survived)."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *TESTS]
    try:
        res = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False  # a hang counts as killed (the tests have timeouts of their own)
    return res.returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="*", type=int, help="mutant numbers (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--min-rate", type=float, default=95.0, help="fail below this kill rate (percent)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's test run")
    args = ap.parse_args(argv)
    if args.list:
        for i, m in enumerate(MUTANTS):
            print(f"{i:3d} {m.path}: {m.what}" + (" [equivalent]" if m.equivalent else ""))
        return 0
    chosen = args.which or list(range(len(MUTANTS)))
    tmp = _scratch()
    bad = 0
    try:
        if not _run_tests(tmp, args.timeout):
            print("the tests fail without any mutant: fix them first", file=sys.stderr)
            return 1
        killed, survived, wrong_equivalent = [], [], []
        for i in chosen:
            m = MUTANTS[i]
            target = tmp / "jssync" / m.path
            text = target.read_text()
            if text.count(m.old) != 1:
                print(f"{i:3d} does not apply ({text.count(m.old)} matches): {m.path}: {m.what}", file=sys.stderr)
                bad += 1
                continue
            target.write_text(text.replace(m.old, m.new))
            t0 = time.monotonic()
            try:
                alive = _run_tests(tmp, args.timeout)
            finally:
                target.write_text(text)
            took = time.monotonic() - t0
            verdict = "SURVIVED" if alive else "killed"
            print(f"{i:3d} {verdict:8s} {took:5.1f}s {m.path}: {m.what}" + (" [equivalent]" if m.equivalent else ""),
                  flush=True)
            if m.equivalent:
                if not alive:
                    wrong_equivalent.append(i)
            elif alive:
                survived.append(i)
            else:
                killed.append(i)
        counted = len(killed) + len(survived)
        rate = 100.0 * len(killed) / counted if counted else 100.0
        print(f"\n{len(killed)} of {counted} non-equivalent mutants killed ({rate:.1f} %); "
              f"{sum(1 for i in chosen if MUTANTS[i].equivalent)} marked equivalent")
        for i in survived:
            print(f"  survived {i}: {MUTANTS[i].path}: {MUTANTS[i].what}")
        for i in wrong_equivalent:
            print(f"  marked equivalent but killed {i}: {MUTANTS[i].what}", file=sys.stderr)
        for i in chosen:
            if MUTANTS[i].equivalent:
                print(f"  equivalent {i}: {MUTANTS[i].what}: {MUTANTS[i].equivalent}")
        if rate < args.min_rate or wrong_equivalent or bad:
            return 1
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
