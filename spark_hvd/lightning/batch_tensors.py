"""A batch as a LightningModule sees it (rank child, and the executors' transform tasks).

``training_step`` and ``validation_step`` get a dict of column name -> tensor, as Horovod's Petastorm
loader gives them (``batch['features']``, ``batch['label']``): every materialised column (features,
labels, sample weights), after ``transformation_fn``. Floating columns take the module's floating dtype,
so ``x.float()`` in a Horovod module is a no-op and a float64 module trains in float64; integer and
boolean columns keep their dtype (class indices stay int64, as Petastorm gives them). ``forward`` in
transform gets one tensor per feature column, converted the same way and reshaped to ``input_shapes``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch



def column_to_tensor(array: np.ndarray, float_dtype: torch.dtype) -> torch.Tensor:
    # Arrow hands out read-only arrays; torch wants writable memory (copied only when needed).
    tensor = torch.from_numpy(np.require(array, requirements=["C", "W"]))
    return tensor.to(float_dtype) if tensor.is_floating_point() else tensor


def batch_dict(batch: dict[str, np.ndarray], float_dtype: torch.dtype) -> dict[str, Any]:
    """Numeric columns as tensors; a column of Python values (a path, text left as it is) as a list, as a
    DataLoader collates strings."""
    return {name: values.tolist() if values.dtype == object or values.dtype.kind in "SU"
            else column_to_tensor(values, float_dtype) for name, values in batch.items()}


def forward_inputs(columns: Sequence[np.ndarray], names: Sequence[str], input_shapes: Sequence[Any] | None,
                   float_dtype: torch.dtype) -> list[torch.Tensor]:
    """The arguments of ``module(*inputs)``: one tensor per feature column, reshaped to ``input_shapes``."""
    from spark_hvd.torch.batch_tensors import reshape_features

    return reshape_features([column_to_tensor(column, float_dtype) for column in columns], input_shapes, names)
