"""The end of a watch's initial values (``_InitialEnd``, pure state): when the marker may come,
given the consumer's counts, the sequences seen and the stream's last sequence read."""

from __future__ import annotations

from collections.abc import Callable

from jssync.kv.watcher import _InitialEnd


def reader(*answers: int | None) -> tuple[Callable[[], int | None], list[int | None]]:
    """A fake last-sequence read answering ``answers`` in turn; the list records the reads."""
    calls: list[int | None] = []
    left = list(answers)

    def read() -> int | None:
        got = left.pop(0)
        calls.append(got)
        return got

    return read, calls


def test_walk_over_and_the_last_sequence_seen_is_the_end_after_one_read():
    end = _InitialEnd(0)
    end.max_seq = 10
    read, calls = reader(10)
    assert end.done(True, read)
    assert calls == [10]


def test_an_empty_bucket_ends_at_once():
    end = _InitialEnd(0)
    read, calls = reader(0)
    assert end.done(True, read)
    assert calls == [0]


def test_walk_over_waits_for_the_last_sequence_read():
    end = _InitialEnd(0)
    end.max_seq = 8
    read, calls = reader(12)
    assert not end.done(True, read)
    end.max_seq = 11
    assert not end.done(False, read)
    end.max_seq = 12
    assert end.done(False, read)
    assert calls == [12]  # read once: it was read after the walk was over


def test_an_early_pending_zero_reads_again_once_its_sequence_is_seen():
    """pending 0 before the walk is over: the first read may miss a rewrite that comes later."""
    end = _InitialEnd(0)
    end.max_seq = 5
    read, calls = reader(10, 14)
    assert not end.done(False, read)  # pending 0 on message 5: read 10, not final
    end.max_seq = 10
    assert not end.done(False, read)  # 10 seen: the walk is over, read again: 14
    end.max_seq = 14
    assert end.done(False, read)
    assert calls == [10, 14]


def test_an_early_pending_zero_already_past_its_read_is_final():
    end = _InitialEnd(0)
    end.max_seq = 10
    read, calls = reader(10)
    assert end.done(False, read)  # seen before the read was made: the walk was over
    assert calls == [10]


def test_a_failed_read_is_due_again():
    end = _InitialEnd(0)
    end.max_seq = 3
    read, calls = reader(None, 3)
    assert not end.done(True, read)
    assert end.due and end.retry_at > 0
    assert end.done(False, read)
    assert calls == [None, 3] and not end.due


def test_a_bound_never_seen_is_read_again_when_due():
    """The idle heartbeat marks it due: the message read first is gone (expired, purged)."""
    end = _InitialEnd(0)
    end.max_seq = 7
    read, calls = reader(9, 7)
    assert not end.done(True, read)
    end.due = True
    assert end.done(False, read)
    assert calls == [9, 7]


def test_a_new_consumer_starts_over():
    end = _InitialEnd(0)
    end.max_seq = 4
    read, calls = reader(9, 9)
    assert not end.done(True, read)
    end.new_consumer()
    assert end.bound is None and not end.walked
    assert not end.done(False, read)  # read again for the new consumer, before its walk is known over
    assert calls == [9, 9]


def test_resume_from_a_revision_past_the_end_is_done_after_the_read():
    end = _InitialEnd(99)  # resume_from=100
    read, calls = reader(50)
    assert end.done(True, read)
