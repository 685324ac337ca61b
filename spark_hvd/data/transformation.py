"""``transformation_fn`` with Horovod's meaning, applied to a batch (runs on the ranks and, for the sample
check, on the driver).

Horovod hands ``transformation_fn`` to Petastorm as a ``TransformSpec`` of ``make_reader``: it is called
once per row with a dict of column name -> value (a numpy scalar, or an array of the column's per-row
shape) and returns the row's new dict. ``edit_fields`` declare the fields it adds or changes, as
``(name, numpy dtype, shape, nullable)``; ``removed_fields`` the ones it drops. Our readers yield
batches, so the batch is split into rows, transformed, and stacked again.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from spark_hvd.errors import InputError

Row = dict[str, Any]


def apply_transformation(batch: dict[str, np.ndarray], fn: Callable[[Row], Row] | None,
                         edit_fields: Sequence[Sequence[Any]] | None = None,
                         removed_fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The batch after ``fn`` ran on each of its rows, with edit_fields' dtypes and shapes applied."""
    if fn is None:
        return batch
    names = list(batch)
    rows = len(batch[names[0]]) if names else 0
    transformed = []
    for i in range(rows):
        row = {name: batch[name][i] for name in names}
        try:
            result = fn(row)
        except Exception as e:
            # The user's own error, as raised, with which row it was (an image's origin names its file).
            e.add_note(f"transformation_fn failed on row {i} of a batch of {rows}{_row_origin(row)}")
            raise
        if not isinstance(result, dict):
            raise InputError(f"transformation_fn must return a dict of column -> value for each row, "
                             f"got {type(result).__name__}")
        transformed.append(result)
    columns = list(transformed[0]) if transformed else names
    out = {}
    for name in columns:
        missing = [i for i, row in enumerate(transformed) if name not in row]
        if missing:
            raise InputError(f"transformation_fn returned column {name!r} for some rows but not row {missing[0]}")
        out[name] = _stacked(name, [row[name] for row in transformed]) if transformed else batch[name]
    for name in removed_fields or ():
        out.pop(name, None)
    for field in edit_fields or ():
        _apply_edit_field(out, field)
    return out


def _apply_edit_field(batch: dict[str, np.ndarray], field: Sequence[Any]) -> None:
    if len(field) < 3:
        raise InputError(f"transformation_edit_fields entries are (name, numpy dtype, shape, nullable); "
                         f"got {field!r}")
    name, dtype, shape = field[0], field[1], field[2]
    if name not in batch:
        raise InputError(f"transformation_edit_fields names {name!r}, which transformation_fn did not return")
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
            raise InputError(f"transformation_fn returned column {name!r} with shape {first} for row 0 of the "
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
            raise InputError(f"column {name!r} holds {example} values, which cannot be fed to a model as they "
                             "are; give a transformation_fn that decodes each row into numbers of one shape "
                             "(see the data page of the docs)")


def _row_origin(row: dict[str, Any]) -> str:
    """Where a row came from, when the batch says: a ``path`` column (Spark's binaryFile source)."""
    path = row.get("path")
    return f" (path {path!r})" if isinstance(path, str) else ""


def require_transformation_for(specs: Sequence[Any], transformation_fn: Any) -> None:
    """InputError before launch when an encoded column (binary, string, image) would reach the model with
    no transformation_fn to decode it."""
    encoded = [spec for spec in specs if spec.encoded]
    if encoded and transformation_fn is None:
        listed = ", ".join(f"{spec.name!r} ({spec.kind})" for spec in encoded)
        raise InputError(f"column(s) {listed} hold encoded values, which cannot be fed to a model as they are; "
                         "give a transformation_fn that decodes each row into numbers of one shape (see the "
                         "data page of the docs)")
