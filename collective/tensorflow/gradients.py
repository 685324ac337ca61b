"""Averaging gradients across ranks: what DistributedGradientTape and the Keras DistributedOptimizer share."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import tensorflow as tf

from collective.process_sets import ProcessSet, global_process_set, is_global
from collective.reduce_ops import Average, ReduceOp, Sum, resolve_op
from collective.tensorflow.graph.bridge import as_tensor, not_converted, op_name
from collective.tensorflow.compression import Compression, Compressor
from collective.tensorflow.ops import allreduce
from collective.tensorflow.graph.overlap import allreduce_overlapped
from collective.api.wait_clock import WaitClock


def check_groups(num_groups: int, groups: Any) -> None:
    """Horovod's ``num_groups``/``groups`` choose how gradient allreduces are grouped. Here a step's
    gradients go to the engine in a few size-based buckets that overlap backward, and the engine fuses
    what arrives together, so the arguments are checked as Horovod checks them and change nothing else."""
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning, stacklevel=3)
        groups = num_groups if groups is None else groups
    if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError(f"groups should be a positive integer or a list of lists of variables, got {groups!r}")


@dataclass(frozen=True)
class GradientReducer:
    """Reduces a list of gradients (tensors, IndexedSlices or None) across ranks.

    Dense gradients go to the engine in a few buckets that overlap backward (``collective.tensorflow.graph.overlap``);
    the engine fuses what arrives in one cycle. Sparse ones are gathered (or densified with ``sparse_as_dense``).
    """

    kind: str                                  # names the requests: "<kind>.<index>"
    op: ReduceOp = Average
    compression: type[Compressor] = Compression.none
    sparse_as_dense: bool = False
    gradient_predivide_factor: float = 1.0
    process_set: ProcessSet = global_process_set
    # The time its steps waited for the dense gradients' allreduces (what backward did not hide).
    wait_clock: WaitClock = field(default_factory=WaitClock, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.process_set, ProcessSet):
            raise ValueError(f"process_set must be a ProcessSet, got {type(self.process_set).__name__}")
        resolve_op(self.op, None)  # NotImplementedError for Adasum, ValueError for what is no op at all
        if self.op not in (Sum, Average):
            raise ValueError(f"gradients can be reduced with op=Average or op=Sum, not {ReduceOp(self.op).name}")
        if self.gradient_predivide_factor != 1.0 and self.op != Average:
            raise ValueError("gradient_predivide_factor needs op=Average")

    def _scaling(self) -> tuple[ReduceOp, float, float]:
        if self.gradient_predivide_factor == 1.0:
            return self.op, 1.0, 1.0
        # Divide part of the average before the sum (keeps 16-bit sums in range) and the rest after.
        factor = self.gradient_predivide_factor
        return Sum, 1.0 / factor, factor / int(self.process_set.size())

    def reduces_here(self) -> bool:
        """Whether this rank reduces with its set's peers. As in Horovod, a rank outside the set (or
        in a set of one) keeps its local gradients; a set that was never added is an error."""
        process_set = self.process_set
        if is_global(process_set):
            return True
        if process_set.process_set_id is None:
            raise ValueError(f"{process_set} has not been added: call add_process_set() on every rank before "
                             "building a distributed optimizer or tape on it")
        return bool(process_set.included()) and int(process_set.size()) > 1

    @not_converted
    def __call__(self, grads: Sequence[Any]) -> list[Any]:
        out: list[Any] = list(grads)
        if not self.reduces_here():
            return out
        base = op_name(self.kind, None) or self.kind
        dense_index: list[int] = []
        for i, grad in enumerate(grads):
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    out[i] = allreduce(grad, op=self.op, name=f"{base}.{i}", process_set=self.process_set)
                    continue
                grad = tf.convert_to_tensor(grad)
            out[i] = as_tensor(grad, f"{base}.{i}")
            dense_index.append(i)
        if not dense_index:
            return out
        op, prescale, postscale = self._scaling()
        compressed, contexts = zip(*[self.compression.compress(out[i]) for i in dense_index])
        names = [f"{base}.{i}" for i in dense_index]
        reduced = allreduce_overlapped(compressed, names, op, prescale, postscale, self.process_set,
                                       wait_clock=self.wait_clock)
        for i, tensor, ctx in zip(dense_index, reduced, contexts):
            out[i] = self.compression.decompress(tensor, ctx)
        return out


def scale_local(grad: Any, process_set: ProcessSet = global_process_set) -> Any:
    """A local (not reduced) gradient divided by the set's size, Horovod's ``scale_local_gradients``."""
    if grad is None:
        return None
    ranks = int(process_set.size())
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(ranks, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(ranks, grad.dtype)
