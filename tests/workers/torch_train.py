"""DistributedOptimizer, broadcast_optimizer_state and SyncBatchNorm on 2+ ranks, each checked against
single-process training on the combined batch (which every rank computes locally as the reference).

argv[1]: timeline path handed to init, so the job also exercises the timeline.
"""

from __future__ import annotations

import sys
import warnings

import torch

import collective.torch as hvd
from torch_checks import Cases

torch.set_num_threads(1)
STEPS = 5
PER_RANK = 8


def mlp() -> torch.nn.Module:
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3)).double()


def combined_batch(step: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(50 + step)
    return (torch.randn(rows, 6, generator=gen, dtype=torch.float64),
            torch.randn(rows, 3, generator=gen, dtype=torch.float64))


def my_shard(x: torch.Tensor, rows_per_rank: int) -> torch.Tensor:
    return x[hvd.rank() * rows_per_rank:(hvd.rank() + 1) * rows_per_rank]


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_identical_across_ranks(c: Cases, model: torch.nn.Module, what: str) -> None:
    every = hvd.allgather(flat_params(model).unsqueeze(0))
    c.check(all(torch.equal(row, every[0]) for row in every), f"{what}: parameters differ between ranks")


def train_reference(steps: int, lr: float, micro_batches: int = 1) -> torch.nn.Module:
    """One process, the combined batch of every rank (accumulated over micro-batches)."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rows = PER_RANK * hvd.size()
    for step in range(steps):
        optimizer.zero_grad()
        x, y = combined_batch(step, rows)
        for micro in range(micro_batches):
            # Micro-batch m is the m-th slice of every rank's shard.
            part = [slice(r * PER_RANK + micro * PER_RANK // micro_batches,
                          r * PER_RANK + (micro + 1) * PER_RANK // micro_batches) for r in range(hvd.size())]
            xm, ym = torch.cat([x[s] for s in part]), torch.cat([y[s] for s in part])
            torch.nn.functional.mse_loss(model(xm), ym).backward()
        optimizer.step()
    return model


def train_distributed(steps: int, lr: float, micro_batches: int = 1, groups_of=None, **options) -> torch.nn.Module:
    """Every rank trains on its shard; ``groups_of(model)`` builds explicit gradient groups."""
    model = mlp()
    if groups_of is not None:
        options["groups"] = groups_of(model)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                         named_parameters=model.named_parameters(),
                                         backward_passes_per_step=micro_batches, **options)
    for step in range(steps):
        optimizer.zero_grad()
        x, y = combined_batch(step, PER_RANK * hvd.size())
        xs, ys = my_shard(x, PER_RANK), my_shard(y, PER_RANK)
        for micro in range(micro_batches):
            rows = slice(micro * PER_RANK // micro_batches, (micro + 1) * PER_RANK // micro_batches)
            torch.nn.functional.mse_loss(model(xs[rows]), ys[rows]).backward()
        optimizer.step()
    return model


def matches_single_process(c: Cases) -> None:
    reference = flat_params(train_reference(STEPS, lr=0.1))
    variants = {
        "plain": {},
        "groups=2": {"groups": 2},
        "num_groups=3": {"num_groups": 3},
        "explicit groups": {"groups_of": lambda m: [[m[0].weight, m[4].bias], [m[2].weight]]},
        "predivide": {"gradient_predivide_factor": 2.0},
    }
    for label, options in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model = train_distributed(STEPS, lr=0.1, **options)
        check_identical_across_ranks(c, model, label)
        diff = (flat_params(model) - reference).abs().max().item()
        c.check(diff < 1e-5, f"{label}: differs from single-process training by {diff}")


def backward_passes_per_step(c: Cases) -> None:
    reference = flat_params(train_reference(STEPS, lr=0.05, micro_batches=2))
    model = train_distributed(STEPS, lr=0.05, micro_batches=2)
    check_identical_across_ranks(c, model, "backward_passes_per_step=2")
    diff = (flat_params(model) - reference).abs().max().item()
    c.check(diff < 1e-5, f"backward_passes_per_step=2 differs from two accumulated micro-batches by {diff}")


def adam_state_broadcast(c: Cases) -> None:
    """Rank 0 has trained (Adam has state); the others are fresh (empty state, other lr)."""
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(5, 4).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 if hvd.rank() == 0 else 0.5, betas=(0.8, 0.9))
    if hvd.rank() == 0:
        for step in range(3):
            optimizer.zero_grad()
            x, _ = combined_batch(step, 4)
            model(x[:, :5]).pow(2).sum().backward()
            optimizer.step()
    c.check((len(optimizer.state) == 0) == (hvd.rank() != 0), "test setup: only rank 0 has optimizer state")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    root_state = hvd.broadcast_object(optimizer.state_dict() if hvd.rank() == 0 else None, root_rank=0)
    mine = optimizer.state_dict()
    c.check(mine["param_groups"] == root_state["param_groups"], f"param_groups differ: {mine['param_groups']}")
    c.check(sorted(mine["state"]) == sorted(root_state["state"]), "state entries differ")
    for index, entries in root_state["state"].items():
        for key, value in entries.items():
            c.check(torch.equal(mine["state"][index][key], value), f"state[{index}][{key!r}] differs")
    # One more identical step must keep every rank identical.
    optimizer.zero_grad()
    x, _ = combined_batch(9, 4)
    model(x[:, :5]).pow(2).sum().backward()
    optimizer.step()
    check_identical_across_ranks(c, model, "after a step with the broadcast state")


def fresh_optimizer_state_broadcast(c: Cases) -> None:
    """No rank has stepped: as in Horovod, the broadcast first creates the state (one step on zero
    gradients, parameters restored, the zero gradients left in place), so every rank ends up with the
    root's. A frozen parameter gets no gradient."""
    root = hvd.size() - 1
    makers = {
        "Adam": lambda params, rank: torch.optim.Adam(params, lr=0.01 * (rank + 1), weight_decay=0.1),
        "SGD momentum": lambda params, rank: torch.optim.SGD(params, lr=0.1 * (rank + 1), momentum=0.9,
                                                             weight_decay=0.1),
    }
    for label, make in makers.items():
        for wrapped in (False, True):
            what = f"{label}{' (DistributedOptimizer)' if wrapped else ''}"
            torch.manual_seed(hvd.rank())
            model = torch.nn.Linear(5, 4).double()
            model.bias.requires_grad_(False)
            optimizer = make(model.parameters(), hvd.rank())
            if wrapped:
                optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=root)
            before = flat_params(model)
            hvd.broadcast_optimizer_state(optimizer, root_rank=root)
            c.check(torch.equal(flat_params(model), before), f"{what}: the broadcast moved the parameters")
            c.check(model.weight.grad is not None and not model.weight.grad.any(),
                    f"{what}: the trainable parameter's gradient is {model.weight.grad}, expected zeros")
            c.check(model.bias.grad is None, f"{what}: the frozen parameter got a gradient")
            mine = optimizer.state_dict()
            root_state = hvd.broadcast_object(mine, root_rank=root)
            c.check(len(mine["state"]) == 1, f"{what}: state entries {sorted(mine['state'])}, expected 1")
            c.check(mine["param_groups"] == root_state["param_groups"], f"{what}: param_groups differ")
            for index, entries in root_state["state"].items():
                for key, value in entries.items():
                    c.check(torch.equal(torch.as_tensor(mine["state"][index][key]), torch.as_tensor(value)),
                            f"{what}: state[{index}][{key!r}] differs from the root's")


