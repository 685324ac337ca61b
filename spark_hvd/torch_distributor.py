"""Driver: ``spark_hvd.TorchDistributor``, pyspark's ``TorchDistributor`` API on spark_hvd's launcher.

A script written for ``pyspark.ml.torch.distributor.TorchDistributor`` runs after changing only
its import. The ranks get torchrun's environment (see torch_distributed_env.py), and a DDP or
FSDP function runs unchanged; what changes is the launch (one barrier stage, a child process per
rank, no torchrun), the failure reports (the failing rank, with its traceback), progress events
(``spark_hvd.emit_event``) and the start timeout, all as in ``spark_hvd.run``.
"""

from __future__ import annotations

import os
import warnings
from typing import IO, Any, Callable, Mapping

from collective.config import inherited_environ
from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.active_session import active_session, find_session
from spark_hvd.launch.task.gpus import CUDA_VISIBLE_DEVICES, visible_devices
from spark_hvd.launch.rank.rank_context import rank_context
from spark_hvd.script_call import ScriptCall

_TORCH_SSL_CONF = "pytorch.spark.distributor.ignoreSsl"   # pyspark's, so existing settings carry over
_TASK_GPUS = "spark.task.resource.gpu.amount"
_DRIVER_GPUS = "spark.driver.resource.gpu.amount"
_OMP_NUM_THREADS = "OMP_NUM_THREADS"


