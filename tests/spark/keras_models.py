"""Keras models and metrics the KerasEstimator tests train with. The tests register this module with
cloudpickle.register_pickle_by_value, so ranks and executors need not import the tests."""

from __future__ import annotations

import keras


def classifier(features: int, classes: int, hidden: int = 16, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((features,)), keras.layers.Dense(hidden, activation="relu"),
                             keras.layers.Dense(classes)])


def class_accuracy(label: object, output: object) -> object:
    """A plain function metric: Keras can load a model compiled with it only through custom_objects."""
    predicted = keras.ops.cast(keras.ops.argmax(output, axis=-1), "int32")
    expected = keras.ops.cast(keras.ops.reshape(label, (-1,)), "int32")
    return keras.ops.mean(keras.ops.cast(predicted == expected, "float32"))


def slope() -> keras.Model:
    """y = w * x: one weight, starting at 0, so a test can read what was learned."""
    return keras.Sequential([keras.Input(()), keras.layers.Reshape((1,)),
                             keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])


def two_inputs(seed: int = 0) -> keras.Model:
    """Three classes from two feature columns: a 3-vector and a scalar."""
    keras.utils.set_random_seed(seed)
    first, second = keras.Input((3,), name="first"), keras.Input((1,), name="second")
    hidden = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([first, second]))
    return keras.Model([first, second], keras.layers.Dense(3)(hidden))


def binary(features: int, seed: int = 0) -> keras.Model:
    """P(label == 1) from a (B, 1) sigmoid output."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((features,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(1, activation="sigmoid")])


def image_classifier(side: int, classes: int, seed: int = 0) -> keras.Model:
    """A (side, side, 1) image Input, as Horovod's MNIST example has, for a flat vector column."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((side, side, 1)), keras.layers.Conv2D(4, 2, activation="relu"),
                             keras.layers.Flatten(), keras.layers.Dense(classes)])


class EpochLog(keras.callbacks.Callback):
    """Appends one JSON line per epoch to ``<directory>/rank-<rank>.jsonl`` (the rank's collective rank):
    the epoch, the optimizer's learning rate, the logs it was given and TensorFlow's intra-op thread count."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        import json
        import os

        import tensorflow as tf

        import collective

        entry = {"epoch": epoch, "lr": float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)),
                 "logs": {key: float(value) for key, value in (logs or {}).items()},
                 "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()}
        with open(os.path.join(self.directory, f"rank-{collective.rank()}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")


def read_epoch_logs(directory: str, rank: int) -> list[dict]:
    import json
    import os

    with open(os.path.join(directory, f"rank-{rank}.jsonl")) as f:
        return [json.loads(line) for line in f]
