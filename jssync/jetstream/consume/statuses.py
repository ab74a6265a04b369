"""The pull engine's rules for what goes wrong: statuses that are not a plain end of a pull,
missed heartbeats, and how the engine ends or starts over (ADR-37 "Status handling").

Pure functions over a :class:`~jssync.jetstream.consume.engine.PullEngine`'s public state
(no I/O, no threads, no clock: the time comes as an argument); the engine calls them and
returns what they answer. A plain end of a pull (404, 408, 409 Batch Completed / Message
Size Exceeds MaxBytes) and heartbeats stay in the engine: they are its steady path.

* a terminal status (409 Consumer Deleted / is push based) ends the consume after the
  buffer (:func:`end_with`); an ordered consume makes its consumer again instead
  (:func:`start_recreate`);
* 503 is warned about once per outage, writes off, looks the consumer up and re-pulls after
  a pause; 409 Leadership Change writes off and re-pulls; 423 loses the pin id;
* 409 Exceeded ... and 400 are warned about (once until the description changes or a pull
  ends normally), the pulls in flight written off and a new one sent after a pause
  (:func:`retry_later`);
* a single pull (``fetch``, ``next``) ends at any status but a heartbeat
  (:func:`single_status`) or at a missed heartbeat (:func:`single_tick`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base.errors import NoHeartbeatError
from ...base.status import Action as StatusAction
from ...base.status import Status, status_error
from .actions import NOTHING, Action, ArmTimer, CheckConsumer, End, EngineState, PinLost, Recreate, Unsubscribe, Warn

if TYPE_CHECKING:
    from .engine import PullEngine

__all__ = ["RETRY_PAUSE", "end_with", "no_heartbeat", "retry_later", "single_status", "single_tick",
           "start_recreate", "status_verdict"]

#: A pull refused with a warning or 503 is sent again after min(this, idle_heartbeat / 2) seconds.
RETRY_PAUSE = 1.0

_RUNNING = EngineState.RUNNING
_DRAINING = EngineState.DRAINING
_CLOSED = EngineState.CLOSED
_FILLED: tuple[Action, ...] = (End(None),)


def status_verdict(e: PullEngine, act: StatusAction, st: Status, now: float) -> tuple[Action, ...]:
    """A status that ended one of ``e``'s pulls (counted already) and is not a plain end:
    terminal, 503, a reset (409 Leadership Change), 423, or a warning / 400."""
    state = e.state
    if act is StatusAction.TERMINAL:
        err = status_error(st, e.stream, e.consumer)
        if e.recreate:
            return start_recreate(e, "consumer gone", err)
        return end_with(e, err)
    if act is StatusAction.NO_RESPONDERS:
        err = status_error(st, e.stream, e.consumer)
        if e.recreate:
            return start_recreate(e, "no responders", err)
        out: list[Action] = []
        if not e.nr_outage:
            e.nr_outage = True
            out.append(Warn(err))
        out.extend(e.write_off())
        if state is _RUNNING:
            out.append(CheckConsumer())
        out.extend(retry_later(e, now))
        return tuple(out)
    if act is StatusAction.RESET:
        return (Warn(status_error(st, e.stream, e.consumer)), *e.write_off(), *e.refill())
    if act is StatusAction.PIN_LOST:
        return (PinLost(st.description),)
    # a warning (409 Exceeded ...) or 400 ended one of the pulls, which one is unknown:
    # every pull in flight is written off, the next goes out after a pause (it may be refused again)
    out = []
    if st.description != e.last_warning:
        e.last_warning = st.description
        out.append(Warn(status_error(st, e.stream, e.consumer)))
    out.extend(e.write_off())
    out.extend(retry_later(e, now))
    return tuple(out)


def single_status(e: PullEngine, act: StatusAction, st: Status) -> tuple[Action, ...]:
    """A single pull: any status but a heartbeat is the last thing its request brings."""
    if act is StatusAction.HEARTBEAT or e.state is not _RUNNING:
        return NOTHING
    e.state = _CLOSED
    e.open -= 1
    e.disc += st.pending_msgs
    e.disc_b += st.pending_bytes
    if act is StatusAction.DONE:
        return _FILLED
    err = status_error(st, e.stream, e.consumer)
    e.error = err
    fatal = act is StatusAction.ERROR or act is StatusAction.TERMINAL or act is StatusAction.NO_RESPONDERS
    if act is StatusAction.PIN_LOST:
        return (PinLost(st.description), End(err, False))
    return (End(err, fatal),)


def single_tick(e: PullEngine, now: float) -> tuple[Action, ...]:
    """A single pull's reader ticks at ``now`` while it waits: the end at a missed heartbeat."""
    if not e.heartbeat:
        return NOTHING
    if e.activity != e.last_act:
        e.last_act = e.activity
        e.monitor.seen(now)
        return NOTHING
    if not e.monitor.check(now):
        return NOTHING
    e.state = _CLOSED
    err = no_heartbeat(e)
    e.error = err
    return (End(err, False),)


def no_heartbeat(e: PullEngine) -> NoHeartbeatError:
    """The error of a missed heartbeat (2 x idle_heartbeat of silence)."""
    if e.single:
        return NoHeartbeatError(f"no heartbeat from consumer {e.consumer!r} on stream {e.stream!r} "
                                f"within {2 * e.heartbeat}s")
    if e.recreate:
        return NoHeartbeatError(f"no heartbeat from the ordered consumer {e.consumer!r} on stream {e.stream!r} "
                                f"within {2 * e.heartbeat}s: recreating it")
    return NoHeartbeatError(f"no heartbeat or message from consumer {e.consumer!r} on stream {e.stream!r} "
                            f"within {2 * e.heartbeat}s")


def retry_later(e: PullEngine, now: float) -> tuple[Action, ...]:
    """The next pull waits a pause out (the engine's ticks pull once it passed)."""
    if e.state is not _RUNNING:
        return NOTHING
    e.retry_at = now + min(RETRY_PAUSE, e.heartbeat / 2)
    return NOTHING  # the next ticks (every heartbeat / TICKS) pull once it passed


def start_recreate(e: PullEngine, reason: str, error: BaseException | None) -> tuple[Action, ...]:
    """(recreate engines) the consumer must be made again: no pull until :meth:`PullEngine.recreated`."""
    if e.resetting or e.state is not _RUNNING:
        return NOTHING
    e.resetting = True
    out: tuple[Action, ...] = (Recreate(reason, error),)
    if reason == "missed heartbeat" and error is not None:
        out = (Warn(error), *out)
    return out


def end_with(e: PullEngine, err: BaseException) -> tuple[Action, ...]:
    """End the consume with ``err`` after the buffer (DRAINING; once: the first error wins)."""
    if (e.state is not _RUNNING and e.state is not _DRAINING) or e.error is not None:
        return NOTHING
    e.state = _DRAINING
    e.error = err
    return (ArmTimer(None), End(err), Unsubscribe(wait=False))
