"""What every rank of a KerasEstimator fit runs: the Horovod recipe around ``model.fit``.

init collective.keras -> the model from its ``.keras`` bytes -> the optimizer (learning rate scaled
as asked) wrapped in DistributedOptimizer, compiled -> rank 0 restores the last checkpoint, if any ->
``model.fit`` over this rank's shard with exactly ``train_steps`` steps per epoch on every rank (so
uneven shards cannot desynchronise the allreduce), ``initial_epoch`` after the checkpoint; callbacks
broadcast rank 0's variables when training begins, average the logged metrics across ranks, and on
rank 0 checkpoint every epoch and stream progress to the driver.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import cloudpickle
import keras
import numpy as np

from spark_hvd.estimator.base import FitPlan


@dataclass(frozen=True)
class KerasRankSpec:
    plan: FitPlan
    model: bytes              # the user's model as a .keras file
    objects: bytes            # cloudpickle(KerasObjects)
    use_gpu: bool


@dataclass
class KerasObjects:
    optimizer: Any            # keras.optimizers.serialize(...) output, or an optimizer name
    loss: Any
    loss_weights: Any
    metrics: list[Any]
    custom_objects: dict[str, Any]
    transformation_fn: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None
    compression: Any


class KerasRankFn:
    """Picklable callable handed to spark_hvd.run."""

    def __init__(self, spec: KerasRankSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any] | None:
        return train_rank(self.spec)


def train_rank(spec: KerasRankSpec) -> dict[str, Any] | None:
    import collective.keras as hvd
    from spark_hvd.data import make_reader
    from spark_hvd.keras.checkpoint import load_checkpoint
    from spark_hvd.keras.saving import model_to_bytes

    plan = spec.plan
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    _configure_tensorflow(spec.use_gpu, hvd.local_size())
    keras.utils.set_random_seed(plan.seed + rank)
    objects: KerasObjects = cloudpickle.loads(spec.objects)
    model, optimizer = _compiled_model(spec, objects, size, hvd)

    history: list[dict[str, float]] = []
    first_epoch = 0
    checkpoint = load_checkpoint(plan.data.store, plan.run_id) if rank == 0 else None
    if checkpoint is not None:
        _restore(model, optimizer, checkpoint.model, objects)
        first_epoch, history = checkpoint.epoch + 1, list(checkpoint.history)
    first_epoch, history = hvd.broadcast_object((first_epoch, history), root_rank=0, name="shvd.resume")
    if first_epoch >= plan.epochs:
        return {"model": model_to_bytes(model), "history": history} if rank == 0 else None

    readers = {split: make_reader(plan.data, split, rank, size, batch, shuffle=plan.shuffle and split == "train",
                                  seed=plan.seed, reader=plan.reader, shuffle_buffer_rows=plan.shuffle_buffer_size,
                                  inmemory_cache_all=plan.inmemory_cache_all)
               for split, batch, steps in (("train", plan.batch_size, plan.train_steps),
                                           ("val", plan.val_batch_size, plan.val_steps)) if steps}
    feeds = {split: _Feed(reader, plan, objects.transformation_fn,
                          plan.train_steps if split == "train" else plan.val_steps, first_epoch)
             for split, reader in readers.items()}
    recorder = _EpochRecorder(plan, rank, history)
    callbacks = [hvd.BroadcastGlobalVariablesCallback(0), hvd.MetricAverageCallback(), recorder]
    try:
        model.fit(feeds["train"].batches(), steps_per_epoch=plan.train_steps, epochs=plan.epochs,
                  initial_epoch=first_epoch, callbacks=callbacks, verbose=0, shuffle=False,  # the readers shuffle
                  validation_data=feeds["val"].batches() if "val" in feeds else None,
                  validation_steps=plan.val_steps or None)
    except Exception as e:
        # An error in transformation_fn reaches fit wrapped by tf.data; the user's own is clearer.
        for feed in feeds.values():
            if feed.error is not None:
                raise feed.error from None
        peer_failure = _as_peer_failure(e)
        if peer_failure is not None:
            raise peer_failure from e
        raise
    finally:
        for feed in feeds.values():
            feed.stop()
        for reader in readers.values():
            reader.close()
    if rank != 0:
        return None
    return {"model": model_to_bytes(model), "history": recorder.history}


def _as_peer_failure(error: BaseException) -> BaseException | None:
    """model.fit runs the allreduce inside tf.function, where a collective error reaches Python as a
    tf.errors.OpError whose message names the collective error's class (collective.tensorflow.bridge).
    A peer's failure must stay recognisable as one, or the driver would blame this rank for it."""
    import collective

    if isinstance(error, collective.PeerFailureError):
        return None
    message = str(error)
    marker = f"{collective.PeerFailureError.__name__}: "
    if marker not in message:
        return None
    return collective.PeerFailureError(message[message.index(marker) + len(marker):].splitlines()[0])


