"""Process sets given by mpi4py communicators, as Horovod accepts them (run under mpiexec, 3 or 4 ranks).

On the MPI backend: sets from ``COMM_WORLD.Split`` at init (a different set on each parity, set ranks in
global order even where the communicator orders them otherwise), numpy and torch ops on them checked
against numpy, one used from a thread while an overlapping list set runs in another, ranks that pass
``COMM_NULL``, and members that disagree on the communicator (a MismatchError on every rank, after which
sets still add). On the ring backend: the clear refusal.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import collective as hvd
from collective.errors import MismatchError
from common import Cases
from process_sets import allreduce_from_threads, check as check_array

WORLD = MPI.COMM_WORLD


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    case = Cases()
    failures = case.failures

    def check(label: str, got: np.ndarray, want: np.ndarray) -> None:
        check_array(failures, label, got, want)

    if not hvd.mpi_enabled():
        @case
        def refused_on_the_ring() -> None:
            try:
                hvd.add_process_set(hvd.ProcessSet(WORLD))
                failures.append("ProcessSet(mpi_comm) was accepted on the ring backend")
            except NotImplementedError as exc:
                if "MPI backend" not in str(exc):
                    failures.append(f"unclear refusal: {exc}")

        case.run_and_report("comm_process_sets")
        hvd.shutdown()
        return

    # Reversed keys: the communicator's order is not the set's (set ranks follow global ranks, as for a list).
    parity_comm = WORLD.Split(color=rank % 2, key=-rank)
    parity = hvd.ProcessSet(parity_comm)
    hvd.init(process_sets=[parity])
    members = [r for r in range(size) if r % 2 == rank % 2]

    @case
    def parity_sets_from_split() -> None:
        if parity.ranks != members or parity.size() != len(members) or parity.rank() != members.index(rank):
            failures.append(f"queries: ranks={parity.ranks} size={parity.size()} rank={parity.rank()}")
        if parity.included() is not True:
            failures.append("included() is not True on a member")
        ids = hvd.allgather(np.array([parity.process_set_id]))
        if len(set(ids.tolist())) != 2 or ids.tolist()[::2] != [ids[0]] * len(ids[::2]):
            failures.append(f"the two parities' set ids: {ids.tolist()}")
        got = hvd.allreduce(np.arange(6, dtype=np.int32) * (rank + 1), op=hvd.Sum, process_set=parity)
        check("allreduce", got, np.arange(6, dtype=np.int32) * sum(r + 1 for r in members))
        got = hvd.allgather(np.full((rank + 1, 2), rank, np.float64), process_set=parity)
        check("allgather", got, np.concatenate([np.full((r + 1, 2), r, np.float64) for r in members]))
        got = hvd.broadcast(np.array([rank, 5], np.int64), members[-1], process_set=parity)
        check("broadcast from a global root", got, np.array([members[-1], 5], np.int64))

    @case
    def torch_ops_sync_and_async() -> None:
        import torch

        import collective.torch as thvd

        x = torch.full((4,), float(rank + 1), dtype=torch.float32)
        got = thvd.allreduce(x, op=thvd.Average, process_set=parity).numpy()
        check("torch allreduce Average", got, np.full(4, sum(r + 1 for r in members) / len(members), np.float32))
        handle = thvd.allgather_async(torch.tensor([[rank]], dtype=torch.int64), process_set=parity)
        check("torch allgather_async", thvd.synchronize(handle).numpy(), np.array([[r] for r in members], np.int64))
        handle = thvd.allreduce_async_(torch.ones(3, dtype=torch.float64), op=thvd.Sum, name="comm.async",
                                       process_set=parity)
        check("torch allreduce_async_", thvd.synchronize(handle).numpy(), np.full(3, float(len(members))))

    @case
    def with_an_overlapping_list_set_from_threads() -> None:
        low = hvd.add_process_set(range(size - 1))
        mine = [("parity", parity)] + ([("low", low)] if low.included() else [])
        allreduce_from_threads(mine if rank % 2 else mine[::-1], rank, failures, rounds=20)
        hvd.remove_process_set(low)

    @case
    def null_communicators_and_disagreeing_members() -> None:
        # Rank 0 alone, the rest left out (COMM_NULL): one set of one rank, the others in none.
        alone = hvd.add_process_set(hvd.ProcessSet(WORLD.Split(0 if rank == 0 else MPI.UNDEFINED, 0)))
        if (alone.process_set_id is not None) != (rank == 0) or (rank == 0 and alone.ranks != [0]):
            failures.append(f"COMM_NULL: {alone}")
        if rank == 0:
            check("a set of one", hvd.allreduce(np.array([3.0]), op=hvd.Sum, process_set=alone), np.array([3.0]))
        # Rank 1 passes COMM_SELF while rank 0 names it in a communicator of {0, 1}.
        pair = WORLD.Split(0 if rank < 2 else 1, rank)
        try:
            hvd.add_process_set(hvd.ProcessSet(MPI.COMM_SELF if rank == 1 else pair))
            failures.append("members that pass different communicators were accepted")
        except MismatchError as exc:
            if "rank 0 passed has ranks [0, 1]" not in str(exc) or "rank 1 passed one of ranks [1]" not in str(exc):
                failures.append(f"unclear mismatch: {exc}")
        again = hvd.add_process_set(hvd.ProcessSet(pair))  # nothing was left registered by the failure
        got = hvd.allreduce(np.array([rank], np.int64), op=hvd.Sum, process_set=again)
        check("after the mismatch", got, np.array([sum(again.ranks)], np.int64))

    case.run_and_report("comm_process_sets")
    hvd.shutdown()


if __name__ == "__main__":
    main()
