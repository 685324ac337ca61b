"""A Keras fit's history in Horovod's shape (driver side): Keras's own ``History.history``, a dict of
lists, one value per epoch (``{'loss': [...], 'accuracy': [...], 'val_loss': [...]}``), here over every
epoch of the run, resumed ones included."""

from __future__ import annotations

from typing import Sequence


def keras_history(epochs: Sequence[dict[str, float]]) -> dict[str, list[float]]:
    """From the ranks' per-epoch records (``[{"epoch": 0, "loss": ...}, ...]``, in epoch order)."""
    history: dict[str, list[float]] = {}
    for entry in epochs:
        for key, value in entry.items():
            if key != "epoch":
                history.setdefault(key, []).append(float(value))
    return history
