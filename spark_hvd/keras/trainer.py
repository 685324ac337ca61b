"""What every rank of a KerasEstimator fit runs (in the rank child): the Horovod recipe around ``model.fit``.

init collective.keras -> the model from its ``.keras`` bytes -> the optimizer, learning rate scaled by
num_proc (``learning_rate_scaling='linear'``), wrapped in DistributedOptimizer and compiled -> rank 0
restores the last checkpoint, if any -> ``model.fit`` over this rank's shard with exactly ``train_steps``
steps per epoch on every rank (so uneven shards cannot desynchronise the allreduce), ``initial_epoch``
after the checkpoint, with the callbacks of rank_callbacks.py -> rank 0 returns the model (the one the
checkpoint_callback saved, when there is one) with its learning rate unscaled, and the history. An
elastic plan (``elastic=True``) runs the epochs under ``hvd.elastic.run`` instead (elastic_training.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import cloudpickle
import keras

from spark_hvd.estimator.base import FitPlan
from spark_hvd.keras.batch_arrays import ArrayShapes


@dataclass(frozen=True)
class KerasRankSpec:
    plan: FitPlan
    model: bytes              # the user's model as a .keras file
    # cloudpickle(KerasObjects), unpickled only after _configure_tensorflow: unpickling a Keras metric or
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


class KerasRankFn:
    """Picklable callable handed to spark_hvd.run."""

    def __init__(self, spec: KerasRankSpec) -> None:
        self.spec = spec

    def __call__(self) -> dict[str, Any] | None:
        return train_rank(self.spec)


def train_rank(spec: KerasRankSpec) -> dict[str, Any] | None:
    import collective.keras as hvd
    from spark_hvd.keras.learning_rate import learning_rate, scale_factor

    plan = spec.plan
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    _configure_tensorflow(spec.use_gpu, hvd.local_size())
    if plan.seed is not None:
        keras.utils.set_random_seed(plan.seed + rank)
    objects: KerasObjects = cloudpickle.loads(spec.objects)
    factor = scale_factor(plan.learning_rate_scaling, size)
    model, optimizer = _compiled_model(spec, objects, factor, hvd)
    with tempfile.TemporaryDirectory(prefix="spark-hvd-keras-rank-") as local_dir:
        from spark_hvd.keras.rank_callbacks import CheckpointFile

        checkpoint_file = (CheckpointFile(objects.checkpoint_callback, local_dir)
                           if rank == 0 and objects.checkpoint_callback is not None else None)
        first_epoch, history = _resume(plan, rank, model, optimizer, objects, factor, checkpoint_file)
        # Rank 0's (restored) rate, so that every rank's schedule callbacks start from the same one.
        first_epoch, history, rate = hvd.broadcast_object((first_epoch, history, learning_rate(optimizer)),
                                                          root_rank=0, name="shvd.resume")
        optimizer.learning_rate = rate
        logs_dir = os.path.join(local_dir, "logs")
        extra: dict[str, Any] = {}
        if plan.elastic is not None:
            from spark_hvd.keras.elastic_training import fit_elastic

            outcome = fit_elastic(spec, objects, model, optimizer, first_epoch, history, factor, checkpoint_file,
                                  logs_dir, hvd)
            history, factor, extra["reformations"] = outcome.history, outcome.lr_size, outcome.reformations
        elif first_epoch < plan.epochs:
            history = _fit(spec, objects, model, rank, size, first_epoch, history, factor, checkpoint_file,
                           logs_dir, hvd)
        if hvd.rank() != 0:
            return None
        if checkpoint_file is not None:
            checkpoint_file.load_into(model, optimizer, _loading_objects(objects))
        from spark_hvd.keras.learning_rate import unscaled_model_bytes

        return {"model": unscaled_model_bytes(model, factor), "history": history, **extra}


def _resume(plan: FitPlan, rank: int, model: Any, optimizer: Any, objects: KerasObjects, factor: int,
            checkpoint_file: Any) -> tuple[int, list[dict[str, float]]]:
    """Rank 0 takes the last checkpoint's state (its learning rate is unscaled: scaled again here)."""
    from spark_hvd.keras.checkpoint import load_checkpoint
    from spark_hvd.keras.learning_rate import learning_rate
    from spark_hvd.keras.saving import restore_state

    checkpoint = load_checkpoint(plan.data.store, plan.run_id) if rank == 0 else None
    if checkpoint is None:
        return 0, []
    restore_state(model, optimizer, checkpoint.model, _loading_objects(objects))
    optimizer.learning_rate = learning_rate(optimizer) * factor
    if checkpoint_file is not None and checkpoint.callback is not None:
        checkpoint_file.restore(checkpoint.callback)
    return checkpoint.epoch + 1, list(checkpoint.history)


