"""collective.torch with process sets on 3 ranks: the ops (sync, async, autograd) on a set, join per set,
and DistributedOptimizer(process_set=) against single-process training on the set's combined data, while
the rank outside the set trains alone on a set of its own at the same time."""

from __future__ import annotations

import torch

import collective.torch as hvd
from collective.torch.routes import cuda_context, staged
from common import Cases, report

torch.set_num_threads(1)
STEPS, ROWS = 5, 8


def model() -> torch.nn.Module:
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(ROWS, 4, generator=gen, dtype=torch.float64), torch.randn(ROWS, 2, generator=gen,
                                                                                 dtype=torch.float64)


def flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def main() -> None:
    pair, alone = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1])
    hvd.init(process_sets=[pair, alone])
    rank = hvd.rank()
    mine = pair if pair.included() else alone
    case = Cases()
    failures = case.failures

    def close(label: str, got: torch.Tensor, want: torch.Tensor) -> None:
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-9, atol=1e-12):
            failures.append(f"{label}: got {got.reshape(-1)[:4].tolist()} want {want.reshape(-1)[:4].tolist()}")

    @case
    def ops_on_a_set() -> None:
        members = mine.ranks
        x = torch.full((3,), float(rank + 1), dtype=torch.float64)
        close("allreduce Sum", hvd.allreduce(x, op=hvd.Sum, process_set=mine),
              torch.full((3,), float(sum(r + 1 for r in members)), dtype=torch.float64))
        handle = hvd.allreduce_async_(x.clone(), op=hvd.Average, name="avg", process_set=mine)
        close("allreduce_async_ Average", hvd.synchronize(handle),
              torch.full((3,), sum(r + 1 for r in members) / len(members), dtype=torch.float64))
        close("broadcast from a global root", hvd.broadcast(x, members[-1], process_set=mine),
              torch.full((3,), float(members[-1] + 1), dtype=torch.float64))
        got = hvd.allgather(torch.tensor([[float(rank)]], dtype=torch.float64), process_set=mine)
        close("allgather", got, torch.tensor([[float(r)] for r in members], dtype=torch.float64))
        hvd.barrier(process_set=mine)
        # Python objects travel among the set's ranks only, from a global root as in broadcast.
        if hvd.broadcast_object({"from": rank}, members[-1], process_set=mine) != {"from": members[-1]}:
            failures.append("broadcast_object within the set")
        if hvd.allgather_object(("rank", rank), name="set_objects", process_set=mine) != [("rank", r) for r in members]:
            failures.append("allgather_object within the set")

    @case
    def allgather_gradient_within_the_set() -> None:
        x = torch.full((2, 2), float(rank), dtype=torch.float64, requires_grad=True)
        out = hvd.allgather(x, process_set=mine)
        (out * (torch.arange(out.shape[0], dtype=torch.float64) + 1).unsqueeze(1)).sum().backward()
        me = mine.rank()
        # Horovod's allgather gradient: this rank's rows of the set's averaged output gradient.
        close("allgather gradient", x.grad, torch.tensor([[2 * me + 1.0] * 2, [2 * me + 2.0] * 2],
                                                         dtype=torch.float64))

    @case
    def join_within_the_set() -> None:
        # The last member joins after one more allreduce than the others; the set's engine fills in zeros.
        if pair.included():
            if rank == 2:
                got = hvd.allreduce(torch.ones(2, dtype=torch.float64), op=hvd.Sum, name="late", process_set=pair)
                close("allreduce with a joined member", got, torch.ones(2, dtype=torch.float64))
            last = hvd.join(process_set=pair)
            if last != 2:
                failures.append(f"join returned {last}, want global rank 2")

    def trained_against_one_process(process_set: hvd.ProcessSet, data_ranks: list[int]) -> None:
        """DistributedOptimizer(process_set=) against one process trained on ``data_ranks``' combined data
        (the mean of their losses), compared after STEPS steps."""
        net = model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                       named_parameters=net.named_parameters(), process_set=process_set)
        reference = model()
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        for step in range(STEPS):
            opt.zero_grad()
            x, y = batch(rank, step)
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
            ref_opt.zero_grad()
            losses = [torch.nn.functional.mse_loss(reference(bx), by) for bx, by in (batch(r, step) for r in data_ranks)]
            (sum(losses) / len(losses)).backward()
            ref_opt.step()
        close(f"parameters after training on set {process_set.ranks}", flat(net), flat(reference))

    @case
    def distributed_optimizer_on_a_set_matches_one_process() -> None:
        trained_against_one_process(mine, mine.ranks)

    @case
    def every_rank_wraps_with_the_pair_and_the_rank_outside_trains_alone() -> None:
        """Horovod's rule: every rank may build DistributedOptimizer(process_set=pair); rank 1, outside it,
        steps on its own gradients without waiting for anyone."""
        trained_against_one_process(pair, pair.ranks if pair.included() else [rank])
        hvd.barrier()

    @case
    def sparse_allreduce_within_the_set() -> None:
        dense = torch.zeros(6, 2, dtype=torch.float64)
        dense[rank] = rank + 1.0
        got = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse.set", op=hvd.Sum, process_set=mine)()
        want = torch.zeros(6, 2, dtype=torch.float64)
        for member in mine.ranks:
            want[member] = member + 1.0
        close("sparse allreduce (Sum) on the set", got.to_dense(), want)
        got = hvd.synchronize(hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse.set.avg", process_set=mine))
        close("sparse allreduce (Average) on the set", got.to_dense(), want / len(mine.ranks))

    @case
    def host_staged_ops_on_a_set() -> None:
        """The route CUDA tensors take on a process set (the job's NCCL communicator spans every rank):
        staged through host memory onto the set's engine. It is driven here with CPU tensors, which
        take the same steps; making the job's CUDA context, which this CPU-only torch cannot, would
        raise."""
        members, me = mine.ranks, mine.rank()
        x = torch.full((2, 3), float(rank + 1), dtype=torch.float64)
        got = hvd.synchronize(staged.allreduce_(x, "staged.sum", hvd.Sum, 1.0, 1.0, mine))
        if got is not x:
            failures.append("staged allreduce_ did not return its tensor")
        close("staged allreduce_ Sum", x, torch.full((2, 3), float(sum(r + 1 for r in members)), dtype=torch.float64))
        pair_of = [torch.full((4,), float(rank), dtype=torch.float64), torch.arange(3, dtype=torch.float64) * rank]
        got = hvd.synchronize(staged.grouped_allreduce_(pair_of, ["staged.g0", "staged.g1"], hvd.Average,
                                                        1.0, 2.0, mine))
        mean = sum(members) / len(members)
        close("staged grouped Average (postscale 2)", got[0], torch.full((4,), 2 * mean, dtype=torch.float64))
        close("staged grouped member 1", pair_of[1], torch.arange(3, dtype=torch.float64) * 2 * mean)
        y = torch.full((3,), float(rank), dtype=torch.float64)
        hvd.synchronize(staged.broadcast_(y, members[-1], "staged.bcast", mine))
        close("staged broadcast from a global root", y, torch.full((3,), float(members[-1]), dtype=torch.float64))
        rows = torch.full((rank + 1, 2), float(rank), dtype=torch.float64)
        got = hvd.synchronize(staged.allgather(rows, "staged.gather", mine))
        close("staged allgather (uneven rows)", got,
              torch.cat([torch.full((r + 1, 2), float(r), dtype=torch.float64) for r in members]))
        splits = [i + 1 for i in range(len(members))]
        send = torch.cat([torch.full((n, 1), float(10 * rank + i), dtype=torch.float64) for i, n in enumerate(splits)])
        out, received = hvd.synchronize(staged.alltoall(send, splits, "staged.a2a", mine))
        close("staged alltoall", out, torch.cat([torch.full((me + 1, 1), float(10 * r + me), dtype=torch.float64)
                                                 for r in members]))
        if received.tolist() != [me + 1] * len(members):
            failures.append(f"staged alltoall received splits {received.tolist()}")
        table = torch.arange(2 * len(members) + 1, dtype=torch.float64).unsqueeze(1) * (rank + 1)
        got = hvd.synchronize(staged.reducescatter(table, "staged.rs", hvd.Sum, 1.0, 1.0, mine))
        start = 2 * me + min(me, 1)
        total = torch.arange(2 * len(members) + 1, dtype=torch.float64).unsqueeze(1) * sum(r + 1 for r in members)
        close("staged reducescatter (one extra row)", got, total[start:start + 2 + (1 if me < 1 else 0)])
        if cuda_context._context is not None:
            failures.append("a staged process-set collective made the job's CUDA context")

    case.run_and_report("torch_process_sets")
    hvd.shutdown()


if __name__ == "__main__":
    main()
