"""An ``elastic=True`` KerasEstimator fit on a rank (rank child): ``model.fit`` under ``hvd.elastic.run``
(an epoch resumed mid-way alone, then the whole epochs left), kept current and committed by
``collective.keras.elastic``'s callbacks.

What a commit keeps (``KerasState``): the model's weights, the optimizer's variables (its step count, slots
and learning rate as scaled for ``lr_size`` ranks), the position (``epoch``, ``batch`` of ``steps``), the
history and the re-formations. A commit happens every ``elastic_commit_steps`` steps of an epoch and at each
epoch's end, after validation and the history.

When the job re-forms (a lost rank, or an added one), every rank enters ``train`` again with the last commit:

- each rank reads its shard of the Parquet files for its rank and the new size;
- the committed epoch resumes at the same fraction of its steps (``ElasticPlan.resumed_step``), the shard's
  first batches skipped; the steps after the last commit are redone, at the new size;
- the learning rate follows the new size when ``learning_rate_scaling='linear'`` (times new/old size);
- the history keeps one entry per epoch; the re-formation is recorded in ``reformations``. A resumed
  epoch's training metrics average the steps trained since the re-formation (Keras's metric state restarts
  with each ``model.fit``); its validation metrics are whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collective.keras.elastic import CommitStateCallback
from spark_hvd.estimator.elastic_formation import enter_formation, initial_state_attrs
from spark_hvd.estimator.elastic_plan import ElasticPlan


@dataclass(frozen=True)
class ElasticOutcome:
    history: list[dict[str, float]]
    lr_size: int                          # what the optimizer's learning rate is scaled for at the end
    reformations: list[dict[str, int]]


class StepCommits(CommitStateCallback):
    """hvd.elastic's CommitStateCallback, committing when the epoch's step count (``state.batch``, kept by
    UpdateBatchStateCallback before it) is a multiple of ``batches_per_commit``, as TorchEstimator does, and
    not at the epoch's last step: the epoch-end commit follows, after validation (a commit between would
    resume an epoch with no step left to fit)."""

    def __init__(self, state: Any, batches_per_commit: int, steps: int) -> None:
        super().__init__(state, batches_per_commit)
        self.steps = steps

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        done = self.state.batch
        if done % self.batches_per_commit == 0 and done < self.steps:
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
    state = hvd.elastic.KerasState(model, optimizer, history=list(history),
                                   **initial_state_attrs(elastic, hvd.size(), first_epoch, linear, "batch"))
    feed_spec = FeedSpec(plan.feature_cols, plan.label_cols, plan.sample_weight_col, spec.shapes,
                         objects.transformation, objects.prefetch)

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
        callbacks += [hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
                      StepCommits(state, elastic.commit_steps, train_steps)]
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
