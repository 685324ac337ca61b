"""Task: a zygote per Spark Python worker, started after a job; the next jobs' rank processes are forked from it.

Importing torch or TensorFlow takes a rank child one to a few seconds, on the launch's critical path.
A run that names ``keep_warm`` modules leaves, after its rank's child is done, one zygote in this worker
(zygote.py): a process that imports those modules once and then forks a fresh rank process for each
later task of a run in this worker with the same interpreter, modules, run env and GPUs. Each job still
gets a fresh process that has run nothing before, and a fresh collective job; nothing of an earlier
job's process is left (that one has exited; the zygote runs no job). Where forking is not safe (threads
left running by the imports: TensorFlow's), the zygote is a plain spare: the next task adopts the process
itself, and that task leaves a new one.

A zygote dies with its worker (PR_SET_PDEATHSIG), and its children with it; it ends by itself after
child_main's idle limit.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from spark_hvd.launch.task.gpus import CUDA_VISIBLE_DEVICES
from spark_hvd.launch.task.rank_child import RankChild
from spark_hvd.launch.task.zygote import Zygote

_lock = threading.Lock()
_kept: tuple[Any, Zygote] | None = None


def spare_key(executable: str | None, run_env: Mapping[str, str], child_env: Mapping[str, str],
              modules: tuple[str, ...]) -> Any:
    """What a zygote must match to serve a task: the interpreter, the modules, the run's own ``env`` and
    what the task chose (GPUs, import path). The rest of the environment is the worker's, which other jobs
    in the worker may change (pyspark's TorchDistributor sets MASTER_ADDR there): the child takes the
    task's whole environment before it unpickles fn (child_main)."""
    chosen = tuple((name, child_env.get(name)) for name in (CUDA_VISIBLE_DEVICES, "PYTHONPATH"))
    return executable, tuple(sorted(run_env.items())), chosen, tuple(modules)


def take_spare(key: Any, rank: int, env: Mapping[str, str], on_line: Callable[[str, str], None],
               on_event: Callable[[dict[str, Any]], None] | None) -> RankChild | None:
    """``rank``'s child from this worker's zygote started with ``key``: forked from it, or, where it cannot
    fork, the zygote's own process adopted. None when there is none; a zygote of another key is stopped
    (the worker keeps one, for what its runs last asked for)."""
    global _kept
    with _lock:
        kept = _kept
    if kept is None:
        return None
    kept_key, zygote = kept
    if kept_key == key and zygote.alive():
        if zygote.forkable():          # waits for its imports, as a task adopting a spare waited for them
            try:
                return RankChild.forked(zygote, rank, env, on_line, on_event)
            except OSError:
                pass                   # it died meanwhile; the task starts a process of its own
        elif zygote.alive():
            _forget(kept)
            zygote.spare.adopt(rank, env, on_line, on_event)
            return zygote.spare
    _forget(kept)
    zygote.close()
    return None


def leave_spare(key: Any, executable: str | None, env: Mapping[str, str], modules: tuple[str, ...]) -> Zygote:
    """Keeps (or starts) a zygote that imports ``modules`` for the next jobs (from the thread that lives as
    long as the worker: its main thread, where tasks run); returns it."""
    global _kept
    with _lock:
        kept = _kept
    if kept is not None and kept[0] == key and kept[1].alive():
        return kept[1]
    zygote = Zygote(env, modules, executable=executable)
    with _lock:
        old, _kept = _kept, (key, zygote)
    if old is not None:
        old[1].close()
    return zygote


def _forget(kept: tuple[Any, Zygote]) -> None:
    global _kept
    with _lock:
        if _kept is kept:
            _kept = None
