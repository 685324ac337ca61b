"""Repeats the same steps through the MPI engine, as training does, and reports what its batch cache
ended up holding and whether every result was right.

Step: an unnamed allreduce (auto-named anew each time), two named ones submitted together (one
batch), then an unnamed allgather whose row count differs per rank.
"""

from __future__ import annotations

import json

import numpy as np

import collective
from collective._native import CollectiveKind as kinds
from collective.dtypes import dtype_code
from collective.reduce_ops import ReduceOp
from collective.runtime import start_engine

STEPS = 12


def main() -> None:
    collective.init(backend="mpi")
    engine = start_engine()
    rank, size = collective.rank(), collective.size()
    wrong: list[str] = []
    for step in range(STEPS):
        unnamed = np.full(6, rank + step, np.float32)
        collective.allreduce_(unnamed, op=collective.Sum)
        if not np.all(unnamed == sum(r + step for r in range(size))):
            wrong.append(f"step {step} unnamed: {unnamed.tolist()}")
        pair = [np.full(3, rank + 1, np.float64), np.full(5, rank + 2, np.float64)]
        # Both submitted before either is waited on, as collective.torch's hooks do: one batch.
        handles = [engine.submit(kinds.ALLREDUCE, f"grad.{i}", t, dtype_code(t.dtype, ""), op=ReduceOp.SUM)
                   for i, t in enumerate(pair)]
        for handle in handles:
            engine.wait(handle)
        if not (np.all(pair[0] == sum(r + 1 for r in range(size)))
                and np.all(pair[1] == sum(r + 2 for r in range(size)))):
            wrong.append(f"step {step} named: {[t.tolist() for t in pair]}")
        rows = collective.allgather(np.full((rank + 1, 2), rank, np.int32))
        if rows[:, 0].tolist() != [r for r in range(size) for _ in range(r + 1)]:
            wrong.append(f"step {step} allgather: {rows.tolist()}")
    record = {"wrong": wrong, "cached_batches": len(engine._cached_batches)}
    print("RESULT " + json.dumps(record), flush=True)
    collective.shutdown()


if __name__ == "__main__":
    main()
