"""Rank child: the Keras hooks of the rank recipe (spark_hvd/recipe/rank_recipe.py) for a KerasEstimator fit.

What each of the recipe's steps means for Keras:

- init: collective.keras, TensorFlow's device and thread settings, the seed, and the model from its
  ``.keras`` bytes, compiled with the user's optimizer wrapped in DistributedOptimizer (Keras wraps at
  compile time, so the recipe's wrap step has nothing left to do);
- restore: rank 0 takes the last checkpoint's weights, optimizer state (learning rate unscaled) and what
  the checkpoint_callback had saved; every rank adopts rank 0's restored learning rate;
- the parameters are broadcast by ``BroadcastGlobalVariablesCallback`` when ``model.fit`` starts, since the
  optimizer's variables exist only then (an elastic fit: by its state's sync);
- the epochs: ``model.fit`` over this rank's shard, exactly the plan's steps per epoch on every rank (so
  uneven shards cannot desynchronise the allreduce), with the callbacks of rank_callbacks.py;
- the result: the model (the one the checkpoint_callback saved, when there is one) with its learning rate
  unscaled, and the history.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import cloudpickle
import keras
import numpy as np

from spark_hvd.keras.batch_arrays import ArrayShapes
from spark_hvd.recipe.hooks import FrameworkHooks, Position, Records, Resume, WithinEpoch
from spark_hvd.recipe.plan import FitPlan


@dataclass(frozen=True)
class KerasRankSpec:
    plan: FitPlan
    model: bytes              # the user's model as a .keras file
    # cloudpickle(KerasObjects), unpickled only after configure_tensorflow: unpickling a Keras metric or
    # callback starts TensorFlow's runtime, after which its device and thread settings are refused.
    objects: bytes
    shapes: ArrayShapes       # the reshapes the driver's sample check resolved
    use_gpu: bool


@dataclass
class KerasObjects:
    optimizer: Any            # keras.optimizers.serialize(...) output, or an optimizer name
    loss: Any
    loss_weights: Any
    metrics: list[Any]
    custom_objects: dict[str, Any]
    transformation: Any       # (transformation_fn, edit_fields, removed_fields), or None
    compression: Any
    callbacks: list[Any]
    checkpoint_callback: Any
    prefetch: int | None


class KerasHooks(FrameworkHooks):
    carried_attributes = ("metric_sums",)

    def __init__(self, spec: KerasRankSpec) -> None:
        self.spec, self.plan = spec, spec.plan
        self.hvd: Any = None
        self.objects: KerasObjects | None = None
        self.model: Any = None
        self.optimizer: Any = None
        self.checkpoint_file: Any = None      # rank 0's checkpoint_callback and the file it saves to
        self.carried_metrics: Any = None      # an elastic fit's, once run_epochs made it
        self._local = tempfile.TemporaryDirectory(prefix="spark-hvd-keras-rank-")
        self.base_rate = 0.0                  # the user's learning rate (unscaled), after any restore

    def init(self) -> Any:
        import collective.keras as hvd
        from spark_hvd.keras.rank.compiled_model import compiled_model, configure_tensorflow
        from spark_hvd.keras.learning_rate import learning_rate
        from spark_hvd.keras.rank.rank_callbacks import CheckpointFile

        self.hvd = hvd
        hvd.init()
        configure_tensorflow(self.spec.use_gpu, hvd.local_size())
        if self.plan.seed is not None:
            keras.utils.set_random_seed(self.plan.seed + hvd.rank())
        self.objects = cloudpickle.loads(self.spec.objects)
        self.model, self.optimizer = compiled_model(self.spec.model, self.objects,
                                                    self.plan.backward_passes_per_step, hvd)
        if hvd.rank() == 0 and self.objects.checkpoint_callback is not None:
            self.checkpoint_file = CheckpointFile(self.objects.checkpoint_callback, self._local.name)
        self.base_rate = learning_rate(self.optimizer)
        return hvd

    def restore(self) -> Resume | None:
        from spark_hvd.keras.checkpoint import load_checkpoint
        from spark_hvd.keras.learning_rate import learning_rate
        from spark_hvd.keras.saving import restore_state
        from spark_hvd.recipe.checkpoint_fit import check_checkpoint_fit

        checkpoint = load_checkpoint(self.plan.data.store, self.plan.run_id)
        if checkpoint is None:
            return None
        check_checkpoint_fit(self.plan, checkpoint.fit)
        restore_state(self.model, self.optimizer, checkpoint.model, self._loading_objects())
        if self.checkpoint_file is not None and checkpoint.callback is not None:
            self.checkpoint_file.restore(checkpoint.callback)
        history = list(checkpoint.history)
        within = checkpoint.within
        # Rank 0's restored rate goes to every rank, so that their schedule callbacks start from the same one.
        return Resume(within.epoch if within is not None else checkpoint.epoch + 1,
                      Records(history, [dict(entry) for entry in history]), framework=learning_rate(self.optimizer),
                      within=within)

    def adopt(self, resume: Resume) -> None:
        from spark_hvd.keras.learning_rate import set_learning_rate

        if resume.framework is not None:
            set_learning_rate(self.optimizer, resume.framework)
            self.base_rate = float(resume.framework)

    def scale_learning_rate(self, factor: float) -> None:
        from spark_hvd.keras.learning_rate import learning_rate, set_learning_rate

        if factor != 1:
            set_learning_rate(self.optimizer, learning_rate(self.optimizer) * factor)

    def run_epochs(self, start: Position, events: Any) -> None:
        from collections import deque

        from spark_hvd.keras.rank.epoch_reporter import EpochReporter
        from spark_hvd.keras.rank.feed import Feed, FeedSpec
        from spark_hvd.keras.rank.fit_errors import clearer_fit_errors

        plan, objects = self.plan, self.objects
        rank, size = self.hvd.rank(), self.hvd.size()
        callbacks = self._callbacks(start, events, rank)
        reporter = next(c for c in callbacks if isinstance(c, EpochReporter))
        feed_spec = FeedSpec(plan.feature_cols, plan.label_cols, plan.sample_weight_col, self.spec.shapes,
                             objects.prefetch)
        transformation = objects.transformation[0] if objects.transformation is not None else None
        rank_feeds = plan.feeds(rank, size, transformation, resume=start.data)
        position = start
        try:
            while position.epoch < plan.epochs:
                # An epoch resumed mid-way fits its steps left alone; whole epochs fit in one model.fit (a fit
                # per epoch restarts Keras's loop and the input pipeline each time: about 0.15 s an epoch).
                epoch, done = position.epoch, position.step
                reporter.ready_times = deque()   # a new pipeline: its batches' ready times start afresh
                feeds = {"train": Feed(rank_feeds["train"], feed_spec, epoch, skip=done,
                                       ready_times=reporter.ready_times)}
                if "val" in rank_feeds:
                    feeds["val"] = Feed(rank_feeds["val"], feed_spec, epoch)
                with clearer_fit_errors(feeds.values()):
                    self.model.fit(feeds["train"].dataset(endless=done == 0),
                                   steps_per_epoch=events.train_steps - done, initial_epoch=epoch,
                                   epochs=epoch + 1 if done else plan.epochs, callbacks=callbacks, verbose=0,
                                   validation_data=feeds["val"].dataset(endless=False) if "val" in feeds else None,
                                   validation_steps=events.val_steps or None)
                if not done or self.model.stop_training:
                    break
                position = Position(epoch + 1)
        finally:
            for feed in rank_feeds.values():
                feed.close()

    def communication_wait_s(self) -> float:
        return float(getattr(self.optimizer, "communication_wait_s", 0.0))

    def _callbacks(self, start: Position, events: Any, rank: int) -> list[Any]:
        from spark_hvd.keras.rank.carried_metrics import CarriedMetrics
        from spark_hvd.keras.rank.epoch_reporter import EpochReporter
        from spark_hvd.keras.learning_rate import start_schedules_at
        from spark_hvd.keras.rank.rank_callbacks import rank_callbacks

        user_callbacks = list(self.objects.callbacks)
        start_schedules_at(user_callbacks, self.base_rate * events.lr_factor)
        # The rank 0 of a re-formed job may not be the one that started with the checkpoint_callback.
        checkpoint = self.checkpoint_file if rank == 0 else None
        # Before the reporter, whose step may commit or checkpoint: a resumed epoch's sums are added at its first
        # step.
        self.carried_metrics = CarriedMetrics(events.carry, self._average_over_ranks)
        ours: list[Any] = [self.carried_metrics, EpochReporter(events, start, rank, self.plan.stop_on_nonfinite_loss)]
        return rank_callbacks(self.hvd, rank, user_callbacks, checkpoint, ours, os.path.join(self._local.name, "logs"),
                              self.plan.data.store, self.plan.run_id, broadcast=not events.elastic)

    def _average_over_ranks(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(self.hvd.allreduce(values, op=self.hvd.Average, name="shvd.elastic.metric_sums"))

    def save(self, epoch: int, records: Records, lr_factor: float, within: WithinEpoch | None = None) -> None:
        from spark_hvd.keras.checkpoint import save_checkpoint
        from spark_hvd.keras.learning_rate import unscaled_model_bytes

        if self.hvd.rank() != 0:
            return
        callback = self.checkpoint_file.changes() if self.checkpoint_file is not None else None
        save_checkpoint(self.plan.data.store, self.plan.run_id, unscaled_model_bytes(self.model, lr_factor), epoch,
                        records.history, callback, self.plan.fit_key, within)

    def rng_model(self) -> Any:
        return self.model

    def elastic_state(self, records: Records, attrs: dict[str, Any]) -> Any:
        # A commit holds every optimizer variable: its slots must exist before the first one (or a relaunched
        # stage could not restore into this optimizer before its first step).
        if not self.optimizer.built:
            self.optimizer.build(self.model.trainable_variables)
        return self.hvd.elastic.KerasState(self.model, self.optimizer, history=records.history,
                                           epoch_metrics=records.epoch_metrics, **attrs)

    def fill_commit(self, state: Any) -> None:
        self.carried_metrics.save()

    def fill_epoch_commit(self, state: Any) -> None:
        state.metric_sums = None   # the next epoch starts from none

    def result(self, records: Records, lr_factor: float) -> dict[str, Any]:
        from spark_hvd.keras.learning_rate import unscaled_model_bytes

        if self.checkpoint_file is not None:
            self.checkpoint_file.load_into(self.model, self.optimizer, self._loading_objects())
        return {"model": unscaled_model_bytes(self.model, lr_factor), "history": records.history}

    def close(self) -> None:
        self._local.cleanup()

    def _loading_objects(self) -> dict[str, Any]:
        from spark_hvd.keras.saving import loading_objects

        objects = self.objects
        return loading_objects(objects.custom_objects, objects.loss, objects.metrics)
