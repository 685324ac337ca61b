"""Collectives under a cycle time far longer than the job's timeout: each completes only because a
submit wakes the engine (before, every one waited for the next cycle)."""

from __future__ import annotations

import numpy as np

import collective as hvd
from collective._native import CollectiveKind as kinds
from collective.runtime import start_engine
from common import Cases

# Two minutes: longer than the test's timeout, so one collective left waiting for the timer fails it.
CYCLE_TIME_MS = 120_000.0


def main() -> None:
    hvd.init(cycle_time_ms=CYCLE_TIME_MS, stall_check_s=0)
    engine = start_engine()
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    failures = case.failures
    want = size * (size + 1) / 2

    @case
    def sequential_allreduces() -> None:
        for step in range(20):
            x = np.full(8, float(rank + 1), np.float32)
            engine.wait(engine.submit(kinds.ALLREDUCE, f"seq.{step}", x, op=hvd.Sum))
            if not np.all(x == want):
                failures.append(f"step {step}: {x[:2]}")
                return

    @case
    def group_wakes_on_its_last_member() -> None:
        tensors = [np.full(16 + i, float(rank + 1), np.float64) for i in range(5)]
        handles = [engine.submit(kinds.ALLREDUCE, f"grp.{i}", t, op=hvd.Sum, group=900, group_size=len(tensors))
                   for i, t in enumerate(tensors)]
        for h in handles:
            engine.wait(h)
        if not all(np.all(t == want) for t in tensors):
            failures.append(f"group: {[t[0] for t in tensors]}")

    @case
    def ranks_submit_in_different_orders() -> None:
        # Rank 0 submits 'b' first, the others 'a': a round may bring each rank's first request only,
        # and then the ranks holding unanswered requests must go on at once, not sleep for a cycle.
        a = np.full(4, float(rank + 1), np.float32)
        b = np.full(4, float(rank + 1), np.float32)
        if rank == 0:
            hb = engine.submit(kinds.ALLREDUCE, "order.b", b, op=hvd.Sum)
            ha = engine.submit(kinds.ALLREDUCE, "order.a", a, op=hvd.Sum)
        else:
            ha = engine.submit(kinds.ALLREDUCE, "order.a", a, op=hvd.Sum)
            hb = engine.submit(kinds.ALLREDUCE, "order.b", b, op=hvd.Sum)
        engine.wait(ha)
        engine.wait(hb)
        if not (np.all(a == want) and np.all(b == want)):
            failures.append(f"orders: a={a[0]} b={b[0]}")

    @case
    def broadcast_and_barrier() -> None:
        for step in range(5):
            x = np.full(3, float(rank + step), np.float32)
            engine.wait(engine.submit(kinds.BROADCAST, f"bcast.{step}", x, root=size - 1))
            if not np.all(x == size - 1 + step):
                failures.append(f"broadcast {step}: {x}")
            engine.wait(engine.submit(kinds.BARRIER, None, None))

    case.run_and_report("engine_wake")
    hvd.shutdown()


if __name__ == "__main__":
    main()