def sparse_embeddings(c: Cases) -> None:
    """nn.Embedding(sparse=True) trains as single-process training on the combined batch does, with
    its gradient gathered sparse or, with sparse_as_dense, reduced dense."""
    def model() -> torch.nn.Module:
        torch.manual_seed(77)
        return torch.nn.Sequential(torch.nn.Embedding(20, 4, sparse=True), torch.nn.Linear(4, 2)).double()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(900 + step)
        rows = PER_RANK * hvd.size()
        return torch.randint(0, 20, (rows,), generator=gen), torch.randn(rows, 2, generator=gen, dtype=torch.float64)

    reference = model()
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(STEPS):
        ref_optimizer.zero_grad()
        x, y = batch(step)
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_optimizer.step()
    for sparse_as_dense in (False, True):
        net = model()
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                             named_parameters=net.named_parameters(), sparse_as_dense=sparse_as_dense)
        c.check(optimizer._parameter_names == {p: n for n, p in net.named_parameters()},
                "_parameter_names maps each parameter to its name")
        for step in range(STEPS):
            optimizer.zero_grad()
            x, y = batch(step)
            torch.nn.functional.mse_loss(net(my_shard(x, PER_RANK)), my_shard(y, PER_RANK)).backward()
            optimizer.step()
        # Reduced dense or gathered sparse, the step sees a sparse gradient, as the model made it (Horovod's).
        c.check(net[0].weight.grad.is_sparse, f"sparse_as_dense={sparse_as_dense}: gradient layout "
                                              f"{net[0].weight.grad.layout}")
        check_identical_across_ranks(c, net, f"sparse_as_dense={sparse_as_dense}")
        diff = (flat_params(net) - flat_params(reference)).abs().max().item()
        c.check(diff < 1e-9, f"sparse_as_dense={sparse_as_dense}: differs from single-process training by {diff}")


