"""Collectives on tf.Tensors, eager or inside ``tf.function``, with Horovod's gradients.

Gradients (every rank must run backward through the same ops in the same order, as it does when all
ranks run the same model):
- allreduce: the same reduction (op, prescale, postscale) of the incoming gradients;
- allgather: the Sum over ranks of the output gradient, sliced to this rank's rows;
- broadcast: the Sum over ranks of the output gradient on the root, zeros elsewhere;
- alltoall: the gradient rows travel back the way they came;
- reducescatter (Sum/Average): the allgathered gradient, scaled as the forward was.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from collective.reduce_ops import Average, ReduceOp, Sum, resolve_op as _resolve_op
from collective.process_sets import ProcessSet, global_process_set, require_global
from collective.runtime import rank, size
from collective.tensorflow import engine_calls
from collective.tensorflow.bridge import (
    as_tensor,
    invalid_argument,
    label,
    leading_unknown,
    not_converted,
    op_name,
    run,
    sub_names,
)
from collective.tensorflow.compression import Compression, Compressor


def resolve_op(op: ReduceOp | int | None, average: bool | None) -> ReduceOp:
    """``op`` as Horovod reads it: the deprecated ``average=`` still works, with a warning."""
    if average is not None:
        warnings.warn("the `average` argument is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
    return _resolve_op(op, average)


def _grad_name(name: str | None) -> str | None:
    return f"{name}.grad" if name else None


# ---- allreduce -------------------------------------------------------------------------------------

def _allreduce_dense(tensors: Sequence[tf.Tensor], names: Sequence[str | None], op: ReduceOp, prescale: float,
                     postscale: float, grouped: bool) -> list[tf.Tensor]:
    names = list(names)

    def reduce(*arrays: np.ndarray) -> list[np.ndarray]:
        return engine_calls.allreduce(arrays, names, op, prescale, postscale, grouped)

    @tf.custom_gradient
    def forward(*xs: tf.Tensor) -> Any:
        ys = run(reduce, xs, [x.dtype for x in xs], [x.shape for x in xs])

        def backward(*dys: tf.Tensor | None) -> list[tf.Tensor]:
            # Every rank must send every member, even one whose output did not reach the loss here.
            filled = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            return _allreduce_dense(filled, [_grad_name(n) for n in names], op, prescale, postscale, grouped)
        return ys, backward

    outputs = forward(*tensors)
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _allreduce_sparse(slices: tf.IndexedSlices, name: str | None, op: ReduceOp, prescale: float,
                      postscale: float) -> tf.IndexedSlices:
    """Horovod's allreduce of sparse gradients: every rank's rows, gathered (duplicates add up when applied)."""
    if op not in (Sum, Average):
        raise invalid_argument(f"allreduce of IndexedSlices {label(name)} supports only Sum and Average, "
                                   f"not {op.name.capitalize()}")
    base = op_name("allreduce_sparse", name)
    values = allgather(slices.values, name=f"{base}.values" if base else None)
    indices = allgather(slices.indices, name=f"{base}.indices" if base else None)
    scale = prescale * postscale / (size() if op == Average else 1)
    if scale != 1:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@not_converted
def allreduce(tensor: Any, average: bool | None = None, device_dense: str = "", device_sparse: str = "",
              compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, name: str | None = None,
              ignore_name_scope: bool = False, process_set: ProcessSet = global_process_set
              ) -> tf.Tensor | tf.IndexedSlices:
    """Returns the reduction of ``tensor`` across ranks (default Average). An IndexedSlices is gathered
    instead (values and indices of every rank). ``device_*`` and ``ignore_name_scope`` are accepted for
    Horovod compatibility."""
    require_global(process_set, "collective.tensorflow.allreduce")
    reduce_op = resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_sparse(tensor, name, reduce_op, prescale_factor, postscale_factor)
    dense = as_tensor(tensor, name)
    compressed, ctx = compression.compress(dense)
    (reduced,) = _allreduce_dense([compressed], [op_name("allreduce", name)], reduce_op, prescale_factor,
                                  postscale_factor, grouped=False)
    return compression.decompress(reduced, ctx)


@not_converted
def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None, device_dense: str = "",
                      device_sparse: str = "", compression: type[Compressor] = Compression.none,
                      op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      name: str | None = None, process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Reduces the tensors as one group, negotiated and fused together (one group per dtype)."""
    require_global(process_set, "collective.tensorflow.grouped_allreduce")
    reduce_op = resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    base = op_name("grouped_allreduce", name)
    names = sub_names(base, len(tensors))
    dense = [as_tensor(t, n) for t, n in zip(tensors, names)]
    compressed, contexts = zip(*[compression.compress(t) for t in dense])
    reduced = _allreduce_dense(compressed, names, reduce_op, prescale_factor, postscale_factor, grouped=True)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]


