"""GapTracker (jssync/jetstream/consume/gaps.py): ordered delivery, a reset on a gap. Pure.

ADR-15 (gap detection): "compare the consumer sequence of each message with the last one
+ 1"; an idle heartbeat's ``Nats-Last-Consumer`` other than the last one received is a gap
too. An ordered consumer recreates its consumer from the last stream sequence + 1 (ADR-17),
and what the dropped consumer still sends must not count.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jssync.jetstream.consume.gaps import DELIVER, IGNORE, SKIP, Gap, GapTracker, Reset

pytestmark = pytest.mark.timeout(60)

EXAMPLES = int(os.environ.get("JSSYNC_MODEL_EXAMPLES", "60"))


# -- one row per rule ---------------------------------------------------------------------------


def test_in_order_messages_are_delivered_with_one_constant() -> None:
    t = GapTracker()
    assert [t.message(s, c, 0) for s, c in ((5, 1), (7, 2), (8, 3))] == [DELIVER] * 3
    assert t.message(9, 4, 0) is DELIVER  # the same object: nothing allocated per message
    assert t.next_stream_seq == 10 and t.resets == 0


def test_a_consumer_sequence_gap_resets_once_from_the_next_stream_sequence() -> None:
    t = GapTracker()
    t.message(5, 1, 0)
    act = t.message(9, 3, 0)
    assert isinstance(act, Reset) and act.from_stream_seq == 6 and act.generation == 1
    # the old consumer goes on sending: ignored, never a second reset
    assert t.message(10, 4, 0) is IGNORE
    assert t.heartbeat(4, 0) is IGNORE
    assert t.status_from(0) is IGNORE
    assert t.resets == 1
    # the new consumer starts at consumer sequence 1
    assert t.message(6, 1, 1) is DELIVER


def test_a_duplicate_consumer_sequence_resets() -> None:
    t = GapTracker()
    t.message(1, 1, 0)
    assert isinstance(t.message(1, 1, 0), Reset)


def test_a_heartbeat_showing_a_gap_resets() -> None:
    t = GapTracker()
    t.message(3, 1, 0)
    assert t.heartbeat(1, 0) is IGNORE
    assert t.heartbeat(-1, 0) is IGNORE  # no Nats-Last-Consumer: nothing to compare
    act = t.heartbeat(2, 0)
    assert isinstance(act, Reset) and act.from_stream_seq == 4


def test_missed_heartbeats_reconnects_and_lost_consumers_reset() -> None:
    t = GapTracker(next_stream_seq=10)
    acts = [t.missed_heartbeat(), t.reconnected(), t.status_from(2), t.dropped(3)]
    assert all(isinstance(a, Reset) and a.from_stream_seq == 10 for a in acts)
    assert [a.generation for a in acts if isinstance(a, Reset)] == [1, 2, 3, 4]
    assert t.resets == 4


def test_nothing_delivered_yet_resets_to_the_configured_start() -> None:
    act = GapTracker().missed_heartbeat()
    assert isinstance(act, Reset) and act.from_stream_seq == 0


def test_stream_sequences_delivered_already_are_skipped() -> None:
    t = GapTracker()
    t.message(7, 1, 0)
    t.reconnected()
    # a "last per subject" consumer sends the latest per subject again
    assert [t.message(s, c, 1) for s, c in ((3, 1), (7, 2), (9, 3))] == [SKIP, SKIP, DELIVER]


def test_without_recover_a_gap_is_reported_and_tracking_goes_on() -> None:
    t = GapTracker(recover=False, last_consumer_seq=None)
    assert t.message(4, 10, 0) is DELIVER  # an existing consumer: the first one sets the count
    gap = t.message(6, 12, 0)
    assert isinstance(gap, Gap) and (gap.stream_seq, gap.consumer_seq, gap.last_consumer_seq) == (5, 12, 10)
    assert t.message(2, 13, 0) is DELIVER  # a redelivery has an older stream sequence: delivered
    hb = t.heartbeat(15, 0)
    assert isinstance(hb, Gap) and hb.consumer_seq == 15
    assert t.heartbeat(15, 0) is IGNORE  # reported once
    assert t.missed_heartbeat() is IGNORE and t.reconnected() is IGNORE
    assert t.resets == 0 and t.generation == 0


def test_is_next_asks_without_changing_anything() -> None:
    t = GapTracker()
    t.message(4, 1, 0)
    assert t.is_next(2, 0) and not t.is_next(3, 0) and not t.is_next(2, 1)
    assert t.last_consumer_seq == 1


def test_begin_and_rewind_are_the_callers_decisions() -> None:
    t = GapTracker()
    t.message(5, 1, 0)
    t.rewind(3)
    assert t.next_stream_seq == 3
    t.rewind(4)
    assert t.next_stream_seq == 3
    assert t.begin() == 1 and t.resets == 0
    assert t.message(3, 1, 0) is IGNORE and t.message(3, 1, 1) is DELIVER


# -- the model ---------------------------------------------------------------------------------


class _Consumer:
    """What the server's consumer of one generation has sent."""

    def __init__(self, gen: int, pos: int) -> None:
        self.gen = gen
        self.pos = pos  # index of the next stream entry it sends
        self.cseq = 0  # consumer sequence of the last one sent (lost ones count)
        self.sent: list[tuple[int, int]] = []


