"""Driver: ``spark_hvd.run``: run a function on ``num_proc`` ranks of one Spark barrier stage."""

from __future__ import annotations

import os
import queue
import secrets
import sys
import threading
import time
import uuid
from typing import IO, Any, Callable, Collection, Mapping, Sequence

import cloudpickle

from collective.config import config_from_env, format_host_port
from collective.failures.report import REPORT_LAG_S, root_cause
from collective.launcher import LineSink
from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.barrier_job import BarrierJob, JobFailed, JobFinished, StageRows
from spark_hvd.launch.driver.connect_session import is_connect_session
from spark_hvd.errors import (
    LaunchError,
    RankFailure,
    RunError,
    SparkJobError,
    StartTimeoutError,
    spark_error_summary,
)
from spark_hvd.launch.driver.launch_checks import resolve_num_proc
from spark_hvd.launch.task.stage_outbox import frames_from_bytes
from spark_hvd.launch.driver.output_collector import (
    DRIVER_TAG,
    OutputCollector,
    RankCommitted,
    RankConnected,
    RankEvent,
    RankFailed,
)
from spark_hvd.launch.driver.run_options import RanksLaunch, RunOptions
from spark_hvd.launch.task_spec import TaskSpec
from spark_hvd.launch.rank.torch_distributed_call import TorchDistributedCall

# Once a rank has failed and the job is cancelled, how long to wait for Spark to wind it down.
_CANCEL_DEADLINE_S = 60.0
# After success, how long the ranks' last output lines may take to arrive.
_OUTPUT_DRAIN_S = 10.0
# After a failure, how long the healthy ranks' last events may take: a rank that lingers delays the error.
_FAILED_DRAIN_S = REPORT_LAG_S


