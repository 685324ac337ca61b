"""What an estimator's ``elastic=True`` fit needs beyond the static plan (driver side, pickled to the ranks):
the commit frequency, the bounds on the number of ranks, and how the epoch's steps follow the world size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_hvd.errors import InputError


@dataclass(frozen=True)
class EpochSteps:
    """How many steps an epoch has at a given number of ranks: the user's fixed counts, or the rows divided
    among the ranks (as the static plan computes them)."""

    train_rows: int
    val_rows: int
    batch_size: int
    val_batch_size: int
    backward_passes_per_step: int
    whole_training_batches: bool
    train_steps_per_epoch: int | None = None
    validation_steps_per_epoch: int | None = None

    def at(self, size: int) -> tuple[int, int]:
        """(training steps, validation steps) of one epoch on ``size`` ranks."""
        from spark_hvd.data import steps_per_epoch

        bpps = self.backward_passes_per_step
        train = steps_per_epoch(self.train_rows, size, self.batch_size, self.train_steps_per_epoch,
                                whole_batches_only=self.whole_training_batches)
        # Whole accumulation windows only, so that every epoch ends on an optimizer step.
        train = -(-train // bpps) * bpps
        val = (steps_per_epoch(self.val_rows, size, self.val_batch_size, self.validation_steps_per_epoch)
               if self.val_rows else 0)
        return train, val


@dataclass(frozen=True)
class ElasticPlan:
    """``commit_steps``: steps between commits within an epoch (a multiple of backward_passes_per_step, so
    that no commit falls inside an accumulation window); there is one at each epoch's end too."""

    commit_steps: int
    min_num_proc: int
    max_num_proc: int
    steps: EpochSteps

    def resumed_step(self, step: int, old_steps: int, new_steps: int) -> int:
        """Where the committed step of an epoch of ``old_steps`` lands in one of ``new_steps``: the same
        fraction of the epoch done, rounded down to a whole accumulation window."""
        bpps = self.steps.backward_passes_per_step
        return (step * new_steps // old_steps) // bpps * bpps


def checked_elastic_bounds(estimator: Any, num_proc: int) -> tuple[int, int]:
    """(min_num_proc, max_num_proc) of an ``elastic=True`` fit on ``num_proc`` ranks, checked before launch:
    each defaults to num_proc, and min_num_proc <= num_proc <= max_num_proc."""
    # The public name (spark_hvd.lightning.TorchEstimator), since two estimators are called TorchEstimator.
    name = f"{type(estimator).__module__.rsplit('.', 1)[0]}.{type(estimator).__name__}"
    if not estimator.elastic_supported:
        raise InputError(f"elastic=True: {name} has no elastic training yet; use spark_hvd.torch.TorchEstimator, "
                         "spark_hvd.keras.KerasEstimator or spark_hvd.lightning.TorchEstimator, or fit with "
                         "elastic=False (a refit with the same run_id resumes from the last epoch)")
    min_np = estimator.getMinNumProc() or num_proc
    max_np = estimator.getMaxNumProc() or max(num_proc, min_np)
    if max_np < num_proc:
        raise InputError(f"elastic=True: max_num_proc ({max_np}) is less than num_proc ({num_proc}), the ranks "
                         "the fit starts with")
    if min_np > max_np:
        raise InputError(f"elastic=True: min_num_proc ({min_np}) is greater than max_num_proc ({max_np})")
    if min_np > num_proc:
        raise InputError(f"elastic=True: min_num_proc ({min_np}) is greater than num_proc ({num_proc}), the "
                         "ranks the fit starts with")
    return min_np, max_np


def check_no_elastic_params(estimator: Any) -> None:
    """min_num_proc, max_num_proc and elastic_commit_steps mean something only with elastic=True."""
    given = [name for name in ("min_num_proc", "max_num_proc") if estimator.isSet(name)]
    if given:
        raise InputError(f"{', '.join(given)} given without elastic=True: set elastic=True for an elastic fit")
