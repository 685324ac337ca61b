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