def _fit(spec: KerasRankSpec, objects: KerasObjects, model: Any, rank: int, size: int, first_epoch: int,
         history: list[dict[str, float]], factor: int, checkpoint_file: Any, logs_dir: str,
         hvd: Any) -> list[dict[str, float]]:
    """model.fit from first_epoch; the history of every epoch so far (averaged over the ranks)."""
    from spark_hvd.keras.epoch_recorder import EpochRecorder
    from spark_hvd.keras.feed import Feed, FeedSpec
    from spark_hvd.keras.learning_rate import learning_rate, start_schedules_at
    from spark_hvd.keras.rank_callbacks import rank_callbacks

    plan = spec.plan
    user_callbacks = list(objects.callbacks)
    start_schedules_at(user_callbacks, learning_rate(model.optimizer))
    recorder = EpochRecorder(plan, rank, history, factor, checkpoint_file)
    callbacks = rank_callbacks(hvd, rank, user_callbacks, checkpoint_file, recorder, logs_dir,
                               plan.data.store, plan.run_id)
    feed_spec = FeedSpec(plan.feature_cols, plan.label_cols, plan.sample_weight_col, spec.shapes,
                         objects.transformation, objects.prefetch)
    readers = plan.readers(rank, size)
    feeds = {split: Feed(reader, feed_spec, plan.train_steps if split == "train" else plan.val_steps, first_epoch)
             for split, reader in readers.items()}
    try:
        with clearer_fit_errors(feeds.values()):
            model.fit(feeds["train"].dataset(endless=True), steps_per_epoch=plan.train_steps, epochs=plan.epochs,
                      initial_epoch=first_epoch, callbacks=callbacks, verbose=0,
                      validation_data=feeds["val"].dataset(endless=False) if "val" in feeds else None,
                      validation_steps=plan.val_steps or None)
    finally:
        for reader in readers.values():
            reader.close()
    return recorder.history


@contextlib.contextmanager
def clearer_fit_errors(feeds: Iterable[Any]) -> Iterator[None]:
    """Around a ``model.fit`` over ``feeds``: an error in transformation_fn reaches fit wrapped by tf.data,
    so the user's own is raised instead, and a peer's failure stays one (``_as_peer_failure``); the feeds
    stop at the end."""
    feeds = list(feeds)
    try:
        yield
    except Exception as e:
        for feed in feeds:
            if feed.error is not None:
                raise feed.error from None
        peer_failure = _as_peer_failure(e)
        if peer_failure is not None:
            raise peer_failure from e
        raise
    finally:
        for feed in feeds:
            feed.stop()


def _loading_objects(objects: KerasObjects) -> dict[str, Any]:
    from spark_hvd.keras.saving import loading_objects

    return loading_objects(objects.custom_objects, objects.loss, objects.metrics)


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


def _compiled_model(spec: KerasRankSpec, objects: KerasObjects, factor: int, hvd: Any) -> tuple[Any, Any]:
    from spark_hvd.keras.saving import model_from_bytes

    plan = spec.plan
    model = model_from_bytes(spec.model, objects.custom_objects, compile=False)
    base = keras.optimizers.get(objects.optimizer) if isinstance(objects.optimizer, str) else \
        keras.optimizers.deserialize(objects.optimizer, custom_objects=objects.custom_objects or None)
    if factor != 1:
        config = base.get_config()
        config["learning_rate"] = float(config["learning_rate"]) * factor
        base = type(base).from_config(config)
    optimizer = hvd.DistributedOptimizer(
        base, compression=objects.compression or hvd.Compression.none,
        backward_passes_per_step=plan.backward_passes_per_step,
        # Accumulated windows average their gradients rather than sum them, as TorchEstimator's do.
        average_aggregated_gradients=True)
    model.compile(optimizer=optimizer, loss=objects.loss, loss_weights=objects.loss_weights,
                  metrics=list(objects.metrics) or None)
    return model, optimizer
