"""Commits that outlive the job's processes, for a launcher that replaces the whole job when a member is lost
(``spark_hvd.run_elastic`` relaunches a Spark barrier stage) instead of re-forming it in process.

Such a launcher installs ``DurableCommits`` in each rank before the training function runs: rank 0 hands every
commit's snapshot to ``sink`` (which keeps it somewhere the next job can fetch it), and the first ``sync`` of
``@hvd.elastic.run`` starts from ``initial`` (the last snapshot the previous job kept). A lost peer then ends
this process's run instead of waiting for a re-formation that never comes: the launcher relaunches the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class DurableCommits:
    sink: Callable[[Any], None]   # rank 0's commits; the snapshot is never mutated afterwards, so it may be
                                  # serialised later, in another thread
    initial: Any = None           # the snapshot this job starts from; None: the state as the script built it

    def take_initial(self) -> Any:
        """The starting snapshot, once: a later sync (after a re-form) takes rank 0's live state."""
        initial, self.initial = self.initial, None
        return initial


_installed: DurableCommits | None = None


def install(commits: DurableCommits | None) -> None:
    """Called by the launcher's rank process before the training function runs; None uninstalls."""
    global _installed
    _installed = commits


def installed() -> DurableCommits | None:
    return _installed
