"""Task: a spare rank child per Spark Python worker, started after a job and adopted by the next one.

Importing torch or TensorFlow takes a rank child one to a few seconds, on the launch's critical path.
A run that names ``keep_warm`` modules leaves, after its rank's child is done, one spare child in this
worker: a new process that imports those modules and then waits for a job. The next task of a run in
this worker with the same interpreter, modules, run env and GPUs adopts it instead of starting one. The
spare has never run anything: each job still gets a fresh process and a fresh collective job, and
nothing of the previous job's process is left (that one has exited).

A spare dies with its worker (PR_SET_PDEATHSIG) and ends by itself after child_main's idle limit.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from spark_hvd.launch.gpus import CUDA_VISIBLE_DEVICES
from spark_hvd.launch.rank_child import RankChild

_lock = threading.Lock()
_spare: tuple[Any, RankChild] | None = None


def spare_key(executable: str | None, run_env: Mapping[str, str], child_env: Mapping[str, str],
              modules: tuple[str, ...]) -> Any:
    """What a spare must match to be adopted: the interpreter, the modules, the run's own ``env`` and what
    the task chose (GPUs, import path). The rest of the environment is the worker's, which other jobs in
    the worker may change (pyspark's TorchDistributor sets MASTER_ADDR there): the adopted spare takes
    the task's whole environment before it unpickles fn (adopt)."""
    chosen = tuple((name, child_env.get(name)) for name in (CUDA_VISIBLE_DEVICES, "PYTHONPATH"))
    return executable, tuple(sorted(run_env.items())), chosen, tuple(modules)


def take_spare(key: Any) -> RankChild | None:
    """The waiting spare started with ``key``, if alive; a spare of another key is stopped (the worker
    keeps one, for what its runs last asked for)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is None:
        return None
    spare_key_, child = spare
    if spare_key_ == key and child.waiting():
        return child
    child.close()
    return None


def leave_spare(key: Any, executable: str | None, env: Mapping[str, str], modules: tuple[str, ...]) -> None:
    """Starts a spare that imports ``modules`` and waits for the next job (from the thread that lives as
    long as the worker: its main thread, where tasks run)."""
    global _spare
    child = RankChild.spare(env, modules, executable=executable)
    with _lock:
        old, _spare = _spare, (key, child)
    if old is not None:
        old[1].close()
