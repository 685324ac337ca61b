"""Rank child: the recipe's part of every step and epoch, whichever framework's loop runs them.

A framework's ``run_epochs`` tells ``EpochEvents`` when a training step ends and when an epoch ends (after
validation). The recipe then reports progress, keeps the records, has the checkpoint saved (every
``checkpoint_every_steps`` steps too) and, in an elastic fit, commits. So a step added here (a timing) reaches
all three frameworks and both modes at once.

A checkpoint or commit inside an epoch holds where the epoch's data stands (data/read/epoch_position.py),
which every rank computes alike from where its formation took the epoch up (``start``), and every rank's
random generators (rng_states.py); one at an epoch's end holds the generators.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator, TypeVar

from spark_hvd.data.read.epoch_position import EpochPosition, epoch_origin
from spark_hvd.recipe import rng_states
from spark_hvd.recipe.epoch_clock import EpochClock
from spark_hvd.recipe.epoch_times import epoch_times_record, gathered_times
from spark_hvd.recipe.formation import falls_within
from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, WithinEpoch
from spark_hvd.recipe.plan import FitPlan

T = TypeVar("T")
RNG_GATHER_NAME = "shvd.rng_states"


class EpochEvents:
    """One formation's events: the ranks of ``size``, the records so far, and (elastic) the state that
    commits; ``lr_factor`` is what the live learning rates are scaled by. ``gather(obj, name)`` is the
    framework's ``allgather_object``, which combines the ranks' epoch times once an epoch and their
    generators at each checkpoint (None: one rank's alone). ``start``: where the formation takes the epochs
    up; ``carried``: what a checkpoint inside that epoch put aside (a static fit's ``carry``)."""

    def __init__(self, hooks: FrameworkHooks, plan: FitPlan, progress: Any, size: int, records: Records,
                 lr_factor: float, state: Any = None, gather: Callable[..., list[Any]] | None = None,
                 start: Position = Position(0), carried: dict[str, Any] | None = None) -> None:
        self.hooks, self.plan, self.progress, self.state = hooks, plan, progress, state
        self.size, self.start = size, start
        self.train_steps, self.val_steps = plan.steps_at(size)
        self._records, self._lr_factor = records, lr_factor
        self._gather = gather
        self.clock = EpochClock(hooks.communication_wait_s)
        self._every = getattr(plan, "checkpoint_every_steps", None)
        # Where the framework's fill_commit puts what a resumed epoch needs (its metric sums so far).
        self.carry = state if state is not None else SimpleNamespace(
            **{**{name: None for name in hooks.carried_attributes}, **(carried or {})})

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

    def data_position(self, epoch: int, done: int) -> EpochPosition:
        """Where ``epoch``'s data stands once ``done`` of its steps are done (counting those before a
        resume): the feeds dealt from the same origin (RankFeed.origin)."""
        first = self.start.step if epoch == self.start.epoch else 0
        data = self.plan.data
        origin = epoch_origin(self.start.data if epoch == self.start.epoch else None, epoch, data.train_rows,
                              self.size, self.train_steps, self.plan.batch_size, first)
        return origin.deal(self.size, self.train_steps - first, self.plan.batch_size).after(done - first)

    def step_done(self, epoch: int, done: int, loss: float | None) -> None:
        """``done`` training steps of ``epoch`` are done (counting those before a resume)."""
        self.clock.step_ended()
        self.progress.step(epoch, done, loss)
        commit = self.state is not None and falls_within(self.plan.elastic.commit_steps, done, self.train_steps)
        checkpoint = falls_within(self._every, done, self.train_steps)
        if not (commit or checkpoint):
            return
        started = time.perf_counter()
        if commit or self.hooks.carried_attributes:
            self.hooks.fill_commit(self.carry)
        position, rng = self.data_position(epoch, done).to_ints(), self._rng_states()
        if checkpoint:
            carried = {name: getattr(self.carry, name) for name in self.hooks.carried_attributes}
            self.hooks.save(epoch - 1, self.records, self.lr_factor,
                            WithinEpoch(epoch, done, self.size, position, carried, rng))
        if commit:
            self.state.step, self.state.position, self.state.rng = done, position, rng
            self.state.commit()
        self.clock.exclude(time.perf_counter() - started)   # a commit or checkpoint is no step's time

    def epoch_done(self, epoch: int, entry: Any, metrics: dict[str, float]) -> None:
        """``epoch`` is trained and validated: ``entry`` is its history entry, ``metrics`` its flat metrics
        (averaged over the ranks). Every rank calls it at the same point (the ranks' times are gathered)."""
        times = epoch_times_record(epoch, gathered_times(self._gather, self.clock.split()))
        records = self.records
        records.history.append(entry)
        records.epoch_metrics.append({"epoch": epoch, **metrics})
        times.update(self._row_counts(epoch))
        records.epoch_times.append(times)
        for name in self.hooks.carried_attributes:
            setattr(self.carry, name, None)       # the next epoch carries nothing yet
        rng = self._rng_states()
        self.hooks.save(epoch, records, self.lr_factor, WithinEpoch(epoch + 1, 0, self.size, rng=rng))
        self.progress.epoch(epoch, metrics, times)
        if self.state is not None:
            self.state.epoch, self.state.step, self.state.position, self.state.rng = epoch + 1, 0, None, rng
            self.hooks.fill_epoch_commit(self.state)
            self.state.commit()
        self.clock.begin()   # the next epoch's, unless its loop says when it begins

    def _row_counts(self, epoch: int) -> dict[str, int]:
        """How far ``epoch`` was from each row once: rows trained a second time (the lockstep padding from the
        next pass) and rows it left out (whole batches only, or an epoch of fewer steps than its rows)."""
        end = self.data_position(epoch, self.train_steps)
        undealt_padding = sum(stop - max(start, end.rows) for start, stop in end.left if stop > end.rows)
        return {"padded_rows": end.frontier - end.rows - undealt_padding, "left_out_rows": end.pass_rows_left}

    def _rng_states(self) -> list[Any] | None:
        """Every rank's generators' states, in rank order (collective: every rank calls it at once)."""
        mine = rng_states.capture(self.hooks.rng_model())
        return [mine] if self._gather is None else self._gather(mine, RNG_GATHER_NAME)
