"""Launches an ``elastic=True`` fit's ranks through ``spark_hvd.run_elastic`` (driver side)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from spark_hvd.estimator.elastic_plan import ElasticPlan


def run_elastic_fit(fn: Callable[[], Any], elastic: ElasticPlan, backend: Any, spark: Any, env: Mapping[str, str],
                    on_event: Callable[..., None], verbose: int, start_timeout: float,
                    keep_warm: tuple[str, ...], commit_store: Any = None) -> list[Any]:
    """The ranks' results, as ``SparkBackend.run`` gives them; the backend's own run options (stdout, nics,
    ...) apply, and the estimator's progress listens to rank 0 in every formation. Commits too large for the
    driver's memory go to ``commit_store`` (the estimator's Store)."""
    from spark_hvd import run_elastic

    options = {"spark": spark, "verbose": verbose, "start_timeout": start_timeout, "keep_warm": keep_warm,
               "commit_store": commit_store, **backend.run_options, "on_event": on_event}
    return run_elastic(fn, num_proc=backend.num_processes(), min_num_proc=elastic.min_num_proc,
                       max_num_proc=elastic.max_num_proc, env=backend.rank_env(env), **options)
