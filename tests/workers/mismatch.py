"""Ranks deliberately disagree; every rank must get the same clear MismatchError, then carry on."""

from __future__ import annotations

import sys

import numpy as np

import collective as hvd
from collective.runtime import start_engine
from common import report


def attempt(label: str, fn) -> None:
    try:
        fn()
    except hvd.MismatchError as exc:
        report(kind="mismatch", case=label, message=str(exc))
    else:
        report(kind="no-error", case=label)


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"))
    through_engine = sys.argv[2:] == ["engine"]
    if through_engine:
        start_engine()
    rank = hvd.rank()
    attempt("dtype", lambda: hvd.allreduce(np.ones(10, np.float32 if rank == 0 else np.float64), name="grad.w"))
    attempt("shape", lambda: hvd.allreduce(np.ones((2, 5) if rank == 0 else (10,), np.float32), name="grad.b"))
    attempt("count", lambda: hvd.allreduce(np.ones(5_000_000 if rank == 0 else 4_000_000, np.float32), name="big"))
    attempt("op", lambda: hvd.allreduce(np.ones(3), op=hvd.Sum if rank == 0 else hvd.Max, name="loss"))
    attempt("root", lambda: hvd.broadcast(np.ones(3), root_rank=rank % 2, name="params"))
    if not through_engine:
        # The engine matches calls by name, and unnamed calls of different kinds get different names: that
        # case is a stall there (see the stall inspector tests), not a mismatch.
        attempt("kind", lambda: hvd.allgather(np.ones((2, 2))) if rank == 0 else hvd.allreduce(np.ones((2, 2))))
    # After all those errors the ranks are still in step and can keep working.
    total = hvd.allreduce(np.ones(1_000_000, np.float32), op=hvd.Sum, name="after")
    report(kind="after", ok=bool(np.all(total == hvd.size())))
    hvd.shutdown()


if __name__ == "__main__":
    main()
