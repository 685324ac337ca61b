"""Task: the function each task of a warm-up stage runs (zygote_warm_up.py): start this worker's zygote, return.

It runs in the Spark Python worker that the run's own barrier task will use next (the same kind of stage:
mapInArrow, barrier), and returns as soon as the zygote is started: the zygote imports in the background.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping

from spark_hvd.launch.task.rank_task import prestart_zygote

# partition: the task's partition id; worker: this Python worker's pid; zygote: the pid of the zygote it keeps.
WARM_UP_DDL = "partition INT, worker INT, zygote INT"

Prestart = Callable[[str | None, Mapping[str, str], tuple[str, ...]], int]


class WarmUpTask:
    """The mapInArrow function: consumes its (one-row) input, starts the zygote, yields one row about it.

    ``prestart``: what starts the zygote (rank_task.prestart_zygote; the tests give one that raises)."""

    def __init__(self, executable: str | None, run_env: Mapping[str, str], modules: tuple[str, ...],
                 prestart: Prestart = prestart_zygote) -> None:
        self.executable = executable
        self.run_env = dict(run_env)
        self.modules = tuple(modules)
        self.prestart = prestart

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        # An unread input iterator leaves Spark's Python worker unusable for the next job (the run's).
        for _ in batches:
            pass
        zygote = self.prestart(self.executable, self.run_env, self.modules)
        yield pa.RecordBatch.from_pydict(
            {"partition": [TaskContext.get().partitionId()], "worker": [os.getpid()], "zygote": [zygote]},
            schema=pa.schema([("partition", pa.int32()), ("worker", pa.int32()), ("zygote", pa.int32())]))
