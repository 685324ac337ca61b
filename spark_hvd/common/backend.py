"""``horovod.spark.common.backend`` under its new name: how an estimator's fit runs its ranks (driver side).

    from spark_hvd.common.backend import SparkBackend
    est = TorchEstimator(backend=SparkBackend(num_proc=4, stdout=sys.stdout, verbose=1), ...)

A Backend runs ``fn`` on ``num_processes()`` ranks and returns their results in rank order. SparkBackend
does it with ``spark_hvd.run`` (one barrier stage); its keywords are ``spark_hvd.run``'s.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence


class Backend:
    """What an estimator needs of whatever runs its ranks; subclass it to run them elsewhere."""

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None) -> list[Any]:
        raise NotImplementedError

    def num_processes(self) -> int:
        raise NotImplementedError


class SparkBackend(Backend):
    """Runs the ranks as one Spark barrier stage through ``spark_hvd.run``.

    num_proc: ranks; default every task slot of the active session's cluster.
    env: extra environment variables for the ranks (a call's own ``env`` is added on top).
    run_options: any other keyword of ``spark_hvd.run`` (stdout, stderr, verbose, nics,
        prefix_output_with_timestamp, start_timeout, use_mpi, use_gloo, extra_mpi_args, ...).
    """

    def __init__(self, num_proc: int | None = None, env: Mapping[str, str] | None = None,
                 **run_options: Any) -> None:
        if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
            raise ValueError(f"SparkBackend: num_proc must be a positive int, got {num_proc!r}")
        self._num_proc = num_proc
        self._env = dict(env or {})
        self._run_options = dict(run_options)

    def num_processes(self) -> int:
        if self._num_proc is None:
            from spark_hvd.launch.driver.launch_checks import describe_cluster, resolve_num_proc
            from spark_hvd.launch.driver.active_session import active_session

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

    def run(self, fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            env: Mapping[str, str] | None = None, **run_options: Any) -> list[Any]:
        """``spark_hvd.run(fn, args, kwargs, num_proc, env=...)``; ``run_options`` win over the backend's."""
        from spark_hvd.launch.driver.runner import run

        options = {**self._run_options, **run_options}
        return run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(), env=self.rank_env(env), **options)

    def __repr__(self) -> str:
        return f"SparkBackend(num_proc={self._num_proc!r}, options={sorted(self._run_options)})"


__all__ = ["Backend", "SparkBackend"]
