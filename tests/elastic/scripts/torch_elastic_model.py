"""The torch side of elastic_data's problem, shared by the local launcher's script and the Spark tests' function:
a float64 linear model from zero, and its DistributedOptimizer at Horovod's learning rate for the world size."""

from __future__ import annotations

from typing import Any

import torch

from elastic_data import BASE_LR, FEATURES


def zero_model_and_optimizer(hvd: Any) -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    """``hvd``: collective.torch, initialised."""
    model = torch.nn.Linear(FEATURES, 1).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=BASE_LR * hvd.size()),
                                         named_parameters=model.named_parameters())
    return model, optimizer
