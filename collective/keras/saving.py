"""Loading a saved model with its optimizer distributed again."""

from __future__ import annotations

from typing import Any

import keras

from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.compression import Compression, Compressor
from collective.keras.optimizer import make_settings, wrap_in_place


def load_model(filepath: str, custom_optimizers: list[type] | None = None, custom_objects: dict[str, Any] | None = None,
               compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
               op: ReduceOp = Average, backward_passes_per_step: int = 1,
               average_aggregated_gradients: bool = False) -> keras.Model:
    """Loads a ``.keras`` file (saved with or without DistributedOptimizer) and makes its optimizer a
    DistributedOptimizer with the given settings, keeping the optimizer's loaded state.

    ``custom_optimizers`` (custom optimizer classes) are made known to Keras like ``custom_objects``.
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
    model = keras.saving.load_model(filepath, custom_objects=objects or None)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        wrap_in_place(optimizer, make_settings(compression, sparse_as_dense, 1.0, op, backward_passes_per_step,
                                               average_aggregated_gradients))
    return model
