"""What an ``input_shapes`` entry does to a batch, with Horovod's meaning (driver's sample check, rank child, and
the executors' transform tasks).

Horovod reshapes the whole batch a model gets to the entry: ``batch.reshape(entry)``. So the batch's size is part
of the reshape: ``[-1, 1, 28, 28]`` fits any batch, while ``[2]`` fits only a batch of one row of 2 values (the
model then gets a 1-d tensor). Training feeds batches of exactly ``batch_size`` rows (``val_batch_size`` in
validation: the readers wrap around their shard, so there is no short last batch), and Horovod's transform feeds
one row at a time. An entry is *batch-free* when it keeps the rows as the first dimension whatever their number
(``n`` rows become ``(n, *rest)`` with the same ``rest`` for every ``n``): only then may a batch be cut anywhere,
so transform predicts whole chunks only when every entry is batch-free, and otherwise row by row as Horovod does.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from spark_hvd.errors import InputError

Shape = Sequence[int]


def reshaped(entry: Shape, rows: int, row_shape: Shape) -> tuple[int, ...]:
    """The shape ``rows`` rows of ``row_shape`` take under ``entry``, by torch's own rules; RuntimeError if none."""
    import torch

    # A meta tensor has a shape and no storage: torch checks the reshape without touching memory.
    return tuple(torch.empty((rows, *row_shape), device="meta").reshape([int(d) for d in entry]).shape)


def batch_free(input_shapes: Sequence[Shape] | None, row_shapes: Sequence[Shape]) -> bool:
    """Whether every entry keeps the rows as the first dimension, the rest independent of their number."""
    if not input_shapes:
        return True
    for entry, row_shape in zip(input_shapes, row_shapes):
        try:
            one, two = reshaped(entry, 1, row_shape), reshaped(entry, 2, row_shape)
        except RuntimeError:
            return False
        if one[:1] != (1,) or two != (2, *one[1:]):
            return False
    return True


def check_batches(input_shapes: Sequence[Shape] | None, row_shapes: Sequence[Shape], names: Sequence[str],
                  batch_sizes: dict[str, int]) -> None:
    """Raises InputError unless every entry reshapes a batch of each of ``batch_sizes`` ({param name: rows})."""
    for entry, row_shape, name in zip(input_shapes or [], row_shapes, names):
        for param, rows in batch_sizes.items():
            try:
                reshaped(entry, rows, row_shape)
            except RuntimeError as e:
                raise InputError(
                    f"feature column {name!r} (per-row shape {tuple(row_shape)}) cannot be reshaped to its "
                    f"input_shapes entry {list(entry)} for a batch of {rows} row(s) ({param}={rows}); the whole "
                    f"batch is reshaped, as in Horovod, so give the batch dimension as -1 (e.g. "
                    f"{[-1, *row_shape]}) or a batch size the entry fits: {e}") from e


def tiled(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """``batch`` repeated along its rows to exactly ``rows`` rows, as a reader wraps around a small shard."""
    return {name: np.resize(values, (rows, *np.shape(values)[1:])) for name, values in batch.items()}


def predict_in_rows(predict: Callable[[list[np.ndarray]], list[np.ndarray]], features: list[np.ndarray],
                    input_shapes: Sequence[Shape] | None) -> list[np.ndarray]:
    """``predict`` over a chunk of rows: in one call when every entry is batch-free, else one call per row
    (Horovod's transform), each output stacked over the rows (a row's whole output is its prediction)."""
    if not len(features[0]) or batch_free(input_shapes, [f.shape[1:] for f in features]):
        return predict(features)
    per_row = [predict([f[i:i + 1] for f in features]) for i in range(len(features[0]))]
    return [np.stack([np.asarray(outputs[k]) for outputs in per_row]) for k in range(len(per_row[0]))]
