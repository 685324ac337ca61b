"""``hvd.Adasum`` exists in every package, as Horovod's scripts and tests name it, and every collective or
optimizer given it raises NotImplementedError (a RuntimeError, as Horovod's refusals are) naming it."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import collective


def _refusals() -> dict[str, Callable[[], Any]]:
    import keras
    import tensorflow as tf
    import torch

    import collective.keras as hvd_keras
    import collective.tensorflow as hvd_tf
    import collective.torch as hvd_torch

    parameter = torch.nn.Parameter(torch.ones(2))
    return {
        "numpy allreduce": lambda: collective.allreduce(np.ones(2), op=collective.Adasum),
        "torch allreduce": lambda: hvd_torch.allreduce(torch.ones(2), op=hvd_torch.Adasum),
        "torch reducescatter": lambda: hvd_torch.reducescatter(torch.ones(4), op=hvd_torch.Adasum),
        "torch DistributedOptimizer": lambda: hvd_torch.DistributedOptimizer(
            torch.optim.SGD([parameter], lr=0.1), op=hvd_torch.Adasum),
        "tf allreduce": lambda: hvd_tf.allreduce(tf.ones(2), op=hvd_tf.Adasum),
        "tf allreduce in a tf.function": lambda: tf.function(lambda: hvd_tf.allreduce(tf.ones(2), op=hvd_tf.Adasum))(),
        "tf IndexedSlices allreduce": lambda: hvd_tf.allreduce(
            tf.IndexedSlices(tf.ones((1, 3)), tf.constant([0])), op=hvd_tf.Adasum),
        "keras DistributedOptimizer": lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                                             op=hvd_keras.Adasum),
    }


def test_adasum_is_named_everywhere_and_refused_with_not_implemented_error(one_rank: None) -> None:
    wrong = []
    for what, call in _refusals().items():
        try:
            call()
            wrong.append(f"{what}: accepted")
        except NotImplementedError as exc:
            if "op=Adasum is not implemented" not in str(exc):
                wrong.append(f"{what}: {exc}")
    assert wrong == []
    assert issubclass(NotImplementedError, RuntimeError)  # what Horovod's torch tests catch
