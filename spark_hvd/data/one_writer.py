"""Driver: one write of a materialisation at a time in this driver process, so that fits of one DataFrame
started side by side (Spark ML tuning's ``parallelism``, Optuna's ``n_jobs``) write its data once: the others
wait for that write and reuse it. Drivers apart still each write a private version (materialize.py's publish
keeps that safe), at the cost of the extra write."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def one_writer(path: str) -> Iterator[None]:
    """Holds the lock of the materialisation at ``path`` (its intermediate directory) for the block."""
    with _guard:
        lock = _locks.setdefault(path, threading.Lock())
    with lock:
        yield
