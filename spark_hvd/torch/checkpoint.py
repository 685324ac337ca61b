"""Per-epoch checkpoints of a torch run under ``<store>/runs/<run_id>/checkpoints/``."""

from __future__ import annotations

import io
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"


def checkpoint_path(store: Any, run_id: str) -> str:
    return f"{store.get_checkpoint_path(run_id).rstrip('/')}/{CHECKPOINT_FILE}"


def save_checkpoint(store: Any, run_id: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    epoch: int, history: list[dict[str, float]]) -> None:
    """Written whole or not at all (Store.write_bytes), so a crash mid-write keeps the previous one."""
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "history": history}, buffer)
    store.write_bytes(checkpoint_path(store, run_id), buffer.getvalue())


def load_checkpoint(store: Any, run_id: str) -> dict[str, Any] | None:
    path = checkpoint_path(store, run_id)
    if not store.exists(path):
        return None
    return torch.load(io.BytesIO(store.read_bytes(path)), map_location="cpu", weights_only=True)
