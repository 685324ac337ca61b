"""A Horovod Keras training script (in the style of Horovod's tensorflow2_keras_mnist example, on
synthetic data), ported by changing one import.

    python -m collective.run -np 2 examples/keras_train.py

Each rank trains on its own shard with ``model.fit``; DistributedOptimizer averages gradients, the
callbacks start every rank from rank 0's weights, warm the learning rate up and average the logged
metrics, and every rank ends with the same weights.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import collective.keras as hvd  # noqa: E402  (was: import horovod.tensorflow.keras as hvd)


def make_data(rows: int = 4096, features: int = 20, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=0.6, size=(classes, features))
    labels = rng.integers(0, classes, size=rows)
    return (centers[labels] + rng.normal(size=(rows, features))).astype("float32"), labels


def main() -> None:
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras.utils.set_random_seed(hvd.rank())  # different initial weights on purpose: the broadcast fixes that
    x, y = make_data()
    x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]

    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    scaled_lr = 0.02 * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.BroadcastGlobalVariablesCallback(0),
        hvd.MetricAverageCallback(),
        hvd.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=1, verbose=1 if hvd.rank() == 0 else 0),
    ]
    model.fit(x, y, batch_size=64, epochs=4, callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)

    # The replicas stayed identical: every rank's weights equal rank 0's.
    flat = tf.concat([tf.reshape(w, [-1]) for w in model.trainable_weights], axis=0)
    spread = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
    if hvd.rank() == 0:
        print(f"max weight difference across ranks: {float(tf.reduce_max(tf.abs(spread))):.3g}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
