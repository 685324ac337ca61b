"""Per-epoch checkpoints of a Keras run under ``<store>/runs/<run_id>/checkpoints/`` (written by rank 0).

Each epoch's model goes to its own ``epoch-NNNN.keras`` (the native format: weights and optimizer
state, learning rate unscaled), and one inside an epoch (``checkpoint_every_steps``) to
``epoch-NNNN-step-SSSSSS.keras``; the file the ``checkpoint_callback`` saved last, when it saved a new
one, to ``callback-NNNN.keras`` (or ``.weights.h5``); then ``checkpoint.json`` (epoch, history, file
names, the callback's best value, where in an epoch, the fit it belongs to) is replaced atomically to point at them;
then the files it no longer names are removed. A crash at any point leaves a pointer to complete files of the point
it names.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from spark_hvd.recipe.checkpoint_fit import FIT_KEY
from spark_hvd.recipe.hooks import WithinEpoch

POINTER_FILE = "checkpoint.json"


@dataclass(frozen=True)
class CallbackSave:
    """What the checkpoint_callback left: the file it saved last and its best monitored value."""
    blob: bytes | None        # when saving: None if unchanged since the previous checkpoint
    best: float | None
    suffix: str               # ".keras" (a whole model) or ".weights.h5" (save_weights_only)


@dataclass(frozen=True)
class KerasCheckpoint:
    epoch: int                        # the last completed epoch (0-based)
    history: list[dict[str, float]]
    model: bytes                      # the .keras file
    callback: CallbackSave | None
    fit: str | None = None            # the fit it belongs to (recipe/checkpoint_fit.py)
    within: WithinEpoch | None = None  # a checkpoint inside an epoch: where


def checkpoint_dir(store: Any, run_id: str) -> str:
    return store.get_checkpoint_path(run_id).rstrip("/")


def save_checkpoint(store: Any, run_id: str, model_bytes: bytes, epoch: int, history: list[dict[str, float]],
                    callback: CallbackSave | None = None, fit: str | None = None,
                    within: WithinEpoch | None = None) -> None:
    directory = checkpoint_dir(store, run_id)
    previous = _read_pointer(store, run_id) or {}
    label = f"{within.epoch:04d}-step-{within.step:06d}" if within is not None and within.step else f"{epoch:04d}"
    name = f"epoch-{label}.keras"
    store.write_bytes(f"{directory}/{name}", model_bytes)
    callback_entry = None
    if callback is not None:
        callback_file = (previous.get("callback") or {}).get("file")
        if callback.blob is not None:
            callback_file = f"callback-{label}{callback.suffix}"
            store.write_bytes(f"{directory}/{callback_file}", callback.blob)
        callback_entry = {"file": callback_file, "best": callback.best, "suffix": callback.suffix}
    pointer = {"epoch": epoch, "history": history, "model": name, "callback": callback_entry, FIT_KEY: fit,
               "within": base64.b64encode(within.to_bytes()).decode() if within is not None else None}
    store.write_bytes(f"{directory}/{POINTER_FILE}", json.dumps(pointer).encode())
    named = {name, (callback_entry or {}).get("file")}
    for stale in (previous.get("model"), (previous.get("callback") or {}).get("file")):
        if stale is not None and stale not in named:
            store.delete(f"{directory}/{stale}")


def load_checkpoint(store: Any, run_id: str) -> KerasCheckpoint | None:
    pointer = _read_pointer(store, run_id)
    if pointer is None:
        return None
    directory = checkpoint_dir(store, run_id)
    callback = None
    entry = pointer.get("callback")
    if entry is not None:
        blob = store.read_bytes(f"{directory}/{entry['file']}") if entry.get("file") else None
        callback = CallbackSave(blob, entry.get("best"), entry["suffix"])
    within = WithinEpoch.from_bytes(base64.b64decode(pointer["within"])) if pointer.get("within") else None
    return KerasCheckpoint(int(pointer["epoch"]), list(pointer["history"]),
                           store.read_bytes(f"{directory}/{pointer['model']}"), callback, pointer.get(FIT_KEY),
                           within)


def _read_pointer(store: Any, run_id: str) -> dict[str, Any] | None:
    path = f"{checkpoint_dir(store, run_id)}/{POINTER_FILE}"
    if not store.exists(path):
        return None
    return json.loads(store.read_bytes(path))
