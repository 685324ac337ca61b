"""Per-epoch checkpoints of a Keras run under ``<store>/runs/<run_id>/checkpoints/``.

Each epoch's model goes to its own ``epoch-NNNN.keras`` (the native format: weights and optimizer
state); then ``checkpoint.json`` (epoch, history, file name) is replaced atomically to point at it;
then the previous model file is removed. A crash at any point leaves a pointer to a complete model
of the epoch the pointer names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

POINTER_FILE = "checkpoint.json"


@dataclass(frozen=True)
class KerasCheckpoint:
    epoch: int                        # the last completed epoch (0-based)
    history: list[dict[str, float]]
    model: bytes                      # the .keras file


def checkpoint_dir(store: Any, run_id: str) -> str:
    return store.get_checkpoint_path(run_id).rstrip("/")


def save_checkpoint(store: Any, run_id: str, model_bytes: bytes, epoch: int,
                    history: list[dict[str, float]]) -> None:
    directory = checkpoint_dir(store, run_id)
    previous = _read_pointer(store, run_id)
    name = f"epoch-{epoch:04d}.keras"
    store.write_bytes(f"{directory}/{name}", model_bytes)
    pointer = {"epoch": epoch, "history": history, "model": name}
    store.write_bytes(f"{directory}/{POINTER_FILE}", json.dumps(pointer).encode())
    if previous is not None and previous["model"] != name:
        store.delete(f"{directory}/{previous['model']}")


def load_checkpoint(store: Any, run_id: str) -> KerasCheckpoint | None:
    pointer = _read_pointer(store, run_id)
    if pointer is None:
        return None
    blob = store.read_bytes(f"{checkpoint_dir(store, run_id)}/{pointer['model']}")
    return KerasCheckpoint(int(pointer["epoch"]), list(pointer["history"]), blob)


def _read_pointer(store: Any, run_id: str) -> dict[str, Any] | None:
    path = f"{checkpoint_dir(store, run_id)}/{POINTER_FILE}"
    if not store.exists(path):
        return None
    return json.loads(store.read_bytes(path))
