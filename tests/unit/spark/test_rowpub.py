"""The row publisher's reply receiver (jssync/spark/rowpub.py ``_Acks``): which replies it counts, pure, no server.

A plain PubAck (``{"stream":"S","seq":N}``, a duplicate's) of a row still waiting is
counted on the I/O thread and drops the row; everything else (a PubAck with a domain, an
error, a 503 status, a reply not for a row) is handed to the publishing thread unchanged.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="jssync.spark needs PySpark (the spark extra)")

from jssync.core.msg import Msg
from jssync.spark.rowpub import _Acks

pytestmark = pytest.mark.timeout(60)

INBOX = "_INBOX.abc"


def _acks(rows: int) -> _Acks:
    return _Acks({r: ("S.x", b"", f"{INBOX}.{r}", None) for r in range(rows)}, len(INBOX) + 1)


def _reply(row: object, data: bytes, headers: dict[str, str] | None = None) -> Msg:
    return Msg(f"{INBOX}.{row}", "", data, headers)


def test_plain_pubacks_are_counted_and_drop_their_rows():
    a = _acks(4)
    a.put_nowait(_reply(1, b'{"stream":"S","seq":7}'))  # (learns the stream's head)
    a.put_nowait(_reply(0, b'{"stream":"S","seq":5}'))  # (the head learned: no regular expression)
    a.put_nowait(_reply(2, b'{"stream":"S","seq":9,"duplicate":true}'))
    a.put_nowait(_reply(3, b'{"stream":"T","seq":2,"duplicate": true}'))  # another stream, the server's spacing
    assert (a.stored, a.duplicates, a.lo, a.hi) == (2, 2, 5, 7)
    assert not a.rows and not a.odd


def test_a_reply_of_a_row_not_waiting_is_not_counted():
    a = _acks(1)
    a.put_nowait(_reply(0, b'{"stream":"S","seq":5}'))
    a.put_nowait(_reply(0, b'{"stream":"S","seq":6}'))  # a second reply
    a.put_nowait(_reply(7, b'{"stream":"S","seq":8}'))  # never published (or failed already)
    assert (a.stored, a.duplicates, a.lo, a.hi) == (1, 0, 5, 5)
    assert not a.odd


@pytest.mark.parametrize("data, headers", [
    (b'{"stream":"S","domain":"hub","seq":5}', None),
    (b'{"stream":"S","seq":5,"extra":1}', None),
    (b'{"stream":"S","seq":5x}', None),
    (b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}', None),
    (b"", {"Status": "503"}),
    (b'{"stream":"S","seq":5}', {"Nats-Msg-Id": "x"}),
])
def test_every_other_reply_goes_to_the_publishing_thread_unchanged(data, headers):
    a = _acks(2)
    a.put_nowait(_reply(1, b'{"stream":"S","seq":1}'))  # (a head learned)
    m = _reply(0, data, headers)
    a.put_nowait(m)
    assert list(a.odd) == [m] and 0 in a.rows
    assert (a.stored, a.duplicates) == (1, 0)


def test_a_reply_not_for_a_row_goes_to_the_publishing_thread():
    a = _acks(1)
    m = _reply("x", b'{"stream":"S","seq":5}')
    a.put_nowait(m)
    assert list(a.odd) == [m] and a.stored == 0


def test_a_waiting_publisher_is_woken_when_the_rows_are_down_to_its_level_or_another_reply_came():
    a = _acks(3)
    a.want = 1
    a.put_nowait(_reply(0, b'{"stream":"S","seq":1}'))
    assert not a.ready.is_set() and a.want == 1
    a.put_nowait(_reply(1, b'{"stream":"S","seq":2}'))
    assert a.ready.is_set() and a.want == -1  # woken once
    a.ready.clear()
    a.want = 0
    a.put_nowait(_reply(2, b'{"error":{"code":500,"description":"x"}}'))
    assert a.ready.is_set() and a.want == -1
