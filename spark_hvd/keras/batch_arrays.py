"""From a batch of numpy columns to Keras model inputs and targets, with Horovod's reshapes (runs on the
ranks, in transform's predictor and, for the sample check, on the driver).

Rules (documented in KerasEstimator's docstring):
- floating and boolean columns become ``keras.config.floatx()``; integer columns stay integers (class
  indices for sparse losses, ids for embeddings);
- each feature batch is reshaped to its model input's shape (``model.inputs``) when the sizes agree, as
  Horovod does: a flat 784-vector column feeds a ``(28, 28, 1)`` Input, a scalar column a ``(1,)`` Input;
- one feature is one array, several are a tuple in feature_cols order (tf.data takes tuples, not lists);
- each label batch is reshaped to ``label_shapes`` when given, else to its output's shape when the sizes
  agree; a label with one value per row for an output with several (class indices) stays as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from spark_hvd.errors import InputError

RowShape = tuple[int, ...] | None    # a per-row shape to reshape to; None: leave the column as it is


@dataclass(frozen=True)
class ArrayShapes:
    """What the ranks and the predictor reshape to, resolved once on the driver."""
    inputs: tuple[RowShape, ...]      # one per feature column
    labels: tuple[RowShape, ...]      # one per label column


def column_array(array: np.ndarray, floatx: str) -> np.ndarray:
    if array.dtype.kind in "fb":
        return np.ascontiguousarray(array, dtype=floatx)
    if array.dtype.kind in "iu":
        return np.ascontiguousarray(array, dtype=np.int64)
    raise InputError(f"a column of dtype {array.dtype} cannot be given to a Keras model; "
                     "use numeric or boolean columns")


def known_row_shape(shape: Sequence[Any]) -> RowShape:
    """The per-row part of a Keras tensor's shape (batch first), or None when a dimension is unknown."""
    row = tuple(shape)[1:]
    if any(d is None or int(d) < 0 for d in row):
        return None
    return tuple(int(d) for d in row)


def model_input_shapes(model: Any, count: int) -> tuple[RowShape, ...]:
    """Per-row shapes of the model's inputs; all None for a model without symbolic inputs (subclassed)."""
    try:
        inputs = list(model.inputs or [])
    except (AttributeError, ValueError):
        inputs = []
    if len(inputs) != count:
        return (None,) * count
    return tuple(known_row_shape(tensor.shape) for tensor in inputs)


def label_row_shape(shape: Sequence[Any]) -> tuple[int, ...]:
    """A ``label_shapes`` entry as a per-row shape. Horovod reshapes the whole batch to it, so its
    entries start with the batch dimension (``[-1, 1]``); one without it (``[1]``) is taken per row."""
    dims = tuple(-1 if d is None else int(d) for d in shape)
    return dims[1:] if dims and dims[0] == -1 else dims


def reshaped(array: np.ndarray, row_shape: RowShape) -> np.ndarray:
    """``array`` with rows of ``row_shape`` when they hold as many values, else unchanged."""
    if row_shape is None:
        return array
    if int(np.prod(row_shape, dtype=np.int64)) != int(np.prod(array.shape[1:], dtype=np.int64)):
        return array
    return array.reshape((array.shape[0], *row_shape))


def model_inputs(columns: Sequence[np.ndarray], shapes: Sequence[RowShape]) -> Any:
    """What ``model(x)``, ``model.fit`` and ``predict_on_batch`` take: one array, or a tuple of them."""
    arrays = tuple(reshaped(column, shape) for column, shape in zip(columns, shapes))
    return arrays[0] if len(arrays) == 1 else arrays


def model_targets(columns: Sequence[np.ndarray], shapes: Sequence[RowShape]) -> Any:
    arrays = tuple(_label(column, shape) for column, shape in zip(columns, shapes))
    return arrays[0] if len(arrays) == 1 else arrays


def _label(column: np.ndarray, shape: RowShape) -> np.ndarray:
    if shape is None:
        return column
    try:
        return column.reshape((column.shape[0], *shape))
    except ValueError as e:
        raise InputError(f"a label batch of per-row shape {column.shape[1:]} cannot be reshaped to {shape} "
                         f"per row (label_shapes): {e}") from e


def as_outputs(value: Any) -> list[np.ndarray]:
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    return [np.asarray(v) for v in values]


def resolve_label_shapes(label_shapes: Sequence[Sequence[Any]] | None, labels: Sequence[np.ndarray],
                         outputs: Sequence[np.ndarray], label_cols: Sequence[str]) -> tuple[RowShape, ...]:
    """Per label: ``label_shapes``' entry when given, else its output's per-row shape when the label holds
    as many values per row, else None (left as it is, e.g. class indices)."""
    if len(outputs) != len(labels):
        raise InputError(f"the model returns {len(outputs)} output(s) for {len(labels)} label column(s) "
                         f"{list(label_cols)}; return one output per label column")
    if label_shapes is not None:
        if len(label_shapes) != len(labels):
            raise InputError(f"label_shapes has {len(label_shapes)} shape(s) for {len(labels)} label column(s) "
                             f"{list(label_cols)}")
        return tuple(label_row_shape(shape) for shape in label_shapes)
    resolved: list[RowShape] = []
    for label, output in zip(labels, outputs):
        out_row = tuple(int(d) for d in output.shape[1:])
        same_size = int(np.prod(label.shape[1:], dtype=np.int64)) == int(np.prod(out_row, dtype=np.int64))
        resolved.append(out_row if same_size else None)
    return tuple(resolved)
