"""The delivery ledger (jssync/base/ledger.py) and the hand-over of wait_get: pure code."""

from __future__ import annotations

import threading
from queue import SimpleQueue

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jssync.base.deadline import EXPIRED, wait_get
from jssync.base.ledger import Ledger, LedgerError, State


def test_a_message_goes_buffered_handed_over_settled() -> None:
    led: Ledger[int] = Ledger()
    led.put(1)
    led.put(2)
    assert led.state(1) == "buffered"
    assert led.take() == 1
    assert led.state(1) == "handed over"
    led.settle(1)
    assert led.state(1) == "settled"
    assert led.buffered() == [2]
    led.check([1, 2])


def test_a_given_back_message_is_the_next_one_taken() -> None:
    led: Ledger[int] = Ledger()
    for k in (1, 2, 3):
        led.put(k)
    assert led.take() == 1
    led.give_back(1)
    assert led.buffered() == [1, 2, 3]
    assert led.take() == 1


def test_settle_buffered_returns_the_buffer_front_first_and_settles_it() -> None:
    led: Ledger[int] = Ledger()
    for k in (1, 2, 3):
        led.put(k)
    assert led.take() == 1
    led.give_back(1)
    assert led.take() == 1  # handed over: not the way out's
    assert led.settle_buffered() == [2, 3]
    assert len(led) == 0
    assert led.in_state(State.SETTLED) == {2, 3}
    assert led.in_state(State.HANDED_OVER) == {1}
    assert led.take() is None


def test_a_settled_message_redelivered_is_buffered_again() -> None:
    led: Ledger[str] = Ledger()
    led.put("a")
    led.settle_buffered()
    led.put("a")
    assert led.state("a") == "buffered"


@pytest.mark.parametrize("bad", ["put twice", "give back unknown", "settle twice", "give back buffered"])
def test_what_breaks_the_rule_is_refused_by_name(bad: str) -> None:
    led: Ledger[int] = Ledger()
    led.put(1)
    with pytest.raises(LedgerError, match="1"):
        if bad == "put twice":
            led.put(1)
        elif bad == "give back unknown":
            led.take()
            led.settle(1)
            led.give_back(1)
        elif bad == "settle twice":
            led.settle(1)
            led.settle(1)
        else:
            led.give_back(1)


def test_check_names_a_message_received_and_in_no_state() -> None:
    led: Ledger[int] = Ledger()
    led.put(1)
    with pytest.raises(LedgerError, match="lost"):
        led.check([1, 2])


@given(st.lists(st.sampled_from(["put", "take", "take_interrupted", "settle_one", "way_out"]), max_size=60))
def test_every_message_is_in_exactly_one_state(ops: list[str]) -> None:
    led: Ledger[int] = Ledger()
    received: list[int] = []
    handed: list[int] = []
    for op in ops:
        if op == "put":
            received.append(len(received) + 1)
            led.put(received[-1])
        elif op == "take":
            k = led.take()
            if k is not None:
                handed.append(k)
        elif op == "take_interrupted":
            before = led.buffered()
            k = led.take()
            if k is not None:
                led.give_back(k)
            assert led.buffered() == before
        elif op == "settle_one" and handed:
            led.settle(handed.pop(0))
        elif op == "way_out":
            naks = led.settle_buffered()
            assert all(led.state(k) == "settled" for k in naks)
        led.check(received)
        states = [led.state(k) for k in received]
        assert "unknown" not in states
        assert sorted(led.buffered()) == sorted(k for k in received if led.state(k) == "buffered")


def test_wait_get_gives_an_item_back_to_front_when_interrupted_after_the_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """3.11/3.12: the handler of a signal held during the wait raises as it is unblocked,
    after the item was taken: the item goes to ``front``, the exception propagates."""
    import jssync.base.deadline as dl

    if dl._QUEUE_WAIT_IS_SIGNAL_SAFE:
        pytest.skip("no signal mask on this Python")
    q: SimpleQueue[object] = SimpleQueue()
    front: list[object] = []
    real = dl._sigmask
    calls: list[int] = []

    def unmask_raises(how: int, mask: object) -> object:
        out = real(how, mask)
        if how == dl._SIG_UNBLOCK and not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(dl, "_sigmask", unmask_raises)
    threading.Timer(0.05, q.put, ("m1",)).start()
    with pytest.raises(KeyboardInterrupt):
        wait_get(q, 2.0, front)
    assert front == ["m1"]
    assert q.empty()
    monkeypatch.setattr(dl, "_sigmask", real)
    assert wait_get(q, 0.01, front) is EXPIRED
