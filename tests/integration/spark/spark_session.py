"""One place that starts the SparkSessions of the Spark test modules.

A process has one SparkContext at a time, and starting one costs seconds (a JVM, a py4j
gateway), and each new SparkContext's first ``jetstream`` job seconds more (its Python
workers start and import pyarrow and jssync): the modules share one session for the whole
test run (``SharedSessions``, the ``spark`` fixture of conftest.py), all of them on
``MASTER``, ``local[2,3]``: two threads, and up to three attempts per task, as a cluster
retries a failed task (test_source_and_sink.py forces retries). A module that asks for
another master stops the current session and starts its own; test_local_cluster.py
(``local-cluster[2,1,1024]``) starts and stops its own with ``start_session``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jssync

#: JVM flags of the test JVMs (driver, local-cluster executors, subprocess drivers): the client
#: compiler only and the serial collector. The test JVMs live for seconds to minutes on a
#: machine of 2 cores, where the C2 compiler threads and the parallel collector's threads
#: took CPU from the work itself (local-cluster's start took half as long again without
#: them). They change how fast the JVM runs Spark, never what it does.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: The master of the session the modules share.
MASTER = "local[2,3]"


def jssync_root() -> str:
    """The directory that holds the ``jssync`` package this process imports."""
    return os.path.dirname(os.path.dirname(os.path.abspath(jssync.__file__)))


def start_session(master: str, app: str, **conf: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from jssync import spark as jspark

    active = SparkContext._active_spark_context
    if active is not None:  # a session of another master (or one a module forgot to stop)
        active.stop()
    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # the driver's flags count when this process starts its JVM (its first session)
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
    )
    for k, v in conf.items():
        b = b.config(k, v)
    session = b.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    jspark.register(session)
    return session


class SharedSessions:
    """The session of the last master asked for, kept across test modules."""

    def __init__(self) -> None:
        self._master: str | None = None
        self._session: Any = None

    def get(self, master: str) -> Any:
        """The running session of ``master``: the one already there if it is still the active
        one, else a new one (stopping the session of another master)."""
        from pyspark import SparkContext

        s = self._session
        if s is not None and self._master == master and SparkContext._active_spark_context is s.sparkContext:
            return s
        self._session = start_session(master, "jssync-tests")
        self._master = master
        return self._session

    def stop(self) -> None:
        """Stop the session held, if it is still running."""
        from pyspark import SparkContext

        s, self._session, self._master = self._session, None, None
        if s is not None and SparkContext._active_spark_context is s.sparkContext:
            s.stop()
