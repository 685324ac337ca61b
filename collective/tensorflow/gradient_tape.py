"""DistributedGradientTape: a tf.GradientTape whose gradients are averaged across ranks."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.bridge import not_converted
from collective.tensorflow.gradients import GradientReducer


@not_converted
def _gradient(self: Any, target: Any, sources: Any, output_gradients: Any = None,
              unconnected_gradients: tf.UnconnectedGradients = tf.UnconnectedGradients.NONE) -> Any:
    grads = super(self.__class__, self).gradient(target, sources, output_gradients, unconnected_gradients)
    flat = tf.nest.flatten(grads, expand_composites=False)
    return tf.nest.pack_sequence_as(grads, self._collective_reducer(flat))


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                            compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
                            op: ReduceOp = Average, gradient_predivide_factor: float = 1.0) -> tf.GradientTape:
    """Wraps a tape (after its ``with`` block) so that ``gradient()`` returns gradients reduced across
    ranks with ``op`` (Average or Sum). Sparse gradients (IndexedSlices) are gathered from every rank,
    or densified first with ``sparse_as_dense``. ``device_*`` are accepted for Horovod compatibility.

    The result is an instance of a subclass of the tape's own class sharing its recorded state, so it
    is still a ``tf.GradientTape``.
    """
    reducer = GradientReducer("DistributedGradientTape", op=op, compression=compression,
                              sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor)
    base = type(gradtape)
    cls = type(base.__name__, (base,), {"gradient": _gradient, "__module__": __name__})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._collective_reducer = reducer
    return tape
