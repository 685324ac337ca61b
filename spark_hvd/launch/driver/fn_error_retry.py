"""Driver: Horovod's rule for an exception that fn raises under ``spark_hvd.run_elastic``: the job re-forms from
the last commit and tries again, up to ``reset_limit`` re-formations, unless a retry cannot help.

A retry cannot help when it would start from where the error was raised last time: no commit has reached the
driver yet (the error came before the first one), or none since the previous retry. Nor when the error's class
says so (``retryable = False``: bad input, a non-finite loss, a commit too large), whatever the commits.
Then the error raised is fn's own exception, as the rank raised it (unpickled on the driver), with a note
naming the rank, its traceback and the resets tried, chained from the RunError that carried it.
"""

from __future__ import annotations

from typing import Any, Protocol

import cloudpickle

from spark_hvd.errors import RunError


class CommitPosition(Protocol):
    def position(self) -> tuple[int, int] | None:
        """(stage, sequence number) of the newest commit kept; None before the first."""


class FnErrorRetry:
    """Decides, stage by stage, whether fn's exception re-forms the job or ends it."""

    def __init__(self, kept: CommitPosition, reset_limit: int | None) -> None:
        self._kept = kept
        self._reset_limit = reset_limit
        self._retried_from: tuple[int, int] | None = None   # the commit the last retry started from

    def after(self, error: RunError, stage: int) -> str:
        """Why stage ``stage`` ended, when the job retries; else raises fn's own exception."""
        failure = error.failure
        commit = self._kept.position()
        resets = stage - 1
        if not failure.retryable:
            raise users_error(error, resets, "its class says a retry cannot help")
        if commit is None:
            raise users_error(error, resets, "it was raised before the first commit, where a retry would start")
        if commit == self._retried_from:
            raise users_error(error, resets, f"it was raised again before any commit after the retry from "
                                             f"commit #{commit[1]} of stage {commit[0]}")
        if self._reset_limit is not None and stage > self._reset_limit:
            raise users_error(error, resets, f"reset_limit={self._reset_limit}")
        self._retried_from = commit
        return (f"rank {failure.rank} raised {failure.summary}; retrying from the commit #{commit[1]} of "
                f"stage {commit[0]}")


def users_error(error: RunError, resets: int, why: str) -> BaseException:
    """fn's exception (or, where it does not unpickle here, the RunError), noted with the rank, its traceback
    and the resets tried, and chained from ``error``."""
    failure = error.failure
    note = (f"spark_hvd.run_elastic: raised by fn on rank {failure.rank} after {resets} reset(s) of the job; "
            f"not retried: {why}")
    if failure.traceback:
        note += f"\nTraceback from rank {failure.rank}:\n{failure.traceback.rstrip()}"
    own = _unpickled(failure.exception)
    if own is None:
        error.add_note(note)
        return error
    own.add_note(note)
    own.__cause__ = error
    return own


def _unpickled(blob: bytes | None) -> BaseException | None:
    if blob is None:
        return None
    try:
        value: Any = cloudpickle.loads(blob)
    except Exception:  # noqa: BLE001 - a class the driver cannot import: the RunError stands for it
        return None
    return value if isinstance(value, BaseException) else None
