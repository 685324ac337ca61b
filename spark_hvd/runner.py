"""``spark_hvd.run``: run a function on ``num_proc`` ranks of one Spark barrier stage."""

from __future__ import annotations

import queue
import secrets
import socket
import sys
import time
from typing import IO, Any, Callable, Mapping, Sequence

import cloudpickle

from collective.config import format_host_port
from collective.run import LineSink
from spark_hvd.barrier_job import BarrierJob, JobFailed, JobFinished
from spark_hvd.errors import (
    LaunchError,
    RankFailure,
    RunError,
    SparkJobError,
    StartTimeoutError,
    spark_error_summary,
)
from spark_hvd.launch_checks import ClusterShape, describe_cluster, resolve_num_proc
from spark_hvd.output_collector import DRIVER_TAG, OutputCollector, RankConnected, RankEvent, RankFailed
from spark_hvd.task_spec import TaskSpec

DEFAULT_START_TIMEOUT_S = 600.0
# Once a rank has failed and the job is cancelled, how long to wait for Spark to wind it down.
_CANCEL_DEADLINE_S = 60.0
# When Spark reports the failure first, how long the failing rank's own report may lag behind.
_REPORT_LAG_S = 3.0
# After success, how long the ranks' last output lines may take to arrive.
_OUTPUT_DRAIN_S = 10.0