# ---- allgather, broadcast ------------------------------------------------------------------------

@not_converted
def allgather(tensor: Any, name: str | None = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank order (first
    dimensions may differ)."""
    require_global(process_set, "collective.tensorflow.allgather")
    x = as_tensor(tensor, name)
    if x.shape.rank == 0:
        raise invalid_argument(f"allgather {label(name)} needs a tensor with at least one dimension")
    submitted = op_name("allgather", name)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        (y,) = run(lambda a: engine_calls.allgather([a], [submitted]), [x], [x.dtype], [leading_unknown(x.shape)])

        def backward(dy: tf.Tensor) -> tf.Tensor:
            grad_name = _grad_name(submitted)
            summed = allreduce(dy, op=Sum, name=grad_name)
            rows = tf.shape(x, out_type=tf.int64)[:1]
            all_rows = allgather(rows, name=f"{grad_name}.rows" if grad_name else None)
            offset = tf.reduce_sum(all_rows[:rank()])
            return summed[offset:offset + rows[0]]
        return y, backward

    return forward(x)


# Pure data movement may carry dtypes the engine cannot reduce, as bits of a same-width dtype.
_BIT_CARRIERS = {tf.uint32: tf.int32, tf.uint64: tf.int64, tf.int16: tf.float16, tf.uint16: tf.float16}


def _as_bits(tensor: tf.Tensor) -> tuple[tf.Tensor, tf.DType | None]:
    if tensor.dtype == tf.bool:
        return tf.cast(tensor, tf.uint8), tf.bool
    carrier = _BIT_CARRIERS.get(tensor.dtype)
    if carrier is None:
        return tensor, None
    return tf.bitcast(tensor, carrier), tensor.dtype


def _from_bits(tensor: tf.Tensor, original: tf.DType | None) -> tf.Tensor:
    if original is None:
        return tensor
    return tf.cast(tensor, tf.bool) if original == tf.bool else tf.bitcast(tensor, original)


@not_converted
def broadcast(tensor: Any, root_rank: int, name: str | None = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank. bool and 16/32/64-bit unsigned or int16 tensors
    travel as bits of a same-width dtype."""
    require_global(process_set, "collective.tensorflow.broadcast")
    raw = tf.convert_to_tensor(tensor)
    carried, original = _as_bits(raw)
    x = as_tensor(carried, name)
    root = _check_root(root_rank, name)
    submitted = op_name("broadcast", name)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        (y,) = run(lambda a: engine_calls.broadcast([a], [submitted], root), [x], [x.dtype], [x.shape])

        def backward(dy: tf.Tensor) -> tf.Tensor:
            summed = allreduce(dy, op=Sum, name=_grad_name(submitted))
            return summed if rank() == root else tf.zeros_like(summed)
        return y, backward

    return _from_bits(forward(x), original)


def _check_root(root_rank: int, name: str | None) -> int:
    root = int(root_rank)
    if not 0 <= root < size():
        raise invalid_argument(f"broadcast {label(name)}: root_rank {root} is outside [0, {size()})")
    return root


@not_converted
def broadcast_group(tensors: Sequence[tf.Tensor], root_rank: int, names: Sequence[str | None]) -> list[tf.Tensor]:
    """Broadcasts several tensors in one engine round trip (no gradient): for variables and state."""
    root = _check_root(root_rank, names[0] if names else None)
    carried, originals = zip(*[_as_bits(tf.convert_to_tensor(t)) for t in tensors]) if tensors else ((), ())
    dense = [as_tensor(t, n) for t, n in zip(carried, names)]
    names = list(names)
    outputs = run(lambda *arrays: engine_calls.broadcast(arrays, names, root), dense, [t.dtype for t in dense],
                  [t.shape for t in dense])
    return [_from_bits(t, o) for t, o in zip(outputs, originals)]


# ---- alltoall, reducescatter ---------------------------------------------------------------------

@not_converted
def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             ignore_name_scope: bool = False, process_set: ProcessSet = global_process_set
             ) -> tuple[tf.Tensor, tf.Tensor]:
    """Sends ``splits[i]`` rows of ``tensor`` to rank i (the first dimension split evenly when None).

    Returns ``(received rows, received_splits)``, the latter an int32 tensor of rows from each rank, as
    Horovod's TensorFlow alltoall does.
    """
    require_global(process_set, "collective.tensorflow.alltoall")
    x = as_tensor(tensor, name)
    if x.shape.rank == 0:
        raise invalid_argument(f"alltoall {label(name)} needs a tensor with at least one dimension")
    split_tensor = None if splits is None else tf.reshape(tf.cast(tf.convert_to_tensor(splits), tf.int64), [-1])
    submitted = op_name("alltoall", name)

    def exchange(array: np.ndarray, *split_array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return engine_calls.alltoall(array, split_array[0] if split_array else None, submitted)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        inputs = [x] if split_tensor is None else [x, split_tensor]
        y, received = run(exchange, inputs, [x.dtype, tf.int32], [leading_unknown(x.shape), [size()]])

        def backward(dy: tf.Tensor, _unused: Any = None) -> tf.Tensor:
            returned, _ = alltoall(dy, splits=received, name=_grad_name(submitted))
            return returned
        return (y, received), backward

    return forward(x)


@not_converted
def reducescatter(tensor: Any, device_dense: str = "", compression: type[Compressor] = Compression.none,
                  op: ReduceOp = Average, name: str | None = None, ignore_name_scope: bool = False,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's rows of the result (the first
    ``rows % size`` ranks get one row more)."""
    require_global(process_set, "collective.tensorflow.reducescatter")
    reduce_op = resolve_op(op, None)
    x = as_tensor(tensor, name)
    if x.shape.rank == 0:
        raise invalid_argument(f"reducescatter {label(name)} needs a tensor with at least one dimension")
    compressed, ctx = compression.compress(x)
    submitted = op_name("reducescatter", name)

    def scatter(array: np.ndarray) -> list[np.ndarray]:
        return engine_calls.reducescatter([array], [submitted], reduce_op, prescale_factor, postscale_factor)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        (y,) = run(scatter, [x], [x.dtype], [leading_unknown(x.shape)])

        def backward(dy: tf.Tensor) -> tf.Tensor:
            if reduce_op not in (Sum, Average):
                raise invalid_argument(f"reducescatter with op={reduce_op.name.capitalize()} has no gradient; use Sum or Average")
            gathered = allgather(dy, name=_grad_name(submitted))
            scale = prescale_factor * postscale_factor / (size() if reduce_op == Average else 1)
            return gathered * tf.cast(scale, gathered.dtype) if scale != 1 else gathered
        return y, backward

    return compression.decompress(forward(compressed), ctx)


# ---- synchronisation -----------------------------------------------------------------------------

@not_converted
def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank has called barrier() (inside a graph: once the op runs)."""
    require_global(process_set, "collective.tensorflow.barrier")

    def wait() -> list[np.ndarray]:
        engine_calls.barrier()
        return [np.zeros((), np.int32)]
    run(wait, [], [tf.int32], [[]])


@not_converted
def join(process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Marks this rank as out of data; until every rank has joined it contributes zeros to the
    others' allreduces. Returns the rank that joined last (an int32 scalar tensor)."""
    require_global(process_set, "collective.tensorflow.join")
    (last,) = run(lambda: [np.asarray(engine_calls.join(), dtype=np.int32)], [], [tf.int32], [[]])
    return last
