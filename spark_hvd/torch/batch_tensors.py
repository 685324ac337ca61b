"""From a batch of numpy columns to model inputs, and from model outputs and labels to the loss, with
Horovod's rules (runs on the ranks, in transform's predictor and, for the sample check, on the driver).

- every feature, label and weight column becomes the model's floating dtype (float32 usually), as
  Horovod's ``row[col].float()``: a class-index label arrives as floats, so losses that need integer
  targets cast them (``F.cross_entropy(out, y.long())``), as Horovod scripts do;
- ``input_shapes`` (one shape per feature, batch dimension included: ``[[-1, 1, 28, 28]]``) reshape the
  feature batches; the model is called as ``model(*features)``, in feature_cols order;
- a model with several label columns returns one output per label column (a tuple or list);
- labels are reshaped to ``label_shapes`` when given, else to their output's shape when the sizes agree.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import numpy as np
import torch

from spark_hvd.errors import InputError
from spark_hvd.data.feed.transformation import apply_transformation, require_model_ready


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.get_default_dtype()


def column_tensor(array: np.ndarray, float_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    # Arrow hands out read-only arrays; torch wants writable memory (copied only when needed).
    tensor = torch.from_numpy(np.require(array, requirements=["C", "W"]))
    return tensor.to(device=device, dtype=float_dtype, non_blocking=True)


def feature_tensors(columns: Sequence[np.ndarray], input_shapes: Sequence[Sequence[int]] | None,
                    float_dtype: torch.dtype, device: torch.device,
                    names: Sequence[str] | None = None) -> list[torch.Tensor]:
    return reshape_features([column_tensor(column, float_dtype, device) for column in columns], input_shapes, names)


def reshape_features(tensors: list[torch.Tensor], input_shapes: Sequence[Sequence[int]] | None,
                     names: Sequence[str] | None = None) -> list[torch.Tensor]:
    """Each feature batch reshaped to its ``input_shapes`` entry (batch dimension included), when given."""
    if not input_shapes:
        return tensors
    if len(input_shapes) != len(tensors):
        raise InputError(f"input_shapes has {len(input_shapes)} shape(s) for {len(tensors)} feature column(s)")
    shaped = []
    for i, (tensor, shape) in enumerate(zip(tensors, input_shapes)):
        try:
            shaped.append(tensor.reshape([int(d) for d in shape]))
        except RuntimeError as e:
            name = names[i] if names else f"#{i}"
            raise InputError(f"feature column {name!r} (per-row shape {tuple(tensor.shape[1:])}) cannot be "
                             f"reshaped to its input_shapes entry {list(shape)}: {e}") from e
    return shaped


def as_outputs(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def align_labels(outputs: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                 label_shapes: Sequence[Sequence[int]] | None) -> list[torch.Tensor]:
    """Horovod's reshape of the labels before the loss (which also keeps a (B,) label from
    broadcasting against a (B, 1) output)."""
    if label_shapes:
        return [label.reshape([int(d) for d in shape]) for label, shape in zip(labels, label_shapes)]
    return [label.reshape(output.shape) if hasattr(output, "shape") and output.numel() == label.numel() else label
            for label, output in zip(labels, outputs)]


def check_output_label_shapes(outputs: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                              label_cols: Sequence[str]) -> None:
    """After align_labels, outputs and labels must line up: the same shape, or class indices for the
    output's last dimension. Anything else would broadcast in the loss without a word."""
    if len(outputs) != len(labels):
        raise InputError(f"the model returns {len(outputs)} output(s) for {len(labels)} label column(s) "
                         f"{list(label_cols)}; return one output per label column")
    for output, label, name in zip(outputs, labels, label_cols):
        same = tuple(output.shape) == tuple(label.shape)
        class_indices = tuple(label.shape) == tuple(output.shape[:-1])
        if not (same or class_indices):
            raise InputError(
                f"label column {name!r} has shape {tuple(label.shape[1:])} per row but the model's output for "
                f"it has shape {tuple(output.shape[1:])} per row; they must hold the same number of values "
                f"(or the label must be class indices for the output's last dimension), or give label_shapes")


def resolve_losses(loss: Any, loss_constructors: Any, count: int) -> list[Callable[..., torch.Tensor]]:
    if loss is not None and loss_constructors is not None:
        raise InputError("give only one of loss and loss_constructors")
    if loss_constructors is not None:
        constructors = list(loss_constructors) if isinstance(loss_constructors, (list, tuple)) else [loss_constructors]
        losses = [make() for make in constructors]
    elif isinstance(loss, (list, tuple)):
        losses = list(loss)
    else:
        losses = [loss]
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
    """Horovod's loss: the sum over label columns of weight * loss, weights 1 / labels by default; with
    sample weights, the mean over the batch of each row's loss times its weight."""

    def __init__(self, losses: Sequence[Callable[..., torch.Tensor]], loss_weights: Sequence[float] | None,
                 weighted_rows: bool) -> None:
        self._weights = list(loss_weights) if loss_weights else [1.0 / len(losses)] * len(losses)
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
                value = (per_row * row_weights.reshape(-1)).mean()
            total = value * weight if total is None else total + value * weight
        assert total is not None
        return total


def batch_tensors(batch: dict[str, np.ndarray], transformation: Any, feature_cols: Sequence[str],
                  label_cols: Sequence[str], sample_weight_col: str | None, float_dtype: torch.dtype,
                  device: torch.device, input_shapes: Sequence[Sequence[int]] | None = None
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor | None]:
    """One batch as the model and the loss take it: (features, labels, row weights or None), after the
    user's transformation (a ``(fn, edit_fields, removed_fields)`` triple, or None). The ranks' training
    and the driver's sample check go through here."""
    if transformation is not None:
        batch = apply_transformation(batch, *transformation)
    needed = [*feature_cols, *label_cols, *filter(None, [sample_weight_col])]
    missing = [name for name in needed if name not in batch]
    if missing:
        raise InputError(f"column(s) {missing} are missing from the batch after transformation_fn; it has "
                         f"{sorted(batch)}")
    require_model_ready(batch, needed)
    features = feature_tensors([batch[c] for c in feature_cols], input_shapes, float_dtype, device, feature_cols)
    labels = [column_tensor(batch[c], float_dtype, device) for c in label_cols]
    weights = column_tensor(batch[sample_weight_col], float_dtype, device) if sample_weight_col else None
    return features, labels, weights
