"""The deterministic regression problem the elastic test scripts train, and the reference the tests
compute from it: step ``s`` has one global batch of 12 rows, dealt to the ranks by row."""

from __future__ import annotations

import numpy as np

GLOBAL_BATCH = 12  # divisible by every world size the tests form (1..4)
FEATURES = 4
BASE_LR = 0.01


def global_batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(1000 + step)
    x = rng.standard_normal((GLOBAL_BATCH, FEATURES))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.25 + 0.1 * rng.standard_normal(GLOBAL_BATCH)
    return x, y.reshape(-1, 1)


def shard(step: int, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = global_batch(step)
    return x[rank::size], y[rank::size]


def reference_weights(sizes: list[int], lr_dtype: type = np.float64) -> tuple[np.ndarray, float]:
    """The weights after ``len(sizes)`` SGD steps from zero, step ``s`` taken at world size ``sizes[s]`` with
    the learning rate scaled by it (Horovod's rule), on the mean squared error of the global batch.
    ``lr_dtype``: the precision the framework keeps the learning rate in (Keras: float32)."""
    w, b = np.zeros(FEATURES), 0.0
    for step, size in enumerate(sizes):
        x, y = global_batch(step)
        err = x @ w + b - y[:, 0]
        lr = float(lr_dtype(BASE_LR * size))
        w = w - lr * (2.0 / len(err)) * (x.T @ err)
        b = b - lr * (2.0 / len(err)) * err.sum()
    return w, b