class GapMachine(RuleBasedStateMachine):
    """Random messages, losses, duplicates, stale generations, heartbeats and reconnects.

    The stream is a sparse list of stream sequences (filters leave holes). The client side
    is a GapTracker; the reference is ten lines of "what the client received last".
    """

    def __init__(self) -> None:
        super().__init__()
        self.stream: list[int] = [1, 2, 3]
        self.tracker = GapTracker()
        self.delivered: list[int] = []
        self.consumers = [_Consumer(0, 0)]
        self.gen = 0
        self.client_last = 0  # the reference: the consumer sequence received last (this generation)
        self.next = 0  # the reference: the stream sequence to start at (0: the start)
        self.expected_resets = 0
        self.replay = 2  # how far before next the consumer after a reset starts (last per subject)

    @property
    def current(self) -> _Consumer:
        return self.consumers[-1]

    def _expect_reset(self, act: object) -> None:
        assert isinstance(act, Reset), act
        self.expected_resets += 1
        assert act.from_stream_seq == self.next
        assert act.generation == self.gen + 1
        self.gen = act.generation
        self.client_last = 0
        start = 0
        if self.next:
            start = next((i for i, s in enumerate(self.stream) if s >= self.next), len(self.stream))
        self.consumers.append(_Consumer(self.gen, max(0, start - self.replay)))

    def _feed(self, sseq: int, cseq: int, gen: int) -> None:
        act = self.tracker.message(sseq, cseq, gen)
        if gen != self.gen:
            assert act is IGNORE
        elif cseq != self.client_last + 1:
            self._expect_reset(act)
        else:
            self.client_last = cseq
            if sseq < self.next:
                assert act is SKIP
            else:
                assert act is DELIVER
                self.delivered.append(sseq)
                self.next = sseq + 1

    @rule(step=st.integers(1, 3))
    def store(self, step: int) -> None:
        self.stream.append(self.stream[-1] + step)

    @rule(k=st.integers(0, 3))
    def next_reset_replays(self, k: int) -> None:
        self.replay = k

    @rule(lose=st.booleans())
    def send(self, lose: bool) -> None:
        c = self.current
        if c.pos >= len(self.stream):
            return
        sseq = self.stream[c.pos]
        c.pos += 1
        c.cseq += 1
        c.sent.append((sseq, c.cseq))
        if not lose:
            self._feed(sseq, c.cseq, c.gen)

    @precondition(lambda self: bool(self.current.sent))
    @rule(back=st.integers(0, 3))
    def resend(self, back: int) -> None:
        sent = self.current.sent
        sseq, cseq = sent[max(0, len(sent) - 1 - back)]
        self._feed(sseq, cseq, self.current.gen)

    @precondition(lambda self: len(self.consumers) > 1)
    @rule(data=st.data(), kind=st.sampled_from(["message", "heartbeat", "status"]))
    def stale(self, data: st.DataObject, kind: str) -> None:
        old = data.draw(st.sampled_from(self.consumers[:-1]))
        if kind == "message":
            if old.pos < len(self.stream):
                old.pos += 1
                old.cseq += 1
                self._feed(self.stream[old.pos - 1], old.cseq, old.gen)
        elif kind == "heartbeat":
            assert self.tracker.heartbeat(old.cseq + 1, old.gen) is IGNORE
        else:
            assert self.tracker.status_from(old.gen) is IGNORE

    @rule()
    def heartbeat(self) -> None:
        c = self.current
        act = self.tracker.heartbeat(c.cseq, c.gen)
        if c.cseq == self.client_last:
            assert act is IGNORE
        else:
            self._expect_reset(act)

    @rule()
    def missed_heartbeat(self) -> None:
        self._expect_reset(self.tracker.missed_heartbeat())

    @rule()
    def reconnected(self) -> None:
        self._expect_reset(self.tracker.reconnected())

    @rule()
    def consumer_gone(self) -> None:
        self._expect_reset(self.tracker.status_from(self.current.gen))

    @invariant()
    def delivered_in_order_without_holes(self) -> None:
        d = self.delivered
        assert all(a < b for a, b in zip(d, d[1:], strict=False))
        assert d == self.stream[:len(d)], "a message was lost without a reset"

    @invariant()
    def one_reset_per_trigger(self) -> None:
        assert self.tracker.resets == self.expected_resets
        assert self.tracker.generation == self.gen


GapMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None)
TestGapMachine = GapMachine.TestCase


class PushGapMachine(RuleBasedStateMachine):
    """``recover=False`` (a plain push subscription) on an existing consumer: every message is
    delivered, each discontinuity of the consumer sequence (a message or a heartbeat's
    ``Nats-Last-Consumer``) is reported once as a :class:`Gap` and tracking goes on from it;
    the first message or heartbeat only sets the count; nothing ever resets."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = GapTracker(recover=False, last_consumer_seq=None)
        self.cseq = 0  # the server's consumer sequence (the consumer existed before)
        self.sseq = 0
        self.sent: list[tuple[int, int]] = []
        self.client_last: int | None = None  # the reference
        self.next = 0
        self.deliveries = 0
        self.gaps = 0
        self.expected_gaps = 0

    def _check(self, act: object, gap_at: int | None) -> None:
        if gap_at is None:
            assert act is DELIVER or act is IGNORE, act
            return
        assert isinstance(act, Gap), act
        assert act.consumer_seq == gap_at and act.last_consumer_seq == self.client_last
        assert act.stream_seq == (self.next or 1)
        self.gaps += 1

    def _feed(self, sseq: int, cseq: int) -> None:
        act = self.tracker.message(sseq, cseq, 0)
        last = self.client_last
        if last is not None and cseq != last + 1:
            self.expected_gaps += 1
            self._check(act, cseq)
        else:
            assert act is DELIVER, act
        self.deliveries += 1  # a Gap is delivered all the same
        self.client_last = cseq
        self.next = sseq + 1

    @rule(skip=st.integers(0, 40))
    def existing_history(self, skip: int) -> None:
        """(before the client saw anything) the consumer delivered to someone else already."""
        if self.client_last is None:
            self.cseq += skip
            self.sseq += skip

    @rule(lose=st.booleans(), step=st.integers(1, 3))
    def send(self, lose: bool, step: int) -> None:
        self.cseq += 1
        self.sseq += step
        self.sent.append((self.sseq, self.cseq))
        if not lose:
            self._feed(self.sseq, self.cseq)

    @precondition(lambda self: bool(self.sent))
    @rule(back=st.integers(0, 3))
    def redeliver(self, back: int) -> None:
        """A redelivery: an older stream sequence with the next consumer sequence."""
        sseq, _ = self.sent[max(0, len(self.sent) - 1 - back)]
        self.cseq += 1
        self._feed(sseq, self.cseq)

    @precondition(lambda self: bool(self.sent))
    @rule()
    def duplicate(self) -> None:
        """The same delivery seen twice (a consumer sequence repeated)."""
        sseq, cseq = self.sent[-1]
        self._feed(sseq, cseq)

    @rule(missing=st.booleans())
    def heartbeat(self, missing: bool) -> None:
        if missing:  # no Nats-Last-Consumer header
            assert self.tracker.heartbeat(-1, 0) is IGNORE
            return
        act = self.tracker.heartbeat(self.cseq, 0)
        if self.client_last is None:
            assert act is IGNORE  # an existing consumer: the first count seen
            self.client_last = self.cseq
        elif self.cseq == self.client_last:
            assert act is IGNORE
        else:
            self.expected_gaps += 1
            self._check(act, self.cseq)
            self.client_last = self.cseq

    @rule(which=st.sampled_from(["missed", "reconnected", "gone", "dropped"]))
    def no_recovery(self, which: str) -> None:
        t = self.tracker
        act = {"missed": t.missed_heartbeat, "reconnected": t.reconnected, "gone": lambda: t.status_from(0),
               "dropped": lambda: t.dropped(0)}[which]()
        assert act is IGNORE

    @invariant()
    def reported_once_never_reset(self) -> None:
        assert self.gaps == self.expected_gaps
        assert self.tracker.resets == 0 and self.tracker.generation == 0
        assert self.tracker.last_consumer_seq == self.client_last


PushGapMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None)
TestPushGapMachine = PushGapMachine.TestCase