def run(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    num_proc: int | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    stdout: IO | None = None,
    stderr: IO | None = None,
    verbose: int = 1,
    *,
    spark: Any = None,
    tail_lines: int = 20,
    on_event: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[Any]:
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks and returns their results in rank order.

    Like ``horovod.spark.run``. Each rank is one task of a Spark barrier stage (rank = partition
    id) and runs ``fn`` in a child process of that task, with ``collective`` already initialised
    (a Horovod-style ``collective.init()`` at the top of ``fn`` is fine too), and with
    ``CUDA_VISIBLE_DEVICES`` set to the task's GPUs when Spark assigns GPUs to tasks.

    num_proc: ranks to run; default, every task slot of the cluster. More than the cluster's
        slots fails at once with NotEnoughSlotsError.
    start_timeout: seconds for every rank to start (a busy cluster may hold slots back).
    env: extra environment variables for the ranks' processes (they win over inherited ones).
    stdout, stderr: where the ranks' output lines go, prefixed ``[rank]: `` (default: sys's).
    verbose: 0 keeps rank output quiet (it still appears in errors), 1 prints it, 2 adds progress.
    spark: the SparkSession to use; default, the active one.
    tail_lines: how many of the failing rank's last output lines a RunError carries.
    on_event: called as ``on_event(rank, data)`` in this (the driver's) thread for every
        ``spark_hvd.emit_event(data)`` a rank makes while the job runs; what it raises ends the job.

    Raises RunError naming the failing rank (with its traceback and last output lines) when ``fn``
    raises or its process dies on any rank; the other ranks are stopped.
    """
    if not (start_timeout > 0):
        raise ValueError(f"start_timeout must be positive, got {start_timeout!r}")
    env = dict(env or {})
    bad = [k for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str))]
    if bad:
        raise TypeError(f"env names and values must be str; not so for {bad!r}")
    spark = spark if spark is not None else _active_session()
    shape = describe_cluster(spark)
    num_proc = resolve_num_proc(num_proc, shape)
    secret = secrets.token_bytes(32)
    payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    err = LineSink(stderr if stderr is not None else sys.stderr)
    out = LineSink(stdout if stdout is not None else sys.stdout)
    collector = OutputCollector(secret, num_proc, events.put, out, err,
                                echo=verbose >= 1, tail_lines=tail_lines)
    port = collector.start()
    try:
        spec = TaskSpec(num_proc=num_proc, secret=secret, payload=payload, env=env,
                        collector_address=format_host_port(_driver_host(spark), port))
        job = BarrierJob(spark, spec, events)
        supervisor = _Supervisor(job, collector, events, num_proc, start_timeout, shape, err, verbose,
                                 on_event)
        supervisor.progress(f"launching {num_proc} rank(s) on {shape.master}")
        job.start()
        results = supervisor.wait()
    finally:
        collector.stop()
    return [_unpickle_result(rank, results[rank]) for rank in range(num_proc)]


class _Supervisor:
    """Waits for the job, and turns whatever ends it first into the result or one clear error."""

    def __init__(self, job: BarrierJob, collector: OutputCollector, events: "queue.SimpleQueue[Any]",
                 num_proc: int, start_timeout: float, shape: ClusterShape, err: LineSink,
                 verbose: int, on_event: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        self._job = job
        self._collector = collector
        self._events = events
        self._num_proc = num_proc
        self._start_timeout = start_timeout
        self._shape = shape
        self._err = err
        self._verbose = verbose
        self._on_event = on_event
        self._started: set[int] = set()
        self._failures: list[RankFailure] = []
        self._t0 = time.monotonic()

    def wait(self) -> dict[int, bytes]:
        start_deadline = self._t0 + self._start_timeout
        try:
            while True:
                all_started = len(self._started) == self._num_proc
                timeout = None if all_started else max(0.0, start_deadline - time.monotonic())
                try:
                    event = self._events.get(timeout=timeout)
                except queue.Empty:
                    self._cancel_and_wait()
                    raise StartTimeoutError(self._start_timeout_message()) from None
                if isinstance(event, RankConnected):
                    self._started.add(event.rank)
                    if len(self._started) == self._num_proc:
                        self.progress(f"all {self._num_proc} rank(s) started after "
                                       f"{time.monotonic() - self._t0:.1f}s")
                elif isinstance(event, RankEvent):
                    if self._on_event is not None:
                        self._deliver(event)
                elif isinstance(event, RankFailed):
                    self._failures.append(event.failure)
                    self._cancel_and_wait()
                    raise self._run_error()
                elif isinstance(event, JobFailed):
                    raise self._error_after_job_failed(event.error)
                elif isinstance(event, JobFinished):
                    return self._finished(event.results)
        except KeyboardInterrupt:
            self._cancel_and_wait()
            raise

    def _deliver(self, event: RankEvent) -> None:
        try:
            self._on_event(event.rank, event.data)
        except BaseException:
            # The caller's callback failed: the job has no one left to report to.
            self._cancel_and_wait()
            raise

    def _finished(self, results: dict[int, bytes]) -> dict[int, bytes]:
        # Every task closed its connection before returning, so this wait is normally instant.
        self._collector.wait_until_all_closed(_OUTPUT_DRAIN_S)
        missing = sorted(set(range(self._num_proc)) - set(results))
        if missing:
            raise SparkJobError(f"the Spark job returned no result for rank(s) {missing}")
        self.progress(f"{self._num_proc} rank(s) done after {time.monotonic() - self._t0:.1f}s")
        return results

    def _cancel_and_wait(self) -> None:
        """Cancels the stage and waits for Spark to end it, collecting later failure reports."""
        self._job.cancel()
        deadline = time.monotonic() + _CANCEL_DEADLINE_S
        while True:
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if isinstance(event, RankFailed):
                self._failures.append(event.failure)
            elif isinstance(event, (JobFailed, JobFinished)):
                return

    def _error_after_job_failed(self, error: BaseException) -> BaseException:
        # A failing rank reports before its task fails, but the report travels on another path.
        deadline = time.monotonic() + _REPORT_LAG_S
        while not self._failures:
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if isinstance(event, RankFailed):
                self._failures.append(event.failure)
        if self._failures:
            failure = self._run_error()
            failure.__cause__ = error
            return failure
        wrapped = SparkJobError(f"spark_hvd.run: the Spark job failed before any rank reported a "
                                f"failure: {spark_error_summary(error)}")
        wrapped.__cause__ = error
        return wrapped

    def _run_error(self) -> RunError:
        # The root cause is the first failure that is not just a reaction to another rank's.
        root = next((f for f in self._failures if not f.peer_failure), self._failures[0])
        others = [f for f in self._failures if f is not root]
        return RunError(root, self._collector.tail(root.rank), others)

    def _start_timeout_message(self) -> str:
        missing = sorted(set(range(self._num_proc)) - self._started)
        return (f"spark_hvd.run: rank(s) {missing} of {self._num_proc} did not start within "
                f"start_timeout={self._start_timeout:g}s; the cluster has {self._shape.slots} task "
                f"slot(s) (master {self._shape.master}), which other jobs may be holding")

    def progress(self, text: str) -> None:
        if self._verbose >= 2:
            self._err.write_line(f"{DRIVER_TAG} ".encode(), text.encode())


def _unpickle_result(rank: int, blob: bytes) -> Any:
    try:
        return cloudpickle.loads(blob)
    except Exception as e:
        raise SparkJobError(f"spark_hvd.run: the driver cannot unpickle rank {rank}'s return value: "
                            f"{type(e).__name__}: {e}") from e


def _active_session() -> Any:
    from pyspark.sql import SparkSession

    try:
        # The thread's active session, else the default one (a new thread has no active session).
        return SparkSession.active()
    except Exception as e:  # noqa: BLE001 - PySparkRuntimeError when there is none
        raise LaunchError("spark_hvd.run needs a SparkSession: create one, or pass spark=...") from e


def _driver_host(spark: Any) -> str:
    """The address executors use to reach the driver; the output collector listens there too."""
    try:
        host = spark.sparkContext.getConf().get("spark.driver.host", None)
    except Exception:  # noqa: BLE001 - Spark Connect: the client is the driver-side end
        host = None
    return host or socket.getfqdn()
