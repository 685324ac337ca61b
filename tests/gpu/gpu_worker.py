"""collective.torch on CUDA tensors, each result checked against a CPU reference every rank computes.

One rank: NCCL. Two ranks on one GPU: host staging. Reports RESULT {"case": ..., "failures": [...]}
per case, and {"route": ...} first.
"""

from __future__ import annotations

import json
import traceback
from typing import Callable

import torch

import collective.torch as hvd
from collective.torch.routes.cuda_context import cuda_context

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def report(**record: object) -> None:
    print("RESULT " + json.dumps(record), flush=True)


def rank_input(rank: int, shape: tuple[int, ...], dtype: torch.dtype, positive: bool = False) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    values = (torch.arange(n, dtype=torch.int64) * (rank + 3)) % 7 + (1 if positive else -3) + rank
    return values.reshape(shape).to(dtype)


def reference(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    stack = torch.stack([t.double() for t in inputs])
    if op == "Sum":
        return stack.sum(0)
    if op == "Average":
        return stack.sum(0) / len(inputs)
    if op == "Min":
        return stack.min(0).values
    if op == "Max":
        return stack.max(0).values
    return stack.prod(0)


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    got = got.detach().cpu().double()
    want = want.cpu().double()
    if got.shape != want.shape:
        return False
    if not dtype.is_floating_point:
        return torch.equal(got, torch.trunc(want))
    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-6)
    return torch.allclose(got, want, rtol=tol, atol=tol)


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)


