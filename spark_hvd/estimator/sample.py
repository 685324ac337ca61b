"""A few rows of the materialised training data, read on the driver to check them against the model."""

from __future__ import annotations

from typing import Any

import numpy as np


def read_sample(data: Any, rows: int = 2) -> dict[str, np.ndarray]:
    """The first ``rows`` rows of the training split (fewer if it has fewer), unshuffled."""
    from spark_hvd.data import make_reader

    reader = make_reader(data, "train", rank=0, size=1, batch_size=min(rows, data.train_rows), shuffle=False,
                         seed=0)
    try:
        return next(iter(reader.batches(0)))
    finally:
        reader.close()
