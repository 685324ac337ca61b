"""``transformation_fn`` with Horovod's meaning, applied to a batch (runs on the ranks and, for the sample
check, on the driver).

Horovod hands ``transformation_fn`` to Petastorm as a ``TransformSpec`` of ``make_reader``: it is called
once per row with a dict of column name -> value (a numpy scalar, or an array of the column's per-row
shape) and returns the row's new dict. ``edit_fields`` declare the fields it adds or changes, as
``(name, numpy dtype, shape, nullable)``; ``removed_fields`` the ones it drops. Our readers yield
batches, so the batch is split into rows, transformed, and stacked again.

``BatchTransformation(fn)`` marks a ``transformation_fn`` that takes the whole batch (a dict of column
name -> numpy array, one entry per row) and returns the transformed batch. Prefer it where the decoder is
vectorised (numpy over the whole batch), where a tokenizer encodes a list of texts at once, or wherever a
Python call per row costs more than the work: it runs once per batch, with or without decode workers.

The decode workers (decode_worker.py) load this file on its own, outside the ``spark_hvd`` package, so
it imports nothing of spark_hvd at module level.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

Row = dict[str, Any]


def _input_error(message: str) -> Exception:
    from spark_hvd.errors import InputError

    return InputError(message)


class BatchTransformation:
    """A ``transformation_fn`` run once per batch: ``fn(batch)`` takes and returns a dict of column name ->
    numpy array (first dimension: the batch's rows). Also a decorator: ``@BatchTransformation``."""

    per_batch = True

    def __init__(self, fn: Callable[[dict[str, np.ndarray]], dict[str, Any]]) -> None:
        if not callable(fn):
            raise TypeError(f"BatchTransformation needs a function, got {type(fn).__name__}")
        self.fn = fn

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return self.fn(batch)

    def __repr__(self) -> str:
        return f"BatchTransformation({self.fn!r})"


def apply_transformation(batch: dict[str, np.ndarray], fn: Callable[[Row], Row] | None,
                         edit_fields: Sequence[Sequence[Any]] | None = None,
                         removed_fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The batch after ``fn`` ran on each of its rows (once on the whole batch where ``fn`` is a
    BatchTransformation), with edit_fields' dtypes and shapes applied."""
    if fn is None:
        return batch
    if getattr(fn, "per_batch", False):
        return apply_batch_transformation(batch, fn.fn, edit_fields, removed_fields)
    names = list(batch)
    rows = len(batch[names[0]]) if names else 0
    transformed = []
    for i in range(rows):
        result = fn({name: batch[name][i] for name in names})
        if not isinstance(result, dict):
            raise _input_error(f"transformation_fn must return a dict of column -> value for each row, "
                             f"got {type(result).__name__}")
        transformed.append(result)
    columns = list(transformed[0]) if transformed else names
    out = {}
    for name in columns:
        missing = [i for i, row in enumerate(transformed) if name not in row]
        if missing:
            raise _input_error(f"transformation_fn returned column {name!r} for some rows but not row "
                               f"{missing[0]}")
        out[name] = _stacked(name, [row[name] for row in transformed]) if transformed else batch[name]
    for name in removed_fields or ():
        out.pop(name, None)
    for field in edit_fields or ():
        _apply_edit_field(out, field)
    return out


def apply_batch_transformation(batch: dict[str, np.ndarray], fn: Callable[[dict[str, np.ndarray]], dict[str, Any]],
                               edit_fields: Sequence[Sequence[Any]] | None = None,
                               removed_fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The batch ``fn`` returns for the whole batch, each column an array of the batch's rows, with
    edit_fields' dtypes and shapes applied."""
    rows = len(next(iter(batch.values()))) if batch else 0
    result = fn(batch)
    if not isinstance(result, dict):
        raise _input_error(f"a BatchTransformation must return a dict of column -> array of the batch's rows, "
                           f"got {type(result).__name__}")
    out = {}
    for name, values in result.items():
        values = np.asarray(values)
        if values.ndim == 0 or len(values) != rows:
            got = "a scalar" if values.ndim == 0 else f"{len(values)} rows"
            raise _input_error(f"a BatchTransformation must return one value per row of the batch: column "
                               f"{name!r} has {got}, the batch {rows}")
        out[name] = values
    for name in removed_fields or ():
        out.pop(name, None)
    for field in edit_fields or ():
        _apply_edit_field(out, field)
    return out


def _apply_edit_field(batch: dict[str, np.ndarray], field: Sequence[Any]) -> None:
    if len(field) < 3:
        raise _input_error(f"transformation_edit_fields entries are (name, numpy dtype, shape, nullable); "
                         f"got {field!r}")
    name, dtype, shape = field[0], field[1], field[2]
    if name not in batch:
        raise _input_error(f"transformation_edit_fields names {name!r}, which transformation_fn did not return")
    values = batch[name].astype(np.dtype(dtype), copy=False)
    if shape is not None and tuple(shape):
        per_row = tuple(-1 if d is None else int(d) for d in shape)
        values = values.reshape((len(values), *per_row))
    batch[name] = values


def _stacked(name: str, values: list[Any]) -> np.ndarray:
    """One column of the transformed rows as a (rows, *shape) array; InputError naming the column and the
    first two shapes that differ (a model takes one shape per column)."""
    arrays = [np.asarray(value) for value in values]
    first = arrays[0].shape
    for i, array in enumerate(arrays):
        if array.shape != first:
            raise _input_error(f"transformation_fn returned column {name!r} with shape {first} for row 0 of the "
                             f"batch but {array.shape} for row {i}; a column must have one shape in every row "
                             "(pad or truncate it in transformation_fn)")
    return np.stack(arrays)


def require_model_ready(batch: dict[str, np.ndarray], names: Sequence[str]) -> None:
    """InputError naming a column that still holds encoded values (bytes, text, arrays of varying lengths,
    images of their own size) where the model needs numbers: transformation_fn must decode it."""
    for name in names:
        values = batch[name]
        if values.dtype == object:
            example = type(values[0]).__name__ if len(values) else "object"
            raise _input_error(f"column {name!r} holds {example} values, which cannot be fed to a model as they "
                             "are; give a transformation_fn that decodes each row into numbers of one shape "
                             "(see the data page of the docs)")


def require_transformation_for(specs: Sequence[Any], transformation_fn: Any) -> None:
    """InputError before launch when an encoded column (binary, string, image) would reach the model with
    no transformation_fn to decode it."""
    encoded = [spec for spec in specs if spec.encoded]
    if encoded and transformation_fn is None:
        listed = ", ".join(f"{spec.name!r} ({spec.kind})" for spec in encoded)
        raise _input_error(f"column(s) {listed} hold encoded values, which cannot be fed to a model as they are; "
                         "give a transformation_fn that decodes each row into numbers of one shape (see the "
                         "data page of the docs)")


class RowCounter:
    """A row transformation that counts its calls, so that an error can name its row."""

    def __init__(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.fn, self.row = fn, -1

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        self.row += 1
        return self.fn(row)
