"""Horovod's ``horovod.tensorflow.util`` helpers that user and test code import by name."""

from __future__ import annotations

import tensorflow as tf


def _executing_eagerly() -> bool:
    """Whether ops run eagerly here (not while a ``tf.function`` traces or a TF1 graph builds). Horovod's
    scripts branch on it between a GradientTape and ``tf.gradients``, so it keeps Horovod's name."""
    return tf.executing_eagerly()
