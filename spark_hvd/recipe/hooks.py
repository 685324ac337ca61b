"""Rank child: what a framework gives the rank recipe (rank_recipe.py), and what the recipe gives back.

The recipe owns the order of a rank's steps; a framework (torch, Keras, Lightning) supplies only these
hooks. A framework whose own loop does a step (Keras broadcasts the variables when ``model.fit`` starts,
Lightning's strategy scales, broadcasts and wraps inside ``Trainer.fit``) leaves that hook a no-op and says
where the step happens instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Records:
    """A fit's per-epoch records: ``history`` in the framework's (Horovod's) shape, ``epoch_metrics`` flat
    (``{'epoch': e, 'loss': ..., 'val_loss': ...}``: progress, MLflow, the model's history), and
    ``epoch_times``: where each epoch's training time went (epoch_times.py), kept apart from the metrics,
    which a seeded fit reproduces exactly."""

    history: list[Any] = field(default_factory=list)
    epoch_metrics: list[dict[str, float]] = field(default_factory=list)
    epoch_times: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Resume:
    """What rank 0 restored from the run's last checkpoint, broadcast to every rank: the epoch to start
    from, the records so far, and what else every rank must adopt (Keras: the restored learning rate)."""

    first_epoch: int = 0
    records: Records = field(default_factory=Records)
    framework: Any = None


@dataclass(frozen=True)
class Position:
    """Where the epochs start: ``epoch``, with ``step`` of its training steps done already (an elastic
    fit resumed mid-epoch; 0 otherwise)."""

    epoch: int
    step: int = 0


class FrameworkHooks(ABC):
    """One framework's part of a rank's fit. ``init`` runs first and returns the framework's collective
    module (``collective.torch``, ``collective.keras``), initialised; the recipe then calls the others in
    its order."""

    # The attribute of an elastic state that counts the steps done in its epoch.
    step_attribute = "step"

    @abstractmethod
    def init(self) -> Any:
        """Initialise the collective, the device, threads and seeds, and build the model."""

    @abstractmethod
    def restore(self) -> Resume | None:
        """On rank 0: the run's last checkpoint into the model and optimizer; None when there is none."""

    def adopt(self, resume: Resume) -> None:
        """On every rank: what rank 0 restored and every rank must hold before the learning rate is scaled."""

    @abstractmethod
    def scale_learning_rate(self, factor: float) -> None:
        """Multiply the live learning rates by ``factor`` (Horovod's rule; checkpoints keep them unscaled)."""

    def broadcast_parameters(self) -> None:
        """Every rank takes rank 0's parameters and optimizer state."""

    def wrap_optimizer(self) -> None:
        """The optimizer becomes the framework's DistributedOptimizer."""

    @abstractmethod
    def run_epochs(self, start: Position, events: Any) -> None:
        """Train from ``start`` to the plan's last epoch, telling ``events`` (the recipe's EpochEvents,
        epoch_events.py) of every step and epoch, and
        where the loop waits for input (``events.epoch_begins``, ``events.input_batches`` or
        ``events.input_waited``: epoch_clock.py)."""

    def communication_wait_s(self) -> float:
        """The seconds the framework's DistributedOptimizer(s) have waited for gradient allreduces so far
        (their ``communication_wait_s``); 0 where there is none yet."""
        return 0.0

    @abstractmethod
    def save(self, epoch: int, records: Records, lr_factor: float) -> None:
        """The checkpoint after ``epoch``, learning rates divided by ``lr_factor``. Called on every rank (a
        framework's save may be collective); the checkpoint is written once, by rank 0."""

    def elastic_state(self, records: Records, attrs: dict[str, Any]) -> Any:
        """An elastic fit's ``hvd.elastic`` state: the framework's model and optimizer state, the records
        (as ``history`` and ``epoch_metrics``) and ``attrs`` (the position, formation.py)."""
        raise NotImplementedError(f"{type(self).__name__} has no elastic training")

    def fill_commit(self, state: Any) -> None:
        """Before a commit inside an epoch: put into ``state`` what the framework needs to resume the epoch
        (the metric sums of its steps so far; Lightning: its whole checkpoint)."""

    def fill_epoch_commit(self, state: Any) -> None:
        """Before the commit at an epoch's end (after validation and the epoch's records)."""

    @abstractmethod
    def result(self, records: Records, lr_factor: float) -> dict[str, Any]:
        """On rank 0 after the last epoch: what goes back to the driver to build the model."""

    def close(self) -> None:
        """Always, last: release what ``init`` and ``run_epochs`` opened."""
