"""The Spark data source's errors, under ``jssync.JetStreamError`` (shown as ``jssync.spark``'s)."""

from __future__ import annotations

from typing import Any

from ..base.errors import JetStreamError


class SparkWriteError(JetStreamError):
    """A row could not be published by the ``jetstream`` sink; the Spark task fails with it.

    The message names the partition, the row, the subject and the cause (the PubAck
    error, a timeout waiting for PubAcks, a bad subject...).
    """


class DataLossError(JetStreamError):
    """Messages of a planned read range were removed before a task read them (``failOnDataLoss``).

    The message names the stream and the sequences: they were at or after the stream's
    first sequence when the range was planned (or when the micro-batch started), and below
    it when the task began to read (removed by the stream's limits, a purge or their age).
    """


class _Stopped(Exception):  # noqa: N818 - internal: the task was stopped, not an error of its own
    """Raised inside :func:`write_batches` when the driver's abort stopped the task."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("stopped")
        self.report = report


class _RowFailed(Exception):  # noqa: N818 - internal, always turned into SparkWriteError
    """A row's PubAck failed (or did not come in time): ``row``, ``subject``, ``error``."""

    def __init__(self, row: int, subject: str, error: BaseException) -> None:
        super().__init__(row, subject, error)
        self.row = row
        self.subject = subject
        self.error = error


class _InputFailed(Exception):  # noqa: N818 - internal, always turned into SparkWriteError
    """The task's input (the Arrow batches Spark hands over) raised ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


SparkWriteError.__module__ = DataLossError.__module__ = "jssync.spark"  # their public home
