"""Driver: a warm-up stage that starts keep_warm's zygotes in the Spark workers a run is about to use, while the
caller prepares that run (an estimator writes its data).

A run's first task in a Spark Python worker (the first of a session, or any after pyspark ended its idle workers,
which it does once they have had no task for a minute) finds no zygote there and starts its rank process cold:
importing torch or TensorFlow (seconds) is then on the launch's critical path. The warm-up is a stage of the
very kind the run's is (mapInArrow, barrier, ``num_proc`` tasks at once, so they hold distinct workers of the
same pool), whose tasks start the zygote as the run's tasks key it (warm_up_task.py) and return at once. It is
submitted before the caller's own jobs, so Spark's FIFO scheduler gives it the slots first; the run's tasks then
fork from the zygotes, waiting for their imports when they are not done yet.

It never fails or delays the run: its failures are logged at debug level, and ``finish()`` (before the launch,
so it cannot hold slots the run's barrier stage needs) cancels it when it has not ended by then.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Mapping

from spark_hvd.launch.driver.connect_session import is_connect_session
from spark_hvd.launch.driver.launch_checks import ClusterShape, describe_cluster
from spark_hvd.launch.task.rank_task import prestart_zygote
from spark_hvd.launch.task.warm_up_task import WARM_UP_DDL, Prestart, WarmUpTask

logger = logging.getLogger(__name__)

# How long start() waits for Spark to accept the warm-up's job (its query is planned first), so that the
# caller's next job comes after it in the FIFO queue; past that the caller goes on regardless.
_SUBMIT_DEADLINE_S = 5.0
# Spark reports a submitted job to its status tracker through its listener bus: polled this often.
_SUBMIT_POLL_S = 0.005
# How long finish() waits for a stage it cancelled (its running tasks complete; they only start a process).
_CANCEL_DEADLINE_S = 30.0


class ZygoteWarmUp:
    """One warm-up stage, run from a driver thread: ``start()``, then ``finish()`` before the run launches."""

    def __init__(self, spark: Any, num_proc: int, run_env: Mapping[str, str], executable: str | None,
                 modules: tuple[str, ...], prestart: Prestart = prestart_zygote) -> None:
        self._spark = spark
        self._task = WarmUpTask(executable, run_env, modules, prestart)
        self._num_proc = num_proc
        self.group_id = f"spark_hvd.warm_up-{uuid.uuid4().hex}"
        self.zygotes: dict[int, int] = {}       # partition -> zygote pid, once the stage succeeded
        self.error: BaseException | None = None
        self._finished = False
        self._thread = threading.Thread(target=self._run, name="spark-hvd-warm-up", daemon=True)

    def start(self) -> "ZygoteWarmUp":
        """Submits the stage, and returns once Spark has its job (or after a short deadline)."""
        self._thread.start()
        tracker = self._spark.sparkContext.statusTracker()
        deadline = time.monotonic() + _SUBMIT_DEADLINE_S
        while self._thread.is_alive() and not tracker.getJobIdsForGroup(self.group_id):
            if time.monotonic() >= deadline:
                logger.debug("spark_hvd warm-up: its job was not submitted within %.0f s; going on",
                             _SUBMIT_DEADLINE_S)
                break
            self._thread.join(_SUBMIT_POLL_S)
        return self

    def finish(self) -> None:
        """Ends the warm-up: normally it has; else it is cancelled (its running tasks complete) and awaited.
        Once: a second call returns at once."""
        if self._finished or not self._thread.is_alive():
            return
        self._finished = True
        try:
            self._spark.sparkContext.cancelJobGroup(self.group_id)
        except Exception as e:  # noqa: BLE001 - the warm-up never fails the run
            logger.debug("spark_hvd warm-up: cancelling it failed: %s", e)
        self._thread.join(_CANCEL_DEADLINE_S)
        if self._thread.is_alive():
            logger.debug("spark_hvd warm-up: still running %.0f s after it was cancelled; launching anyway",
                         _CANCEL_DEADLINE_S)

    def _run(self) -> None:
        try:
            sc = self._spark.sparkContext
            # Job groups are per thread: this does not touch the caller's. No interrupt on cancel: Spark would
            # kill the task's Python worker, and the zygote with it.
            sc.setJobGroup(self.group_id, f"spark_hvd: warm-up of {self._num_proc} rank processes",
                           interruptOnCancel=False)
            n = self._num_proc
            rows = self._spark.range(0, n, 1, n).mapInArrow(self._task, WARM_UP_DDL, barrier=True).collect()
            self.zygotes = {int(row["partition"]): int(row["zygote"]) for row in rows}
            logger.debug("spark_hvd warm-up: the workers keep zygotes %s", sorted(self.zygotes.values()))
        except BaseException as e:  # noqa: BLE001 - logged and ignored: the run starts its processes itself
            self.error = e
            logger.debug("spark_hvd warm-up failed; the run starts its rank processes itself: %s", e)


def start_warm_up(spark: Any, num_proc: int, run_env: Mapping[str, str], executable: str | None,
                  modules: tuple[str, ...], prestart: Prestart | None = None, *,
                  shape: ClusterShape | None = None) -> ZygoteWarmUp | None:
    """A started warm-up for a ``spark_hvd.run`` of ``num_proc`` ranks with this ``env``, ``executable`` and
    ``keep_warm``; None where it cannot serve that run (the reason is logged at debug level):
    - no modules: the run keeps no zygote;
    - Spark Connect: the warm-up would need the client's session to run a stage and its thread's job group;
    - GPUs per task: a task's GPUs are part of the zygote's key, and which GPUs the run's task in a worker gets
      is only known in that task;
    - more ranks than slots, or dynamic allocation: the run itself fails at once, with the reason.
    ``prestart``: what the tasks call to start the zygote; default (None) this module's ``prestart_zygote``
    (rank_task's), looked up at each call, so a test can replace it with one that fails. ``shape``: the
    cluster's, when the caller has just described it; else it is described here.
    """
    reason = _why_not(spark, num_proc, modules, shape)
    if reason is not None:
        logger.debug("spark_hvd warm-up skipped: %s", reason)
        return None
    try:
        return ZygoteWarmUp(spark, num_proc, run_env, executable, modules, prestart or prestart_zygote).start()
    except Exception as e:  # noqa: BLE001 - the warm-up never fails the run
        logger.debug("spark_hvd warm-up could not start: %s", e)
        return None


def _why_not(spark: Any, num_proc: int, modules: tuple[str, ...], shape: ClusterShape | None) -> str | None:
    if not modules:
        return "no keep_warm modules"
    if is_connect_session(spark):
        return "a Spark Connect session"
    try:
        shape = shape if shape is not None else describe_cluster(spark)
    except Exception as e:  # noqa: BLE001
        return f"the cluster's shape is unknown ({e})"
    if shape.task_gpus is not None and _amount(shape.task_gpus) != 0.0:
        return f"tasks get GPUs (spark.task.resource.gpu.amount={shape.task_gpus})"
    if shape.dynamic_allocation:
        return "dynamic allocation"
    if shape.slots is None or shape.slots < num_proc:
        return f"{num_proc} rank(s) need {num_proc} task slots at once, the cluster has {shape.slots}"
    return None


def _amount(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
