"""Exceptions raised on the driver by spark_hvd.run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from collective.failures.report import FailureReport
from collective.failures.picklable import PicklableError


class LaunchError(RuntimeError):
    """The job could not be started as asked (checked before any task runs)."""


class NotEnoughSlotsError(PicklableError, LaunchError):
    """num_proc is larger than the number of tasks the cluster can run at once."""

    def __init__(self, message: str, *, num_proc: int, slots: int) -> None:
        super().__init__(message)
        self.num_proc = num_proc
        self.slots = slots


class DynamicAllocationError(LaunchError):
    """Spark refuses barrier stages while dynamic allocation is enabled."""


class StartTimeoutError(LaunchError):
    """Not every rank started within start_timeout (usually: the cluster has too few free slots)."""


@dataclass(frozen=True)
class RankFailure:
    """What one rank reported when it failed."""

    rank: int
    summary: str                      # one line, e.g. "ValueError: boom" or "exited with code 3"
    traceback: str | None = None      # the child's formatted traceback, when fn raised
    exit_code: int | None = None      # the child's exit status (negative: killed by that signal)
    peer_failure: bool = False        # a consequence of another rank failing, not a root cause
    blamed_rank: int | None = None    # the peer it was waiting on when it noticed (peer failures)
    retryable: bool = True            # False: fn's error says a retry cannot help (FailureReport.retryable)
    exception: bytes | None = None    # fn's exception, pickled by the rank, when it was small enough

    @classmethod
    def from_report(cls, rank: int, report: FailureReport, exit_code: int | None = None) -> "RankFailure":
        return cls(rank=rank, summary=report.summary, traceback=report.traceback, exit_code=exit_code,
                   peer_failure=report.peer_failure, blamed_rank=report.blamed_rank, retryable=report.retryable,
                   exception=report.exception)

    # The one conversion to and from the frames that carry a failure (child to task, task to driver).
    def to_wire(self) -> dict[str, Any]:
        report = FailureReport(self.summary, self.traceback, self.peer_failure, self.blamed_rank,
                               retryable=self.retryable, exception=self.exception)
        return {**report.to_wire(), "exit_code": self.exit_code}

    @classmethod
    def from_wire(cls, rank: int, fields: Mapping[str, Any], exit_code: int | None = None) -> "RankFailure":
        if exit_code is None:
            sent = fields.get("exit_code")
            exit_code = sent if isinstance(sent, int) and not isinstance(sent, bool) else None
        return cls.from_report(rank, FailureReport.from_wire(fields), exit_code)


class RunError(PicklableError, RuntimeError):
    """A rank failed; the message names it and carries its traceback and last output lines."""

    def __init__(
        self,
        failure: RankFailure,
        last_lines: list[str] | None = None,
        other_failures: list[RankFailure] | None = None,
    ) -> None:
        self.failure = failure
        self.last_lines = list(last_lines or [])
        self.other_failures = list(other_failures or [])
        super().__init__(self._message())

    @property
    def rank(self) -> int:
        return self.failure.rank

    def _message(self) -> str:
        parts = [f"spark_hvd.run: rank {self.failure.rank} failed: {self.failure.summary}"]
        if self.failure.traceback:
            parts.append(f"Traceback from rank {self.failure.rank}:\n{self.failure.traceback.rstrip()}")
        if self.last_lines:
            shown = "\n".join(f"  {line}" for line in self.last_lines)
            parts.append(f"Last {len(self.last_lines)} output line(s) of rank {self.failure.rank}:\n{shown}")
        for other in self.other_failures:
            parts.append(f"rank {other.rank} also failed: {other.summary}")
        return "\n\n".join(parts)


class SparkJobError(RuntimeError):
    """The Spark job ended without any rank reporting a failure (cancelled, executor lost...)."""


def spark_error_summary(error: BaseException, limit: int = 500) -> str:
    """The telling line of a Spark job failure.

    Py4J's first line only names the JVM call; a failed Python task carries its traceback inside
    the Java message, and its exception line says most.
    """
    lines = str(error).splitlines()
    for i, line in enumerate(lines):
        if "Traceback (most recent call last):" in line:
            raised = next((later.strip() for later in lines[i + 1:] if later and not later[0].isspace()), None)
            if raised:
                return _clip(raised, limit)
    for line in lines:
        line = line.strip().lstrip(":").strip()
        if line and not line.startswith("An error occurred while calling"):
            return _clip(line, limit)
    return type(error).__name__


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class InputError(ValueError):
    """The DataFrame or the columns given to fit() cannot train the model (checked before any launch)."""

    retryable = False   # the same data or state fails a retry the same way (run_elastic fails at once)


class ShardReadError(RuntimeError):
    """A rank's reader returned fewer rows than its shard holds (e.g. Petastorm's silent empty epochs)."""

    retryable = False   # the same data or state fails a retry the same way (run_elastic fails at once)


class ElasticNotSupportedError(NotImplementedError):
    """spark_hvd.run_elastic cannot run here (a Spark Connect session: its ranks cannot reach the driver)."""


class CommitTooLargeError(ValueError):
    """spark_hvd.run_elastic: a committed state is larger than the driver keeps in memory (``max_commit_bytes``)."""

    retryable = False   # the same data or state fails a retry the same way (run_elastic fails at once)


class ResetLimitError(RuntimeError):
    """spark_hvd.run_elastic: the job re-formed more than ``reset_limit`` times."""


class IgnoredArgumentWarning(UserWarning):
    """A Horovod argument that has no effect in spark-hvd, with what spark-hvd does instead."""


class RunIdReuseWarning(UserWarning):
    """A fit's run_id holds another fit's checkpoints (other data, model or training params), or is in use by a
    fit running now: this fit trains under a run_id of its own, which the message names, instead of resuming."""


class CheckpointMismatchError(RuntimeError):
    """A run's checkpoint belongs to another fit than the one about to resume it (raised on rank 0)."""


class NonFiniteLossError(FloatingPointError):
    """A rank's training loss became NaN or infinite (raised on that rank; stop_on_nonfinite_loss=False warns)."""

    retryable = False   # the same data or state fails a retry the same way (run_elastic fails at once)