class TorchDistributor:
    """Runs a PyTorch training function or script on ``num_processes`` ranks, as pyspark's does.

    num_processes: how many processes train (default 1).
    local_mode: run them on the driver (through spark_hvd's local launcher, collective.run)
        rather than in one Spark barrier stage (default True, as in pyspark).
    use_gpu: train on GPUs (default True, as in pyspark). On a cluster, each task takes
        ``spark.task.resource.gpu.amount`` (must be 1) GPUs and sees them as its
        CUDA_VISIBLE_DEVICES; locally, the ranks share the driver's GPUs. Without it, the ranks
        on a cluster see no GPU (CUDA_VISIBLE_DEVICES="").
    _ssl_conf: pyspark's: the Spark setting that allows training on a cluster whose
        ``spark.ssl.enabled`` is true, although the ranks' traffic is not encrypted.

    Keyword-only, spark_hvd's own: ``spark`` (default: the active session), ``start_timeout``,
    ``env``, ``stdout``, ``stderr``, ``verbose``, ``tail_lines`` and ``on_event``, which mean
    what they mean for ``spark_hvd.run``.
    """

    def __init__(
        self,
        num_processes: int = 1,
        local_mode: bool = True,
        use_gpu: bool = True,
        _ssl_conf: str = _TORCH_SSL_CONF,
        *,
        spark: Any = None,
        start_timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        stdout: IO | None = None,
        stderr: IO | None = None,
        verbose: int = 1,
        tail_lines: int = 20,
        on_event: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes <= 0:
            raise ValueError(f"num_processes has to be a positive integer, got {num_processes!r}")
        self.num_processes = num_processes
        self.local_mode = checked.flag("local_mode", local_mode)
        self.use_gpu = checked.flag("use_gpu", use_gpu)
        if not isinstance(_ssl_conf, str) or not _ssl_conf:
            raise TypeError(f"_ssl_conf must name a Spark setting, got {_ssl_conf!r}")
        self.ssl_conf = _ssl_conf
        self._start_timeout = checked.start_timeout_s(start_timeout)
        self._env = checked.rank_env(env)
        self._stdout, self._stderr = stdout, stderr
        self._verbose = checked.verbose(verbose)
        self._tail_lines = tail_lines
        self._on_event = on_event
        # As in pyspark, a cluster run (or the driver's GPUs) needs the session at once.
        if spark is None:
            spark = active_session("spark_hvd.TorchDistributor", " for local_mode=False or use_gpu=True") \
                if not self.local_mode or self.use_gpu else find_session()
        self.spark = spark
        self._driver_gpus: list[str] = []
        self.num_tasks = self._num_tasks()

    def run(self, train_object: Callable[..., Any] | str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """Runs ``train_object(*args, **kwargs)`` on every rank and returns rank 0's result, or runs
        the script at path ``train_object`` with ``args`` as its command line and returns None.

        A script path is opened on each rank's host. Raises spark_hvd.RunError naming the rank
        that failed (its traceback and last output lines) when the function or script fails.
        """
        if isinstance(train_object, (str, os.PathLike)):
            if kwargs:
                raise ValueError(f"TorchDistributor.run: a script (train_object={os.fspath(train_object)!r}) "
                                 f"takes command-line arguments only; got keyword arguments {sorted(kwargs)}")
            fn: Callable[..., Any] = ScriptCall(os.fspath(train_object), [str(a) for a in args])
            args, kwargs = (), {}
        elif callable(train_object):
            fn = RankZeroResult(train_object)
        else:
            raise TypeError("TorchDistributor.run: train_object must be a function or the path of a "
                            f"Python script, got {type(train_object).__name__} {train_object!r}")
        options = dict(env=self._rank_env(), start_timeout=self._start_timeout, stdout=self._stdout,
                       stderr=self._stderr, verbose=self._verbose, tail_lines=self._tail_lines,
                       on_event=self._on_event, torch_distributed=True)
        if self.local_mode:
            from spark_hvd.launch.driver.local_job import run_local

            return run_local(fn, args, kwargs, self.num_processes, **options)[0]
        from spark_hvd.launch.driver.runner import run

        self._check_encryption()
        return run(fn, args, kwargs, num_proc=self.num_tasks, spark=self.spark, **options)[0]

    def _train_on_dataframe(self, train_function: Callable[..., Any], spark_dataframe: Any,
                            *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "spark_hvd.TorchDistributor does not have pyspark's private _train_on_dataframe: write the "
            "DataFrame to Parquet and read each rank's share in train_function, or fit it with "
            "spark_hvd.TorchEstimator, which streams each rank its shard")

    def _num_tasks(self) -> int:
        """pyspark's checks of the GPU settings, with its messages; the number of Spark tasks."""
        if not self.use_gpu:
            return self.num_processes
        if not self.local_mode:
            amount = _conf(self.spark, _TASK_GPUS, "0")
            try:
                per_task = float(amount)
            except ValueError:
                raise RuntimeError(f"'{_TASK_GPUS}'={amount!r} is not a number of GPUs") from None
            if per_task < 1:
                raise RuntimeError(f"'{_TASK_GPUS}' was unset, so gpu usage is unavailable.")
            if per_task != 1:
                # pyspark would start torchrun with that many processes in each task; spark_hvd
                # runs one process per task, each on its own GPU.
                raise RuntimeError(
                    f"spark_hvd.TorchDistributor runs one process per Spark task, but {_TASK_GPUS}="
                    f"{amount} gives each task several GPUs: set it to 1, so that the "
                    f"{self.num_processes} processes run as {self.num_processes} tasks of one GPU each")
            return self.num_processes
        resources = self.spark.sparkContext.resources
        if "gpu" not in resources:
            raise RuntimeError("GPUs were unable to be found on the driver.")
        if int(float(_conf(self.spark, _DRIVER_GPUS, "0"))) == 0:
            raise RuntimeError("GPU resources were not configured properly on the driver.")
        addresses = list(resources["gpu"].addresses)
        if self.num_processes > len(addresses):
            warnings.warn(
                f"'num_processes' cannot be set to a value greater than the number of available GPUs "
                f"on the driver, which is {len(addresses)}. 'num_processes' was reset to be equal to "
                f"the number of available GPUs.", stacklevel=3)
            self.num_processes = len(addresses)
        self._driver_gpus = addresses[:self.num_processes]
        return self.num_processes

    def _rank_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.local_mode:
            inherited = inherited_environ()
            if self._driver_gpus:
                env[CUDA_VISIBLE_DEVICES] = visible_devices(self._driver_gpus, inherited.get(CUDA_VISIBLE_DEVICES))
            if self.num_processes > 1 and _OMP_NUM_THREADS not in inherited:
                # What torchrun does for several processes on one node (pyspark's local mode).
                env[_OMP_NUM_THREADS] = "1"
        elif not self.use_gpu:
            env[CUDA_VISIBLE_DEVICES] = ""  # pyspark hides the GPUs from CPU training
        env.update(self._env)
        return env

    def _check_encryption(self) -> None:
        if _conf(self.spark, "spark.ssl.enabled", "false").strip().lower() != "true":
            return
        unencrypted = ("the ranks' traffic (rendezvous, output, torch.distributed) is authenticated but "
                       "not encrypted, so model parameters and possibly training data cross the network "
                       "in the clear")
        if _conf(self.spark, self.ssl_conf, "false").strip().lower() == "true":
            warnings.warn(f"This cluster has TLS encryption enabled (spark.ssl.enabled=true) and "
                          f"'{self.ssl_conf}' is true, so TorchDistributor runs anyway: {unencrypted}.",
                          stacklevel=3)
            return
        raise RuntimeError(f"This cluster has TLS encryption enabled (spark.ssl.enabled=true), but "
                           f"{unencrypted}. To train anyway, set '{self.ssl_conf}' to 'true' in the "
                           "Spark configuration.")


class RankZeroResult:
    """Runs on the ranks: fn's value on rank 0, None elsewhere, so only rank 0's is pickled and
    shipped to the driver (pyspark's TorchDistributor returns rank 0's alone)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(*args, **kwargs)
        return value if rank_context().rank == 0 else None


def _conf(spark: Any, key: str, default: str) -> str:
    value = spark.conf.get(key, default)
    return default if value is None else str(value)
