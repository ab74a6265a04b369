"""When a PubAck'ed publish that no stream answered (503) is sent again: the one schedule.

``publish_async`` and the Spark sink's row publisher both resend a message whose reply
says no stream answered (the stream is being created, or its leader is being elected):
up to ``attempts`` times, after ``wait``, ``2 x wait``, ... seconds, and only while the
reply to the resend can still come before the publish's deadline. Which errors are worth
a resend is :func:`jssync.base.errors.worth_retrying`'s decision; this module only says
when (pure).
"""

from __future__ import annotations

#: A resend needs at least this long before the publish's deadline for its reply to arrive.
RESEND_MARGIN = 0.05


def resend_delay(tries: int, attempts: int, wait: float, now: float, deadline: float) -> float | None:
    """Seconds to wait before sending a publish again after its ``tries``-th 503, or None: give up.

    ``tries`` resends were made so far (0 after the first 503); ``attempts`` is the most
    resends allowed, ``wait`` the first wait (the n-th resend waits ``n x wait``); ``now``
    and ``deadline`` are ``time.monotonic()`` values (the publish fails at ``deadline``).
    None when the resends are used up or the resend's reply could not come before the
    deadline (less than :data:`RESEND_MARGIN` left after the wait). Pure.
    """
    delay = wait * (tries + 1)
    if tries >= attempts or now + delay + RESEND_MARGIN >= deadline:
        return None
    return delay
