"""Driver: checks made before launching, so that impossible jobs fail at once and clearly.

Spark's own answer to a barrier stage that needs more slots than the cluster has is to retry the
slot check for about ten minutes (40 x 15 s) before failing; dynamic allocation fails only when
the stage is submitted. Both are checked here first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_hvd.errors import DynamicAllocationError, LaunchError, NotEnoughSlotsError

_DYNAMIC_ALLOCATION = "spark.dynamicAllocation.enabled"


@dataclass(frozen=True)
class ClusterShape:
    master: str
    slots: int | None              # tasks the cluster can run at once; None when unknown
    task_cpus: int = 1
    task_gpus: str | None = None   # spark.task.resource.gpu.amount, when set
    dynamic_allocation: bool = False


def describe_cluster(spark: Any) -> ClusterShape:
    """Reads the shape of the cluster behind ``spark`` (a SparkSession)."""
    try:
        sc = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext; Spark checks slots itself
        return ClusterShape(master="(Spark Connect)", slots=None)
    conf = sc.getConf()
    master = sc.master
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    return ClusterShape(
        master=master,
        slots=_slots(sc, task_cpus),
        task_cpus=task_cpus,
        task_gpus=conf.get("spark.task.resource.gpu.amount", None),
        dynamic_allocation=(conf.get(_DYNAMIC_ALLOCATION, "false").strip().lower() == "true"
                            and not _is_local_master(master)),
    )


def resolve_num_proc(num_proc: int | None, shape: ClusterShape) -> int:
    """``num_proc``, or all the cluster's slots when None; raises LaunchError if it cannot run."""
    if shape.dynamic_allocation:
        raise DynamicAllocationError(
            f"spark_hvd.run needs a barrier stage, and Spark does not run barrier stages with dynamic "
            f"allocation ({_DYNAMIC_ALLOCATION}=true, master {shape.master}). Start the session with "
            f"{_DYNAMIC_ALLOCATION}=false and a fixed number of executors.")
    if num_proc is None:
        if shape.slots is None:
            raise LaunchError("spark_hvd.run cannot count this cluster's task slots; pass num_proc")
        if shape.slots < 1:
            raise NotEnoughSlotsError(
                f"spark_hvd.run found no task slots ({_describe_slots(shape)}); are executors registered?",
                num_proc=0, slots=0)
        return shape.slots
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be a positive int, got {num_proc!r}")
    if shape.slots is not None and num_proc > shape.slots:
        raise NotEnoughSlotsError(
            f"spark_hvd.run: num_proc={num_proc} needs {num_proc} task slots at once (one barrier "
            f"stage), but the cluster has {shape.slots} ({_describe_slots(shape)}). Lower num_proc "
            f"or add executors.", num_proc=num_proc, slots=shape.slots)
    return num_proc


def _slots(sc: Any, task_cpus: int) -> int | None:
    """Exactly what Spark's barrier check counts, through the JVM; else an estimate from cores."""
    try:
        jsc = sc._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # noqa: BLE001 - internal API; fall back to the public estimate
        pass
    try:
        return max(0, int(sc.defaultParallelism) // max(1, task_cpus))
    except Exception:  # noqa: BLE001
        return None


def _describe_slots(shape: ClusterShape) -> str:
    text = f"master {shape.master}, spark.task.cpus={shape.task_cpus}"
    if shape.task_gpus is not None:
        text += f", spark.task.resource.gpu.amount={shape.task_gpus}"
    return text


def _is_local_master(master: str) -> bool:
    # As Spark decides it: local-cluster[...] is a real cluster, local[...] is not.
    return master == "local" or master.startswith("local[")
