"""Horovod's Keras callbacks for Keras 3: start every rank from the same weights, average the logged
metrics, warm up or schedule the learning rate, and keep the best model (BestModelCheckpoint)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import keras
import numpy as np

from collective.process_sets import rank_number
from collective.reduce_ops import Average
from collective.runtime import size
from collective.tensorflow.graph import engine_calls
from collective.tensorflow.functions import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Gives every rank ``root_rank``'s model and optimizer variables when training begins, so ranks
    that built their models with different random weights train one model; ``local_variables`` keep
    each rank's own values. Runs once, before the first step (Keras 3 builds the optimizer before
    ``on_train_begin``)."""

    def __init__(self, root_rank: int = 0, device: str = "", local_variables: Iterable[Any] | None = None) -> None:
        super().__init__()
        self.root_rank = rank_number(root_rank, "root_rank")
        self.broadcast_done = False
        # Variables each rank keeps its own value of (Horovod's local_variables), by identity.
        self.local_variables = {id(v): v for v in (local_variables or [])}

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.broadcast_done:
            return
        model = self.model
        optimizer = getattr(model, "optimizer", None)
        variables = list(model.variables)
        if optimizer is not None:
            if not optimizer.built:
                optimizer.build(model.trainable_variables)
            variables += list(optimizer.variables)
        variables = [v for v in variables if id(v) not in self.local_variables]
        broadcast_variables(variables, root_rank=self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each epoch's logged metrics with their average over ranks. Put it before callbacks that
    read the metrics (ReduceLROnPlateau, checkpointing, early stopping)."""

    def __init__(self, device: str = "") -> None:
        super().__init__()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if not logs:
            return
        keys = sorted(logs)
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        (averaged,) = engine_calls.allreduce([values], [f"metric_average.{','.join(keys)}"], Average)
        for key, value in zip(keys, averaged):
            logs[key] = float(value)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` up to (not
    including) ``end_epoch``.

    ``multiplier`` is a number or a function of the epoch. With ``staircase`` the rate changes at the
    start of each epoch; without it, every batch, with a fractional epoch (``epoch + batch /
    steps_per_epoch``; ``steps_per_epoch`` defaults to the steps ``fit`` reports). With
    ``momentum_correction`` a change of rate by a factor r also scales SGD's momentum buffers by r, which
    is what Horovod's one-step momentum adjustment (momentum * r for one batch) amounts to for plain
    momentum (Keras 3 compiles momentum into the train step as a constant, so the buffers are what can
    change). The rate in effect is logged as ``lr`` at the end of each epoch.
    """

    def __init__(self, initial_lr: float, multiplier: float | Callable[[float], float], start_epoch: int = 0,
                 end_epoch: int | None = None, staircase: bool = True, momentum_correction: bool = True,
                 steps_per_epoch: int | None = None) -> None:
        super().__init__()
        if initial_lr is None:
            raise ValueError("initial_lr is required (the learning rate the schedule multiplies)")
        self.initial_lr = float(initial_lr)
        if callable(multiplier):
            self.multiplier = multiplier
            self.staircase = staircase
        else:
            constant = float(multiplier)
            self.multiplier = lambda epoch: constant
            self.staircase = True
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        if not self.staircase and not self.steps_per_epoch:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(f"{type(self).__name__} needs steps_per_epoch: fit() did not report its steps")
            self.steps_per_epoch = int(steps)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.current_epoch = epoch

    def _in_range(self) -> bool:
        return self.current_epoch >= self.start_epoch and (self.end_epoch is None or self.current_epoch < self.end_epoch)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if not self._in_range():
            return
        if self.staircase:
            if batch == 0:
                self._set_learning_rate(self.initial_lr * self.multiplier(self.current_epoch))
        else:
            self._set_learning_rate(self.initial_lr * self.multiplier(self.current_epoch + batch / self.steps_per_epoch))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is not None:
            logs["lr"] = current_learning_rate(self.model.optimizer)

    def _set_learning_rate(self, new_lr: float) -> None:
        optimizer = self.model.optimizer
        old_lr = current_learning_rate(optimizer)
        optimizer.learning_rate = new_lr
        applied_lr = current_learning_rate(optimizer)  # as stored (float32), the rate steps will use
        momentums = getattr(optimizer, "momentums", None)
        if (self.momentum_correction and momentums and getattr(optimizer, "momentum", 0) and old_lr
                and applied_lr != old_lr):
            ratio = applied_lr / old_lr
            for buffer in momentums:
                buffer.assign(buffer * ratio)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from ``initial_lr / size()`` to ``initial_lr`` over ``warmup_epochs``,
    batch by batch (Goyal et al., "Accurate, Large Minibatch SGD"). ``initial_lr`` is the rate for all
    ranks together, usually the single-process rate times ``size()``."""

    def __init__(self, initial_lr: float, warmup_epochs: int = 5, momentum_correction: bool = True,
                 steps_per_epoch: int | None = None, verbose: int = 0) -> None:
        def multiplier(epoch: float) -> float:
            # One batch ahead, so the last batch of the warm-up reaches exactly initial_lr.
            epoch += 1.0 / self.steps_per_epoch
            ranks = size()
            return (epoch * (ranks - 1) / warmup_epochs + 1) / ranks
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        super().on_epoch_end(epoch, logs)
        if self.verbose and epoch == self.warmup_epochs - 1:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{current_learning_rate(self.model.optimizer):g}.")


def current_learning_rate(optimizer: Any) -> float:
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's ModelCheckpoint that keeps only the best model by ``monitor`` (``save_best_only``).

    Meant as a KerasEstimator's ``checkpoint_callback``, which sets ``filepath`` to the run's own
    checkpoint file and returns the model it saved last, i.e. the best one. ``filepath`` (not in
    Horovod's signature) is for use with a plain ``model.fit``; by default ``best_model.keras``, or
    ``best_model.weights.h5`` with ``save_weights_only`` (Keras 3 requires those suffixes).
    """

    def __init__(self, monitor: str = "val_loss", verbose: int = 0, save_weights_only: bool = False,
                 mode: str = "auto", save_freq: str | int = "epoch", filepath: str | None = None) -> None:
        if filepath is None:
            filepath = "best_model.weights.h5" if save_weights_only else "best_model.keras"
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
