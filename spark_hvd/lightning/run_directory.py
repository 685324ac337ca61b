"""A rank's local directory for one Lightning run, and the copy of its logs under the Store (rank child).

    <tmp>/spark-hvd-lightning/<run_id>/rank-<r>/checkpoints   what Lightning writes, mirrored to
                                                              <store>/runs/<run_id>/checkpoints (checkpoint_io)
    <tmp>/spark-hvd-lightning/<run_id>/rank-<r>/logs          the logger's and profiler's files, copied to
                                                              <store>/runs/<run_id>/logs by rank 0

The path depends only on the run_id and the rank, so the local paths a resumed checkpoint remembers are the
same in the next fit; each rank empties its own directory at the start (a previous fit may have left one).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from typing import Any


class RunDirectory:
    def __init__(self, run_id: str, rank: int) -> None:
        self.root = os.path.join(tempfile.gettempdir(), "spark-hvd-lightning", run_id, f"rank-{rank}")
        self.checkpoints = os.path.join(self.root, "checkpoints")
        self.logs = os.path.join(self.root, "logs")
        self._synced: dict[str, tuple[int, int]] = {}   # file -> (size, mtime_ns) last copied

    def create(self) -> "RunDirectory":
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.checkpoints)
        os.makedirs(self.logs)
        return self

    def sync_logs(self, store: Any, run_id: str) -> None:
        """Copies new and changed log files to the Store (each written whole)."""
        target = store.get_logs_path(run_id)
        for directory, _, files in os.walk(self.logs):
            for name in files:
                path = os.path.join(directory, name)
                stat = os.stat(path)
                if self._synced.get(path) == (stat.st_size, stat.st_mtime_ns):
                    continue
                relative = os.path.relpath(path, self.logs).split(os.sep)
                with open(path, "rb") as f:
                    store.write_bytes(posixpath.join(target, *relative), f.read())
                self._synced[path] = (stat.st_size, stat.st_mtime_ns)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
