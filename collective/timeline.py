"""Horovod's ``start_timeline``/``stop_timeline``: the engine's Chrome trace for part of a run (every process).

Every rank calls them, as in Horovod; rank 0's engine, which coordinates every rank's negotiation, writes
the file. Collectives run through the engine from then on (the numpy API otherwise calls the communicator
directly, which records nothing).
"""

from __future__ import annotations

import os

from collective.runtime import current, start_engine


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a Chrome trace of every collective to ``file_path`` (on rank 0), replacing the
    file; ``mark_cycles`` also marks each engine cycle that runs collectives. Starting again switches
    files. Raises NotInitializedError before ``init()``."""
    runtime = current()
    if runtime.config.backend == "mpi":
        raise NotImplementedError("the MPI backend has no timeline yet; use the default ring backend")
    if not isinstance(file_path, (str, os.PathLike)) or not os.fspath(file_path):
        raise ValueError(f"start_timeline needs a file path, got {file_path!r}")
    start_engine().start_timeline(os.path.abspath(os.fspath(file_path)), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops the timeline and closes its file, which is then valid JSON. Harmless when none is running."""
    runtime = current()
    if runtime.engine is not None and runtime.config.backend != "mpi":
        runtime.engine.stop_timeline()
