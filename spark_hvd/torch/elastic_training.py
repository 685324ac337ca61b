"""An ``elastic=True`` TorchEstimator fit on a rank (rank child): the epoch loop under ``hvd.elastic.run``.

What a commit keeps (``TorchState``): the model, the optimizer (its learning rate as scaled for ``lr_size``
ranks), the position (``epoch``, ``step`` of ``steps``), every rank's metric sums of the epoch so far, the
history, and the re-formations. A commit happens every ``elastic_commit_steps`` steps and at each epoch's end.

When the job re-forms (a lost rank, or an added one), every rank enters ``train`` again with the last commit:

- each rank reads its shard of the Parquet files for its rank and the new size;
- the committed epoch resumes at the same fraction of its steps (``ElasticPlan.resumed_step``), the shard's
  first batches skipped; the steps after the last commit are redone, at the new size;
- the learning rate follows the new size when ``learning_rate_scaling='linear'`` (times new/old size);
- the history's per-epoch entries stay Horovod's; the re-formation is recorded in ``reformations``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spark_hvd.estimator.base import FitPlan
from spark_hvd.estimator.elastic_formation import enter_formation as shared_enter_formation
from spark_hvd.estimator.elastic_formation import initial_state_attrs
from spark_hvd.estimator.elastic_plan import ElasticPlan


def train_elastic(plan: FitPlan, hvd: Any, model: Any, optimizer: Any, loop: Any, progress: Any, first_epoch: int,
                  history: list[dict[str, Any]], epoch_metrics: list[dict[str, float]]) -> dict[str, Any] | None:
    """Trains ``plan.epochs`` epochs through any number of re-formations; rank 0 of the last formation
    returns what ``train_rank`` returns, plus ``reformations``. ``optimizer``'s learning rate is already
    scaled for the current size (when the rule is linear)."""
    from spark_hvd.torch.checkpoint import save_checkpoint
    from spark_hvd.torch.state_bytes import state_dict_bytes, torch_bytes
    from spark_hvd.torch.trainer import unscaled_state

    elastic: ElasticPlan = plan.elastic
    linear = plan.learning_rate_scaling == "linear"
    size = hvd.size()
    state = hvd.elastic.TorchState(
        model=model, optimizer=optimizer, sums=None, history=history, epoch_metrics=epoch_metrics,
        **initial_state_attrs(elastic, size, first_epoch, linear))

    @hvd.elastic.run
    def train(state: Any) -> None:
        enter_formation(state, hvd, elastic, optimizer, linear)
        rank, size = hvd.rank(), hvd.size()
        train_steps, val_steps = elastic.steps.at(size)

        def commit_within_epoch(done: int, totals: Any) -> None:
            if done % elastic.commit_steps or done >= train_steps:
                return   # the epoch's end commits after validation
            # Every rank's sums of the steps so far: a rank lost later takes its own with it.
            state.sums = add_sums(state.sums, totals.summed(hvd, "train.commit"))
            totals.sums[:] = 0
            state.step = done
            state.commit()

        readers = plan.readers(rank, size)
        try:
            while state.epoch < plan.epochs:
                epoch = state.epoch
                entry, flat = loop.train_epoch(epoch, readers["train"], progress, steps=train_steps,
                                               first_step=state.step, after_step=commit_within_epoch,
                                               carried=state.sums)
                if "val" in readers:
                    val_entry, val_flat = loop.validate(epoch, readers["val"], val_steps)
                    entry["validation"] = val_entry
                    flat.update(val_flat)
                state.history.append(entry)
                state.epoch_metrics.append({"epoch": epoch, **flat})
                state.epoch, state.step, state.sums = epoch + 1, 0, None
                if rank == 0:
                    save_checkpoint(plan.data.store, plan.run_id, model, unscaled_state(optimizer, state.lr_size),
                                    epoch, state.history, state.epoch_metrics)
                progress.epoch(epoch, flat)
                state.commit()
        finally:
            for reader in readers.values():
                reader.close()

    train(state)
    if hvd.rank() != 0:
        return None
    return {"state_dict": state_dict_bytes(model),
            "optimizer_state": torch_bytes(unscaled_state(optimizer, state.lr_size)),
            "history": state.history, "epoch_metrics": state.epoch_metrics, "reformations": state.reformations}


def enter_formation(state: Any, hvd: Any, elastic: ElasticPlan, optimizer: Any, linear: bool) -> None:
    """The shared ``enter_formation`` (elastic_formation.py), rescaling the torch optimizer's groups."""
    from spark_hvd.torch.trainer import scale_learning_rate

    shared_enter_formation(state, hvd.size(), elastic, lambda factor: scale_learning_rate(optimizer, factor), linear)


def add_sums(carried: np.ndarray | None, sums: np.ndarray) -> np.ndarray:
    return sums if carried is None else carried + sums