def _configure_tensorflow(use_gpu: bool, local_size: int) -> None:
    import tensorflow as tf

    if not use_gpu:
        tf.config.set_visible_devices([], "GPU")
    # Ranks that share a host share its cores; without this each would start one thread per core.
    threads = max(1, (os.cpu_count() or 1) // max(1, local_size))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass    # TensorFlow's runtime already started in this process; it keeps its pools


def _compiled_model(spec: KerasRankSpec, objects: KerasObjects, size: int, hvd: Any) -> tuple[Any, Any]:
    from spark_hvd.keras.saving import model_from_bytes

    plan = spec.plan
    model = model_from_bytes(spec.model, objects.custom_objects, compile=False)
    base = keras.optimizers.get(objects.optimizer) if isinstance(objects.optimizer, str) else \
        keras.optimizers.deserialize(objects.optimizer, custom_objects=objects.custom_objects or None)
    if plan.learning_rate_scaling == "linear":
        config = base.get_config()
        config["learning_rate"] = float(config["learning_rate"]) * size
        base = type(base).from_config(config)
    optimizer = hvd.DistributedOptimizer(
        base, compression=objects.compression or hvd.Compression.none,
        backward_passes_per_step=plan.backward_passes_per_step,
        # Accumulated windows average their gradients rather than sum them, as TorchEstimator's do.
        average_aggregated_gradients=True)
    model.compile(optimizer=optimizer, loss=objects.loss, loss_weights=objects.loss_weights,
                  metrics=list(objects.metrics) or None)
    return model, optimizer


def _restore(model: Any, optimizer: Any, blob: bytes, objects: KerasObjects) -> None:
    """Weights and optimizer state of a checkpoint into this rank's freshly compiled model."""
    from spark_hvd.keras.saving import loading_objects, model_from_bytes

    saved = model_from_bytes(blob, loading_objects(objects.custom_objects, objects.loss, objects.metrics),
                             compile=True)
    model.set_weights(saved.get_weights())
    optimizer.build(model.trainable_variables)
    source = list(saved.optimizer.variables)
    target = list(optimizer.variables)
    if len(source) != len(target):
        raise RuntimeError(f"the checkpoint's optimizer has {len(source)} variables, this run's has {len(target)}: "
                           "resume with the same optimizer as the run that wrote it")
    for variable, value in zip(target, source):
        variable.assign(value)


class _Feed:
    """(features, labels[, weights]) tuples for model.fit, epoch after epoch, exactly ``steps`` a
    epoch, from the epoch's own shuffled stream. One generator serves every epoch because Keras keeps
    one iterator over a generator when steps_per_epoch is given."""

    def __init__(self, reader: Any, plan: FitPlan, transformation_fn: Any, steps: int, first_epoch: int) -> None:
        self.reader, self.plan, self.transformation_fn = reader, plan, transformation_fn
        self.steps, self.first_epoch = steps, first_epoch
        self.error: BaseException | None = None
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def batches(self) -> Iterator[tuple[Any, ...]]:
        epoch = self.first_epoch
        while not self._stopped:
            stream = iter(self.reader.batches(epoch))
            for _ in range(self.steps):
                if self._stopped:
                    return
                try:
                    yield self._arrays(next(stream))
                except Exception as e:   # noqa: BLE001 - kept for train_rank, then re-raised into tf.data
                    self.error = self.error or e
                    raise
            epoch += 1

    def _arrays(self, batch: dict[str, np.ndarray]) -> tuple[Any, ...]:
        from spark_hvd.keras.batch_arrays import column_array, model_inputs, model_targets

        if self.transformation_fn is not None:
            batch = self.transformation_fn(batch)
        floatx = keras.config.floatx()
        plan = self.plan
        x = model_inputs([column_array(batch[c], floatx) for c in plan.feature_cols])
        y = model_targets([column_array(batch[c], floatx) for c in plan.label_cols])
        if plan.sample_weight_col is None:
            return x, y
        return x, y, column_array(batch[plan.sample_weight_col], floatx)


class _EpochRecorder(keras.callbacks.Callback):
    """After MetricAverageCallback: keeps the history, checkpoints (rank 0) and reports progress."""

    def __init__(self, plan: FitPlan, rank: int, history: list[dict[str, float]]) -> None:
        super().__init__()
        from spark_hvd.estimator.rank_progress import RankProgress

        self.plan, self.rank = plan, rank
        self.history = list(history)
        self.progress = RankProgress(rank)
        self._epoch = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.progress.start(self.history[-1]["epoch"] + 1 if self.history else 0)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        self.progress.step(self._epoch, batch + 1, None if loss is None else float(loss))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        from spark_hvd.keras.checkpoint import save_checkpoint
        from spark_hvd.keras.saving import model_to_bytes

        metrics = {str(k): float(v) for k, v in (logs or {}).items()}
        self.history.append({"epoch": epoch, **metrics})
        if self.rank == 0:
            save_checkpoint(self.plan.data.store, self.plan.run_id, model_to_bytes(self.model), epoch, self.history)
        self.progress.epoch(epoch, metrics)