def sparse_adam_with_sparse_as_dense(c: Cases) -> None:
    """SparseAdam takes only sparse gradients: with sparse_as_dense they are reduced dense and handed back
    sparse, so it steps, and every rank ends with the same table."""
    torch.manual_seed(78)
    table = torch.nn.Embedding(10, 3, sparse=True)
    optimizer = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(table.parameters()), lr=0.1),
                                         named_parameters=table.named_parameters(), sparse_as_dense=True)
    rows = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if hvd.rank() == 0 else torch.tensor([[1, 3, 4], [4, 7, 9]])
    for _ in range(2):
        optimizer.zero_grad()
        table(rows).sum().backward()
        optimizer.step()
    check_identical_across_ranks(c, table, "SparseAdam with sparse_as_dense")


def compression_converges(c: Cases) -> None:
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
        torch.manual_seed(7)
        true_w = torch.randn(8, 1)
        model = torch.nn.Linear(8, 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(), compression=compression)
        gen = torch.Generator().manual_seed(100 + hvd.rank())
        losses = []
        for _ in range(60):
            x = torch.randn(32, 8, generator=gen)
            loss = torch.nn.functional.mse_loss(model(x), x @ true_w)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        c.check(losses[-1] < 0.01 * losses[0], f"{compression.__name__}: loss {losses[0]:.4f} -> {losses[-1]:.6f}")
        check_identical_across_ranks(c, model, compression.__name__)


def synchronize_and_guards(c: Cases) -> None:
    model = mlp()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x, y = combined_batch(0, PER_RANK * hvd.size())
    torch.nn.functional.mse_loss(model(my_shard(x, PER_RANK)), my_shard(y, PER_RANK)).backward()
    try:
        optimizer.zero_grad()
        c.check(False, "zero_grad between backward and step was allowed")
    except AssertionError:
        pass
    optimizer.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with optimizer.skip_synchronize():
            optimizer.step()
    c.check(not caught, f"skip_synchronize still warned: {[str(w.message) for w in caught]}")
    check_identical_across_ranks(c, model, "after clipping")
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(my_shard(x, PER_RANK)), my_shard(y, PER_RANK))
    loss.backward(retain_graph=True)
    try:
        loss.backward()
        c.check(False, "a second backward before step was allowed with backward_passes_per_step=1")
    except AssertionError:
        pass
    optimizer.synchronize()  # leave nothing in flight


def mismatched_models(c: Cases) -> None:
    """Ranks whose models disagree get an error naming the parameter, and can carry on afterwards."""
    layer = torch.nn.Linear(3, 2 if hvd.rank() == 0 else 3)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(layer.parameters(), lr=0.1),
                                         named_parameters=[("layer.weight", layer.weight), ("layer.bias", layer.bias)])
    layer(torch.ones(1, 3)).sum().backward()
    try:
        optimizer.step()
        c.check(False, "step() with mismatched gradients did not raise")
    except hvd.MismatchError as exc:
        c.check("layer.weight" in str(exc) or "layer.bias" in str(exc), f"the error names no parameter: {exc}")
    optimizer.zero_grad()
    c.check(hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2, "ranks out of step afterwards")


