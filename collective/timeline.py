"""Horovod's ``start_timeline``/``stop_timeline``: the engine's Chrome trace for part of a run (every process).

Every rank calls them, as in Horovod; rank 0's engine writes the file. The MPI backend's engine writes the
same format with the same phase names (it drives the native writer). Collectives run through the engine
from then on (the numpy API otherwise calls the communicator directly, which records nothing).
"""

from __future__ import annotations

import os

from collective.runtime import current, start_engine


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts writing a Chrome trace of every collective to ``file_path`` (on rank 0), replacing the
    file; ``mark_cycles`` also marks each engine cycle that runs collectives. Starting again switches
    files. Raises NotInitializedError before ``init()``."""
    current()  # NotInitializedError before a complaint about the path
    if not isinstance(file_path, (str, os.PathLike)) or not os.fspath(file_path):
        raise ValueError(f"start_timeline needs a file path, got {file_path!r}")
    start_engine().start_timeline(os.path.abspath(os.fspath(file_path)), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops the timeline and closes its file, which is then valid JSON. Harmless when none is running."""
    runtime = current()
    if runtime.engine is not None:
        runtime.engine.stop_timeline()
