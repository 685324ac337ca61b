"""Driver: what spark_hvd needs to know of a Spark Connect session, which has no SparkContext.

Under Connect the driver program is a gRPC client of the Spark driver: executors may have no route
back to it (a laptop, Databricks Connect), so nothing here or in the launch ever dials or listens on
the client. Everything travels on the Connect channel the client opened: settings through
``spark.conf``, cluster facts through tiny queries, the ranks' start through Connect's progress
reports, and their results, output and failures through the barrier stage's rows (StageOutbox).
"""

from __future__ import annotations

import threading
from typing import Any, Callable



def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (pyspark.sql.connect), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def conf_value(spark: Any, key: str) -> str | None:
    """A Spark setting as the session sees it, or None when it is unset; works under Connect too."""
    try:
        return spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a key the server refuses to show reads as unset
        return None


def default_parallelism(spark: Any) -> int:
    """The Spark driver's defaultParallelism, read where Connect can see it: the partition count of a
    range without one, which Spark sizes as defaultParallelism (total executor cores on a cluster,
    N for local[N]). One tiny job, no data moved."""
    from pyspark.sql import functions as F

    # The leaf parallelism setting, when set, sizes the range instead; then it is the answer Spark uses too.
    row = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).agg(F.max("p").alias("top")).first()
    return int(row["top"]) + 1


class StageStartWatch:
    """Calls ``on_started()`` once Connect's progress reports show ``num_tasks`` tasks running at once:
    a barrier stage launches all its tasks together, so that is the moment every rank has started.

    Connect's progress handlers are per session, not per operation; one that sees another job's tasks
    would only call a start early, never hide one.
    """

    def __init__(self, spark: Any, num_tasks: int, on_started: Callable[[], None]) -> None:
        self._spark = spark
        self._num_tasks = num_tasks
        self._on_started = on_started
        self._fired = threading.Event()
        self._registered = False

    def __enter__(self) -> "StageStartWatch":
        register = getattr(self._spark, "registerProgressHandler", None)
        if register is None:
            # A client without progress reports (before pyspark 4.0): call it started, so the start
            # timeout cannot fire on a job that is running; the stage's end still reports everything.
            self._fire()
        else:
            register(self)
            self._registered = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._registered:
            self._spark.removeProgressHandler(self)

    def __call__(self, stages: Any, inflight_tasks: int, operation_id: Any, done: bool) -> None:
        if inflight_tasks >= self._num_tasks or any(
                stage.num_tasks == self._num_tasks and stage.num_completed_tasks > 0 for stage in stages or ()):
            self._fire()

    def _fire(self) -> None:
        if not self._fired.is_set():
            self._fired.set()
            self._on_started()
