"""Driver: ``horovod.spark.common.backend`` under its new name: how an estimator's fit runs its ranks.

    from spark_hvd.common.backend import SparkBackend
    est = TorchEstimator(backend=SparkBackend(num_proc=4, stdout=sys.stdout, verbose=1), ...)

A Backend runs ``fn`` on ``num_processes()`` ranks and returns their results in rank order. SparkBackend
does it with ``spark_hvd.run`` (one barrier stage), or ``spark_hvd.run_elastic`` for an elastic fit; its
keywords are ``spark_hvd.run``'s.

An estimator reaches the launcher only through its Backend: ``backend.for_fit(FitLaunch(...))`` is the backend
that runs one fit (SparkBackend resolves num_proc for it once, and starts warming the workers), and that
backend's ``run(fn, env=...)`` launches the ranks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from spark_hvd.errors import InputError


@dataclass(frozen=True)
class FitLaunch:
    """What an estimator's fit asks of the launch, beside Horovod's ``run(fn, args, kwargs, env)``."""

    spark: Any
    verbose: int = 1
    start_timeout: float | None = None
    keep_warm: tuple[str, ...] = ()      # what the ranks import: spark_hvd.run's keep_warm
    on_event: Callable[[int, dict[str, Any]], None] | None = None   # the ranks' emit_event, on the driver
    warm_up: bool = False                # start the ranks' processes while the fit writes its data
    env: Mapping[str, str] | None = None  # what the fit's run adds to the ranks' environment (for the warm-up)
    elastic: tuple[int | None, int | None] | None = None   # (min_num_proc, max_num_proc) of an elastic fit
    commit_store: Any = None             # where an elastic fit's commits too large for the driver go


class Backend:
    """What an estimator needs of whatever runs its ranks; subclass it to run them elsewhere."""

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        raise NotImplementedError

    def num_processes(self) -> int:
        raise NotImplementedError

    def for_fit(self, fit: FitLaunch) -> "Backend":
        """Driver: the backend that runs one estimator fit's ranks; this one, which cannot run an elastic fit.
        Used as a context manager around the fit (``close()`` at its end)."""
        if fit.elastic is not None:
            raise InputError(f"elastic=True runs on Spark's executors (spark_hvd.run_elastic): backend must be a "
                             f"SparkBackend, got {type(self).__name__}")
        return self

    def close(self) -> None:
        """Driver: ends what ``for_fit`` started for the fit; nothing here."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class SparkBackend(Backend):
    """Runs the ranks as one Spark barrier stage through ``spark_hvd.run``.

    num_proc: ranks; default every task slot of the active session's cluster.
    env: extra environment variables for the ranks (a call's own ``env`` is added on top).
    run_options: any other keyword of ``spark_hvd.run`` (stdout, stderr, verbose, nics,
        prefix_output_with_timestamp, start_timeout, use_mpi, use_gloo, extra_mpi_args, ...).
    """

    # Set on the backend for_fit returns (class defaults, so that a SparkBackend pickled before them loads).
    _elastic: tuple[int | None, int | None] | None = None   # (min_num_proc, max_num_proc): through run_elastic
    _warm_up: Any = None                      # the fit's warm-up stage, until the launch

    def __init__(self, num_proc: int | None = None, env: Mapping[str, str] | None = None,
                 **run_options: Any) -> None:
        if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
            raise ValueError(f"SparkBackend: num_proc must be a positive int, got {num_proc!r}")
        self._num_proc = num_proc
        self._env = dict(env or {})
        self._run_options = dict(run_options)

    def num_processes(self) -> int:
        if self._num_proc is None:
            from spark_hvd.launch.driver.active_session import active_session
            from spark_hvd.launch.driver.launch_checks import describe_cluster, resolve_num_proc

            spark = self._run_options.get("spark") or active_session("SparkBackend")
            self._num_proc = resolve_num_proc(None, describe_cluster(spark))
        return self._num_proc

    @property
    def env(self) -> dict[str, str]:
        """The environment variables this backend gives every rank (a copy)."""
        return dict(self._env)

    def rank_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """What the ranks of a call with ``env`` get: this backend's variables, with the call's on top."""
        return {**self._env, **dict(env or {})}

    @property
    def run_options(self) -> dict[str, Any]:
        """The spark_hvd.run keywords this backend was made with (a copy)."""
        return dict(self._run_options)

    def for_fit(self, fit: FitLaunch) -> "SparkBackend":
        """Driver: this backend bound to one fit: the fit's launch settings under this backend's own options
        (which win, but for the fit's ``on_event``), num_proc resolved once (waiting, as ``spark_hvd.run``
        does, for a starting cluster's slots), and, with ``fit.warm_up``, the workers warming up while the fit
        writes its data (launch/driver/zygote_warm_up.py)."""
        from spark_hvd.launch.driver.fit_launch import resolve_fit_num_proc, start_fit_warm_up

        bound = copy.copy(self)
        defaults = {"spark": fit.spark, "verbose": fit.verbose, "start_timeout": fit.start_timeout,
                    "keep_warm": fit.keep_warm}
        if fit.elastic is not None:
            defaults["commit_store"] = fit.commit_store
        bound._run_options = {**defaults, **self._run_options, "on_event": fit.on_event}
        bound._elastic = fit.elastic
        bound._num_proc, shape = resolve_fit_num_proc(self._num_proc, bound._run_options, elastic=fit.elastic)
        bound._warm_up = start_fit_warm_up(bound._num_proc, shape, bound.rank_env(fit.env),
                                           bound._run_options) if fit.warm_up else None
        return bound

    def close(self) -> None:
        """Driver: ends the fit's warm-up (so that it holds no slot the ranks' stage needs)."""
        warm_up, self._warm_up = self._warm_up, None
        if warm_up is not None:
            warm_up.finish()

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None, **run_options: Any) -> list[Any]:
        """``spark_hvd.run(fn, args, kwargs, num_proc, env=...)`` (``spark_hvd.run_elastic`` for an elastic
        fit); ``run_options`` win over the backend's."""
        from spark_hvd.launch.driver.elastic_runner import run_elastic
        from spark_hvd.launch.driver.runner import run

        self.close()
        options = {**self._run_options, **run_options}
        if self._elastic is not None:
            min_num_proc, max_num_proc = self._elastic
            return run_elastic(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(),
                               min_num_proc=min_num_proc, max_num_proc=max_num_proc, env=self.rank_env(env),
                               **options)
        return run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(), env=self.rank_env(env), **options)

    def __repr__(self) -> str:
        return f"SparkBackend(num_proc={self._num_proc!r}, options={sorted(self._run_options)})"


__all__ = ["Backend", "FitLaunch", "SparkBackend"]
