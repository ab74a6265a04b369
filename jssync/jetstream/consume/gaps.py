"""The gap tracker: "the expected sequence, else start again from here".

Pure (sans-I/O): no threads, no clock, no queues, nothing sent. An ordered consumer
(ADR-17 on the pull API, ADR-15's ordered push subscription, the Key-Value watcher, the
Liftbridge subscription) feeds it what arrives and gets back what to do:

* :data:`DELIVER`: the message is the next one: hand it to the application;
* :data:`SKIP`: the next one by consumer sequence, but its stream sequence was delivered
  already (a consumer re-created with "last per subject" sends those again): pass it over;
* :data:`IGNORE`: from an older generation (a consumer given up), or nothing to do;
* :class:`Reset`: the consumer lost something (a consumer sequence gap, a heartbeat whose
  ``Nats-Last-Consumer`` is not the last one received, a missed heartbeat, a reconnect,
  the consumer gone): make a new consumer starting at ``from_stream_seq``. A reset starts a
  new *generation*; the caller tags each consumer (its subscription or its name) with the
  generation it was made for, and whatever an older one still sends is ignored, so one
  gap or disconnect causes exactly one reset;
* :class:`Gap` (only with ``recover=False``, a push subscription that is not ordered): the
  gap is to be reported, and tracking goes on from the sequence received (ADR-15).

The states (``c``: the last consumer sequence received, ``s``: the next stream sequence)::

                 message(s', c+1, g), s' >= s   -> DELIVER  (c = c+1, s = s'+1)
                 message(s', c+1, g), s' <  s   -> SKIP     (c = c+1)
                 heartbeat(c, g)                -> IGNORE
                 anything from generation < g   -> IGNORE
                    +-------+
                    |       v
   begin  +----------------------------+
  ------> |  generation g               |
          |  c: last consumer seq       |
          |  s: next stream seq         |
          +----------------------------+
                    |  message(_, c' != c+1, g)   heartbeat(c' != c, g)
                    |  missed_heartbeat()         reconnected()
                    |  status_from(g)             dropped(g)
                    v
          Reset(from_stream_seq = s)  ->  generation g+1, c = 0, s unchanged

Not thread-safe: feed it from one thread (the consumer's I/O thread or reader).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DELIVER", "IGNORE", "SKIP", "Action", "Deliver", "Gap", "GapTracker", "Ignore", "Reset", "Skip"]


class Deliver:
    """Hand the message to the application (use the constant :data:`DELIVER`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DELIVER"


class Skip:
    """In order, but delivered already: pass it over (use the constant :data:`SKIP`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIP"


class Ignore:
    """Nothing to do: stale, or no news (use the constant :data:`IGNORE`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IGNORE"


#: The constants the tracker returns (compare with ``is``): no allocation per message.
DELIVER: Final = Deliver()
SKIP: Final = Skip()
IGNORE: Final = Ignore()


class Reset:
    """Make a new consumer starting at ``from_stream_seq`` (0: the configured start), for ``generation``.

    Attributes:
        from_stream_seq: the first stream sequence the new consumer must deliver (0 when no
            message was delivered yet and no start is known: use the configured start).
        generation: the generation the new consumer is for (tag its subscription with it).
        reason: why, for logs.
    """

    __slots__ = ("from_stream_seq", "generation", "reason")

    def __init__(self, from_stream_seq: int, generation: int, reason: str) -> None:
        self.from_stream_seq = from_stream_seq
        self.generation = generation
        self.reason = reason

    def __repr__(self) -> str:
        return f"Reset(from_stream_seq={self.from_stream_seq}, generation={self.generation}, reason={self.reason!r})"


class Gap:
    """A gap to report (``recover=False`` only); the message, if any, is delivered all the same.

    Attributes:
        stream_seq: the stream sequence expected next (the last delivered + 1; 1 if none).
        consumer_seq: the consumer sequence received (or the heartbeat's last one).
        last_consumer_seq: the last consumer sequence received before it.
    """

    __slots__ = ("consumer_seq", "last_consumer_seq", "stream_seq")

    def __init__(self, stream_seq: int, consumer_seq: int, last_consumer_seq: int) -> None:
        self.stream_seq = stream_seq
        self.consumer_seq = consumer_seq
        self.last_consumer_seq = last_consumer_seq

    def __repr__(self) -> str:
        return f"Gap(stream_seq={self.stream_seq}, consumer_seq={self.consumer_seq}, last={self.last_consumer_seq})"


Action = Deliver | Skip | Ignore | Reset | Gap


class GapTracker:
    """Expected-sequence tracking for one ordered consumer, across the consumers it makes.

    Args:
        recover: True (ordered consumers): a gap resets; False (a plain push
            subscription): a gap is reported (:class:`Gap`) and tracking goes on.
        next_stream_seq: the first stream sequence to deliver (0: not known; messages of
            any stream sequence are delivered until one is).
        last_consumer_seq: the last consumer sequence received (0 for a consumer about to
            be created; None for an existing one: the first message or heartbeat sets it).

    Attributes:
        generation: the current generation (starts at 0).
        last_consumer_seq: the consumer sequence of the last message of this generation.
        next_stream_seq: where a new consumer starts (the last delivered + 1; 0: the
            configured start). The caller may set it when the server tells the start
            (the consumer's delivered floor) or move it back (:meth:`rewind`).
        resets: how many resets were returned.
    """

    __slots__ = ("generation", "last_consumer_seq", "next_stream_seq", "recover", "resets")

    def __init__(self, *, recover: bool = True, next_stream_seq: int = 0, last_consumer_seq: int | None = 0) -> None:
        self.recover = recover
        self.generation = 0
        self.last_consumer_seq = last_consumer_seq
        self.next_stream_seq = next_stream_seq
        self.resets = 0

    def __repr__(self) -> str:
        return (f"<GapTracker generation={self.generation} last_consumer_seq={self.last_consumer_seq} "
                f"next_stream_seq={self.next_stream_seq} resets={self.resets}>")

    # -- events ---------------------------------------------------------------------------------

    def message(self, stream_seq: int, consumer_seq: int, generation: int) -> Action:
        """A message with these sequences arrived from the consumer of ``generation``.

        Returns DELIVER, SKIP, IGNORE (an older generation), a :class:`Reset` (a gap, with
        ``recover``) or a :class:`Gap` (a gap, without ``recover``: deliver it and report).
        """
        if generation != self.generation:
            return IGNORE
        last = self.last_consumer_seq
        if last is not None and consumer_seq != last + 1:
            if self.recover:
                return self._reset(f"gap: consumer sequence {consumer_seq} where {last + 1} was expected")
            gap = Gap(self.next_stream_seq or 1, consumer_seq, last)
            self.last_consumer_seq = consumer_seq
            self.next_stream_seq = stream_seq + 1
            return gap
        self.last_consumer_seq = consumer_seq
        if stream_seq < self.next_stream_seq and self.recover:
            return SKIP
        self.next_stream_seq = stream_seq + 1
        return DELIVER

    def heartbeat(self, last_consumer_seq: int, generation: int) -> Action:
        """An idle heartbeat of ``generation`` says the consumer sent up to ``last_consumer_seq``.

        ADR-15: a ``Nats-Last-Consumer`` other than the last consumer sequence received is a
        gap (a negative value: the header was missing, nothing to compare). Returns IGNORE,
        a :class:`Reset` or a :class:`Gap` (then tracking goes on from that sequence).
        """
        if generation != self.generation or last_consumer_seq < 0:
            return IGNORE
        last = self.last_consumer_seq
        if last is None:  # an existing consumer: the first count we see
            self.last_consumer_seq = last_consumer_seq
            return IGNORE
        if last_consumer_seq == last:
            return IGNORE
        if self.recover:
            return self._reset(f"heartbeat says consumer sequence {last_consumer_seq}, last received {last}")
        self.last_consumer_seq = last_consumer_seq
        return Gap(self.next_stream_seq or 1, last_consumer_seq, last)

    def missed_heartbeat(self) -> Action:
        """The heartbeat monitor reported a miss: a :class:`Reset` (IGNORE without ``recover``)."""
        return self._reset("missed heartbeats") if self.recover else IGNORE

    def reconnected(self) -> Action:
        """The connection came back (the consumer may be lost): a :class:`Reset` (IGNORE without ``recover``)."""
        return self._reset("reconnected") if self.recover else IGNORE

    def status_from(self, generation: int, reason: str = "the consumer is gone") -> Action:
        """The consumer of ``generation`` ended (deleted, not found, no responders, its inbox
        closed): a :class:`Reset`, or IGNORE when ``generation`` is an older one (or without
        ``recover``)."""
        if generation != self.generation or not self.recover:
            return IGNORE
        return self._reset(reason)

    def dropped(self, generation: int) -> Action:
        """A message of ``generation`` was dropped here (the pending limit): a :class:`Reset`
        starting at it, or IGNORE (an older generation, or without ``recover``)."""
        return self.status_from(generation, "a message was dropped (slow consumer)")

    def is_next(self, consumer_seq: int, generation: int) -> bool:
        """True when a message with ``consumer_seq`` from ``generation`` would be in order now
        (a question: nothing changes)."""
        last = self.last_consumer_seq
        return generation == self.generation and (last is None or consumer_seq == last + 1)

    # -- what the caller decides ----------------------------------------------------------------

    def begin(self) -> int:
        """A new consumer is made for a reason of the caller's (a first one, or the next
        operation after a stop): a new generation that starts at consumer sequence 1, not
        counted as a reset. Returns the generation to tag it with."""
        self.generation += 1
        self.last_consumer_seq = 0
        return self.generation

    def rewind(self, stream_seq: int) -> None:
        """Messages from ``stream_seq`` on were not handed over: a new consumer starts there."""
        if stream_seq > 0 and (self.next_stream_seq == 0 or stream_seq < self.next_stream_seq):
            self.next_stream_seq = stream_seq

    def _reset(self, reason: str) -> Reset:
        self.generation += 1
        self.last_consumer_seq = 0
        self.resets += 1
        return Reset(self.next_stream_seq, self.generation, reason)
