"""An ``elastic=True`` KerasEstimator fit on a rank (rank child): ``model.fit`` under ``hvd.elastic.run``
(an epoch resumed mid-way alone, then the whole epochs left), kept current and committed by
``collective.keras.elastic``'s callbacks.

What a commit keeps (``KerasState``): the model's weights, the optimizer's variables (its step count, slots
and learning rate as scaled for ``lr_size`` ranks), the position (``epoch``, ``batch`` of ``steps``), the
epoch's metric sums so far, the history and the re-formations. A commit happens every
``elastic_commit_steps`` steps of an epoch and at each epoch's end, after validation and the history.

When the job re-forms (a lost rank, or an added one), every rank enters ``train`` again with the last commit:

- each rank reads its shard of the Parquet files for its rank and the new size;
- the committed epoch resumes at the same fraction of its steps (``ElasticPlan.resumed_step``), the shard's
  first batches skipped; the steps after the last commit are redone, at the new size;
- the learning rate follows the new size when ``learning_rate_scaling='linear'`` (times new/old size);
- the history keeps one entry per epoch; the re-formation is recorded in ``reformations``. A resumed
  epoch's training metrics carry the committed steps' sums (``CarriedMetrics``: every rank's, averaged over
  the ranks, so a lost rank's share is kept), as TorchEstimator's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import keras
import numpy as np

from collective.keras.elastic import CommitStateCallback
from spark_hvd.estimator.elastic_formation import enter_formation, initial_state_attrs
from spark_hvd.estimator.elastic_plan import ElasticPlan


@dataclass(frozen=True)
class ElasticOutcome:
    history: list[dict[str, float]]
    lr_size: int                          # what the optimizer's learning rate is scaled for at the end
    reformations: list[dict[str, int]]


class CarriedMetrics(keras.callbacks.Callback):
    """Keras's metric state of an epoch across a re-formation. The loss tracker and Keras's metrics keep sums
    (totals, counts, confusion counts) that restart with each ``model.fit``: before each in-epoch commit
    (``save``) the ranks' sums, averaged over the ranks by ``average``, go into ``state.metric_sums``; a fit
    that resumes the epoch adds them to its metrics after its first step, when Keras has built them all."""

    def __init__(self, state: Any, average: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__()
        self.state, self.average = state, average
        self._pending = False

    def save(self) -> None:
        variables = self.model.metrics_variables
        flat = np.concatenate([np.ravel(np.asarray(v.numpy(), dtype=np.float64)) for v in variables] or
                              [np.zeros(0)])
        averaged, sums, at = self.average(flat), {}, 0
        for variable in variables:
            count = int(np.prod(variable.shape))
            sums[variable.path] = averaged[at:at + count].reshape(tuple(variable.shape))
            at += count
        self.state.metric_sums = sums

    def on_train_begin(self, logs: Any = None) -> None:
        self._pending = bool(self.state.batch) and self.state.metric_sums is not None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._pending:
            return
        self._pending = False
        carried = self.state.metric_sums
        for variable in self.model.metrics_variables:
            if variable.path in carried:
                variable.assign_add(np.asarray(carried[variable.path]).astype(variable.dtype))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.metric_sums = None   # the next epoch starts from none


class StepCommits(CommitStateCallback):
    """hvd.elastic's CommitStateCallback, committing when the epoch's step count (``state.batch``, kept by
    UpdateBatchStateCallback before it) is a multiple of ``batches_per_commit``, as TorchEstimator does, and
    not at the epoch's last step: the epoch-end commit follows, after validation (a commit between would
    resume an epoch with no step left to fit)."""

    def __init__(self, state: Any, batches_per_commit: int, steps: int,
                 before_commit: Callable[[], None] | None = None) -> None:
        super().__init__(state, batches_per_commit)
        self.steps, self.before_commit = steps, before_commit

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        done = self.state.batch
        if done % self.batches_per_commit == 0 and done < self.steps:
            if self.before_commit is not None:
                self.before_commit()
            self.state.commit()


def fit_elastic(spec: Any, objects: Any, model: Any, optimizer: Any, first_epoch: int,
                history: list[dict[str, float]], lr_factor: int, checkpoint_file: Any, logs_dir: str,
                hvd: Any) -> ElasticOutcome:
    """Trains the plan's epochs from ``first_epoch`` through any number of re-formations. ``optimizer``'s
    learning rate is already scaled by ``lr_factor`` (the current size, under the linear rule)."""
    from spark_hvd.keras.epoch_recorder import EpochRecorder
    from spark_hvd.keras.feed import Feed, FeedSpec
    from spark_hvd.keras.learning_rate import learning_rate, set_learning_rate, start_schedules_at
    from spark_hvd.keras.rank_callbacks import rank_callbacks
    from spark_hvd.keras.trainer import clearer_fit_errors

    plan = spec.plan
    elastic: ElasticPlan = plan.elastic
    linear = plan.learning_rate_scaling == "linear"
    # The user's rate: schedule callbacks start from it times the size the rate is scaled for.
    base_rate = learning_rate(optimizer) / lr_factor
    # A commit holds every optimizer variable: its slots must exist before the first one (or a relaunched
    # stage could not restore into this optimizer before its first step).
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, optimizer, history=list(history), metric_sums=None,
                                   **initial_state_attrs(elastic, hvd.size(), first_epoch, linear, "batch"))
    feed_spec = FeedSpec(plan.feature_cols, plan.label_cols, plan.sample_weight_col, spec.shapes,
                         objects.transformation, objects.prefetch)

    def average_over_ranks(values: np.ndarray) -> np.ndarray:
        return np.asarray(hvd.allreduce(values, op=hvd.Average, name="shvd.elastic.metric_sums"))

    def scale_rate(factor: float) -> None:
        set_learning_rate(optimizer, learning_rate(optimizer) * factor)

    @hvd.elastic.run
    def train(state: Any) -> None:
        enter_formation(state, hvd.size(), elastic, scale_rate, linear, step_name="batch")
        rank, size = hvd.rank(), hvd.size()
        train_steps, val_steps = elastic.steps.at(size)
        user_callbacks = list(objects.callbacks)
        start_schedules_at(user_callbacks, base_rate * state.lr_size)
        mine = checkpoint_file if rank == 0 else None
        recorder = EpochRecorder(plan, rank, [], state.lr_size, mine)
        recorder.history = state.history   # appended in place, so that the epoch's commit holds it
        callbacks = rank_callbacks(hvd, rank, user_callbacks, mine, recorder, logs_dir, plan.data.store,
                                   plan.run_id, broadcast=False)
        # After the recorder, in this order: the commit holds the batch and epoch that just ended.
        metrics = CarriedMetrics(state, average_over_ranks)
        callbacks += [metrics, hvd.elastic.UpdateBatchStateCallback(state),
                      hvd.elastic.UpdateEpochStateCallback(state),
                      StepCommits(state, elastic.commit_steps, train_steps, before_commit=metrics.save)]
        readers = plan.readers(rank, size)
        try:
            while state.epoch < plan.epochs:
                # An epoch resumed mid-way fits its steps left alone; whole epochs fit in one model.fit, as
                # a static fit does (a fit per epoch restarts Keras's loop and the input pipeline each time:
                # about 0.15 s an epoch on this kind of machine).
                epoch, done = state.epoch, state.batch
                feeds = {"train": Feed(readers["train"], feed_spec, train_steps - done, epoch, skip=done)}
                if "val" in readers:
                    feeds["val"] = Feed(readers["val"], feed_spec, val_steps, epoch)
                with clearer_fit_errors(feeds.values()):
                    model.fit(feeds["train"].dataset(endless=done == 0), steps_per_epoch=train_steps - done,
                              initial_epoch=epoch, epochs=epoch + 1 if done else plan.epochs, callbacks=callbacks,
                              verbose=0, validation_data=feeds["val"].dataset(endless=False) if "val" in feeds
                              else None, validation_steps=val_steps or None)
        finally:
            for reader in readers.values():
                reader.close()

    train(state)
    return ElasticOutcome(state.history, state.lr_size, state.reformations)
