"""horovod.tensorflow's DistributedOptimizer: a TF1 ``tf.compat.v1.train.Optimizer`` whose gradients
are reduced across ranks, or, given a Keras optimizer, collective.keras's DistributedOptimizer."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.gradients import GradientReducer, check_groups


class _DistributedLegacyOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a TF1 optimizer: ``compute_gradients`` (and so ``minimize``) returns the reduced gradients;
    everything else is the wrapped optimizer's."""

    def __init__(self, optimizer: tf.compat.v1.train.Optimizer, reducer: GradientReducer, name: str | None,
                 use_locking: bool) -> None:
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = reducer

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*pairs) if pairs else ((), ())
        return list(zip(self._reducer(list(grads)), variables))

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer: Any, name: str | None = None, use_locking: bool = False, device_dense: str = "",
                         device_sparse: str = "", compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, backward_passes_per_step: int = 1, op: ReduceOp = Average,
                         gradient_predivide_factor: float = 1.0, average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups: Any = None, scale_local_gradients: bool = True) -> Any:
    """An optimizer whose gradients are reduced across ranks (``op`` Average or Sum) before they are
    applied. A TF1 ``tf.compat.v1.train.Optimizer`` is wrapped for graphs run in a ``Session``; a Keras
    optimizer gets ``collective.keras.DistributedOptimizer``. ``device_*`` are accepted for Horovod
    compatibility."""
    if isinstance(optimizer, keras.optimizers.Optimizer):
        from collective.keras.optimizer import DistributedOptimizer as keras_distributed  # keras builds on this package

        return keras_distributed(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                 gradient_predivide_factor, op, backward_passes_per_step,
                                 average_aggregated_gradients, num_groups, groups,
                                 scale_local_gradients=scale_local_gradients)
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise ValueError(f"DistributedOptimizer needs a Keras or tf.compat.v1.train optimizer, got "
                         f"{type(optimizer).__name__}")
    check_groups(num_groups, groups)
    if backward_passes_per_step != 1:
        raise ValueError("backward_passes_per_step > 1 needs a Keras optimizer")
    reducer = GradientReducer("DistributedOptimizer", op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                              gradient_predivide_factor=gradient_predivide_factor)
    return _DistributedLegacyOptimizer(optimizer, reducer, name, use_locking)
