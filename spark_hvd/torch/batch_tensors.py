"""From a batch of numpy columns to model inputs, and from model outputs and labels to the loss.

Conversion rules (documented in TorchEstimator's docstring):
- floating columns take the dtype of the model's first floating parameter (float32 usually);
- integer columns stay int64 (class indices for CrossEntropyLoss, ids for embeddings);
- the model is called as ``model(*features)``, one tensor per feature column, in feature_cols order;
- a model with several label columns returns one output per label column (a tuple or list).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np
import torch

from spark_hvd.errors import InputError


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.get_default_dtype()


def column_tensor(array: np.ndarray, float_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # Arrow hands out read-only arrays; torch wants writable memory (copied only when needed).
    tensor = torch.from_numpy(np.require(array, requirements=["C", "W"]))
    if tensor.is_floating_point():
        tensor = tensor.to(float_dtype)
    elif tensor.dtype == torch.bool:
        tensor = tensor.to(float_dtype)
    else:
        tensor = tensor.to(torch.int64)
    return tensor.to(device, non_blocking=True)


def as_outputs(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_output_label_shapes(outputs: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                              label_cols: Sequence[str]) -> None:
    """Outputs and labels must line up: same shape, or integer class indices for the output's classes.

    Torch would broadcast a (B, 1) output against a (B,) label silently (a B x B loss), so this is
    checked on a sample before launch rather than left to the loss."""
    if len(outputs) != len(labels):
        raise InputError(f"the model returns {len(outputs)} output(s) for {len(labels)} label column(s) "
                         f"{list(label_cols)}; return one output per label column")
    for output, label, name in zip(outputs, labels, label_cols):
        same = tuple(output.shape) == tuple(label.shape)
        class_indices = (not label.is_floating_point()) and tuple(label.shape) == tuple(output.shape[:-1])
        if not (same or class_indices):
            raise InputError(
                f"label column {name!r} has shape {tuple(label.shape[1:])} per row but the model's output for "
                f"it has shape {tuple(output.shape[1:])} per row; they must be equal (or the label must be "
                f"integer class indices for the output's last dimension)")


def resolve_losses(loss: Any, loss_constructors: Any, count: int) -> list[Callable[..., torch.Tensor]]:
    if loss_constructors is not None:
        constructors = list(loss_constructors) if isinstance(loss_constructors, (list, tuple)) else [loss_constructors]
        losses = [make() for make in constructors]
    elif isinstance(loss, (list, tuple)):
        losses = list(loss)
    else:
        losses = [loss] * count
    if len(losses) == 1 and count > 1:
        losses = losses * count
    if len(losses) != count or not all(callable(fn) for fn in losses):
        raise InputError(f"loss must be one callable, or one per label column ({count}); got {losses!r}")
    return losses


def unreduced(loss_fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The same loss, per row, so sample weights can weigh the rows."""
    if isinstance(loss_fn, torch.nn.Module) and hasattr(loss_fn, "reduction"):
        per_row = copy.copy(loss_fn)
        per_row.reduction = "none"
        return per_row
    return lambda output, label: loss_fn(output, label, reduction="none")


class LossComputer:
    def __init__(self, losses: Sequence[Callable[..., torch.Tensor]], loss_weights: Sequence[float] | None,
                 weighted_rows: bool) -> None:
        self._weights = list(loss_weights) if loss_weights is not None else [1.0] * len(losses)
        if len(self._weights) != len(losses):
            raise InputError(f"loss_weights has {len(self._weights)} weight(s) for {len(losses)} loss(es)")
        self._losses = [unreduced(fn) for fn in losses] if weighted_rows else list(losses)
        self._weighted_rows = weighted_rows

    def __call__(self, outputs: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                 row_weights: torch.Tensor | None) -> torch.Tensor:
        total: torch.Tensor | None = None
        for fn, weight, output, label in zip(self._losses, self._weights, outputs, labels):
            value = fn(output, label)
            if self._weighted_rows:
                per_row = value.reshape(value.shape[0], -1).mean(dim=1) if value.dim() > 1 else value
                value = (per_row * row_weights).sum() / row_weights.sum().clamp_min(1e-12)
            total = value * weight if total is None else total + value * weight
        assert total is not None
        return total


def batch_tensors(batch: dict[str, np.ndarray], transformation_fn: Callable[[dict], dict] | None,
                  feature_cols: Sequence[str], label_cols: Sequence[str], sample_weight_col: str | None,
                  float_dtype: torch.dtype, device: torch.device
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None]:
    """One batch as the model and the loss take it: (features, labels, row weights or None), after the
    user's transformation_fn. The ranks' training and the driver's sample check go through here."""
    if transformation_fn is not None:
        batch = transformation_fn(batch)
    convert = lambda name: column_tensor(batch[name], float_dtype, device)  # noqa: E731
    weights = convert(sample_weight_col) if sample_weight_col else None
    return [convert(c) for c in feature_cols], [convert(c) for c in label_cols], weights
