"""Driver: what ``SparkBackend.for_fit`` needs of the launcher for one estimator fit: its ranks, counted once
(waiting for a starting cluster's slots as ``spark_hvd.run`` does), and the warm-up stage that starts the
ranks' processes in the workers while the fit writes its data (zygote_warm_up.py).
"""

from __future__ import annotations

from typing import Any, Mapping

from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.active_session import active_session
from spark_hvd.launch.driver.launch_checks import ClusterShape, cluster_for_launch, resolve_num_proc
from spark_hvd.launch.driver.run_options import status_line
from spark_hvd.launch.driver.zygote_warm_up import ZygoteWarmUp, start_warm_up


def resolve_fit_num_proc(num_proc: int | None, options: Mapping[str, Any], *,
                         elastic: tuple[int | None, int | None] | None) -> tuple[int, ClusterShape | None]:
    """The fit's ranks and the cluster's shape that says so (None when not looked at), from ``spark_hvd.run``
    keywords ``options``. A static fit is checked as ``spark_hvd.run`` checks it, before the data is written;
    an elastic one with ``num_proc`` given is left to ``run_elastic``, which starts on the slots there are."""
    if elastic is not None and num_proc is not None:
        return num_proc, None
    spark = options.get("spark") or active_session("SparkBackend")
    verbose = options.get("verbose", 1)
    on_wait = status_line(options.get("stderr"), verbose) if isinstance(verbose, int) else None
    shape = cluster_for_launch(spark, num_proc, checked.start_timeout_s(options.get("start_timeout")),
                               wait_for_num_proc=elastic is None, on_wait=on_wait)
    return resolve_num_proc(num_proc, shape), shape


def start_fit_warm_up(num_proc: int, shape: ClusterShape | None, env: Mapping[str, str],
                      options: Mapping[str, Any]) -> ZygoteWarmUp | None:
    """The warm-up for the fit's launch with ``spark_hvd.run`` keywords ``options`` (its zygotes are keyed on
    what the launch will use); None where it cannot serve, or where an option is bad (the launch names it)."""
    try:
        modules = checked.module_names("keep_warm", options.get("keep_warm", ()))
        executable = checked.executable(options.get("executable"))
        env = checked.rank_env(env)
    except (TypeError, ValueError):
        return None
    spark = options.get("spark") or active_session("SparkBackend")
    return start_warm_up(spark, num_proc, env, executable, modules, shape=shape)
