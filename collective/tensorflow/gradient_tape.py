"""DistributedGradientTape: a tf.GradientTape whose gradients are averaged across ranks, and
PartialDistributedGradientTape, which keeps some layers' gradients local."""

from __future__ import annotations

from typing import Any, Iterable

import keras
import tensorflow as tf

from collective.process_sets import ProcessSet, global_process_set
from collective.reduce_ops import Average, ReduceOp
from collective.tensorflow.graph.bridge import not_converted
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.gradients import GradientReducer, check_groups, scale_local


@not_converted
def _gradient(self: Any, target: Any, sources: Any, output_gradients: Any = None,
              unconnected_gradients: tf.UnconnectedGradients = tf.UnconnectedGradients.NONE) -> Any:
    grads = super(self.__class__, self).gradient(target, sources, output_gradients, unconnected_gradients)
    flat_grads = tf.nest.flatten(grads, expand_composites=False)
    flat_sources = tf.nest.flatten(sources, expand_composites=False)
    local = [id(s) in self._collective_local_sources for s in flat_sources]
    reduced = iter(self._collective_reducer([g for g, is_local in zip(flat_grads, local) if not is_local]))
    process_set = self._collective_reducer.process_set
    out = [(scale_local(g, process_set) if self._collective_scale_local else g) if is_local else next(reduced)
           for g, is_local in zip(flat_grads, local)]
    return tf.nest.pack_sequence_as(grads, out)


def _register_local_source(self: Any, source: Any) -> None:
    """Keeps ``source``'s gradient local: it is not reduced across ranks (it is divided by the set's size
    when the tape was made with ``scale_local_gradients``, as Horovod does)."""
    self._collective_local_sources[id(source)] = source


def _get_local_and_global_gradients(self: Any, loss: Any, var_list: Any) -> tuple[list[tuple[Any, Any]],
                                                                                 list[tuple[Any, Any]]]:
    """``gradient(loss, var_list)`` split as Horovod's tape splits it: ``(local, global)``, each a list of
    ``(variable, gradient)`` pairs in ``var_list``'s order; local pairs are the registered local sources'."""
    variables = tf.nest.flatten(var_list, expand_composites=False)
    pairs = list(zip(variables, tf.nest.flatten(self.gradient(loss, var_list), expand_composites=False)))
    local = [pair for pair in pairs if id(pair[0]) in self._collective_local_sources]
    shared = [pair for pair in pairs if id(pair[0]) not in self._collective_local_sources]
    return local, shared


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                            compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
                            op: ReduceOp = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                            groups: Any = None, process_set: ProcessSet = global_process_set,
                            scale_local_gradients: bool = True) -> tf.GradientTape:
    """Wraps a tape (after its ``with`` block) so that ``gradient()`` returns gradients reduced across
    ranks with ``op`` (Average or Sum), among the ranks of ``process_set`` (a rank outside it keeps its
    local gradients, as in Horovod). Sparse gradients (IndexedSlices) are gathered from every rank,
    or densified first with ``sparse_as_dense``. ``device_*`` are accepted for Horovod compatibility.
    ``register_local_source(variable)`` keeps a variable's gradient local, and
    ``get_local_and_global_gradients(loss, var_list)`` returns the local and the reduced
    ``(variable, gradient)`` pairs apart. ``num_groups``/``groups`` are
    checked and need nothing more: a step's gradients go to the engine together.

    The result is an instance of a subclass of the tape's own class sharing its recorded state, so it
    is still a ``tf.GradientTape``.
    """
    check_groups(num_groups, groups)
    reducer = GradientReducer("DistributedGradientTape", op=op, compression=compression,
                              sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor,
                              process_set=process_set)
    base = type(gradtape)
    cls = type(base.__name__, (base,), {"gradient": _gradient, "register_local_source": _register_local_source,
                                        "get_local_and_global_gradients": _get_local_and_global_gradients,
                                        "__module__": __name__})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._collective_reducer = reducer
    tape._collective_local_sources = {}
    tape._collective_scale_local = bool(scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "", device_sparse: str = "",
                                   compression: type[Compressor] = Compression.none, sparse_as_dense: bool = False,
                                   op: ReduceOp = Average, gradient_predivide_factor: float = 1.0,
                                   num_groups: int = 0, groups: Any = None,
                                   process_set: ProcessSet = global_process_set, local_layers: Any = None,
                                   scale_local_gradients: bool = True) -> tf.GradientTape:
    """A DistributedGradientTape that keeps the gradients of ``local_layers`` (a Keras layer or a list
    of them) local: they are not reduced across ranks, and with ``scale_local_gradients`` they are
    divided by size(), as Horovod does."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set=process_set,
                                   scale_local_gradients=scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        tape.register_local_source(variable)
    return tape


def local_layer_variables(local_layers: Any) -> list[Any]:
    """The trainable variables of ``local_layers``: None, a Keras layer, or an iterable of layers."""
    if local_layers is None:
        return []
    layers: Iterable[Any] = [local_layers] if isinstance(local_layers, keras.layers.Layer) else local_layers
    layers = list(layers)
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer):
            raise ValueError(f"local_layers must be Keras layers, got a {type(layer).__name__}")
    return [variable for layer in layers for variable in layer.trainable_weights]