def run(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    num_proc: int | None = None,
    start_timeout: float | None = None,
    use_mpi: bool | None = None,
    use_gloo: bool | None = None,
    extra_mpi_args: str | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO | None = None,
    stderr: IO | None = None,
    verbose: int = 1,
    nics: Collection[str] | None = None,
    prefix_output_with_timestamp: bool = False,
    executable: str | os.PathLike | None = None,
    *,
    spark: Any = None,
    tail_lines: int = 20,
    on_event: Callable[[int, dict[str, Any]], None] | None = None,
    torch_distributed: bool = False,
    keep_warm: Sequence[str] = (),
) -> list[Any]:
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks and returns their results in rank order.

    Like ``horovod.spark.run``, with its parameters in its order. Each rank is one task of a Spark
    barrier stage (rank = partition id) and runs ``fn`` in a child process of that task, with
    ``collective`` already initialised (a Horovod-style ``collective.init()`` at the top of ``fn``
    is fine too), and with ``CUDA_VISIBLE_DEVICES`` set to the task's GPUs when Spark assigns GPUs
    to tasks.

    num_proc: ranks to run; default, every task slot of the cluster. On a cluster master, the launch
        waits up to start_timeout for that many slots to register (saying so on stderr); where they
        cannot come (a local master, or more than spark.cores.max allows) it fails at once with
        NotEnoughSlotsError.
    start_timeout: seconds for every rank to start (a busy cluster may hold slots back); default,
        ``HOROVOD_SPARK_START_TIMEOUT`` when set, else 600.
    use_mpi, use_gloo, extra_mpi_args: Horovod's choice of controller. spark-hvd never starts
        mpirun: the ranks always use its native ring, so ``use_mpi=True``, ``use_gloo=False`` and
        any ``extra_mpi_args`` only raise one IgnoredArgumentWarning.
    env: extra environment variables for the ranks' processes (they win over inherited ones).
    stdout, stderr: where the ranks' output lines go, prefixed as Horovod's, ``[rank]<stdout>:`` and
        ``[rank]<stderr>:`` (default: sys's).
    verbose: 0 keeps rank output quiet (it still appears in errors), 1 prints it, 2 adds progress.
    nics: network interfaces (a list or set of names, e.g. ``['eth0']``) the ranks' rendezvous
        and mesh must use: each rank listens on, and advertises, one of their IPv4 addresses.
        A name that is not an interface of a rank's host fails that rank, naming its interfaces.
    prefix_output_with_timestamp: prefix each rank line with the driver's time when it arrived,
        in Horovod's format (``Mon Jan  1 12:00:00 2024[0]<stdout>:text``).
    executable: the Python interpreter the ranks' processes run, on the executors; default, the
        executor's own Python worker interpreter.
    spark: the SparkSession to use; default, the active one.
    tail_lines: how many of the failing rank's last output lines a RunError carries.
    on_event: called as ``on_event(rank, data)`` in this (the driver's) thread for every
        ``spark_hvd.emit_event(data)`` a rank makes while the job runs; what it raises ends the job.
    torch_distributed: also give fn torchrun's worker environment (MASTER_ADDR, MASTER_PORT, RANK,
        WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK...), so that
        ``torch.distributed.init_process_group("gloo")`` (or ``"nccl"``) works with ``env://``.
        Rank 0 hosts torch's store on a port it holds for the whole job, agreed through the job's
        own rendezvous. Each task is one torchrun node, as in pyspark's TorchDistributor:
        LOCAL_RANK is 0 and the task's GPUs are its CUDA_VISIBLE_DEVICES.
    keep_warm: module names (e.g. ``["torch"]``). After its rank, each task leaves a spare process in
        its Spark Python worker that imports them and waits; the next run in that worker with the same
        ``env``, GPUs, ``executable`` and ``keep_warm`` adopts it (it takes that task's environment)
        instead of starting a process and importing them again.
        The spare has run nothing: every run still gets a fresh process. It uses a worker's worth of
        memory for those modules, and exits when its worker does or after 10 idle minutes.

    Raises RunError naming the failing rank (with its traceback and last output lines) when ``fn``
    raises or its process dies on any rank; the other ranks are stopped.
    """
    checked.warn_about_mpi_arguments(use_mpi, use_gloo, extra_mpi_args)
    options = RunOptions.checked(
        "spark_hvd.run", start_timeout=start_timeout, env=env, stdout=stdout, stderr=stderr, verbose=verbose,
        nics=nics, prefix_output_with_timestamp=prefix_output_with_timestamp, spark=spark, tail_lines=tail_lines,
        on_event=on_event, keep_warm=keep_warm, executable=executable)
    torch_distributed = checked.flag("torch_distributed", torch_distributed)
    shape = options.cluster(num_proc)
    num_proc = resolve_num_proc(num_proc, shape)
    if torch_distributed:
        # Each Spark task is one torchrun node, as in pyspark's TorchDistributor.
        fn = TorchDistributedCall(fn, uuid.uuid4().hex, node_per_task=True)
    # A Connect client may be unreachable from the executors: the ranks never dial it (StageOutbox).
    launch = options.launch(
        num_proc=num_proc, payload=cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}))),
        dialable=not is_connect_session(options.spark),
        where=f"the cluster has {shape.slots} task slot(s) (master {shape.master}), which other "
              "jobs may be holding", job_label=f"the Spark job on {shape.master}")
    return run_ranks(launch, lambda spec, events: BarrierJob(options.spark, spec, events,
                                                              launch.collector_bind_host))


def run_ranks(launch: RanksLaunch,
              make_job: Callable[[TaskSpec, "queue.SimpleQueue[Any]"], Any]) -> list[Any]:
    """Runs the ranks with the job ``make_job`` builds (it has start() and cancel(), and ends by
    putting JobFinished or JobFailed on the queue); returns their results in rank order."""
    secret = secrets.token_bytes(32)
    # The knobs the ranks will see (their env wins), so one setting covers the driver's listener too.
    knobs = config_from_env(environ={**os.environ, **launch.env})
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    err = LineSink(launch.stderr if launch.stderr is not None else sys.stderr)
    out = LineSink(launch.stdout if launch.stdout is not None else sys.stdout)
    bind_host = launch.collector_bind_host or launch.collector_host
    on_event = events.put
    fence = StageFence()
    if launch.keep_commit is not None:
        keep_commit = launch.keep_commit

        def on_event(event: Any) -> None:
            if isinstance(event, RankCommitted):
                fence.admit(lambda: keep_commit(event))
            events.put(event)
    collector = OutputCollector(secret, launch.num_proc, on_event, out, err, echo=launch.verbose >= 1,
                                tail_lines=launch.tail_lines, timestamps=launch.timestamps,
                                bind_host=bind_host or "127.0.0.1", handshake_timeout_s=knobs.handshake_timeout_s,
                                max_commit_bytes=launch.max_commit_bytes)
    # Without a collector host the collector never listens: it only replays the stage's rows.
    address = None if launch.collector_host is None else format_host_port(launch.collector_host, collector.start())
    try:
        spec = TaskSpec(num_proc=launch.num_proc, secret=secret, payload=launch.payload, env=launch.env,
                        nics=launch.nics, executable=launch.executable, collector_address=address,
                        connect_timeout_s=knobs.connect_timeout_s, handshake_timeout_s=knobs.handshake_timeout_s,
                        keep_warm=launch.keep_warm)
        job = make_job(spec, events)
        supervisor = _Supervisor(job, collector, events, launch, err, fence)
        supervisor.progress(f"launching {launch.num_proc} rank(s) in {launch.job_label}")
        job.start()
        results = supervisor.wait()
    finally:
        collector.stop()
    return [_unpickle_result(rank, results[rank]) for rank in range(launch.num_proc)]


class StageFence:
    """What a stage may still change once the driver gives it up (a start timeout, a failed rank, a cancel):
    nothing. Its late commits would otherwise become the next stage's starting point, so that work of a
    formation the driver abandoned (and may relaunch) counted twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True

    def close(self) -> None:
        with self._lock:
            self._open = False

    def admit(self, change: Callable[[], None]) -> bool:
        """Makes ``change`` while the stage is live (under the fence's lock, so that it never lands after
        close() returned); returns whether it was made."""
        with self._lock:
            if self._open:
                change()
            return self._open


class _Supervisor:
    """Waits for the job, and turns whatever ends it first into the result or one clear error."""

    def __init__(self, job: Any, collector: OutputCollector, events: "queue.SimpleQueue[Any]",
                 launch: RanksLaunch, err: LineSink, fence: StageFence) -> None:
        self._job = job
        self._fence = fence
        self._collector = collector
        self._events = events
        self._num_proc = launch.num_proc
        self._start_timeout = launch.start_timeout
        self._where = launch.where
        self._job_label = launch.job_label
        self._err = err
        self._verbose = launch.verbose
        self._on_event = launch.on_event
        self._after_commit = launch.after_commit
        self._started: set[int] = set()
        self._failures: list[RankFailure] = []
        self._delivering = True  # until the caller's callback fails: then nothing more is handed to it
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
                        self._deliver(lambda: self._on_event(event.rank, event.data))
                elif isinstance(event, RankCommitted):
                    if self._after_commit is not None:
                        self._deliver(self._after_commit)
                elif isinstance(event, RankFailed):
                    self._failures.append(event.failure)
                    if event.failure.peer_failure and self._await_root_cause():
                        self._drain_after_end(time.monotonic() + _FAILED_DRAIN_S)
                    else:
                        self._cancel_and_wait()
                    raise self._run_error()
                elif isinstance(event, JobFailed):
                    raise self._error_after_job_failed(event.error)
                elif isinstance(event, StageRows):
                    self._replay(event)
                elif isinstance(event, JobFinished):
                    return self._finished(event.results)
        except KeyboardInterrupt:
            self._cancel_and_wait()
            raise

    def _replay(self, rows: StageRows) -> None:
        """Puts what the ranks carried in their rows on the queue, as their connections would have,
        then the job's end: failures are read before the results, as they are live."""
        for rank in sorted(rows.outboxes):
            try:
                frames = frames_from_bytes(rows.outboxes[rank])
            except ValueError as e:
                raise SparkJobError(f"spark_hvd.run: rank {rank}'s row of {self._job_label} is unreadable: {e}") from e
            self._collector.replay(rank, frames)
        self._events.put(JobFinished(rows.results))

    def _deliver(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except BaseException:
            # The caller's callback failed: the job has no one left to report to.
            self._delivering = False
            self._cancel_and_wait()
            raise

    def _finished(self, results: dict[int, bytes]) -> dict[int, bytes]:
        # Every task closed its connection before returning, so this wait is normally instant.
        self._collector.wait_until_all_closed(_OUTPUT_DRAIN_S)
        missing = sorted(set(range(self._num_proc)) - set(results))
        if missing:
            raise SparkJobError(f"{self._job_label} returned no result for rank(s) {missing}")
        self.progress(f"{self._num_proc} rank(s) done after {time.monotonic() - self._t0:.1f}s")
        return results

    def _await_root_cause(self) -> bool:
        """The first report is a rank's reaction to another's failure (its peer vanished): cancelling
        now could stop that other rank before its own report is out, so wait a moment for it.
        Returns whether the job ended meanwhile."""
        deadline = time.monotonic() + REPORT_LAG_S
        while all(f.peer_failure for f in self._failures):
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if self._take_while_ending(event):
                return True
        return False

    def _cancel_and_wait(self) -> None:
        """Cancels the stage and waits for Spark to end it, collecting later failure reports and
        delivering the events the ranks sent before they stopped. Nothing the stage commits from now on is
        kept: the driver has given it up, and the next stage starts from the last commit before this."""
        self._fence.close()
        self._job.cancel()
        deadline = time.monotonic() + _CANCEL_DEADLINE_S
        while True:
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if self._take_while_ending(event):
                break
        self._drain_after_end(deadline)

    def _take_while_ending(self, event: Any) -> bool:
        """Handles an event that arrives once the job is failing; returns whether the job has ended.

        Each rank's reports come through a reader thread of its own, so a healthy rank's events (an
        epoch's metrics) can still be on their way when another rank's failure is taken: they are
        delivered, so that what the job finished is not lost with it."""
        if isinstance(event, RankFailed):
            self._failures.append(event.failure)
        elif isinstance(event, RankEvent):
            self._deliver_while_ending(event)
        return isinstance(event, (JobFailed, JobFinished, StageRows))

    def _deliver_while_ending(self, event: RankEvent) -> None:
        if self._on_event is None or not self._delivering:
            return
        try:
            self._on_event(event.rank, event.data)
        except Exception as e:  # noqa: BLE001 - the job's own failure is the error to raise
            self._delivering = False
            self._err.write_line(f"{DRIVER_TAG} ".encode(),
                                 f"rank {event.rank}'s event was not delivered while the job failed, nor will "
                                 f"later ones be: {e!r}".encode())

    def _drain_after_end(self, deadline: float) -> None:
        """Once the stage is over, reads every rank's connection to its end and takes what is queued."""
        self._collector.wait_until_all_closed(max(0.0, min(_FAILED_DRAIN_S, deadline - time.monotonic())))
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            self._take_while_ending(event)

    def _error_after_job_failed(self, error: BaseException) -> BaseException:
        # A failing rank reports before its task fails, but the report travels on another path.
        deadline = time.monotonic() + REPORT_LAG_S
        while not self._failures:
            try:
                event = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self._take_while_ending(event)
        self._drain_after_end(time.monotonic() + _FAILED_DRAIN_S)
        if self._failures:
            failure = self._run_error()
            failure.__cause__ = error
            return failure
        wrapped = SparkJobError(f"spark_hvd.run: {self._job_label} failed before any rank reported a "
                                f"failure: {spark_error_summary(error)}")
        wrapped.__cause__ = error
        return wrapped

    def _run_error(self) -> RunError:
        root = self._root_cause()
        others = [f for f in self._failures if f is not root]
        return RunError(root, self._collector.tail(root.rank), others)

    def _root_cause(self) -> RankFailure:
        """The first failure that is not a reaction to another rank's; else the rank the reactions lead to.

        A rank whose task died under it, or that stopped responding, reports nothing: the peers that were
        waiting on it name it, and it is the one to blame.
        """
        own = next((f for f in self._failures if not f.peer_failure), None)
        if own is not None:
            return own
        first = self._failures[0]
        blamed = root_cause(first.rank, {f.rank: f.blamed_rank for f in self._failures})
        if blamed == first.rank:
            return first
        return RankFailure(rank=blamed, summary=f"it died or stopped responding (rank {first.rank} noticed: "
                                                f"{first.summary})")

    def _start_timeout_message(self) -> str:
        missing = sorted(set(range(self._num_proc)) - self._started)
        return (f"spark_hvd.run: rank(s) {missing} of {self._num_proc} did not start within "
                f"start_timeout={self._start_timeout:g}s; {self._where}")

    def progress(self, text: str) -> None:
        if self._verbose >= 2:
            self._err.write_line(f"{DRIVER_TAG} ".encode(), text.encode())


def _unpickle_result(rank: int, blob: bytes) -> Any:
    try:
        return cloudpickle.loads(blob)
    except Exception as e:
        raise SparkJobError(f"spark_hvd.run: the driver cannot unpickle rank {rank}'s return value: "
                            f"{type(e).__name__}: {e}") from e
