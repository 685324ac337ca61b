"""Driver: runs a job's ranks on this machine through the local launcher (collective.run), as
``TorchDistributor(local_mode=True)`` does; everything on the driver's side is spark_hvd.run's.

Each rank is a ``spark_hvd.launch.task.local_task`` process, the stand-in for a Spark task, so output
streaming, events, failure reports and blame work exactly as under Spark.
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import tempfile
import threading
import uuid
from typing import IO, Any, Callable, Mapping, Sequence

import cloudpickle

from collective.config import inherited_environ
from collective.launcher import Stopper, launch
from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.barrier_job import JobFailed, JobFinished
from spark_hvd.errors import LaunchError
from spark_hvd.launch.task.local_task import SPEC_FILE, result_path
from spark_hvd.launch.task.rank_task import importable_path
from spark_hvd.launch.driver.run_options import RanksLaunch
from spark_hvd.launch.driver.runner import run_ranks
from spark_hvd.launch.task_spec import TaskSpec
from spark_hvd.launch.rank.torch_distributed_call import TorchDistributedCall

_LOOPBACK = "127.0.0.1"


def run_local(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    num_proc: int = 1,
    *,
    env: Mapping[str, str] | None = None,
    start_timeout: float | None = None,
    stdout: IO | None = None,
    stderr: IO | None = None,
    verbose: int = 1,
    tail_lines: int = 20,
    on_event: Callable[[int, dict[str, Any]], None] | None = None,
    torch_distributed: bool = False,
) -> list[Any]:
    """Like ``spark_hvd.run``, with the ranks started on this machine by collective.run, no Spark.

    ``torch_distributed``: the ranks form one torchrun node, as under ``torchrun --standalone``
    (LOCAL_RANK = rank), sharing the devices in this process's CUDA_VISIBLE_DEVICES.
    """
    checked.positive_int("num_proc", num_proc)
    if checked.flag("torch_distributed", torch_distributed):
        fn = TorchDistributedCall(fn, uuid.uuid4().hex, node_per_task=False)
    ranks = RanksLaunch(
        num_proc=num_proc, payload=cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}))),
        env=checked.rank_env(env), start_timeout=checked.start_timeout_s(start_timeout),
        stdout=stdout, stderr=stderr, verbose=checked.verbose(verbose), tail_lines=tail_lines,
        on_event=on_event, collector_host=_LOOPBACK, collector_bind_host=_LOOPBACK,
        where="they run on this machine (local mode), started by collective.run",
        job_label="the local launcher (collective.run)")
    return run_ranks(ranks, lambda spec, events: LocalJob(spec, events, stdout, stderr))


class LocalJob:
    """The local counterpart of BarrierJob: start() launches the ranks from a thread of its own,
    cancel() stops them; the ending (JobFinished or JobFailed) goes on the events queue."""

    def __init__(self, spec: TaskSpec, events: "queue.SimpleQueue[Any]", stdout: IO | None,
                 stderr: IO | None) -> None:
        self._spec = spec
        self._events = events
        self._stdout = stdout
        self._stderr = stderr
        self._stopper = Stopper()
        # The ranks die with the thread that started them (PR_SET_PDEATHSIG), so it is this one,
        # which lives until they have all ended.
        self._thread = threading.Thread(target=self._run, name="spark-hvd-local-job", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._stopper.stop()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            with tempfile.TemporaryDirectory(prefix="spark-hvd-local-") as job_dir:  # mode 0700
                self._write_spec(job_dir)
                env = inherited_environ()
                # The ranks run on this machine, so whatever the driver imports, they can too.
                env["PYTHONPATH"] = importable_path(env.get("PYTHONPATH"))
                code = launch([*_TASK_MODULE, job_dir], self._spec.num_proc, env=env,
                              stdout=self._stdout if self._stdout is not None else sys.stdout,
                              stderr=self._stderr if self._stderr is not None else sys.stderr,
                              stopper=self._stopper)
                if code != 0:
                    raise LaunchError(f"collective.run ended with exit code {code}")
                self._events.put(JobFinished(self._read_results(job_dir)))
        except BaseException as e:  # noqa: BLE001 - every ending must reach the waiting caller
            self._events.put(JobFailed(e))

    def _write_spec(self, job_dir: str) -> None:
        # The spec holds the job secret: readable by this user only.
        fd = os.open(os.path.join(job_dir, SPEC_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(self._spec, f)

    def _read_results(self, job_dir: str) -> dict[int, bytes]:
        results = {}
        for rank in range(self._spec.num_proc):
            try:
                with open(result_path(job_dir, rank), "rb") as f:
                    results[rank] = f.read()
            except FileNotFoundError:
                pass  # The supervisor names the ranks without a result.
        return results


_TASK_MODULE = ("-m", "spark_hvd.launch.task.local_task")
