"""Driver: the options ``spark_hvd.run`` and ``spark_hvd.run_elastic`` share, checked once, and what one job's
launch is made of (RanksLaunch), whichever of them, or the local launcher, runs it.

Both public functions keep Horovod's signatures; each hands its shared keywords to ``RunOptions.checked``, the
one place they are checked and defaulted.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import IO, Any, Callable, Collection, Mapping, Sequence

from collective.launcher import LineSink
from spark_hvd.launch.driver import run_arguments as checked
from spark_hvd.launch.driver.active_session import active_session
from spark_hvd.launch.driver.launch_checks import ClusterShape, cluster_for_launch
from spark_hvd.launch.driver.output_collector import DRIVER_TAG, RankCommitted


@dataclass(frozen=True)
class RunOptions:
    """The checked keywords a launch shares with every other: where its output goes and what its ranks get."""

    spark: Any
    start_timeout: float
    env: dict[str, str]
    stdout: IO | None
    stderr: IO | None
    verbose: int
    nics: tuple[str, ...] | None
    timestamps: bool
    tail_lines: int
    on_event: Callable[[int, dict[str, Any]], None] | None
    keep_warm: tuple[str, ...]
    executable: str | None = None

    @classmethod
    def checked(cls, caller: str, *, start_timeout: float | None, env: Mapping[str, str] | None,
                stdout: IO | None, stderr: IO | None, verbose: int, nics: Collection[str] | None,
                prefix_output_with_timestamp: bool, spark: Any, tail_lines: int,
                on_event: Callable[[int, dict[str, Any]], None] | None, keep_warm: Sequence[str],
                executable: str | os.PathLike | None = None) -> "RunOptions":
        """Each value checked (a bad one is an error naming it) and defaulted; ``spark`` None: the active
        session, which ``caller`` (``"spark_hvd.run"``) names when there is none."""
        start_timeout = checked.start_timeout_s(start_timeout)
        env = checked.rank_env(env)
        verbose = checked.verbose(verbose)
        nics = checked.nics(nics)
        timestamps = checked.flag("prefix_output_with_timestamp", prefix_output_with_timestamp)
        executable = checked.executable(executable)
        keep_warm = checked.module_names("keep_warm", keep_warm)
        spark = spark if spark is not None else active_session(caller)
        return cls(spark=spark, start_timeout=start_timeout, env=env, stdout=stdout, stderr=stderr,
                   verbose=verbose, nics=nics, timestamps=timestamps, tail_lines=tail_lines, on_event=on_event,
                   keep_warm=keep_warm, executable=executable)

    def cluster(self, num_proc: int | None, *, wait_for_num_proc: bool = True) -> ClusterShape:
        """The cluster's shape once it has slots for ``num_proc`` ranks (launch_checks.cluster_for_launch),
        saying on stderr what it waits for."""
        return cluster_for_launch(self.spark, num_proc, self.start_timeout, wait_for_num_proc=wait_for_num_proc,
                                  on_wait=status_line(self.stderr, self.verbose))

    def launch(self, *, num_proc: int, payload: bytes, where: str, job_label: str, dialable: bool = True,
               **elastic: Any) -> "RanksLaunch":
        """The launch of one job of ``num_proc`` ranks running ``payload`` on Spark's executors; ``dialable``
        False: the executors cannot reach this driver (a Spark Connect client). ``elastic``: run_elastic's
        commit fields of RanksLaunch."""
        return RanksLaunch(
            num_proc=num_proc, payload=payload, env=self.env, nics=self.nics, executable=self.executable,
            start_timeout=self.start_timeout, stdout=self.stdout, stderr=self.stderr, verbose=self.verbose,
            tail_lines=self.tail_lines, timestamps=self.timestamps, on_event=self.on_event,
            collector_host=_driver_host(self.spark) if dialable else None,
            collector_bind_host=_driver_bind_host(self.spark) if dialable else None,
            where=where, job_label=job_label, keep_warm=self.keep_warm, **elastic)


@dataclass(frozen=True)
class RanksLaunch:
    """What the driver needs to run one job's ranks, checked already, whichever launcher starts them."""

    num_proc: int
    payload: bytes                     # cloudpickle((fn, args, kwargs))
    env: dict[str, str]
    start_timeout: float
    stdout: IO | None
    stderr: IO | None
    verbose: int
    tail_lines: int
    on_event: Callable[[int, dict[str, Any]], None] | None
    collector_host: str | None         # where the ranks' tasks reach this driver; None: they cannot, and
                                       # return their output in the stage's rows (Spark Connect)
    where: str                         # why ranks may not start, for the start timeout's message
    job_label: str                     # what runs the ranks, for messages ("the Spark job on ...")
    nics: tuple[str, ...] | None = None
    executable: str | None = None
    timestamps: bool = False
    collector_bind_host: str | None = None  # where the collector listens; None: collector_host
    keep_warm: tuple[str, ...] = ()         # modules of a spare rank child left per worker (spare_child.py)
    # run_elastic: keep_commit gets each commit rank 0 sends, as it arrives (in the collector's thread), until
    # the driver gives the stage up (runner.StageFence); after_commit is then called in the driver's thread,
    # and what it raises ends the job. max_commit_bytes: the largest commit accepted.
    keep_commit: Callable[[RankCommitted], None] | None = None
    after_commit: Callable[[], None] | None = None
    max_commit_bytes: int = 0


def status_line(stderr: IO | None, verbose: int) -> Callable[[str], None] | None:
    """Where the launch says what it waits for before any rank starts (a wait for executors can be minutes)."""
    if verbose < 1:
        return None
    err = LineSink(stderr if stderr is not None else sys.stderr)
    return lambda text: err.write_line(f"{DRIVER_TAG} ".encode(), text.encode())


def _driver_host(spark: Any) -> str:
    """The address executors use to reach the driver (the output collector's address)."""
    return _driver_conf(spark, "spark.driver.host") or socket.getfqdn()


def _driver_bind_host(spark: Any) -> str | None:
    """Where the output collector listens: where Spark's own driver does (``spark.driver.bindAddress``,
    which defaults to ``spark.driver.host``), so never every interface unless the user set 0.0.0.0 there.
    None: the collector's address itself."""
    return _driver_conf(spark, "spark.driver.bindAddress") or _driver_conf(spark, "spark.driver.host")


def _driver_conf(spark: Any, key: str) -> str | None:
    try:
        return spark.sparkContext.getConf().get(key, None)
    except Exception:  # noqa: BLE001 - Spark Connect: the client is the driver-side end
        return None
