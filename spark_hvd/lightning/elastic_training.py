"""An ``elastic=True`` Lightning fit on a rank (rank child): ``Trainer.fit`` under ``hvd.elastic.run``, one
Trainer per formation, committing Lightning's own checkpoint from a callback.

What a commit keeps (an ``ObjectState``): the Lightning checkpoint of the moment, as bytes (the module's
weights, the optimizers and LR schedulers, Lightning's loop position, and the FitRecorder's per-epoch records
and logged metrics), its learning rates unscaled as every checkpoint of a fit keeps them; and the position
(``epoch``, ``step`` of ``steps``) and the re-formations. A commit happens every ``elastic_commit_steps``
steps (``on_train_batch_end``) and at each epoch's end, after validation and the epoch's record.

When the job re-forms (a lost rank, or an added one), every rank enters ``train`` again with the last commit:

- a new Trainer resumes from the committed checkpoint (``trainer.fit(ckpt_path=...)``), which scales the
  learning rates for the new size under ``learning_rate_scaling='linear'``;
- each rank reads its shard for its rank and the new size; the committed epoch resumes at the same
  fraction of its steps (``ElasticPlan.resumed_step``), the shard's first batches skipped by the data
  module, and Lightning's restored position moved to that step; the steps after the last commit are redone;
- the history keeps one entry per epoch (the records travel in the checkpoint); the re-formation is
  recorded in ``reformations``.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
from pytorch_lightning import Callback

from spark_hvd.estimator.elastic_formation import enter_formation, initial_state_attrs
from spark_hvd.estimator.elastic_plan import ElasticPlan

COMMIT_FILE = "elastic-commit.ckpt"     # under the rank's run directory, outside its mirrored checkpoints
_BATCH_PROGRESS = "epoch_loop.batch_progress"


@dataclass(frozen=True)
class Formation:
    """What one formation's Trainer is built from: the ranks, the checkpoint to resume from (None: the
    fit's start), where the training epoch resumes, and the callback that commits."""

    rank: int
    size: int
    ckpt_path: str | None
    resume_at: tuple[int, int]
    commits: "StepCommits"


@dataclass(frozen=True)
class ElasticOutcome:
    trainer: Any
    recorder: Any
    user_callbacks: list[Any]
    reformations: list[dict[str, int]]


class StepCommits(Callback):
    """Commits every ``commit_steps`` steps of an epoch but its last (the epoch's end commits after
    validation, through ``commit_epoch_end``, which the FitRecorder calls once the epoch is recorded)."""

    def __init__(self, state: Any, commit_steps: int, steps: int) -> None:
        self.state, self.commit_steps, self.steps = state, commit_steps, steps
        self.trainer: Any = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.trainer = trainer

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        done = batch_idx + 1     # Lightning numbers a resumed epoch's batches from where it left off
        if done % self.commit_steps or done >= self.steps:
            return
        self._commit(trainer.current_epoch, done)

    def commit_epoch_end(self) -> None:
        self._commit(self.trainer.current_epoch + 1, 0)

    def _commit(self, epoch: int, step: int) -> None:
        buffer = io.BytesIO()
        # Lightning's own checkpoint, as trainer.save_checkpoint makes it, minus the barrier and the file.
        torch.save(self.trainer._checkpoint_connector.dump_checkpoint(weights_only=False), buffer)
        self.state.checkpoint = buffer.getvalue()
        self.state.epoch, self.state.step = epoch, step
        self.state.commit()


def moved_to_step(checkpoint: dict[str, Any], step: int) -> dict[str, Any]:
    """``checkpoint`` (saved at a training batch's end) with Lightning's position in the epoch moved to
    ``step`` steps done: a commit resumed at another world size redoes or skips the same fraction of its
    epoch. The counts keep the shape of a save at a batch's end (completed one behind processed)."""
    progress = checkpoint["loops"]["fit_loop"][_BATCH_PROGRESS]
    shift = step - progress["current"]["processed"]
    if shift:
        for scope in ("current", "total"):
            for key in ("ready", "started", "processed", "completed"):
                progress[scope][key] += shift
    return checkpoint


def fit_elastic(hvd: Any, module: Any, elastic: ElasticPlan, first_epoch: int, linear: bool, run_dir: str,
                start_ckpt: str | None, fit: Callable[[Formation], tuple[Any, Any, list[Any]]]) -> ElasticOutcome:
    """Trains through any number of re-formations; ``fit`` builds a formation's Trainer and data, runs
    ``trainer.fit`` and returns (trainer, recorder, user callbacks). ``start_ckpt``: the run's resume
    checkpoint of an earlier fit, for the formations before the first commit."""
    # A job re-formed in this process before the first commit starts again from the module as given.
    initial_weights = {name: value.detach().clone() for name, value in module.state_dict().items()}
    state = hvd.elastic.ObjectState(checkpoint=None, **initial_state_attrs(elastic, hvd.size(), first_epoch, linear))
    commit_file = os.path.join(run_dir, COMMIT_FILE)
    outcome: dict[str, Any] = {}

    @hvd.elastic.run
    def train(state: Any) -> None:
        # The learning rates need no rescaling here: a commit keeps them unscaled, and resuming from it
        # scales them for this formation's size (FitRecorder.on_load_checkpoint).
        enter_formation(state, hvd.size(), elastic, lambda factor: None, linear)
        size = hvd.size()
        ckpt_path = start_ckpt
        if state.checkpoint is None and start_ckpt is None:
            module.load_state_dict(initial_weights)
        elif state.checkpoint is not None:
            checkpoint = torch.load(io.BytesIO(state.checkpoint), map_location="cpu", weights_only=False)
            if checkpoint["epoch"] == state.epoch:   # committed mid-epoch (an epoch's end commits the next)
                checkpoint = moved_to_step(checkpoint, state.step)
            torch.save(checkpoint, commit_file)
            ckpt_path = commit_file
        commits = StepCommits(state, elastic.commit_steps, elastic.steps.at(size)[0])
        trainer, recorder, user_callbacks = fit(Formation(hvd.rank(), size, ckpt_path, (state.epoch, state.step),
                                                          commits))
        outcome.update(trainer=trainer, recorder=recorder, user_callbacks=user_callbacks)

    train(state)
    return ElasticOutcome(outcome["trainer"], outcome["recorder"], outcome["user_callbacks"], state.reformations)
