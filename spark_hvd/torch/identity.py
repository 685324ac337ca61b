"""Driver: the torch parts of a fit's identity (estimator/fit_identity.py), shared by TorchEstimator and the
Lightning estimator: a module's structure and an optimizer's settings, never their values."""

from __future__ import annotations

from typing import Any

from spark_hvd.estimator.fit_identity import described


def module_structure(module: Any) -> list[Any]:
    """The module's class, then each entry of its state dict: name, shape and dtype."""
    return [described(type(module)),
            *([name, list(tensor.shape), str(tensor.dtype)] for name, tensor in module.state_dict().items())]


def optimizer_settings(optimizer: Any) -> list[Any]:
    """The optimizer's class, then each parameter group's hyperparameters and its number of parameters."""
    return [described(type(optimizer)),
            *({**{key: described(value) for key, value in group.items() if key != "params"},
               "params": len(group["params"])} for group in optimizer.param_groups)]
