"""Every numpy collective on a many-rank job (tests/scale), each result checked: integers exactly, floats
within a tolerance that grows with the number of ranks.

argv: shm|tcp, then the phases to run, comma-separated, in this order: direct (every op on the communicator),
sets (evens and odds as process sets), engine (the background engine: named async requests submitted in
different orders on different ranks, polled and waited on, and every op through it).

Inputs are formulas of (rank, index), so a rank computes what every other rank sent without a (size x n)
stack of arrays: large sums over the ranks are in closed form, since at 128 ranks a loop over the ranks on
every rank costs seconds of the machine's time.
"""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np

import collective as hvd
from collective._native import CollectiveKind as kinds
from collective.runtime import start_engine
from common import Cases, report

# Sizes 0, 1, odd, and (at any size above 2) past the small calls that travel inside the descriptor round.
COUNTS = (0, 1, 7, 4099, 40_003)


def int_input(rank: int, count: int) -> np.ndarray:
    """Distinct per rank and index, so a piece delivered to the wrong place or reduced twice shows."""
    return np.arange(count, dtype=np.int64) * (rank % 7 + 1) + rank * 1_000_003 - 500_000


def int_sum(size: int, count: int) -> np.ndarray:
    """The sum of every rank's int_input, in closed form (a loop over 128 ranks, on 128 ranks, costs seconds)."""
    ranks = np.arange(size, dtype=np.int64)
    return (np.arange(count, dtype=np.int64) * int((ranks % 7 + 1).sum()) + 1_000_003 * int(ranks.sum())
            - 500_000 * size)


def mixed_input(rank: int, count: int) -> np.ndarray:
    """Int32 values whose minimum and maximum come from different ranks at different indices."""
    return ((np.arange(count, dtype=np.int64) * 7 + rank * 13) % 1009 - 504).astype(np.int32)


def eighths(rank: int, count: int) -> np.ndarray:
    """Float32 multiples of 1/8 in [-6.25, 6.25]: any sum over 128 ranks is exact, in any order."""
    return (((rank * 31 + np.arange(count, dtype=np.int64) * 17) % 101 - 50) / 8).astype(np.float32)


def eighths_sum(size: int, count: int) -> np.ndarray:
    # eighths(r, i) depends on i only through k = 17 i mod 101: sum over the ranks once per k.
    per_k = np.array([((np.arange(size) * 31 + k) % 101 - 50).sum() / 8 for k in range(101)])
    return per_k[np.arange(count, dtype=np.int64) * 17 % 101]


