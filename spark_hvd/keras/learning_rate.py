"""Horovod's learning-rate rule for Keras on the ranks (runs in the rank child): the ranks train with the
optimizer's rate times the recipe's factor (``learning_rate_factor``: num_proc under
``learning_rate_scaling='linear'``, else 1), Horovod's
``LearningRateScheduleCallback``s start from that scaled rate, and what leaves the ranks (checkpoints,
the returned model) holds the rate divided again, so a later fit on another number of ranks scales
the user's own rate."""

from __future__ import annotations

from typing import Any, Iterable

import keras


def learning_rate(optimizer: Any) -> float:
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def set_learning_rate(optimizer: Any, value: float) -> None:
    optimizer.learning_rate = value


def start_schedules_at(callbacks: Iterable[Any], rate: float) -> None:
    """Horovod sets every schedule callback's ``initial_lr`` to the rate the ranks train with."""
    from collective.keras.callbacks import LearningRateScheduleCallback

    for callback in callbacks:
        if isinstance(callback, LearningRateScheduleCallback):
            callback.initial_lr = rate


def unscaled_model_bytes(model: Any, factor: int) -> bytes:
    """The model as a ``.keras`` file whose optimizer holds the learning rate divided by ``factor``."""
    from spark_hvd.keras.saving import model_to_bytes

    optimizer = model.optimizer
    if factor == 1 or optimizer is None:
        return model_to_bytes(model)
    rate = learning_rate(optimizer)
    set_learning_rate(optimizer, rate / factor)
    try:
        return model_to_bytes(model)
    finally:
        set_learning_rate(optimizer, rate)
