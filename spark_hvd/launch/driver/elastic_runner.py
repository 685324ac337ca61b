"""Driver: ``spark_hvd.run_elastic``: elastic training as a series of barrier stages.

A barrier stage cannot lose a task and go on (Spark fails the whole stage), so the job re-forms by stages:
when one fails because a rank, an executor or a host was lost, the driver launches a new stage on the slots
free now (between min and max ranks), and its ranks start from the last commit rank 0 sent to the driver.
No custom driver RPC: commits travel on each rank's output connection (a ``commit`` frame), and the next
stage gets the kept one inside its task payload. An exception of fn's own re-forms the job too, as in Horovod,
unless a retry cannot help (fn_error_retry.py). A stage the driver gives up can no longer commit
(runner.StageFence) nor form its ranks (BarrierJob.cancel), so fn never runs in two live formations.

Rejoin: when the cluster has more slots than the stage uses (and max allows), the driver ends the stage
right after the next commit arrives and launches a larger one from that commit; no step is lost beyond
those the ranks took while the stage wound down.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Collection, Mapping, Sequence

import cloudpickle

from collective.elastic.errors import ElasticTimeoutError
from collective.launcher import LineSink
from spark_hvd.errors import (
    ElasticNotSupportedError,
    ResetLimitError,
    RunError,
    SparkJobError,
    StartTimeoutError,
    spark_error_summary,
)
from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.barrier_job import BarrierJob
from spark_hvd.launch.driver.connect_session import is_connect_session
from spark_hvd.launch.rank.elastic_rank import ElasticRankCall
from spark_hvd.launch.driver.fn_error_retry import FnErrorRetry
from spark_hvd.launch.driver.launch_checks import ClusterShape, describe_cluster, resolve_num_proc
from spark_hvd.launch.driver.output_collector import DRIVER_TAG, RankCommitted
from spark_hvd.launch.driver.run_options import RanksLaunch, RunOptions
from spark_hvd.launch.driver.runner import run_ranks
from spark_hvd.launch.stored_commits import MAX_REFERENCE_BYTES, CommitSpill, as_store, stored_path

# Horovod's default elastic timeout: how long the driver waits for min ranks' worth of slots.
_DEFAULT_ELASTIC_TIMEOUT_S = 600.0
# The largest commit the driver keeps in its memory by default (pickled bytes).
DEFAULT_MAX_COMMIT_BYTES = 512 << 20
# Spark tells Python nothing when executors come and go, so the slot count is polled this often.
_SLOT_POLL_S = 0.5
# While a stage runs, how often a commit may trigger a slot count (a JVM call) to look for rejoined slots.
_GROW_CHECK_S = 1.0
# Stages in a row that Spark failed with no rank blamed and no commit made: a launch that keeps failing the same
# way (an executor that cannot run the task at all), not lost members; the job then fails with the error.
_FRUITLESS_STAGES = 3


@dataclass
class _Grow(Exception):
    """Ends a stage right after a commit: more slots are free than it uses."""

    slots: int


@dataclass
class _KeptCommit:
    """The newest commit rank 0 sent, across stages (written by the collector's thread)."""

    spill: CommitSpill | None = None
    blob: bytes | None = None     # the pickled commit, or a reference to it in spill's Store
    stage: int = 0
    seq: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def position(self) -> tuple[int, int] | None:
        """(stage, sequence number) of the newest commit kept; None before the first."""
        with self.lock:
            return None if self.blob is None else (self.stage, self.seq)

    def keep(self, stage: int, event: RankCommitted) -> None:
        if event.rank != 0:
            return
        with self.lock:
            replaced, self.blob, self.stage, self.seq = self.blob, event.blob, stage, event.seq
        if self.spill is not None and replaced != event.blob:
            self.spill.forget(replaced)


def run_elastic(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                num_proc: int | None = None, min_np: int | None = None, max_np: int | None = None,
                start_timeout: float | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None, env: Mapping[str, str] | None = None, stdout: IO | None = None,
                stderr: IO | None = None, verbose: int = 1, nics: Collection[str] | None = None,
                prefix_output_with_timestamp: bool = False, *, min_num_proc: int | None = None,
                max_num_proc: int | None = None, spark: Any = None, max_commit_bytes: int = DEFAULT_MAX_COMMIT_BYTES,
                commit_store: Any = None, tail_lines: int = 20,
                on_event: Callable[[int, dict[str, Any]], None] | None = None,
                keep_warm: Sequence[str] = ()) -> list[Any]:
    """Runs the elastic function ``fn(*args, **kwargs)`` (it uses ``hvd.elastic.run`` and commits its state)
    on between ``min_num_proc`` and ``max_num_proc`` ranks, re-forming the job when ranks are lost or slots
    come back; returns the results of the ranks of the last stage, in rank order.

    Like ``horovod.spark.run_elastic``, with its parameters in its order (``min_np``/``max_np`` are Horovod
    0.28's names of ``min_num_proc``/``max_num_proc``). Each stage is one Spark barrier stage, as in
    ``spark_hvd.run``.

    num_proc: ranks of the first stage; default, max_num_proc, else every slot of the cluster.
    min_num_proc: fewest ranks to go on with; default, num_proc.
    max_num_proc: most ranks; default, num_proc. Slots beyond the running stage's size make it grow at the
        next commit, up to this.
    start_timeout: seconds for every rank of a stage to start (as in ``spark_hvd.run``).
    elastic_timeout: seconds to wait for min_num_proc free slots before a stage; then ElasticTimeoutError
        naming the shortage. Default 600.
    reset_limit: most re-formations (stages after the first); more raise ResetLimitError. Default: no limit.
    env, stdout, stderr, verbose, nics, prefix_output_with_timestamp: as in ``spark_hvd.run``.
    spark: the SparkSession; default, the active one.
    max_commit_bytes: the largest pickled commit the driver keeps in memory. A larger one goes to
        ``commit_store``; without one, it fails the job with CommitTooLargeError at the commit after it.
    commit_store: a Store (or a path or URL for ``Store.create``) that every host reads and writes: rank 0
        writes the commits over ``max_commit_bytes`` there, under a directory of this run's that is deleted
        when the run ends; only a reference to each travels to the driver.
    tail_lines, on_event, keep_warm: as in ``spark_hvd.run``; ``keep_warm=["torch"]`` also makes a
        relaunched stage start sooner (its ranks' processes have imported torch already).

    A lost rank (its process killed, its executor or host lost) ends the stage; the next starts from the
    last commit that reached the driver. An exception raised by fn does the same, as in Horovod, up to
    ``reset_limit`` re-formations, unless a retry cannot help: an error raised before the first commit
    or again before a new one, or one whose class says so (bad input, a non-finite loss). Then, or when the
    retries run out, fn's own exception is raised, with a note naming its rank, its traceback and the
    resets tried (chained from the RunError). Three stages in a row that Spark fails with no rank blamed
    and no commit made raise Spark's error (SparkJobError).
    """
    min_num_proc = _alias("min_num_proc", min_num_proc, "min_np", min_np)
    max_num_proc = _alias("max_num_proc", max_num_proc, "max_np", max_np)
    for name, value in (("num_proc", num_proc), ("min_num_proc", min_num_proc), ("max_num_proc", max_num_proc)):
        if value is not None:
            checked.positive_int(name, value)
    elastic_timeout = _DEFAULT_ELASTIC_TIMEOUT_S if elastic_timeout is None else checked.positive_seconds(
        "elastic_timeout", elastic_timeout)
    _check_order(num_proc if min_num_proc is None else min_num_proc, num_proc,
                 num_proc if max_num_proc is None else max_num_proc)
    if reset_limit is not None and (isinstance(reset_limit, bool) or not isinstance(reset_limit, int)
                                    or reset_limit < 0):
        raise ValueError(f"reset_limit must be a non-negative int or None, got {reset_limit!r}")
    checked.positive_int("max_commit_bytes", max_commit_bytes)
    store = as_store(commit_store)
    options = RunOptions.checked(
        "spark_hvd.run_elastic", start_timeout=start_timeout, env=env, stdout=stdout, stderr=stderr,
        verbose=verbose, nics=nics, prefix_output_with_timestamp=prefix_output_with_timestamp, spark=spark,
        tail_lines=tail_lines, on_event=on_event, keep_warm=keep_warm)
    if is_connect_session(options.spark):
        raise ElasticNotSupportedError(
            "spark_hvd.run_elastic needs a classic SparkSession: its ranks send their commits to the driver "
            "while the stage runs, and the executors cannot dial a Spark Connect client. Use spark_hvd.run, "
            "or run the driver on the cluster.")
    # The elastic driver grows the job as slots come: no wait for all of them here.
    shape = options.cluster(num_proc or max_num_proc, wait_for_num_proc=False)
    if shape.dynamic_allocation:
        resolve_num_proc(1, shape)  # raises DynamicAllocationError, with what to do
    driver = _ElasticDriver(
        options, fn=fn, args=tuple(args), kwargs=dict(kwargs or {}),
        bounds=_bounds(num_proc, min_num_proc, max_num_proc, shape), elastic_timeout=elastic_timeout,
        reset_limit=reset_limit, max_commit_bytes=max_commit_bytes,
        spill=CommitSpill.for_run(store) if store is not None else None)
    return driver.run()


@dataclass(frozen=True)
class _Bounds:
    first: int
    min: int
    max: int


class _ElasticDriver:
    def __init__(self, options: RunOptions, *, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 bounds: _Bounds, elastic_timeout: float, reset_limit: int | None, max_commit_bytes: int,
                 spill: CommitSpill | None, err: LineSink | None = None) -> None:
        self._options = options
        self._spark = options.spark
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._bounds = bounds
        self._elastic_timeout = elastic_timeout
        self._reset_limit = reset_limit
        self._max_commit_bytes = max_commit_bytes
        self._err = err if err is not None else LineSink(options.stderr if options.stderr is not None else sys.stderr)
        self._kept = _KeptCommit(spill)
        self._retry = FnErrorRetry(self._kept, reset_limit)
        self._last_grow_check = 0.0

    def run(self) -> list[Any]:
        try:
            return self._run_stages()
        finally:
            if self._kept.spill is not None:
                self._kept.spill.remove_all()

    def _run_stages(self) -> list[Any]:
        stage = 1
        fruitless = 0
        size = self._wait_for_slots(self._bounds.first)
        while True:
            resumes = "the script's initial state" if self._kept.blob is None else \
                f"the commit #{self._kept.seq} of stage {self._kept.stage}" + \
                (" (kept in commit_store)" if stored_path(self._kept.blob) else "")
            self._say(f"elastic stage {stage}: {size} rank(s), starting from {resumes}")
            try:
                launch = self._launch(stage, size)
                return run_ranks(launch, lambda spec, events: BarrierJob(self._spark, spec, events,
                                                                         launch.collector_bind_host))
            except _Grow as grow:
                fruitless = 0
                why = f"{grow.slots} slot(s) free, the stage used {size}: growing at that commit"
            except RunError as error:
                fruitless = 0
                if _lost_member(error):
                    why = f"lost rank {error.rank} ({error.failure.summary})"
                else:
                    why = self._retry.after(error, stage)   # raises fn's error when a retry cannot help
            except (SparkJobError, StartTimeoutError) as error:
                # No rank blamed (an executor lost before any report), or the slots counted were gone by the
                # time the stage was scheduled: count again and relaunch, unless that keeps happening.
                fruitless = 0 if self._kept.stage == stage else fruitless + 1
                if fruitless >= _FRUITLESS_STAGES:
                    raise
                summary = spark_error_summary(error.__cause__ or error)
                why = f"a task or executor was lost before any rank reported: {summary}"
            self._say(f"elastic stage {stage} ended: {why}")
            if self._reset_limit is not None and stage > self._reset_limit:
                raise ResetLimitError(
                    f"spark_hvd.run_elastic: the job re-formed {stage - 1} time(s), "
                    f"reset_limit={self._reset_limit}; stage {stage} ended: {why}")
            stage += 1
            size = self._wait_for_slots(self._bounds.max)

    def _launch(self, stage: int, size: int) -> RanksLaunch:
        call = ElasticRankCall(self._fn, self._kept.blob, self._max_commit_bytes, self._kept.spill)
        payload = cloudpickle.dumps((call, self._args, self._kwargs))
        return self._options.launch(
            num_proc=size, payload=payload, where="other jobs may be holding the slots counted",
            job_label=f"elastic stage {stage}", keep_commit=lambda event: self._kept.keep(stage, event),
            after_commit=lambda: self._grow_if_slots(size),
            max_commit_bytes=self._max_commit_bytes if self._kept.spill is None else max(self._max_commit_bytes,
                                                                                         MAX_REFERENCE_BYTES))

    def _grow_if_slots(self, size: int) -> None:
        """After a commit: ends the stage when the cluster now has slots for more ranks (checked at most once
        per _GROW_CHECK_S, since counting slots is a JVM call)."""
        if size >= self._bounds.max or time.monotonic() - self._last_grow_check < _GROW_CHECK_S:
            return
        self._last_grow_check = time.monotonic()
        slots = describe_cluster(self._spark).slots
        if slots is not None and slots > size:
            raise _Grow(slots)

    def _wait_for_slots(self, most: int) -> int:
        """Ranks for the next stage: the free slots, up to ``most``, once there are at least min."""
        deadline = time.monotonic() + self._elastic_timeout
        while True:
            slots = describe_cluster(self._spark).slots
            if slots is None:
                return self._bounds.min  # cannot count: try the fewest, the start timeout guards it
            if slots >= self._bounds.min:
                return min(slots, most)
            if time.monotonic() >= deadline:
                raise ElasticTimeoutError(
                    f"spark_hvd.run_elastic: the cluster has {slots} task slot(s), fewer than "
                    f"min_num_proc={self._bounds.min}, for longer than elastic_timeout={self._elastic_timeout:g}s")
            time.sleep(_SLOT_POLL_S)  # polling the slot count (rate limit), not synchronisation

    def _say(self, text: str) -> None:
        if self._options.verbose >= 1:
            self._err.write_line(f"{DRIVER_TAG} ".encode(), text.encode())


def _lost_member(error: RunError) -> bool:
    """Whether the job's root failure is a lost rank (its process or executor died, or it only reacted to a
    lost peer), not an exception of fn's own: a raised exception carries the child's traceback."""
    root = error.failure
    return root.peer_failure or root.traceback is None


def _bounds(num_proc: int | None, min_num_proc: int | None, max_num_proc: int | None,
            shape: ClusterShape) -> _Bounds:
    if num_proc is None:
        num_proc = max_num_proc if max_num_proc is not None else resolve_num_proc(None, shape)
    low = num_proc if min_num_proc is None else min_num_proc
    high = num_proc if max_num_proc is None else max_num_proc
    _check_order(low, num_proc, high)
    return _Bounds(first=num_proc, min=low, max=high)


def _check_order(low: int | None, num_proc: int | None, high: int | None) -> None:
    """min_num_proc <= num_proc <= max_num_proc among those known; checked before the session is looked
    at, and again once the cluster's slots have filled in the defaults."""
    known = [value for value in (low, num_proc, high) if value is not None]
    if known != sorted(known):
        shown = " <= ".join(str(value) if value is not None else name for name, value in
                            (("min_num_proc", low), ("num_proc", num_proc), ("max_num_proc", high)))
        raise ValueError(f"spark_hvd.run_elastic needs min_num_proc <= num_proc <= max_num_proc, got {shown}")


def _alias(name: str, value: int | None, old_name: str, old_value: int | None) -> int | None:
    if old_value is not None and value is not None and old_value != value:
        raise ValueError(f"{old_name}={old_value} and {name}={value} disagree; {old_name} is Horovod 0.28's name "
                         f"for {name}: pass one")
    return value if value is not None else old_value

