"""Process sets on 3 or 4 ranks: disjoint and overlapping sets, used one after another and from threads at
the same time, every op with process_set=, global roots, set ranks, and the errors of a non-member."""

from __future__ import annotations

import sys
import threading

import numpy as np

import collective as hvd
from collective.process_sets import HorovodBasics
from collective.runtime import engine as running_engine, start_engine
from common import Cases, report


def check(failures: list[str], label: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        failures.append(f"{label}: got {got.dtype}{got.shape} {got.ravel()[:6].tolist()} "
                        f"want {want.dtype}{want.shape} {want.ravel()[:6].tolist()}")


def allreduce_from_threads(sets: list[tuple[str, hvd.ProcessSet]], rank: int, failures: list[str],
                           rounds: int = 30) -> None:
    """Allreduces on each of ``sets`` in a thread of its own, all at once, then checks every result."""
    results: dict[str, list[np.ndarray]] = {}

    def work(label: str, ps: hvd.ProcessSet) -> None:
        try:
            results[label] = [hvd.allreduce(np.full(1000 * (i % 3 + 1), rank + i, np.float64), op=hvd.Sum,
                                            process_set=ps) for i in range(rounds)]
        except Exception as exc:  # reported below
            failures.append(f"{label} in a thread raised {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=item) for item in sets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        if thread.is_alive():
            failures.append("a set's thread did not finish in 120 s")
            return
    for label, ps in sets:
        for i, got in enumerate(results.get(label, [])):
            want = np.full(1000 * (i % 3 + 1), sum(r + i for r in ps.ranks), np.float64)
            check(failures, f"{label} threaded allreduce {i}", got, want)


def main() -> None:
    hvd.init()
    if sys.argv[1] == "engine":
        start_engine()  # the job's engine, then every set's, negotiate and fuse per set
    rank, size = hvd.rank(), hvd.size()
    # Overlapping: the first three ranks and the last three. Disjoint: evens and odds. Set at init too.
    low, high = hvd.ProcessSet(range(size - 1)), hvd.ProcessSet(range(1, size))
    hvd.init(process_sets=[low, high])
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(size) if r % 2 == 1]))
    sets = {"low": low, "high": high, "evens": evens, "odds": odds}
    case = Cases()
    failures = case.failures

    @case
    def set_queries() -> None:
        for label, ps in sets.items():
            inside = rank in ps.ranks
            if ps.included() is not inside or ps.size() != len(ps.ranks):
                failures.append(f"{label}: included={ps.included()} size={ps.size()} for ranks {ps.ranks}")
            if inside and ps.rank() != ps.ranks.index(rank):
                failures.append(f"{label}: rank()={ps.rank()}, want {ps.ranks.index(rank)}")
        if len({ps.process_set_id for ps in sets.values()} | {0}) != 5:
            failures.append(f"ids not distinct: {[ps.process_set_id for ps in sets.values()]}")
        if hvd.global_process_set.ranks != list(range(size)) or hvd.global_process_set.rank() != rank:
            failures.append(f"global set: {hvd.global_process_set.ranks}")

    @case
    def every_op_on_every_set() -> None:
        for label, ps in sets.items():
            if not ps.included():
                continue
            members, me = ps.ranks, ps.ranks.index(rank)
            n = len(members)
            got = hvd.allreduce(np.full(5, rank + 1, np.int64), op=hvd.Sum, name=f"ar.{label}", process_set=ps)
            check(failures, f"{label} allreduce", got, np.full(5, sum(r + 1 for r in members), np.int64))
            got = hvd.allgather(np.full((rank % 3, 2), rank, np.float32), process_set=ps)
            want = np.concatenate([np.full((r % 3, 2), r, np.float32) for r in members])
            check(failures, f"{label} allgather", got, want)
            root = members[-1]  # a global rank, as in Horovod
            check(failures, f"{label} broadcast", hvd.broadcast(np.array([rank, 7]), root, process_set=ps),
                  np.array([root, 7]))
            got = hvd.alltoall(np.arange(n * 2, dtype=np.int32) + 100 * rank, process_set=ps)
            check(failures, f"{label} alltoall", got,
                  np.concatenate([np.arange(2 * me, 2 * me + 2, dtype=np.int32) + 100 * r for r in members]))
            got = hvd.reducescatter(np.full((n, 3), rank, np.float64), op=hvd.Sum, process_set=ps)
            check(failures, f"{label} reducescatter", got, np.full((1, 3), sum(members), np.float64))
            got = hvd.grouped_allgather([np.array([rank]), np.array([rank, rank])], name=f"g.{label}", process_set=ps)
            check(failures, f"{label} grouped_allgather", got[1], np.repeat(np.array(members), 2))
            hvd.barrier(process_set=ps)

    @case
    def overlapping_and_disjoint_sets_from_threads_at_once() -> None:
        """Each set in its own thread, ranks starting them in different orders: one shared mesh or engine
        thread would cross the calls of two sets and hang or mix them up."""
        mine = [(label, ps) for label, ps in sets.items() if ps.included()]
        allreduce_from_threads(mine if rank % 2 == 0 else mine[::-1], rank, failures)

    @case
    def a_non_member_call_names_the_set_and_the_rank() -> None:
        outside = next(ps for ps in (evens, odds) if not ps.included())
        try:
            hvd.allreduce(np.ones(2), process_set=outside)
            failures.append("a call on a set without this rank was accepted")
        except ValueError as exc:
            text = str(exc)
            if f"rank {rank}" not in text or f"process set {outside.process_set_id}" not in text:
                failures.append(f"unclear error: {text}")
        if evens.included():
            try:
                hvd.broadcast(np.ones(1), 1, process_set=evens)  # rank 1 is odd
                failures.append("a root outside the set was accepted")
            except ValueError as exc:
                if "root_rank 1" not in str(exc):
                    failures.append(f"unclear root error: {exc}")

    @case
    def init_again_binds_known_sets_and_names_repeats() -> None:
        """Horovod's rule: a later init(process_sets=...) binds sets whose ranks exist to their ids; entries
        that repeat one another or the global set get no id and a ValueError, and the rest are still added."""
        same_as_low = hvd.ProcessSet(reversed(low.ranks))
        first_only = hvd.ProcessSet([0])  # in no set of the 3- or 4-rank job yet
        listed = [same_as_low, hvd.ProcessSet(range(size - 1, -1, -1)), first_only, hvd.ProcessSet([0])]
        try:
            hvd.init(process_sets=listed)
            failures.append("init(process_sets=...) with repeated entries was accepted")
        except ValueError as exc:
            if "entries [1, 3]" not in str(exc):
                failures.append(f"the repeats are not named: {exc}")
        if same_as_low.process_set_id != low.process_set_id:
            failures.append(f"a set with low's ranks was not bound to low's id: {same_as_low}")
        if first_only.process_set_id in (None, 0) or (rank == 0) is not first_only.included():
            failures.append(f"the new set was not added: {first_only}")
        elif rank == 0:
            check(failures, "the new set's allreduce", hvd.allreduce(np.array([5]), op=hvd.Sum, process_set=first_only),
                  np.array([5]))
        # What Horovod's tests read through hvd.mpi_ops._basics: every set by id, the global one as 0.
        listing = HorovodBasics()._get_process_set_ids_and_ranks()
        want = {0: list(range(size)), first_only.process_set_id: [0],
                **{ps.process_set_id: ps.ranks for ps in sets.values() if ps.process_set_id is not None}}
        if listing != want:
            failures.append(f"_get_process_set_ids_and_ranks() = {listing}, want {want}")
        hvd.barrier()

    @case
    def remove_then_add_again() -> None:
        if not hvd.remove_process_set(odds) or odds.process_set_id is not None:
            failures.append("remove_process_set(odds) did not remove it")
        if hvd.remove_process_set(hvd.global_process_set):
            failures.append("the global set was removed")
        again = hvd.add_process_set([r for r in range(size) if r % 2 == 1])
        if again.included():
            got = hvd.allreduce(np.array([rank]), op=hvd.Sum, process_set=again)
            check(failures, "re-added odds allreduce", got, np.array([sum(again.ranks)]))
        hvd.barrier()

    if running_engine() is not None:
        @case
        def sets_have_their_own_engine() -> None:
            from collective.process_sets import runtime_for
            engines = {id(runtime_for(ps).engine) for ps in sets.values() if ps.included() and ps.process_set_id}
            if None in engines or id(running_engine()) in engines or len(engines) != sum(
                    1 for ps in sets.values() if ps.included() and ps.process_set_id):
                failures.append("a set runs without an engine of its own")

    case.run_and_report("process_sets")
    hvd.shutdown()


if __name__ == "__main__":
    main()