def unused_parameters(c: Cases) -> None:
    """A parameter no rank uses still gets allreduced (as zeros); one only rank 0 uses is averaged."""
    torch.manual_seed(3)
    used, rank0_only, unused = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    params = [("used", used), ("rank0_only", rank0_only), ("unused", unused)]
    named = [(f"{n}.{k}", p) for n, m in params for k, p in m.named_parameters()]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in named], lr=1.0), named_parameters=named)
    x = torch.ones(2, 3)
    loss = used(x).sum() + (rank0_only(x).sum() if hvd.rank() == 0 else 0)
    loss.backward()
    optimizer.synchronize()
    c.check(torch.equal(unused.weight.grad, torch.zeros(1, 3)), "unused gradient is not zero")
    c.check(torch.allclose(rank0_only.weight.grad, torch.full((1, 3), 2.0 / hvd.size())), "rank-0-only gradient")
    c.check(torch.allclose(used.weight.grad, torch.full((1, 3), 2.0)), "used gradient")
    with optimizer.skip_synchronize():
        optimizer.step()


def sync_batch_norm(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    rows = [3 + r for r in range(size)]  # uneven batches
    start = sum(rows[:rank])
    for label, shape in (("2d", (4, 5, 5)), ("1d", (4,))):
        gen = torch.Generator().manual_seed(11)
        x_all = torch.randn(sum(rows), *shape, generator=gen, dtype=torch.float64) * 3 + 1
        weights = torch.randn(sum(rows), *shape, generator=gen, dtype=torch.float64)
        reference = (torch.nn.BatchNorm2d(4) if label == "2d" else torch.nn.BatchNorm1d(4)).double()
        sync = hvd.SyncBatchNorm(4).double()
        with torch.no_grad():
            for bn in (reference, sync):
                bn.weight.copy_(torch.linspace(0.5, 2.0, 4))
                bn.bias.copy_(torch.linspace(-1.0, 1.0, 4))
        x_ref = x_all.clone().requires_grad_()
        y_ref = reference(x_ref)
        (y_ref * weights).sum().backward()
        x_mine = x_all[start:start + rows[rank]].clone().requires_grad_()
        y = sync(x_mine)
        (y * weights[start:start + rows[rank]]).sum().backward()
        tol = dict(rtol=1e-9, atol=1e-9)
        c.check(torch.allclose(y, y_ref[start:start + rows[rank]], **tol), f"{label}: forward")
        c.check(torch.allclose(x_mine.grad, x_ref.grad[start:start + rows[rank]], **tol), f"{label}: input gradient")
        weight_grad = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
        bias_grad = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
        c.check(torch.allclose(weight_grad, reference.weight.grad, **tol), f"{label}: weight gradient (summed)")
        c.check(torch.allclose(bias_grad, reference.bias.grad, **tol), f"{label}: bias gradient (summed)")
        c.check(torch.allclose(sync.running_mean, reference.running_mean, **tol), f"{label}: running mean")
        c.check(torch.allclose(sync.running_var, reference.running_var, **tol), f"{label}: running var")
        sync.eval()
        reference.eval()
        c.check(torch.allclose(sync(x_mine.detach()), reference(x_mine.detach()), **tol), f"{label}: eval mode")


CASES = [matches_single_process, backward_passes_per_step, adam_state_broadcast, fresh_optimizer_state_broadcast,
         sparse_embeddings, sparse_adam_with_sparse_as_dense, compression_converges,
         synchronize_and_guards, mismatched_models, unused_parameters, sync_batch_norm]


def main() -> None:
    hvd.init(timeline=sys.argv[1])
    cases = Cases()
    for case in CASES:
        cases.run(case.__name__, case)
    hvd.shutdown()


if __name__ == "__main__":
    main()
