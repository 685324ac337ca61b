"""A Horovod PyTorch training script, ported by changing one import.

    python -m collective.run -np 2 examples/torch_train.py

Each rank trains on its own shard of a synthetic classification problem; DistributedOptimizer
averages gradients during backward, and every rank ends with the same weights.
"""

from __future__ import annotations

import torch
import torch.nn as nn

import collective.torch as hvd  # was: import horovod.torch as hvd


def make_data(rows: int = 8192, features: int = 20, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    centers = torch.randn(classes, features, generator=generator) * 0.3
    labels = torch.randint(0, classes, (rows,), generator=generator)
    return centers[labels] + torch.randn(rows, features, generator=generator), labels


def main() -> None:
    hvd.init()
    torch.manual_seed(hvd.rank())  # different initial weights on purpose: broadcast fixes that
    torch.set_num_threads(1)
    x, y = make_data()
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]

    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(3):
        for start in range(0, len(x), 64):
            optimizer.zero_grad()
            loss = loss_fn(model(x[start:start + 64]), y[start:start + 64])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            accuracy = (model(x).argmax(1) == y).float().mean()
        accuracy = hvd.allreduce(accuracy, name="accuracy")  # Average over ranks
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {loss.item():.3f}  accuracy {accuracy.item():.3f}")

    # The replicas stayed identical: every rank's weights equal rank 0's.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    spread = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
    if hvd.rank() == 0:
        print(f"max weight difference across ranks: {spread.abs().max().item():.3g}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
