"""SyncBatchNormalization: Keras batch normalization whose training statistics cover every rank's batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from collective.reduce_ops import Average
from collective.runtime import size
from collective.tensorflow.ops import grouped_allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Horovod's SyncBatchNormalization for Keras 3: in training, the mean and variance are those of
    the global batch (every rank's batch together, ranks weighted equally, so batches should be the
    same size), not of this rank's batch; inference uses the moving statistics as usual. Every rank
    must call it in the same order."""

    def _moments(self, inputs: Any, mask: Any) -> tuple[Any, Any]:
        mean, variance = super()._moments(inputs, mask)
        if size() == 1:
            return mean, variance
        # Average each rank's E[x] and E[x^2]; the global variance is E[x^2] - E[x]^2.
        mean_of_squares = variance + tf.square(mean)
        global_mean, global_mean_of_squares = grouped_allreduce([mean, mean_of_squares], op=Average)
        return global_mean, global_mean_of_squares - tf.square(global_mean)
