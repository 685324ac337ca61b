"""Checkpoints of a torch run under ``<store>/runs/<run_id>/checkpoints/`` (written by rank 0), one file
replaced at each epoch's end and every ``checkpoint_every_steps`` steps; ``within`` says where in an epoch
(recipe/hooks.py's WithinEpoch, as bytes)."""

from __future__ import annotations

from typing import Any

import torch

from spark_hvd.recipe.checkpoint_fit import FIT_KEY
from spark_hvd.torch.state_bytes import from_torch_bytes, torch_bytes

CHECKPOINT_FILE = "checkpoint.pt"


def checkpoint_path(store: Any, run_id: str) -> str:
    return f"{store.get_checkpoint_path(run_id).rstrip('/')}/{CHECKPOINT_FILE}"


def save_checkpoint(store: Any, run_id: str, model: torch.nn.Module, optimizer_state: dict[str, Any],
                    epoch: int, history: list[dict[str, Any]], epoch_metrics: list[dict[str, float]],
                    fit: str | None = None, within: bytes | None = None) -> None:
    """Written whole or not at all (Store.write_bytes), so a crash mid-write keeps the previous one.
    Horovod's keys ('model', 'optimizer') plus the last whole epoch, the histories and ``within``, for resuming,
    and the fit it belongs to (FIT_KEY)."""
    store.write_bytes(checkpoint_path(store, run_id), torch_bytes({
        "model": model.state_dict(), "optimizer": optimizer_state, "epoch": epoch, "history": history,
        "epoch_metrics": epoch_metrics, FIT_KEY: fit, "within": within}))


def load_checkpoint(store: Any, run_id: str) -> dict[str, Any] | None:
    path = checkpoint_path(store, run_id)
    if not store.exists(path):
        return None
    return from_torch_bytes(store.read_bytes(path))
