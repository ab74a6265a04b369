"""A stateful randomised checker of the consuming paths, against a real server.

Hypothesis drives a ``RuleBasedStateMachine`` that publishes numbered messages and
interleaves fetch, next, consume (iterator and callback form), stop, drain, nak, ordered
consume, push subscribe (bound to a durable, or creating its own consumer), a connection
cut (the test proxy), a server restart and the deletion of the pull consumer. Invariants:

- **Nothing lost**: every published message was handed to the app or is redeliverable now.
  After a consume's ``stop()`` or ``drain()`` and at the end, a probe pulls (and acks)
  whatever is available for a short time (``PROBE``, well under ``ACK_WAIT``); the pull
  consumer must then have nothing waiting for an ack (``num_ack_pending == 0``): a message
  lost on the way waits for ``ACK_WAIT`` and fails the check. At the end every published
  number must have been acked by the app on the current pull consumer, and the bound push
  consumer must end with nothing pending.
- **Faults are allowed to cost an ack wait**: after a connection cut or a server restart a
  message in flight may legitimately wait for ``ACK_WAIT`` (short, 4 s). Within
  ``ACK_WAIT`` + 2 s of a fault the probe waits long enough for redelivery instead.
- **Nothing left running**: a stopped or drained consume ends (``wait`` returns, the
  iterator thread ends, no callback runs afterwards); after its consumer is deleted a
  consume ends by itself (409 Consumer Deleted) unless a fault hid the deletion; after a
  push subscription's ``drain()`` returns no callback runs. (A push drain may legitimately
  cost an ack wait: the server may deliver just after it processed the UNSUB.)
- **No call blocks past its timeout** (plus ``SLACK``).
- **Ordered**: the ordered consumer hands out stream sequences 1, 2, 3, ... exactly once.

Bounded for CI: ``JSSYNC_CHECKER_EXAMPLES`` examples (default 20) of up to
``JSSYNC_CHECKER_STEPS`` steps (default 15); raise them for a longer run. A failure prints
the steps that led to it; ``JSSYNC_CHECKER_SHRINK=1`` lets hypothesis shrink them to a
minimal sequence first (slow). Timing-dependent failures may be reported as flaky (the
replay passed): the printed steps are still the ones that failed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

import jssync
from jssync.server import NatsServer
from tests.conftest import FACTOR
from tests.proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.fault, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("JSSYNC_CHECKER_EXAMPLES", "20"))
STEPS = int(os.environ.get("JSSYNC_CHECKER_STEPS", "15"))
#: Shrinking a failure re-runs it many times (minutes): on with JSSYNC_CHECKER_SHRINK=1.
PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("JSSYNC_CHECKER_SHRINK") else [])
#: The consumers' ack wait: what a lost message costs.
ACK_WAIT = 4.0 * FACTOR
#: How long a probe may take to collect what is redeliverable now (< ACK_WAIT).
PROBE = 2.0 * FACTOR
#: Allowed over a call's own timeout.
SLACK = 1.5 * FACTOR
#: How long a stopped/drained consume, an iterator thread, a reconnect may take to end.
END_WITHIN = 5.0 * FACTOR


class CheckFailed(AssertionError):
    """An invariant does not hold."""


class _Env:
    server: NatsServer
    proxy: TcpProxy


ENV = _Env()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Env]:
    with NatsServer(store_dir=tmp_path_factory.mktemp("checker-store")) as srv:
        with TcpProxy(("127.0.0.1", srv.port)) as proxy:
            ENV.server = srv
            ENV.proxy = proxy
            yield ENV


def _connect(url: str, errors: list[BaseException]) -> jssync.Connection:
    return jssync.connect(url, reconnect_time_wait=0.1, max_reconnect_attempts=-1, name="checker",
                          error_cb=errors.append)


def _wait(cond: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)  # poll: _wait's interval, inside its deadline
    return bool(cond())


class _App:
    """What the application does with the messages of one reader: record and ack each."""

    def __init__(self, checker: ConsumeChecker, ack: bool = True, slow: bool = False) -> None:
        self.checker = checker
        self.ack = ack
        self.slow = slow
        self.running = 0
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, msg: jssync.Msg) -> None:
        with self.lock:
            self.running += 1
            self.calls += 1
        try:
            if self.slow:
                time.sleep(0.005)  # behaviour: the handler is slow
            self.checker.handed(msg, ack=self.ack)
        finally:
            with self.lock:
                self.running -= 1


class _Consume:
    """A running consume of the pull consumer, iterator form (in a thread) or callback form."""

    def __init__(self, checker: ConsumeChecker, form: str, max_messages: int, slow: bool) -> None:
        self.form = form
        self.app = _App(checker, slow=slow)
        self.errors: list[BaseException] = []
        self.thread: threading.Thread | None = None
        c = checker.consumer
        if form == "callback":
            self.ctx = c.consume(self.app, error_cb=self.errors.append, max_messages=max_messages, expires=2.0)
        else:
            self.ctx = c.consume(max_messages=max_messages, expires=2.0)
            self.thread = threading.Thread(target=self._iterate, name="checker-iter", daemon=True)
            self.thread.start()

    def _iterate(self) -> None:
        try:
            for msg in self.ctx:
                self.app(msg)
        except jssync.Error as exc:
            self.errors.append(exc)

    def ended(self) -> bool:
        return self.ctx.closed and (self.thread is None or not self.thread.is_alive())


class ConsumeChecker(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.uid = uuid.uuid4().hex[:8].upper()
        self.name = f"CHK{self.uid}"
        self.subject = f"{self.name}.m"
        self.errors: list[BaseException] = []
        self.admin = _connect(ENV.server.url, self.errors)  # publishes and looks (never cut)
        self.nc = _connect(ENV.proxy.url, self.errors)  # consumes (through the proxy)
        self.ajs = self.admin.jetstream(timeout=5.0)
        self.js = self.nc.jetstream(timeout=5.0)
        self.ajs.create_stream(name=self.name, subjects=[f"{self.name}.>"], storage="file")
        self.stream = self.js.stream(self.name)
        self.gen = 0
        self._new_pull_consumer()
        self.ajs.create_consumer(self.name, durable_name="P", deliver_subject=f"dlv.{self.name}",
                                 ack_policy="explicit", ack_wait=ACK_WAIT)
        self.published = 0
        self.acked_push: set[int] = set()
        self.consume: _Consume | None = None
        self.oc: Any = None
        self.oc_last = 0
        self.push: Any = None
        self.push_app: _App | None = None
        self.push_created = False
        self.push_subs = 0
        self.last_fault = -1e9  # a cut or restart
        self.pull_taint = -1e9  # a request the client gave up on
        self.push_taint = -1e9  # a push subscription unsubscribed without drain

    # -- the model ------------------------------------------------------------------------

    def _new_pull_consumer(self) -> None:
        self.gen += 1
        self.cname = f"D{self.gen}"
        self.ajs.create_consumer(self.name, durable_name=self.cname, ack_policy="explicit", ack_wait=ACK_WAIT)
        self.consumer = self.js.consumer(self.name, self.cname)
        self.acked: set[int] = set()

    def handed(self, msg: jssync.Msg, ack: bool = True) -> None:
        n = int(msg.data)
        meta = msg.metadata
        if meta.consumer == self.cname or meta.consumer == "P":
            if ack:
                try:
                    msg.ack()
                except jssync.ConnectionClosedError:
                    return
                (self.acked_push if meta.consumer == "P" else self.acked).add(n)
            else:
                msg.nak()

    def _tainted(self, since: float) -> bool:
        return time.monotonic() < since + ACK_WAIT + 2.0

    @contextmanager
    def bounded(self, what: str, timeout: float) -> Iterator[None]:
        t0 = time.monotonic()
        yield
        dt = time.monotonic() - t0
        if dt > timeout + SLACK:
            raise CheckFailed(f"{what} blocked {dt:.2f}s, past its timeout of {timeout}s")

    def _info(self, name: str) -> Any:
        return self.ajs.consumer(self.name, name).info()

    def _probe(self, where: str, long: bool = False) -> None:
        """Pull and ack what is redeliverable now; then nothing may wait for the ack wait."""
        tainted = self._tainted(max(self.last_fault, self.pull_taint))
        limit = PROBE + (max(self.last_fault, self.pull_taint) + ACK_WAIT + 2.0 - time.monotonic()
                         if tainted or long else 0)
        end = time.monotonic() + max(PROBE, limit)
        while True:
            # nothing pending and nothing waiting for an ack: nothing to pull (no fetch waits out its expiry)
            info = self._info(self.cname)
            if info.num_ack_pending == 0 and info.num_pending == 0:
                return
            if time.monotonic() > end:
                break
            try:
                for m in self.consumer.fetch(100, expires=0.3):
                    self.handed(m)
            except jssync.Error:
                pass
        if info.num_ack_pending:
            raise CheckFailed(
                f"after {where}: {info.num_ack_pending} message(s) of {self.cname} still wait for an ack "
                f"{max(PROBE, limit):.1f}s later (lost on the way: they wait for AckWait)"
            )
        raise CheckFailed(f"after {where}: {info.num_pending} message(s) of {self.cname} never delivered")

    def _end_consume(self, how: str) -> None:
        cons = self.consume
        assert cons is not None
        self.consume = None
        with self.bounded(f"consume {how}()", 0.0 if how == "stop" else END_WITHIN):
            if how == "stop":
                cons.ctx.stop()
            else:
                cons.ctx.drain()
        if not _wait(cons.ended, END_WITHIN):
            raise CheckFailed(f"{cons.form} consume still running {END_WITHIN}s after {how}()")
        calls = cons.app.calls
        if cons.app.running:
            raise CheckFailed(f"a callback is still running after the {cons.form} consume ended ({how})")
        time.sleep(0.2 * FACTOR)  # nothing happens: no message after the consume ended
        if cons.app.calls != calls:
            raise CheckFailed(f"the app got messages after the {cons.form} consume ended ({how})")

    # -- rules ----------------------------------------------------------------------------

    @initialize(k=st.integers(1, 200))
    def backlog(self, k: int) -> None:
        self.publish(k)

    @rule(k=st.integers(1, 100))
    def publish(self, k: int) -> None:
        for n in range(self.published, self.published + k):
            self.ajs.publish_async(self.subject, b"%d" % n, msg_id=f"{self.name}-{n}")
        self.ajs.publish_async_completed(15)
        self.published += k

    @rule(batch=st.integers(1, 30), check=st.booleans())
    def fetch(self, batch: int, check: bool) -> None:
        with self.bounded("fetch(expires=0.5)", 0.5 + 1.0):
            try:
                res = self.consumer.fetch(batch, expires=0.5)
                for m in res:
                    self.handed(m)
                if isinstance(res.error, jssync.TimeoutError | jssync.NoHeartbeatError):
                    self.pull_taint = time.monotonic()
            except jssync.Error:
                self.pull_taint = time.monotonic()
        if check and self.consume is None:
            self._probe("fetch")

    @rule(nak=st.booleans(), check=st.booleans())
    def next(self, nak: bool, check: bool) -> None:
        t0 = time.monotonic()
        with self.bounded("next(timeout=0.5)", 0.5 + 0.15):
            try:
                m = self.consumer.next(timeout=0.5)
            except jssync.TimeoutError:
                if time.monotonic() - t0 > 0.6:  # the client gave up, not the server's 408
                    self.pull_taint = time.monotonic()
                return
            except jssync.Error:
                self.pull_taint = time.monotonic()
                return
        self.handed(m, ack=not nak)
        if check and self.consume is None:
            self._probe("nak" if nak else "next")

    @precondition(lambda self: self.consume is None)
    @rule(form=st.sampled_from(["iterator", "callback"]), max_messages=st.sampled_from([1, 2, 5, 20, 50]),
          slow=st.booleans())
    def start_consume(self, form: str, max_messages: int, slow: bool) -> None:
        self.consume = _Consume(self, form, max_messages, slow)

    @precondition(lambda self: self.consume is not None)
    @rule(drain=st.booleans(), after=st.sampled_from([0.0, 0.3]))
    def end_consume(self, drain: bool, after: float) -> None:
        time.sleep(after)  # behaviour: the consume runs a while before it ends
        self._end_consume("drain" if drain else "stop")
        self._probe("consume drain()" if drain else "consume stop()")

    @rule(k=st.integers(1, 20), form=st.sampled_from(["consume", "fetch"]))
    def ordered(self, k: int, form: str) -> None:
        if self.oc is None:
            self.oc = self.stream.ordered_consumer()
        got: list[int] = []
        with self.bounded(f"ordered {form}", 0.5 * k + 2.0):
            try:
                if form == "fetch":
                    for m in self.oc.fetch(k, expires=0.5):
                        got.append(m.metadata.sequence.stream)
                else:
                    with self.oc.consume() as it:
                        for _ in range(k):
                            try:
                                got.append(it.next(timeout=0.5).metadata.sequence.stream)
                            except jssync.TimeoutError:
                                break
            except jssync.Error:
                pass  # a fault: the next read goes on where this one stopped
        for seq in got:
            if seq != self.oc_last + 1:
                raise CheckFailed(f"ordered {form}: got stream sequence {seq} after {self.oc_last}")
            self.oc_last = seq

    @precondition(lambda self: self.push is None)
    @rule(created=st.booleans())
    def push_subscribe(self, created: bool) -> None:
        self.push_app = _App(self)
        self.push_created = created
        if created:
            self.push_subs += 1
            self.push = self.js.subscribe(self.subject, durable=f"PC{self.push_subs}", callback=self.push_app)
        else:
            self.push = self.js.subscribe(self.subject, stream=self.name, consumer="P", callback=self.push_app)

    @precondition(lambda self: self.push is not None)
    @rule(drain=st.booleans(), after=st.sampled_from([0.0, 0.3]))
    def push_end(self, drain: bool, after: float) -> None:
        time.sleep(after)  # behaviour: the push subscription runs a while before it ends
        sub, app = self.push, self.push_app
        assert app is not None
        self.push = None
        with self.bounded("push drain()" if drain else "push unsubscribe()", 5.0):
            try:
                if drain:
                    sub.drain(timeout=5.0)
                else:
                    sub.unsubscribe(timeout=5.0)
            except jssync.TimeoutError:
                self.push_taint = time.monotonic()
        # Even a drain may cost an ack wait: the server decides to deliver to a push
        # consumer's subject while it still sees interest, and what it sends after it
        # processed the UNSUB goes nowhere. Only the final check (everything acked within
        # ack_wait) holds for push consumers.
        self.push_taint = time.monotonic()
        if not drain:
            return
        if app.running:
            raise CheckFailed("a push callback is still running after drain() returned")
        calls = app.calls
        time.sleep(0.2 * FACTOR)  # nothing happens: no push callback after drain() returned
        if app.calls != calls:
            raise CheckFailed("a push callback ran after drain() returned")

    @rule()
    def cut(self) -> None:
        before = self.nc.stats["reconnects"]
        self.last_fault = time.monotonic()
        ENV.proxy.drop()
        self._reconnected(before, None, END_WITHIN)

    @rule()
    def restart(self) -> None:
        before, abefore = self.nc.stats["reconnects"], self.admin.stats["reconnects"]
        self.last_fault = time.monotonic()
        ENV.server.restart()
        self._reconnected(before, abefore, 15.0 * FACTOR)

    def _reconnected(self, before: int, abefore: int | None, within: float) -> None:
        def back() -> bool:
            return (self.nc.stats["reconnects"] > before and self.nc.is_connected
                    and (abefore is None or (self.admin.stats["reconnects"] > abefore and self.admin.is_connected)))

        if not _wait(back, within):
            raise CheckFailed(f"no reconnect within {within}s")
        # JetStream answers again on both connections (after a restart it recovers the stream first)
        if not _wait(lambda: self._stream_ok(self.ajs) and self._stream_ok(self.js), 15.0 * FACTOR):
            raise CheckFailed("JetStream did not answer within 15s of the reconnect")
        self.last_fault = time.monotonic()

    def _stream_ok(self, js: Any) -> bool:
        try:
            js.stream(self.name).info()
            return True
        except jssync.Error:
            return False

    @rule()
    def delete_consumer(self) -> None:
        cons = self.consume
        fault_free = not self._tainted(self.last_fault) and self.nc.is_connected
        self.ajs.delete_consumer(self.name, self.cname)
        self.consume = None
        self._new_pull_consumer()
        if cons is not None:
            try:
                if fault_free and not _wait(cons.ended, 3.0 * FACTOR):
                    raise CheckFailed(f"{cons.form} consume still running 3s after its consumer was deleted")
            finally:
                cons.ctx.stop()
                _wait(cons.ended, END_WITHIN)

    # -- the end --------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is not None:
                return  # a step failed (hypothesis runs teardown in a finally): only clean up
            if self.consume is not None:
                self._end_consume("drain")
            if self.push is not None:
                self.push_end(drain=True, after=0.0)
            self._probe("the end", long=True)
            missing = set(range(self.published)) - self.acked
            if missing:
                raise CheckFailed(f"messages never handed to the app on {self.cname}: {sorted(missing)[:20]}")
            self._check_push_consumer()
        finally:
            self._cleanup()

    def _check_push_consumer(self) -> None:
        app = _App(self)
        sub = self.js.subscribe(self.subject, stream=self.name, consumer="P", callback=app)
        try:
            tainted = self._tainted(max(self.last_fault, self.push_taint))
            limit = PROBE + (max(self.last_fault, self.push_taint) + ACK_WAIT + 2.0 - time.monotonic()
                             if tainted else 0)

            def done() -> bool:
                i = self._info("P")
                return i.num_ack_pending == 0 and i.num_pending == 0

            if not _wait(done, max(PROBE, limit)):
                i = self._info("P")
                raise CheckFailed(f"push consumer P at the end: {i.num_pending} never delivered, "
                                  f"{i.num_ack_pending} waiting for an ack")
        finally:
            sub.drain(timeout=5.0)
        missing = set(range(self.published)) - self.acked_push
        if missing:
            raise CheckFailed(f"messages never handed to the push app: {sorted(missing)[:20]}")

    def _cleanup(self) -> None:
        for c in (self.consume,):
            if c is not None:
                c.ctx.stop()
        if self.push is not None:
            try:
                self.push.unsubscribe()
            except jssync.Error:
                pass
        try:
            self.ajs.delete_stream(self.name)
        except jssync.Error:
            pass
        self.nc.close()
        self.admin.close()
        if self.consume is not None and self.consume.thread is not None:
            self.consume.thread.join(END_WITHIN)


def test_consume_checker(env: _Env) -> None:
    run_state_machine_as_test(ConsumeChecker, settings=settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        phases=PHASES,
        suppress_health_check=list(HealthCheck),
    ))
