"""Horovod's ``hvd.init(comm=...)`` under ``mpiexec -n 3``: the job formed over an mpi4py communicator
(``COMM_WORLD.Split``: the even ranks make one job, the odd rank another) and over a list of
``MPI_COMM_WORLD`` ranks ([0, 2]; rank 1, left out, is told so), with torch allreduces checked on each;
and the named refusals of a wrong ``comm``."""

from __future__ import annotations

import torch
from mpi4py import MPI

import collective.torch as hvd
from common import Cases

WORLD = MPI.COMM_WORLD


def main() -> None:
    me = WORLD.Get_rank()
    case = Cases()
    failures = case.failures

    def expect_job(label: str, members: list[int]) -> None:
        got = (hvd.rank(), hvd.size())
        if got != (members.index(me), len(members)):
            failures.append(f"{label}: rank/size {got} on world rank {me}, members {members}")
        total = hvd.allreduce(torch.tensor([float(me + 1)], dtype=torch.float64), op=hvd.Sum)
        if total.item() != sum(m + 1 for m in members):
            failures.append(f"{label}: allreduce gave {total.item()} on world rank {me}, members {members}")

    @case
    def job_over_a_split_communicator() -> None:
        hvd.init(WORLD.Split(color=me % 2, key=me))  # positional, as Horovod scripts write it
        expect_job("split", [r for r in range(WORLD.Get_size()) if r % 2 == me % 2])
        hvd.shutdown()

    @case
    def job_over_a_list_of_world_ranks() -> None:
        members = [0, 2]
        if me in members:
            hvd.init(comm=members)
            expect_job("list", members)
            hvd.shutdown()
            return
        try:
            hvd.init(comm=members)
            failures.append("a rank the list leaves out joined a job")
        except ValueError as exc:
            if f"MPI_COMM_WORLD rank {me}, which the list leaves out" not in str(exc):
                failures.append(f"unclear refusal for a left-out rank: {exc}")

    @case
    def wrong_comms_are_named() -> None:
        for comm, words in (("world", "got str"), ([0, 0], "distinct"), ([0, 7], "not ranks: [7]"),
                            (MPI.COMM_NULL, "passed MPI.COMM_NULL")):
            try:
                hvd.init(comm=comm)
                failures.append(f"init(comm={comm!r}) was accepted")
                hvd.shutdown()
            except ValueError as exc:
                if words not in str(exc):
                    failures.append(f"init(comm={comm!r}): unclear error: {exc}")

    case.run_and_report("init_comm")


if __name__ == "__main__":
    main()
