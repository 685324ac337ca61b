"""Rank child: TensorFlow's settings for a rank, and the user's Keras model compiled for distributed training."""

from __future__ import annotations

import os
from typing import Any

import keras


def configure_tensorflow(use_gpu: bool, local_size: int) -> None:
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


def compiled_model(model_bytes: bytes, objects: Any, backward_passes_per_step: int, hvd: Any) -> tuple[Any, Any]:
    """The user's model, compiled with its optimizer (the learning rate as given) wrapped in
    DistributedOptimizer: Keras must compile before a checkpoint's optimizer state can be restored."""
    from spark_hvd.keras.saving import model_from_bytes

    model = model_from_bytes(model_bytes, objects.custom_objects, compile=False)
    base = keras.optimizers.get(objects.optimizer) if isinstance(objects.optimizer, str) else \
        keras.optimizers.deserialize(objects.optimizer, custom_objects=objects.custom_objects or None)
    optimizer = hvd.DistributedOptimizer(
        base, compression=objects.compression or hvd.Compression.none,
        backward_passes_per_step=backward_passes_per_step,
        # Accumulated windows average their gradients rather than sum them, as TorchEstimator's do.
        average_aggregated_gradients=True)
    model.compile(optimizer=optimizer, loss=objects.loss, loss_weights=objects.loss_weights,
                  metrics=list(objects.metrics) or None)
    return model, optimizer
