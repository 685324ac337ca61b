"""From a batch of numpy columns to Keras model inputs and targets, and checks of outputs against labels.

Conversion rules (documented in KerasEstimator's docstring):
- floating and boolean columns become ``keras.config.floatx()`` (float32 usually);
- integer columns stay integers (class indices for sparse losses, ids for embeddings);
- one feature column is passed to the model as one array, several as a list in feature_cols order;
- a model with several label columns returns one output per label column (a list or tuple).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from spark_hvd.errors import InputError


def column_array(array: np.ndarray, floatx: str) -> np.ndarray:
    if array.dtype.kind in "fb":
        return np.ascontiguousarray(array, dtype=floatx)
    if array.dtype.kind in "iu":
        return np.ascontiguousarray(array, dtype=np.int64)
    raise InputError(f"a column of dtype {array.dtype} cannot be given to a Keras model; "
                     "use numeric or boolean columns")


def model_inputs(columns: Sequence[np.ndarray]) -> Any:
    """What ``model(x)`` and ``model.fit`` take: one array, or a list of them."""
    return columns[0] if len(columns) == 1 else list(columns)


def model_targets(columns: Sequence[np.ndarray]) -> Any:
    return columns[0] if len(columns) == 1 else tuple(columns)


def as_outputs(value: Any) -> list[np.ndarray]:
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    return [np.asarray(v) for v in values]


def check_output_label_shapes(outputs: Sequence[np.ndarray], labels: Sequence[np.ndarray],
                              label_cols: Sequence[str]) -> None:
    """Outputs and labels must line up per row: the same shape (a trailing 1 aside, which Keras losses
    squeeze), or integer class indices for the output's last dimension.

    Keras losses would broadcast a (B,) label against a (B, 3) output without a word, so this is
    checked on a sample before launch rather than left to the loss."""
    if len(outputs) != len(labels):
        raise InputError(f"the model returns {len(outputs)} output(s) for {len(labels)} label column(s) "
                         f"{list(label_cols)}; return one output per label column")
    for output, label, name in zip(outputs, labels, label_cols):
        out_row, label_row = _squeezed(output.shape[1:]), _squeezed(label.shape[1:])
        class_indices = label.dtype.kind in "iu" and label_row == _squeezed(output.shape[1:-1])
        if not (out_row == label_row or class_indices):
            raise InputError(
                f"label column {name!r} has shape {tuple(label.shape[1:])} per row but the model's output for "
                f"it has shape {tuple(output.shape[1:])} per row; they must be equal (or the label must be "
                f"integer class indices for the output's last dimension)")


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    return shape[:-1] if shape and shape[-1] == 1 else shape
