"""Data-parallel logistic regression with numpy: each rank trains on its own shard and the ranks
average gradients with collective.allreduce every step, as a Horovod training loop would.

    python -m collective.run -np 2 examples/numpy_sgd.py
"""

from __future__ import annotations

import numpy as np

import collective as hvd


def make_shard(rank: int, size: int, rows: int = 20_000, features: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic, linearly separable-ish problem; every rank draws the same data and keeps its share."""
    rng = np.random.default_rng(7)
    true_w = rng.normal(size=features)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = (x @ true_w + 0.5 * rng.normal(size=rows) > 0).astype(np.float32)
    return x[rank::size], y[rank::size]


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    x, y = make_shard(rank, size)
    # Every rank starts from rank 0's weights, as hvd.broadcast_parameters would do.
    w = hvd.broadcast(np.random.default_rng(rank).normal(scale=0.01, size=x.shape[1]).astype(np.float32), 0)
    lr, batch = 0.5, 256
    steps_per_epoch = len(x) // batch
    for epoch in range(5):
        for step in range(steps_per_epoch):
            xb, yb = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
            p = 1.0 / (1.0 + np.exp(-(xb @ w)))
            grad = xb.T @ (p - yb) / len(xb)
            w -= lr * hvd.allreduce(grad, op=hvd.Average, name="grad")
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        local = np.array([np.sum(-(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))),
                          np.sum((p > 0.5) == y), len(y)], dtype=np.float64)
        loss_sum, correct, rows = hvd.allreduce(local, op=hvd.Sum, name="metrics")
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {loss_sum / rows:.4f}  accuracy {correct / rows:.3f}  ({size} ranks)")
    # The replicas must have stayed identical: compare every rank's weights with rank 0's.
    spread = hvd.allreduce(w, op=hvd.Max) - hvd.allreduce(w, op=hvd.Min)
    if rank == 0:
        print(f"max weight difference across ranks: {float(np.max(spread)):.3g}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
