"""Driver: checks made before launching, so that impossible jobs fail at once and clearly.

Spark's own answer to a barrier stage that needs more slots than the cluster has is to retry the
slot check for about ten minutes (40 x 15 s) before failing; dynamic allocation fails only when
the stage is submitted. Both are checked here first.

Slots are counted through the JVM on a classic session, and through one tiny query under Spark
Connect (connect_session.default_parallelism). Right after a session starts on a cluster, executors
may not have registered yet (on Kubernetes, pods take minutes to schedule and pull): cluster_for_launch
waits for them, within the start timeout, as Horovod does, before it calls a shortage. It fails at once
only where the slots cannot grow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from spark_hvd.errors import DynamicAllocationError, LaunchError, NotEnoughSlotsError
from spark_hvd.launch.driver.connect_session import conf_value, default_parallelism, is_connect_session
from spark_hvd.launch.driver.run_arguments import positive_int

_DYNAMIC_ALLOCATION = "spark.dynamicAllocation.enabled"
# Spark's own window for executors to register before scheduling begins (its default: 30 s).
_REGISTRATION_WAIT = "spark.scheduler.maxRegisteredResourcesWaitingTime"
_DEFAULT_REGISTRATION_WAIT_S = 30.0
_REGISTERED_RATIO = "spark.scheduler.minRegisteredResourcesRatio"
# Spark tells Python nothing when an executor registers, so the count is polled this often.
_SLOT_POLL_S = 0.5


@dataclass(frozen=True)
class ClusterShape:
    master: str
    slots: int | None              # tasks the cluster can run at once; None when unknown
    task_cpus: int = 1
    task_gpus: str | None = None   # spark.task.resource.gpu.amount, when set
    dynamic_allocation: bool = False


def describe_cluster(spark: Any) -> ClusterShape:
    """Reads the shape of the cluster behind ``spark`` (a SparkSession, classic or Spark Connect)."""
    if is_connect_session(spark):
        return _describe_connect_cluster(spark)
    sc = spark.sparkContext
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


def cluster_for_launch(spark: Any, num_proc: int | None, start_timeout_s: float,
                       describe: Callable[[Any], ClusterShape] = describe_cluster, *,
                       wait_for_num_proc: bool = True,
                       on_wait: Callable[[str], None] | None = None) -> ClusterShape:
    """The cluster's shape once its executors have registered enough slots for ``num_proc`` ranks.

    With ``num_proc`` on a cluster master, wait until the cluster has that many slots, up to
    ``start_timeout_s``: executors may still be registering, long after Spark's own registration window.
    Return at once where the slots cannot grow: a local master, dynamic allocation (Spark runs no barrier
    stage under it), or a ceiling of this application's settings below ``num_proc``. ``on_wait`` gets a
    status line whenever the count changes while waiting.

    With num_proc None (count them all), or ``wait_for_num_proc`` False (run_elastic, which grows its job
    as slots come), a cluster with no slots yet is still starting: wait for one, up to ``start_timeout_s``;
    short of ``num_proc`` (or to count them all), wait while Spark's registration window
    (spark.scheduler.maxRegisteredResourcesWaitingTime after the application started) is open.
    resolve_num_proc then judges the result.
    """
    began = time.monotonic()
    shape = describe(spark)
    if shape.slots is None or _is_local_master(shape.master) or shape.dynamic_allocation:
        return shape
    patient = num_proc is not None and wait_for_num_proc
    if patient and (ceiling := _slot_ceiling(spark, shape)) is not None and ceiling < num_proc:
        return shape
    window_left = _registration_window_left_s(spark)
    need = 1 if num_proc is None else num_proc
    shown: int | None = None
    while True:
        waited = time.monotonic() - began
        registering = waited < window_left
        enough = shape.slots >= need and (num_proc is not None or not registering)
        if enough or waited >= start_timeout_s or (shape.slots > 0 and not registering and not patient):
            return shape
        if on_wait is not None and shape.slots != shown:
            shown = shape.slots
            wanted = f"{shape.slots} of {num_proc}" if num_proc is not None else f"{shape.slots}"
            on_wait(f"{wanted} task slots registered, waiting (up to start_timeout={start_timeout_s:g}s)")
        time.sleep(_SLOT_POLL_S)
        shape = replace(shape, slots=describe(spark).slots)


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
    positive_int("num_proc", num_proc)
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


def _slot_ceiling(spark: Any, shape: ClusterShape) -> int | None:
    """The most task slots this application can ever hold, where its settings cap them; None when they do not:
    spark.cores.max (standalone), or a fixed executor count on Kubernetes and YARN (spark.executor.cores
    defaults to 1 there)."""
    cores_max = _int_setting(spark, "spark.cores.max")
    if cores_max is not None:
        return cores_max // max(1, shape.task_cpus)
    instances = _int_setting(spark, "spark.executor.instances")
    if instances is not None and shape.master.startswith(("k8s://", "yarn")):
        return instances * (_int_setting(spark, "spark.executor.cores") or 1) // max(1, shape.task_cpus)
    return None


def _int_setting(spark: Any, key: str) -> int | None:
    try:
        return int(conf_value(spark, key) or "")
    except ValueError:
        return None  # unset, or a value Spark itself would refuse: no ceiling is known


def _describe_connect_cluster(spark: Any) -> ClusterShape:
    master = conf_value(spark, "spark.master") or "(Spark Connect)"
    task_cpus = int(conf_value(spark, "spark.task.cpus") or "1")
    # An explicit parallelism setting sizes the probe's range instead of the executors' cores: unknown then.
    explicit = any(conf_value(spark, key) for key in ("spark.default.parallelism",
                                                      "spark.sql.leafNodeDefaultParallelism"))
    slots = None if explicit else default_parallelism(spark) // max(1, task_cpus)
    return ClusterShape(
        master=master, slots=slots, task_cpus=task_cpus,
        task_gpus=conf_value(spark, "spark.task.resource.gpu.amount"),
        dynamic_allocation=((conf_value(spark, _DYNAMIC_ALLOCATION) or "false").strip().lower() == "true"
                            and not _is_local_master(master)),
    )


def _registration_window_left_s(spark: Any) -> float:
    """Seconds left of Spark's executor registration window; 0 when it cannot be told, or when the session
    already waited for every executor (minRegisteredResourcesRatio=1) before it started."""
    try:
        if float(conf_value(spark, _REGISTERED_RATIO) or 0.0) >= 1.0:
            return 0.0
    except ValueError:
        pass  # Spark itself would refuse the setting; count the window as usual
    try:
        started_ms = (int(conf_value(spark, "spark.app.startTime") or 0) if is_connect_session(spark)
                      else int(spark.sparkContext.startTime))
    except (TypeError, ValueError):
        return 0.0
    window_s = _seconds(conf_value(spark, _REGISTRATION_WAIT), _DEFAULT_REGISTRATION_WAIT_S)
    return max(0.0, started_ms / 1000.0 + window_s - time.time()) if started_ms else 0.0


def _seconds(text: str | None, default: float) -> float:
    """A Spark time setting ("30s", "500ms", "2min", "45") in seconds; ``default`` when unset or unreadable."""
    if not text:
        return default
    value = text.strip().lower()
    for suffix, scale in (("ms", 0.001), ("min", 60.0), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if value.endswith(suffix):
            value, unit = value[: -len(suffix)], scale
            break
    else:
        unit = 1.0  # Spark reads a bare number of this setting as seconds
    try:
        return float(value) * unit
    except ValueError:
        return default


def _describe_slots(shape: ClusterShape) -> str:
    text = f"master {shape.master}, spark.task.cpus={shape.task_cpus}"
    if shape.task_gpus is not None:
        text += f", spark.task.resource.gpu.amount={shape.task_gpus}"
    return text


def _is_local_master(master: str) -> bool:
    # As Spark decides it: local-cluster[...] is a real cluster, local[...] is not.
    return master == "local" or master.startswith("local[")
