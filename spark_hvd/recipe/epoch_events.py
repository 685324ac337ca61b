"""Rank child: the recipe's part of every step and epoch, whichever framework's loop runs them.

A framework's ``run_epochs`` tells ``EpochEvents`` when a training step ends and when an epoch ends (after
validation). The recipe then reports progress, keeps the records, has the checkpoint saved and, in an
elastic fit, commits. So a step added here (a mid-epoch checkpoint, a timing) reaches all three frameworks
and both modes at once.
"""

from __future__ import annotations

from typing import Any

from spark_hvd.recipe.formation import commits_after_step
from spark_hvd.recipe.hooks import FrameworkHooks, Records
from spark_hvd.recipe.plan import FitPlan


class EpochEvents:
    """One formation's events: the ranks of ``size``, the records so far, and (elastic) the state that
    commits; ``lr_factor`` is what the live learning rates are scaled by."""

    def __init__(self, hooks: FrameworkHooks, plan: FitPlan, progress: Any, size: int, records: Records,
                 lr_factor: float, state: Any = None) -> None:
        self.hooks, self.plan, self.progress, self.state = hooks, plan, progress, state
        self.train_steps, self.val_steps = plan.steps_at(size)
        self._records, self._lr_factor = records, lr_factor

    @property
    def elastic(self) -> bool:
        return self.state is not None

    @property
    def records(self) -> Records:
        # An elastic state's restore replaces its attributes with the committed copies: read them each time.
        if self.state is None:
            return self._records
        return Records(self.state.history, self.state.epoch_metrics)

    @property
    def lr_factor(self) -> float:
        return self.state.lr_size if self.state is not None else self._lr_factor

    def step_done(self, epoch: int, done: int, loss: float | None) -> None:
        """``done`` training steps of ``epoch`` are done (counting those before a resume)."""
        self.progress.step(epoch, done, loss)
        if self.state is not None and commits_after_step(self.plan.elastic, done, self.train_steps):
            self.hooks.fill_commit(self.state)
            self.state.step = done
            self.state.commit()

    def epoch_done(self, epoch: int, entry: Any, metrics: dict[str, float]) -> None:
        """``epoch`` is trained and validated: ``entry`` is its history entry, ``metrics`` its flat metrics
        (averaged over the ranks)."""
        records = self.records
        records.history.append(entry)
        records.epoch_metrics.append({"epoch": epoch, **metrics})
        self.hooks.save(epoch, records, self.lr_factor)
        self.progress.epoch(epoch, metrics)
        if self.state is not None:
            self.state.epoch, self.state.step = epoch + 1, 0
            self.hooks.fill_epoch_commit(self.state)
            self.state.commit()