def random_floats(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng([rank, count]).uniform(-10, 10, size=count).astype(np.float32)


def over_ranks(size: int, count: int, make: Callable[[int, int], np.ndarray],
               fold: Callable[[np.ndarray, np.ndarray], np.ndarray], dtype: type) -> np.ndarray:
    total = make(0, count).astype(dtype)
    for rank in range(1, size):
        total = fold(total, make(rank, count).astype(dtype))
    return total


def check(failures: list[str], label: str, got: np.ndarray, want: np.ndarray, atol: float = 0.0) -> None:
    if got.shape != want.shape:
        failures.append(f"{label}: shape {got.shape}, want {want.shape}")
    elif atol == 0.0 and not np.array_equal(got, want):
        bad = int(np.flatnonzero(got.ravel() != want.ravel())[0])
        failures.append(f"{label}: element {bad} is {got.ravel()[bad]}, want {want.ravel()[bad]}")
    elif atol > 0.0 and not np.allclose(got, want, rtol=0.0, atol=atol):
        bad = int(np.argmax(np.abs(got.astype(np.float64) - want).ravel()))
        failures.append(f"{label}: element {bad} is {got.ravel()[bad]}, want {want.ravel()[bad]} (atol {atol:g})")


def float_atol(size: int) -> float:
    # |inputs| <= 10: a float32 sum of `size` of them is off by at most about size * 10 * 2^-24 per step.
    return size * size * 10 * 2.0 ** -23


def add_direct_cases(case: Cases, rank: int, size: int, tag: str) -> None:
    """Every op through the ops API (the communicator, or the engine once it runs); `tag` keeps names apart."""
    failures = case.failures

    @case
    def allreduce_integers_sum_min_max() -> None:
        for count in COUNTS:
            got = hvd.allreduce(int_input(rank, count), op=hvd.Sum, name=f"{tag}.sum.{count}")
            check(failures, f"{tag} sum[{count}]", got, int_sum(size, count))
        mine = mixed_input(rank, 4099)
        check(failures, f"{tag} min", hvd.allreduce(mine, op=hvd.Min, name=f"{tag}.min"),
              over_ranks(size, 4099, mixed_input, np.minimum, np.int32))
        check(failures, f"{tag} max", hvd.allreduce(mine, op=hvd.Max, name=f"{tag}.max"),
              over_ranks(size, 4099, mixed_input, np.maximum, np.int32))

    @case
    def allreduce_floats_sum_and_average() -> None:
        for count in (1, 4099, 40_003):
            got = hvd.allreduce(eighths(rank, count), op=hvd.Sum, name=f"{tag}.fsum.{count}")
            check(failures, f"{tag} float sum[{count}] (exact)", got, eighths_sum(size, count).astype(np.float32))
        got = hvd.allreduce(random_floats(rank, 1001), op=hvd.Average, name=f"{tag}.avg")
        want = over_ranks(size, 1001, random_floats, np.add, np.float64) / size
        check(failures, f"{tag} average", got, want, float_atol(size) / size)

    @case
    def allgather_uneven_rows() -> None:
        # Ranks with rank % 4 == 0 send no rows at all.
        mine = np.arange(rank % 4 * 3, dtype=np.int32).reshape(rank % 4, 3) + rank * 1000
        want = np.concatenate([np.arange(r % 4 * 3, dtype=np.int32).reshape(r % 4, 3) + r * 1000 for r in range(size)])
        check(failures, f"{tag} allgather", hvd.allgather(mine, name=f"{tag}.gather"), want)
        got = hvd.allgather(random_floats(rank, 5).astype(np.float64), name=f"{tag}.gather.f64")
        check(failures, f"{tag} allgather f64", got,
              np.concatenate([random_floats(r, 5).astype(np.float64) for r in range(size)]))

    @case
    def broadcast_from_several_roots() -> None:
        for root in sorted({0, size - 1, size // 2 + 1}):
            got = hvd.broadcast(int_input(rank, 40_003), root, name=f"{tag}.bcast.{root}")
            check(failures, f"{tag} broadcast from {root}", got, int_input(root, 40_003))
            got = hvd.broadcast(random_floats(rank, 33), root, name=f"{tag}.bcast.f.{root}")
            check(failures, f"{tag} broadcast f32 from {root}", got, random_floats(root, 33))

    @case
    def alltoall_even_and_uneven() -> None:
        # Even: rank r sends two values to each d, which record (r, d).
        mine = np.array([[rank, d] for d in range(size) for _ in range(2)], np.int32)
        want = np.array([[s, rank] for s in range(size) for _ in range(2)], np.int32)
        check(failures, f"{tag} alltoall", hvd.alltoall(mine, name=f"{tag}.a2a"), want)
        # Uneven: (rank + d) % 3 rows to each d, zero for some pairs.
        splits = [(rank + d) % 3 for d in range(size)]
        mine = np.array([[rank, d] for d in range(size) for _ in range(splits[d])], np.int64).reshape(-1, 2)
        got, received = hvd.alltoall(mine, splits=splits, name=f"{tag}.a2av")
        want_rows = [(s + rank) % 3 for s in range(size)]
        want = np.array([[s, rank] for s in range(size) for _ in range(want_rows[s])], np.int64).reshape(-1, 2)
        check(failures, f"{tag} alltoall uneven", got, want)
        check(failures, f"{tag} alltoall received splits", received, np.array(want_rows, np.int64))

    @case
    def reducescatter_uneven_rows() -> None:
        rows = size * 3 + 5  # the first 5 ranks get one row more
        mine = int_input(rank, rows * 2).reshape(rows, 2)
        total = int_sum(size, rows * 2).reshape(rows, 2)
        share = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(share[:rank])
        got = hvd.reducescatter(mine, op=hvd.Sum, name=f"{tag}.rs")
        check(failures, f"{tag} reducescatter", got, total[start:start + share[rank]])

    @case
    def barriers() -> None:
        for _ in range(3):
            hvd.barrier()


def add_set_cases(case: Cases, rank: int, size: int) -> None:
    failures = case.failures

    @case
    def evens_and_odds_as_process_sets() -> None:
        evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
        odds = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
        mine = evens if evens.included() else odds
        members = mine.ranks
        got = hvd.allreduce(int_input(rank, 4099), op=hvd.Sum, name="set.sum", process_set=mine)
        want = sum(int_input(r, 4099) for r in members)  # at most 64 members
        check(failures, "set allreduce", got, want)
        got = hvd.allgather(np.array([rank], np.int64), name="set.gather", process_set=mine)
        check(failures, "set allgather", got, np.array(members, np.int64))
        root = members[-1]  # a global rank, as in Horovod
        got = hvd.broadcast(np.array([rank, 7], np.int64), root, name="set.bcast", process_set=mine)
        check(failures, "set broadcast", got, np.array([root, 7], np.int64))
        hvd.barrier(process_set=mine)
        for ps in (evens, odds):
            hvd.remove_process_set(ps)


def add_engine_cases(case: Cases, rank: int, size: int) -> None:
    failures = case.failures

    @case
    def named_async_requests_in_rank_dependent_orders() -> None:
        engine = start_engine()
        count = 40
        tensors = {f"async.{i}": int_input(rank, 50 + 97 * i) for i in range(count)}
        names = list(tensors)
        shift = rank % count
        order = names[shift:] + names[:shift]
        if rank % 2:
            order.reverse()
        handles = {name: engine.submit(kinds.ALLREDUCE, name, tensors[name], op=hvd.Sum) for name in order}
        want = {name: int_sum(size, 50 + 97 * i) for i, name in enumerate(names)}
        # A handle that polls as done has its result in place before anyone waits on it.
        for name in order:
            if engine.poll(handles[name]):
                check(failures, f"async {name} once polled done", tensors[name], want[name])
        for name in names:
            engine.wait(handles[name])
            check(failures, f"async {name}", tensors[name], want[name])

    add_direct_cases(case, rank, size, "engine")


def main() -> None:
    transport, phases = sys.argv[1], sys.argv[2].split(",")
    # On a loaded 2-core machine the launcher takes over a minute to start 128 Pythons: the first rank's
    # bootstrap waits for the last one that long, past the default connect_timeout_s of 60 s.
    hvd.init(enable_shm=(transport == "shm"), timeout_s=120, connect_timeout_s=300)
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    if "direct" in phases:
        add_direct_cases(case, rank, size, "direct")
    if "sets" in phases:
        add_set_cases(case, rank, size)
    if "engine" in phases:
        add_engine_cases(case, rank, size)
    case.run_and_report("scale")
    hvd.shutdown()


if __name__ == "__main__":
    main()
