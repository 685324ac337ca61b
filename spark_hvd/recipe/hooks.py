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
class WithinEpoch:
    """Where a checkpoint inside an epoch stands (``checkpoint_every_steps``), beyond the model and optimizer:
    ``step`` steps of ``epoch`` done by ``size`` ranks; ``position``, the epoch's data position
    (``EpochPosition.to_ints()``; None where the reader has none); ``carried``, what the framework's
    ``fill_commit`` put aside of the epoch so far (its metric sums); ``rng``, every rank's random number
    generators' states in rank order (rng_states.py), which the ranks of a resume at the same size take up."""

    epoch: int
    step: int
    size: int
    position: list[int] | None = None
    carried: dict[str, Any] = field(default_factory=dict)
    rng: list[Any] | None = None

    def to_bytes(self) -> bytes:
        """What a checkpoint file keeps of it (its rng holds numpy arrays, which no weights-only format takes)."""
        import pickle

        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def from_bytes(blob: bytes) -> "WithinEpoch":
        import pickle

        within = pickle.loads(blob)
        if not isinstance(within, WithinEpoch):
            raise ValueError(f"a checkpoint's position record holds a {type(within).__name__}")
        return within


@dataclass
class Resume:
    """What rank 0 restored from the run's last checkpoint, broadcast to every rank: the epoch to start
    from, the records so far, what else every rank must adopt (Keras: the restored learning rate), and
    for a checkpoint written inside an epoch, where in it."""

    first_epoch: int = 0
    records: Records = field(default_factory=Records)
    framework: Any = None
    within: WithinEpoch | None = None


@dataclass(frozen=True)
class Position:
    """Where the epochs start: ``epoch``, with ``step`` of its training steps done already (a fit resumed
    mid-epoch; 0 otherwise), and ``data``, the epoch's data position at that step (an ``EpochPosition``;
    None: the epoch's start, or ``step`` steps of this size from it)."""

    epoch: int
    step: int = 0
    data: Any = None


class FrameworkHooks(ABC):
    """One framework's part of a rank's fit. ``init`` runs first and returns the framework's collective
    module (``collective.torch``, ``collective.keras``), initialised; the recipe then calls the others in
    its order."""

    # The attribute of an elastic state that counts the steps done in its epoch.
    step_attribute = "step"
    # What ``fill_commit`` puts into a state (None before it has): a checkpoint inside an epoch keeps them.
    carried_attributes: tuple[str, ...] = ()

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

    def rng_model(self) -> Any:
        """A model whose layers hold random generators of their own (Keras's seed generators), for
        rng_states.py; None where the framework's generators are all global."""
        return None

    def communication_wait_s(self) -> float:
        """The seconds the framework's DistributedOptimizer(s) have waited for gradient allreduces so far
        (their ``communication_wait_s``); 0 where there is none yet."""
        return 0.0

    @abstractmethod
    def save(self, epoch: int, records: Records, lr_factor: float, within: WithinEpoch | None = None) -> None:
        """The checkpoint after ``epoch``, learning rates divided by ``lr_factor``; with ``within``, the one
        inside the epoch it names (``epoch`` is then the last whole one, -1 for none). Called on every rank
        (a framework's save may be collective); the checkpoint is written once, by rank 0, whole or not at
        all, so a failed write keeps the last complete one."""

    def elastic_state(self, records: Records, attrs: dict[str, Any]) -> Any:
        """An elastic fit's ``hvd.elastic`` state: the framework's model and optimizer state, the records
        (as ``history`` and ``epoch_metrics``) and ``attrs`` (the position, formation.py)."""
        raise NotImplementedError(f"{type(self).__name__} has no elastic training")

    def fill_commit(self, state: Any) -> None:
        """Before a commit or a checkpoint inside an epoch (every rank): put into ``state`` (an elastic fit's
        state, or a static fit's ``EpochEvents.carry``) what the framework needs to resume the epoch (the
        metric sums of its steps so far; Lightning: its whole checkpoint)."""

    def fill_epoch_commit(self, state: Any) -> None:
        """Before the commit at an epoch's end (after validation and the epoch's records)."""

    @abstractmethod
    def result(self, records: Records, lr_factor: float) -> dict[str, Any]:
        """On rank 0 after the last epoch: what goes back to the driver to build the model."""

    def close(self) -> None:
        """Always, last: release what ``init`` and ``run_epochs`` opened."""
