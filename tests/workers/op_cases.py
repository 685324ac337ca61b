"""allgather(v), broadcast, alltoall(v), reducescatter, their grouped forms, barrier, in-place and scaling, checked on every rank."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

import collective as hvd
from collective._native import CollectiveKind
from collective.runtime import engine as running_engine, start_engine
from common import Cases, report, submit_duplicate_while_held


def check(failures: list[str], label: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        failures.append(f"{label}: got {got.dtype}{got.shape} {got.ravel()[:6].tolist()} "
                        f"want {want.dtype}{want.shape} {want.ravel()[:6].tolist()}")


def rows_for(rank: int) -> int:
    return (rank * 3) % 5  # uneven, and zero rows for some ranks


def main() -> None:
    hvd.init(enable_shm=(sys.argv[1] == "shm"))
    if len(sys.argv) > 2 and sys.argv[2] == "engine":
        start_engine()  # the same calls, now through the background engine
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    failures = case.failures

    @case
    def allgather_uneven_first_dimension() -> None:
        for rows_scale, dtype in ((1, np.float32), (40_000, np.int64)):  # inline and ring paths
            mine = np.full((rows_for(rank) * rows_scale, 3), rank, dtype=dtype)
            got = hvd.allgather(mine, name=f"gather{rows_scale}")
            want = np.concatenate([np.full((rows_for(r) * rows_scale, 3), r, dtype=dtype) for r in range(size)])
            check(failures, f"allgather x{rows_scale}", got, want)

    @case
    def broadcast_from_every_root() -> None:
        for root in range(size):
            for count in (5, 2_000_003):
                mine = np.full(count, rank * 10 + 1, dtype=np.float64)
                got = hvd.broadcast(mine, root_rank=root)
                check(failures, f"broadcast root={root} n={count}", got, np.full(count, root * 10 + 1, np.float64))
                check(failures, f"broadcast input untouched root={root}", mine, np.full(count, rank * 10 + 1, np.float64))

    @case
    def broadcast_in_place_non_contiguous() -> None:
        base = np.full((6, 4), rank, dtype=np.int32)
        view = base[:, ::2]
        hvd.broadcast_(view, root_rank=size - 1)
        want = np.full((6, 4), rank, dtype=np.int32)
        want[:, ::2] = size - 1
        check(failures, "broadcast_ on strided view", base, want)

    @case
    def alltoall_even_and_uneven() -> None:
        even = np.arange(size * 2 * 3, dtype=np.int32).reshape(size * 2, 3) + 1000 * rank
        got = hvd.alltoall(even)
        want = np.concatenate([np.arange(size * 2 * 3, dtype=np.int32).reshape(size * 2, 3)[2 * rank:2 * rank + 2]
                               + 1000 * r for r in range(size)])
        check(failures, "alltoall even", got, want)
        for scale in (1, 50_000):
            # Rank r sends (r + d) % 3 * scale rows to rank d, each row tagged with (sender, destination).
            splits = [((rank + d) % 3) * scale for d in range(size)]
            rows = [np.full((splits[d], 2), rank * 100 + d, dtype=np.float32) for d in range(size)]
            tensor = np.concatenate(rows) if sum(splits) else np.zeros((0, 2), np.float32)
            got, received = hvd.alltoall(tensor, splits=splits, name=f"a2a{scale}")
            want_splits = [((s + rank) % 3) * scale for s in range(size)]
            want = np.concatenate([np.full((want_splits[s], 2), s * 100 + rank, dtype=np.float32)
                                   for s in range(size)])
            check(failures, f"alltoall uneven x{scale} splits", received, np.array(want_splits, dtype=np.int64))
            check(failures, f"alltoall uneven x{scale}", got, want)

    @case
    def reducescatter_sum_and_average() -> None:
        for rows in (size * 2 + 1, 300_001):
            tensor = (np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) + rank)
            got = hvd.reducescatter(tensor, op=hvd.Sum)
            total = sum(np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) + r for r in range(size))
            per, extra = divmod(rows, size)
            start = rank * per + min(rank, extra)
            mine = total[start:start + per + (1 if rank < extra else 0)]
            check(failures, f"reducescatter sum rows={rows}", got, mine)
            got = hvd.reducescatter(tensor, op=hvd.Average)
            if not np.allclose(got, mine / size):
                failures.append(f"reducescatter average rows={rows}")

    @case
    def grouped_allgather_and_reducescatter() -> None:
        def share(total: np.ndarray) -> np.ndarray:
            per, extra = divmod(total.shape[0], size)
            start = rank * per + min(rank, extra)
            return total[start:start + per + (1 if rank < extra else 0)]
        mine = [np.full((rows_for(rank), 2), rank, np.int32), np.arange(3, dtype=np.float64) + 10 * rank]
        wants = [np.concatenate([np.full((rows_for(r), 2), r, np.int32) for r in range(size)]),
                 np.concatenate([np.arange(3, dtype=np.float64) + 10 * r for r in range(size)])]
        for i, (got, want) in enumerate(zip(hvd.grouped_allgather(mine, name="ggather"), wants)):
            check(failures, f"grouped_allgather member {i}", got, want)
        rows = size * 2 + 1
        mine = [np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + rank, np.full((size, 3), rank + 1, np.int64)]
        totals = [sum(np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + r for r in range(size)),
                  np.full((size, 3), size * (size + 1) // 2, np.int64)]
        for i, (got, total) in enumerate(zip(hvd.grouped_reducescatter(mine, op=hvd.Sum), totals)):
            check(failures, f"grouped_reducescatter member {i}", got, share(total))

    @case
    def allreduce_in_place_and_scaled() -> None:
        x = np.full(1000, rank + 1, dtype=np.float32)
        same = hvd.allreduce_(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
        if same is not x:
            failures.append("allreduce_ did not return its input")
        check(failures, "allreduce_ scaled", x, np.full(1000, size * (size + 1) / 2, np.float32))
        # Integers scale as Horovod's do: each product truncated toward zero, the prescale per rank
        # before the sum (9 * 1.5 -> 13 on each rank: 26 on two ranks, where rounding gave 28).
        ints = hvd.allreduce(np.array([9, -9], dtype=np.int32), op=hvd.Sum, prescale_factor=1.5)
        check(failures, "int prescale truncates", ints, np.array([13 * size, -13 * size], np.int32))
        ints = hvd.allreduce(np.full(7, 3, dtype=np.int32), op=hvd.Sum, postscale_factor=1.5)
        check(failures, "int postscale truncates", ints, np.full(7, int(3 * size * 1.5), np.int32))
        # Average folds 1/size into the postscale and truncates once: 7 * size * (2 / size) is 14.
        ints = hvd.allreduce(np.full(3, 7, dtype=np.int64), op=hvd.Average, postscale_factor=2.0)
        check(failures, "int average with postscale", ints, np.full(3, 14, np.int64))
        avg = hvd.allreduce(np.full(4, float(rank), dtype=np.float64))  # Horovod's default op: Average
        check(failures, "default op is Average", avg, np.full(4, (size - 1) / 2, np.float64))
        legacy = hvd.allreduce(np.ones(3, np.float32), average=False)
        check(failures, "average=False means Sum", legacy, np.full(3, size, np.float32))
        matrix = np.arange(12, dtype=np.float32).reshape(3, 4).T  # non-contiguous input
        got = hvd.allreduce(matrix, op=hvd.Sum)
        check(failures, "non-contiguous allreduce", got, np.ascontiguousarray(matrix) * size)

    @case
    def sixteen_bit_integers_in_every_collective() -> None:
        for dtype in (np.int16, np.uint16):
            tag = np.dtype(dtype).name
            info = np.iinfo(dtype)
            mine = np.array([info.max - rank, info.min + rank, rank + 1, 7], dtype=dtype)
            every = [np.array([info.max - r, info.min + r, r + 1, 7], dtype=dtype) for r in range(size)]
            stack = np.stack(every)
            wants = {"Sum": np.add.reduce(stack, axis=0, dtype=dtype),  # wraps around
                     "Min": stack.min(axis=0), "Max": stack.max(axis=0),
                     "Product": np.multiply.reduce(stack, axis=0, dtype=dtype)}
            wants["Average"] = np.trunc(wants["Sum"].astype(np.float64) / size).astype(dtype)
            for op_name, want in wants.items():
                got = hvd.allreduce(mine, op=getattr(hvd, op_name), name=f"{tag}.{op_name}")
                check(failures, f"{tag} allreduce {op_name}", got, want)
            check(failures, f"{tag} allgather", hvd.allgather(mine[None], name=f"{tag}.gather"), stack)
            check(failures, f"{tag} broadcast", hvd.broadcast(mine, root_rank=size - 1, name=f"{tag}.bcast"),
                  every[size - 1])
            rows = np.repeat(mine[None], size, axis=0)  # one row for each rank
            check(failures, f"{tag} alltoall", hvd.alltoall(rows, name=f"{tag}.a2a"), stack)
            got = hvd.reducescatter(rows, op=hvd.Sum, name=f"{tag}.rs")
            check(failures, f"{tag} reducescatter", got, wants["Sum"][None])

    @case
    def barrier_many_times() -> None:
        for _ in range(50):
            hvd.barrier()

    @case
    def bad_arguments_are_value_errors() -> None:
        """Horovod raises ValueError for these; a ported `except ValueError` must still catch ours."""
        rows = np.ones((size + 1, 2), np.float32)
        bad = {"splits of the wrong length": lambda: hvd.alltoall(rows, splits=[1] * (size + 1), name="a2a.len"),
               "splits that are not integers": lambda: hvd.alltoall(rows, splits=np.ones(size), name="a2a.type"),
               "splits not summing to the rows": lambda: hvd.alltoall(rows, splits=[1] * size, name="a2a.sum")}
        if size > 1:
            bad["mismatched shapes"] = lambda: hvd.allreduce(np.ones(2 + rank, np.float32), name="shapes")
        if running_engine() is not None:
            bad["a duplicate in-flight name"] = duplicate_name
        # Refused before anything is sent (a string would otherwise parse as a number), naming the parameter.
        bad["prescale_factor='2'"] = lambda: hvd.allreduce(np.ones(2, np.float32), prescale_factor="2", name="pre")
        bad["postscale_factor=None"] = lambda: hvd.grouped_reducescatter([np.ones((size, 2), np.float32)],
                                                                         postscale_factor=None, name="post")
        bad["reducescatter's postscale_factor=[2]"] = lambda: hvd.reducescatter(
            np.ones((size, 2), np.float32), postscale_factor=[2], name="rs.post")
        # A rank that is not an integer is refused, not parsed (a string) or truncated (1.5 would be rank 1).
        bad["root_rank='0'"] = lambda: hvd.broadcast(np.ones(2, np.float32), root_rank="0", name="root.str")
        bad["root_rank=0.5"] = lambda: hvd.broadcast(np.ones(2, np.float32), root_rank=0.5, name="root.float")
        for what, call in bad.items():
            try:
                call()
                failures.append(f"{what}: accepted")
            except ValueError as exc:
                if not isinstance(exc, hvd.CollectiveError):
                    failures.append(f"{what}: {type(exc).__name__} is not a CollectiveError")
                parameter = what.split("=")[0].split(" ")[-1]
                if "factor" in what and f"{parameter} must be a real number" not in str(exc):
                    failures.append(f"{what}: the error does not name {parameter}: {exc}")
                if "root_rank" in what and "root_rank must be an integer rank" not in str(exc):
                    failures.append(f"{what}: the error does not name root_rank: {exc}")

    def duplicate_name() -> None:
        submit_duplicate_while_held(running_engine(), CollectiveKind.ALLREDUCE, "dup")

    @case
    def a_call_rejected_on_one_rank_then_barrier() -> None:
        """The rejected call must not use up an automatic name there, or the barrier's names differ."""
        if rank == 0:
            try:
                hvd.alltoall(np.ones(size + 1), splits=[1] * size)
                failures.append("splits that do not sum to the rows were accepted")
            except hvd.InvalidArgumentError:
                pass
        hvd.barrier()
        check(failures, "unnamed allgather afterwards", hvd.allgather(np.array([rank])), np.arange(size))

    @case
    def build_and_availability_queries() -> None:
        on_mpi = os.environ.get("COLLECTIVE_BACKEND") == "mpi"  # set by tests/mpi; the launcher runs the ring
        got = (hvd.mpi_enabled(), hvd.gloo_enabled(), hvd.gloo_built())
        if got != (on_mpi, not on_mpi, True):
            failures.append(f"mpi_enabled, gloo_enabled, gloo_built: {got} on backend mpi={on_mpi}")
        if hvd.mpi_built() is not (importlib.util.find_spec("mpi4py") is not None):
            failures.append(f"mpi_built() is {hvd.mpi_built()}")
        nccl = hvd.nccl_built()
        if type(nccl) is not int or hvd.cuda_built() is not (nccl > 0):
            failures.append(f"nccl_built() {nccl!r}, cuda_built() {hvd.cuda_built()}")
        if [hvd.rocm_built(), hvd.ccl_built(), hvd.ddl_built()] != [False] * 3:
            failures.append("a ROCm, oneCCL or DDL path claims to be built")
        if on_mpi is False and hvd.mpi_threads_supported() is not False:
            failures.append("mpi_threads_supported() is not False on the native ring")
        if hvd.is_homogeneous() is not True:  # every rank of these jobs runs on one host
            failures.append(f"is_homogeneous() is {hvd.is_homogeneous()}")

    case.run_and_report("cases")
    hvd.shutdown()


if __name__ == "__main__":
    main()
