"""Rank child: what an elastic Lightning fit commits, and how a formation resumes from it.

A commit holds Lightning's own checkpoint of the moment, as bytes (the module's weights, the optimizers and
LR schedulers, Lightning's loop position, and the FitRecorder's records), its learning rates unscaled as
every checkpoint of a fit keeps them. A formation resumes with ``trainer.fit(ckpt_path=...)`` from it, which
scales the learning rates for the new size; the committed epoch resumes where the rows it has left take the
steps left at the new size (recipe/resume_point.py), Lightning's restored position moved to that step, and
the data module reads only the rows the commit had not trained.
"""

from __future__ import annotations

import io
import os
from typing import Any

import torch

COMMIT_FILE = "elastic-commit.ckpt"     # under the rank's run directory, outside its mirrored checkpoints
_BATCH_PROGRESS = "epoch_loop.batch_progress"


def checkpoint_bytes(trainer: Any) -> bytes:
    """Lightning's own checkpoint, as ``trainer.save_checkpoint`` makes it, minus the barrier and the file."""
    buffer = io.BytesIO()
    torch.save(trainer._checkpoint_connector.dump_checkpoint(weights_only=False), buffer)
    return buffer.getvalue()


def moved_to_step(checkpoint: dict[str, Any], step: int) -> dict[str, Any]:
    """``checkpoint`` (saved at a training batch's end) with Lightning's position in the epoch moved to
    ``step`` steps done: a commit resumed at another world size has another number of steps left. The
    counts keep the shape of a save at a batch's end (completed one behind processed)."""
    progress = checkpoint["loops"]["fit_loop"][_BATCH_PROGRESS]
    shift = step - progress["current"]["processed"]
    if shift:
        for scope in ("current", "total"):
            for key in ("ready", "started", "processed", "completed"):
                progress[scope][key] += shift
    return checkpoint


def committed_checkpoint(state: Any, run_dir: str) -> str:
    """The state's committed checkpoint as a file ``trainer.fit(ckpt_path=...)`` resumes from."""
    checkpoint = torch.load(io.BytesIO(state.checkpoint), map_location="cpu", weights_only=False)
    return checkpoint_at_step(checkpoint, state.epoch, state.step, run_dir)


def checkpoint_at_step(checkpoint: dict[str, Any], epoch: int, step: int, run_dir: str) -> str:
    """``checkpoint`` as a file ``trainer.fit(ckpt_path=...)`` resumes from, its position moved to ``step``
    steps of ``epoch`` done when it was saved inside that epoch (an epoch's end saves the next)."""
    if checkpoint["epoch"] == epoch:
        checkpoint = moved_to_step(checkpoint, step)
    path = os.path.join(run_dir, COMMIT_FILE)
    torch.save(checkpoint, path)
    return path
