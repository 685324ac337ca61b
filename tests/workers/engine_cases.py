"""The engine's own behaviour: ordering, fusion, join, stalls, names in flight, the timeline."""

from __future__ import annotations

import sys
import numpy as np

import collective as hvd
from collective._native import CollectiveKind as kinds
from collective.runtime import start_engine
from common import Cases, report, submit_duplicate_while_held


def main() -> None:
    timeline = sys.argv[1]
    hvd.init(timeline=timeline, stall_check_s=0.2, stall_shutdown_s=1.5, fusion_threshold_bytes=1 << 20)
    engine = start_engine()
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    failures = case.failures

    @case
    def out_of_order_submission() -> None:
        names = ["a", "b", "c", "d"]
        order = names if rank % 2 == 0 else list(reversed(names))
        tensors = {n: np.full(100 + i, float(rank + 1), np.float32) for i, n in enumerate(names)}
        handles = {n: engine.submit(kinds.ALLREDUCE, n, tensors[n], op=hvd.Sum) for n in order}
        for n in order:
            engine.wait(handles[n])
        want = size * (size + 1) / 2
        for n in names:
            if not np.all(tensors[n] == want):
                failures.append(f"out of order: {n} = {tensors[n][:3]}")

    @case
    def many_small_tensors_fuse_correctly() -> None:
        tensors = [np.full(i + 1, float(rank * 1000 + i), np.float64) for i in range(200)]
        handles = [engine.submit(kinds.ALLREDUCE, f"fuse.{i}", t, op=hvd.Average) for i, t in enumerate(tensors)]
        for h in handles:
            engine.wait(h)
        for i, t in enumerate(tensors):
            want = np.mean([r * 1000 + i for r in range(size)])
            if not np.allclose(t, want):
                failures.append(f"fused tensor {i}: {t[:2]} want {want}")
                break

    @case
    def group_with_mixed_dtypes() -> None:
        dtypes = [np.float32, np.float64, np.int32, np.float32]
        tensors = [np.full(10 + i, rank + 1, dtype=d) for i, d in enumerate(dtypes)]
        handles = [engine.submit(kinds.ALLREDUCE, f"group.{i}", t, op=hvd.Sum, group=7, group_size=len(tensors))
                   for i, t in enumerate(tensors)]
        for h in handles:
            engine.wait(h)
        for i, t in enumerate(tensors):
            if t.dtype != dtypes[i] or not np.all(t == size * (size + 1) // 2):
                failures.append(f"group member {i} ({t.dtype}): {t[:3]}")

    @case
    def name_already_in_flight_is_refused() -> None:
        try:
            submit_duplicate_while_held(engine, kinds.ALLREDUCE, "dup")
            failures.append("second 'dup' accepted")
        except hvd.InvalidArgumentError as exc:
            if "dup" not in str(exc):
                failures.append(f"duplicate error does not name the tensor: {exc}")

    @case
    def stalled_tensor_names_the_missing_rank() -> None:
        # Every rank submits a tensor nobody else does: the stall inspector warns about each, then fails
        # each naming the ranks that never submitted it. No rank has to wait for another to get here.
        mine = f"withheld.{rank}"
        try:
            engine.wait(engine.submit(kinds.ALLREDUCE, mine, np.ones(3, np.float32)))
            failures.append(f"{mine} completed")
        except hvd.CollectiveTimeoutError as exc:
            others = ", ".join(str(r) for r in range(size) if r != rank)
            if f"'{mine}'" not in str(exc) or f"rank(s) {others} did not" not in str(exc):
                failures.append(f"stall error does not name rank(s) {others}: {exc}")
        # Nobody may join before everyone is done here: a joined rank counts as having submitted.
        hvd.barrier()

    @case
    def join_returns_the_last_rank() -> None:
        last = size - 1
        if rank == last:
            total = np.zeros(1, np.float32)
            for step in range(3):
                x = np.ones(5, np.float32)
                engine.wait(engine.submit(kinds.ALLREDUCE, f"join.step{step}", x, op=hvd.Sum))
                total += x[0]
            # The others joined at once and contribute zeros: every sum is just this rank's 1.
            if total[0] != 3.0:
                failures.append(f"sums with joined ranks: {total[0]}")
            # Anything but an allreduce is refused while ranks have joined (Horovod's rule), on both engines.
            try:
                engine.wait(engine.submit(kinds.ALLGATHER, "join.gather", np.ones((2, 3), np.float32)))
                failures.append("an allgather ran while ranks had joined")
            except hvd.InvalidArgumentError as exc:
                joined = ", ".join(str(r) for r in range(size - 1))
                want = (f"allgather 'join.gather' cannot run while rank(s) {joined} have joined; only allreduce "
                        "continues until every rank has joined")
                if str(exc) != want:
                    failures.append(f"refusal while joined: {exc!s}, want {want}")
        joined_last = engine.wait(engine.submit(kinds.JOIN, None, None))
        if joined_last != last:
            failures.append(f"join returned {joined_last}, want {last}")

    case.run_and_report("engine")
    hvd.shutdown()


if __name__ == "__main__":
    main()
