"""Rank child: the recipe's part of every step and epoch, whichever framework's loop runs them.

A framework's ``run_epochs`` tells ``EpochEvents`` when a training step ends and when an epoch ends (after
validation). The recipe then reports progress, keeps the records, has the checkpoint saved and, in an
elastic fit, commits. So a step added here (a mid-epoch checkpoint, a timing) reaches all three frameworks
and both modes at once.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

from spark_hvd.recipe.epoch_clock import EpochClock
from spark_hvd.recipe.epoch_times import epoch_times_record, gathered_times
from spark_hvd.recipe.formation import commits_after_step
from spark_hvd.recipe.hooks import FrameworkHooks, Records
from spark_hvd.recipe.plan import FitPlan

T = TypeVar("T")


class EpochEvents:
    """One formation's events: the ranks of ``size``, the records so far, and (elastic) the state that
    commits; ``lr_factor`` is what the live learning rates are scaled by. ``gather`` is the framework's
    ``allgather_object``, which combines the ranks' epoch times once an epoch (None: one rank's alone)."""

    def __init__(self, hooks: FrameworkHooks, plan: FitPlan, progress: Any, size: int, records: Records,
                 lr_factor: float, state: Any = None,
                 gather: Callable[[Any], list[Any]] | None = None) -> None:
        self.hooks, self.plan, self.progress, self.state = hooks, plan, progress, state
        self.train_steps, self.val_steps = plan.steps_at(size)
        self._records, self._lr_factor = records, lr_factor
        self._gather = gather
        self.clock = EpochClock(hooks.communication_wait_s)

    @property
    def elastic(self) -> bool:
        return self.state is not None

    @property
    def records(self) -> Records:
        # An elastic state's restore replaces its attributes with the committed copies: read them each time.
        if self.state is None:
            return self._records
        return Records(self.state.history, self.state.epoch_metrics,
                       getattr(self.state, "epoch_times", self._records.epoch_times))

    @property
    def lr_factor(self) -> float:
        return self.state.lr_size if self.state is not None else self._lr_factor

    def epoch_begins(self, epoch: int) -> None:
        """The framework's loop starts ``epoch``'s training (its first batch not yet asked for)."""
        self.clock.begin()

    def input_batches(self, stream: Iterable[T]) -> Iterator[T]:
        """``stream``'s batches, the time the loop spends getting each counted as waiting for input."""
        return self.clock.batches(stream)

    def input_waited(self, seconds: float) -> None:
        """The loop waited ``seconds`` for a batch (a framework whose loop draws its batches itself)."""
        self.clock.input_waited(seconds)

    def outside_training(self, seconds: float) -> None:
        """``seconds`` since the last step were no training (a validation inside the epoch)."""
        self.clock.exclude(seconds)

    def step_done(self, epoch: int, done: int, loss: float | None) -> None:
        """``done`` training steps of ``epoch`` are done (counting those before a resume)."""
        self.clock.step_ended()
        self.progress.step(epoch, done, loss)
        if self.state is not None and commits_after_step(self.plan.elastic, done, self.train_steps):
            started = time.perf_counter()
            self.hooks.fill_commit(self.state)
            self.state.step = done
            self.state.commit()
            self.clock.exclude(time.perf_counter() - started)   # a commit is no step's time

    def epoch_done(self, epoch: int, entry: Any, metrics: dict[str, float]) -> None:
        """``epoch`` is trained and validated: ``entry`` is its history entry, ``metrics`` its flat metrics
        (averaged over the ranks). Every rank calls it at the same point (the ranks' times are gathered)."""
        times = epoch_times_record(epoch, gathered_times(self._gather, self.clock.split()))
        records = self.records
        records.history.append(entry)
        records.epoch_metrics.append({"epoch": epoch, **metrics})
        records.epoch_times.append(times)
        self.hooks.save(epoch, records, self.lr_factor)
        self.progress.epoch(epoch, metrics, times)
        if self.state is not None:
            self.state.epoch, self.state.step = epoch + 1, 0
            self.hooks.fill_epoch_commit(self.state)
            self.state.commit()
        self.clock.begin()   # the next epoch's, unless its loop says when it begins
