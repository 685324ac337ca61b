"""Driver and rank child: commits too large for the driver's memory, under ``spark_hvd.run_elastic(commit_store=...)``.

Rank 0 writes such a commit to the Store, and only a reference travels to the driver in its place: the
reference is the pickled commit's bytes as far as every layer between them is concerned (the output
channel, the collector, the next stage's payload), so nothing there changes. The driver deletes the file
of a commit once a newer one has reached it, and the whole directory when the run ends.
"""

from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass
from typing import Any

from spark_hvd.store import Store

# Starts every reference; a pickle never does (its first byte is the PROTO opcode, 0x80).
_REFERENCE_MAGIC = b"spark-hvd stored commit\0"
# The most a reference takes (a Store path well past any real one): the collector accepts a commit frame of
# this size even when max_commit_bytes is smaller.
MAX_REFERENCE_BYTES = 8192


@dataclass(frozen=True)
class CommitSpill:
    """Where a run's large commits go: a directory of its own in a Store every host can read."""

    store: Store
    run_path: str      # the run's directory in the Store; removed with everything in it when the run ends

    @classmethod
    def for_run(cls, store: Store) -> "CommitSpill":
        return cls(store, store.get_run_path(f"run_elastic-{uuid.uuid4().hex[:12]}"))

    def write(self, blob: bytes) -> bytes:
        """Stores ``blob`` (a pickled commit) whole, and returns the reference that travels instead."""
        path = posixpath.join(self.run_path, "commits", f"commit-{uuid.uuid4().hex}.pkl")
        reference = _REFERENCE_MAGIC + path.encode("utf-8")
        if len(reference) > MAX_REFERENCE_BYTES:
            raise ValueError(f"commit_store's path is too long for a commit reference: {path!r}")
        self.store.write_bytes(path, blob)
        return reference

    def read(self, reference: bytes) -> bytes:
        return self.store.read_bytes(stored_path(reference) or "")

    def forget(self, reference: bytes | None) -> None:
        """Deletes the commit ``reference`` names; nothing for a commit kept in memory."""
        path = stored_path(reference)
        if path is not None:
            self.store.delete(path)

    def remove_all(self) -> None:
        self.store.delete(self.run_path)


def stored_path(blob: bytes | None) -> str | None:
    """The Store path a reference names; None for a pickled commit itself (or no commit)."""
    if blob is None or not blob.startswith(_REFERENCE_MAGIC):
        return None
    return blob[len(_REFERENCE_MAGIC):].decode("utf-8")


def as_store(commit_store: Any) -> Store | None:
    """``run_elastic``'s ``commit_store``: a Store, a path or URL for ``Store.create``, or None."""
    if commit_store is None or isinstance(commit_store, Store):
        return commit_store
    if isinstance(commit_store, str) and commit_store:
        return Store.create(commit_store)
    raise TypeError(f"commit_store must be a spark_hvd Store, a path or URL, or None; got {commit_store!r}")