def allreduce(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    for dtype in DTYPES:
        for op_name in ("Sum", "Average", "Min", "Max", "Product"):
            inputs = [rank_input(r, (5, 33), dtype, positive=op_name == "Product") for r in range(size)]
            mine = inputs[rank].to(dev)
            got = hvd.allreduce(mine, op=getattr(hvd, op_name), name=f"ar.{dtype}.{op_name}")
            c.check(got.device == dev and got.dtype == dtype, f"{dtype} {op_name}: result on {got.device} {got.dtype}")
            c.check(close(got, reference(inputs, op_name), dtype), f"{dtype} {op_name}: wrong values")
            c.check(torch.equal(mine.cpu(), inputs[rank]), f"{dtype} {op_name}: input modified")
    x = rank_input(rank, (64,), torch.float32).to(dev)
    want = reference([rank_input(r, (64,), torch.float32) for r in range(size)], "Sum") * 0.5
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    c.check(close(got, want, torch.float32), "prescale 2, postscale 0.25")


def in_place_and_async(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    inputs = [rank_input(r, (8, 6), torch.float32) for r in range(size)]
    want = reference(inputs, "Sum")
    strided = inputs[rank].to(dev).t().contiguous().t()
    returned = hvd.allreduce_(strided, op=hvd.Sum)
    c.check(returned is strided and close(strided, want, torch.float32), "allreduce_ on a non-contiguous tensor")
    handle = hvd.allreduce_async(inputs[rank].to(dev), op=hvd.Sum, name="async")
    result = hvd.synchronize(handle)
    c.check(close(result, want, torch.float32), "allreduce_async result")
    handle = hvd.allreduce_async_(inputs[rank].to(dev), op=hvd.Sum, name="polled")
    hvd.barrier()
    torch.cuda.synchronize()
    c.check(hvd.poll(handle), "poll is False once the stream has finished")
    c.check(close(hvd.synchronize(handle), want, torch.float32), "polled result")


def grouped(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    shapes = [((3, 4), torch.float32), ((7,), torch.float32), ((2, 2), torch.float64), ((5,), torch.float32)]
    inputs = [[rank_input(r + i, s, d) for i, (s, d) in enumerate(shapes)] for r in range(size)]
    mine = [t.to(dev) for t in inputs[rank]]
    out = hvd.grouped_allreduce(mine, op=hvd.Average, name="group")
    for i, (shape, dtype) in enumerate(shapes):
        want = reference([inputs[r][i] for r in range(size)], "Average")
        c.check(close(out[i], want, dtype), f"grouped member {i} ({dtype})")


def allgather(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    for rows_of in (lambda r: 3, lambda r: r + 1):
        for dtype in (torch.float32, torch.int64, torch.bfloat16):
            inputs = [rank_input(r, (rows_of(r), 5), dtype) for r in range(size)]
            got = hvd.allgather(inputs[rank].to(dev), name=f"ag.{dtype}.{rows_of(1)}")
            c.check(got.device == dev and torch.equal(got.cpu(), torch.cat(inputs)), f"allgather {dtype} rows {rows_of(1)}")


def broadcast(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    for root in range(size):
        for dtype in (torch.float32, torch.float16, torch.int32):
            mine = rank_input(rank, (4, 9), dtype).to(dev)
            got = hvd.broadcast(mine, root_rank=root, name=f"bc.{root}.{dtype}")
            c.check(torch.equal(got.cpu(), rank_input(root, (4, 9), dtype)), f"broadcast from {root} {dtype}")
            hvd.broadcast_(mine, root_rank=root, name=f"bc_.{root}.{dtype}")
            c.check(torch.equal(mine.cpu(), rank_input(root, (4, 9), dtype)), f"broadcast_ from {root} {dtype}")


def reducescatter(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    for rows in (size * 3, size * 3 + 1):
        inputs = [rank_input(r, (rows, 4), torch.float32) for r in range(size)]
        total = reference(inputs, "Sum")
        per, extra = divmod(rows, size)
        start = rank * per + min(rank, extra)
        want = total[start:start + per + (1 if rank < extra else 0)]
        got = hvd.reducescatter(inputs[rank].to(dev), op=hvd.Sum, name=f"rs.{rows}")
        c.check(close(got, want, torch.float32), f"reducescatter rows={rows}")


def alltoall(c: Checks, dev: torch.device) -> None:
    size, rank = hvd.size(), hvd.rank()
    splits = [(rank + d) % 3 + 1 for d in range(size)]
    rows = [torch.full((splits[d], 2), float(rank * 100 + d)) for d in range(size)]
    out, received = hvd.alltoall(torch.cat(rows).to(dev), splits=torch.tensor(splits), name="a2a")
    want_splits = [(s + rank) % 3 + 1 for s in range(size)]
    want = torch.cat([torch.full((want_splits[s], 2), float(s * 100 + rank)) for s in range(size)])
    c.check(received.tolist() == want_splits, f"alltoall received splits {received.tolist()}")
    c.check(out.device == dev and torch.equal(out.cpu(), want), "alltoall rows")


def distributed_optimizer(c: Checks, dev: torch.device) -> None:
    """Each rank trains on its slice; the result must match one process training on the whole batch."""
    size, rank = hvd.size(), hvd.rank()
    per_rank, steps = 4, 3

    def model() -> torch.nn.Module:
        torch.manual_seed(7)
        return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()

    gen = torch.Generator().manual_seed(11)
    data = [(torch.randn(per_rank * size, 5, generator=gen, dtype=torch.float64),
             torch.randn(per_rank * size, 2, generator=gen, dtype=torch.float64)) for _ in range(steps)]
    net = model().to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), named_parameters=net.named_parameters())
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    reference_net = model()
    reference_opt = torch.optim.SGD(reference_net.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        torch.nn.functional.mse_loss(net(x[mine].to(dev)), y[mine].to(dev)).backward()
        opt.step()
        reference_opt.zero_grad()
        torch.nn.functional.mse_loss(reference_net(x), y).backward()
        reference_opt.step()
    for (name, p), q in zip(net.named_parameters(), reference_net.parameters()):
        c.check(p.is_cuda and torch.allclose(p.detach().cpu(), q.detach(), atol=1e-10), f"parameter {name} differs")


def process_sets(c: Checks, dev: torch.device) -> None:
    """CUDA tensors on a process set (ranks 0 and the last; the last alone on 2 ranks): staged through host
    memory onto the set's engine, results back on the device. Ranks outside the set only add it."""
    size, rank = hvd.size(), hvd.rank()
    if size < 2:
        return  # a set other than the global one needs a second rank
    members = [0, size - 1] if size >= 3 else [size - 1]
    subset = hvd.add_process_set(members)
    try:
        if rank not in members:
            return
        me = members.index(rank)
        inputs = [rank_input(r, (6, 5), torch.float32) for r in members]
        got = hvd.allreduce(inputs[me].to(dev), op=hvd.Sum, name="ps.ar", process_set=subset)
        c.check(got.device == dev and close(got, reference(inputs, "Sum"), torch.float32), "set allreduce")
        pair = [inputs[me].to(dev), inputs[me][0].double().to(dev)]
        out = hvd.grouped_allreduce(pair, op=hvd.Average, name="ps.group", process_set=subset)
        c.check(close(out[1], reference([t[0] for t in inputs], "Average"), torch.float64), "set grouped allreduce")
        got = hvd.broadcast(inputs[me].to(dev), root_rank=members[-1], name="ps.bc", process_set=subset)
        c.check(got.device == dev and torch.equal(got.cpu(), inputs[-1]), "set broadcast from a global root")
        got = hvd.allgather(inputs[me].to(dev), name="ps.ag", process_set=subset)
        c.check(got.device == dev and torch.equal(got.cpu(), torch.cat(inputs)), "set allgather")
        got = hvd.reducescatter(inputs[me].to(dev), op=hvd.Sum, name="ps.rs", process_set=subset)
        share = 6 // len(members)
        c.check(close(got, reference(inputs, "Sum")[me * share:(me + 1) * share], torch.float32), "set reducescatter")
        out = hvd.alltoall(inputs[me].to(dev), name="ps.a2a", process_set=subset)  # even splits: no splits back
        want = torch.cat([t[me * share:(me + 1) * share] for t in inputs])
        c.check(out.device == dev and torch.equal(out.cpu(), want), "set alltoall")
        net = torch.nn.Linear(5, 1).to(dev)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                       named_parameters=net.named_parameters(), process_set=subset)
        opt.zero_grad()
        net(torch.full((2, 5), float(rank), device=dev)).sum().backward()
        opt.step()
        c.check(net.weight.grad is not None and torch.allclose(
            net.weight.grad.cpu(), torch.full((1, 5), 2.0 * sum(members) / len(members))), "set optimizer gradient")
    finally:
        hvd.remove_process_set(subset)


CASES: list[Callable[[Checks, torch.device], None]] = [
    allreduce, in_place_and_async, grouped, allgather, broadcast, reducescatter, alltoall, distributed_optimizer,
    process_sets]


def main() -> None:
    hvd.init()
    # Every rank uses its local GPU; with more ranks than GPUs they share one (host staging).
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    report(route=cuda_context(dev).decision.route.value, reason=cuda_context(dev).decision.reason)
    for case in CASES:
        checks = Checks()
        try:
            case(checks, dev)
        except Exception:  # report and carry on, so one job shows every broken case
            checks.failures.append(traceback.format_exc())
        report(case=case.__name__, failures=checks.failures)
    hvd.shutdown()


if __name__ == "__main__":
    main()
