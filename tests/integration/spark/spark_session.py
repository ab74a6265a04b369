"""One place that starts the SparkSessions of the Spark test modules.

Each Spark test module starts its own session in a module-scoped fixture and stops it
at the end of the module: a process has one SparkContext at a time, and the modules use
different masters (``local[2,3]``; ``local-cluster[2,1,1024]`` in test_spark_cluster.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jssync


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
    if active is not None:  # a session another module forgot to stop
        active.stop()
    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for k, v in conf.items():
        b = b.config(k, v)
    session = b.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    jspark.register(session)
    return session
