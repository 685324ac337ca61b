"""The torch side of elastic_data's problem, shared by the local launcher's script and the Spark tests' function:
a float64 linear model from zero, its DistributedOptimizer at Horovod's learning rate for the world size, and
one training step."""

from __future__ import annotations

from typing import Any

import torch

from elastic_data import BASE_LR, FEATURES, shard


def zero_model_and_optimizer(hvd: Any) -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    """``hvd``: collective.torch, initialised."""
    model = torch.nn.Linear(FEATURES, 1).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=BASE_LR * hvd.size()),
                                         named_parameters=model.named_parameters())
    return model, optimizer


def sgd_step(hvd: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Any) -> None:
    """One step on this rank's shard of step ``state.step``'s batch; records the world size it ran at in
    ``state.sizes`` (the tests' reference replays them) and advances ``state.step``."""
    x, y = (torch.from_numpy(a) for a in shard(state.step, hvd.rank(), hvd.size()))
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    state.sizes.append(hvd.size())
    state.step += 1
