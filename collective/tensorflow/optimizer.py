"""horovod.tensorflow's DistributedOptimizer: a TF1 ``tf.compat.v1.train.Optimizer`` whose gradients
are reduced across ranks, or, given a Keras optimizer, collective.keras's DistributedOptimizer."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from collective.process_sets import ProcessSet, global_process_set
from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.gradients import GradientReducer, check_groups


class _DistributedLegacyOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps a TF1 optimizer: ``compute_gradients`` (and so ``minimize``) returns the reduced gradients;
    everything else is the wrapped optimizer's.

    With ``backward_passes_per_step`` N > 1 (Horovod's local aggregation) each rank sums its gradients
    over N passes; every N-th pass reduces the sums (divided by N with ``average_aggregated_gradients``)
    and applies them, and the other passes apply nothing.
    """

    def __init__(self, optimizer: tf.compat.v1.train.Optimizer, reducer: GradientReducer, name: str | None,
                 use_locking: bool, backward_passes_per_step: int, average_aggregated_gradients: bool) -> None:
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=use_locking)
        self._optimizer = optimizer
        self._reducer = reducer
        self._passes = backward_passes_per_step
        self._average_aggregated = average_aggregated_gradients
        self._sums: list[tf.Variable] | None = None
        self._is_reduce_pass: tf.Tensor | None = None

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*pairs) if pairs else ((), ())
        reduced = self._reducer(list(grads)) if self._passes == 1 else self._aggregate(list(grads))
        return list(zip(reduced, variables))

    def _aggregate(self, grads: list[Any]) -> list[Any]:
        present = [i for i, g in enumerate(grads) if g is not None]
        dense = [tf.convert_to_tensor(grads[i]) for i in present]
        if self._sums is None:
            local = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
            self._sums = [tf.compat.v1.Variable(tf.zeros_like(g), trainable=False, collections=local) for g in dense]
            self._passes_done = tf.compat.v1.Variable(0, dtype=tf.int64, trainable=False, collections=local)
        count = self._passes_done.assign_add(1)
        with tf.control_dependencies([count]):
            sums = [total.assign_add(g) for total, g in zip(self._sums, dense)]
        self._is_reduce_pass = tf.equal(count % self._passes, 0)
        scale = 1.0 / self._passes if self._average_aggregated else 1.0

        def reduce() -> list[tf.Tensor]:
            return self._reducer([total * tf.cast(scale, total.dtype) for total in sums])

        outputs = tf.cond(self._is_reduce_pass, reduce, lambda: [tf.identity(total) for total in sums])
        out: list[Any] = list(grads)
        for i, tensor in zip(present, outputs):
            out[i] = tensor
        return out

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        if self._passes == 1 or self._is_reduce_pass is None:
            return self._optimizer.apply_gradients(*args, **kwargs)

        def apply() -> tf.Tensor:
            with tf.control_dependencies([self._optimizer.apply_gradients(*args, **kwargs)]):
                with tf.control_dependencies([total.assign(tf.zeros_like(total)) for total in self._sums or []]):
                    return tf.constant(True)
        return tf.cond(self._is_reduce_pass, apply, lambda: tf.constant(False)).op

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
                         num_groups: int = 0, groups: Any = None, process_set: ProcessSet = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """An optimizer whose gradients are reduced across the ranks of ``process_set`` (``op`` Average or
    Sum) before they are applied; a rank outside the set applies its local gradients, as in Horovod. A TF1 ``tf.compat.v1.train.Optimizer`` is wrapped for graphs run in a ``Session``; a Keras
    optimizer gets ``collective.keras.DistributedOptimizer``. ``device_*`` are accepted for Horovod
    compatibility."""
    if isinstance(optimizer, keras.optimizers.Optimizer):
        from collective.keras.optimizer import DistributedOptimizer as keras_distributed  # keras builds on this package

        return keras_distributed(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                 gradient_predivide_factor, op, backward_passes_per_step,
                                 average_aggregated_gradients, num_groups, groups, process_set=process_set,
                                 scale_local_gradients=scale_local_gradients)
    if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise ValueError(f"DistributedOptimizer needs a Keras or tf.compat.v1.train optimizer, got "
                         f"{type(optimizer).__name__}")
    check_groups(num_groups, groups)
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
    reducer = GradientReducer("DistributedOptimizer", op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                              gradient_predivide_factor=gradient_predivide_factor, process_set=process_set)
    return _DistributedLegacyOptimizer(optimizer, reducer, name, use_locking, int(backward_passes_per_step),
                                       bool(average_aggregated_gradients))
