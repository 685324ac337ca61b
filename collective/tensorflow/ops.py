"""Collectives on tf.Tensors, eager or inside ``tf.function``, with Horovod's gradients.

Gradients, Horovod's (every rank must run backward through the same ops in the same order, as it
does when all ranks run the same model):
- allreduce: the same reduction (op, prescale, postscale) of the incoming gradients;
- allgather: the Average over ranks of the output gradient, sliced to this rank's rows;
- broadcast: the Average over ranks of the output gradient on the root, zeros elsewhere;
- alltoall: the gradient rows travel back the way they came;
- reducescatter: the allgathered gradient, times size() for Sum (Horovod's rule, which ignores the
  scale factors: not the exact gradient of the forward).

With ``process_set=``, an op and its gradient run among the set's ranks on the set's own engine; ranks
given to an op (``root_rank``) stay global ranks, as in Horovod.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from collective.grouped import member_names
from collective.process_sets import ProcessSet, global_process_set, is_global, rank_number, runtime_for
from collective.reduce_ops import Average, ReduceOp, Sum, resolve_op as _resolve_op
from collective.runtime import rank
from collective.tensorflow.graph import engine_calls
from collective.tensorflow.graph.bridge import (
    as_tensor,
    distinct_in_graph,
    label,
    leading_unknown,
    not_converted,
    op_name,
    run,
)
from collective.tensorflow.compression import Compression, Compressor
from collective.errors import CollectiveError
from collective.tensorflow.errors import as_tf_error, invalid_argument, not_implemented


def resolve_op(op: ReduceOp | int | None, average: bool | None) -> ReduceOp:
    """``op`` as Horovod reads it: the deprecated ``average=`` still works, with a warning."""
    if average is not None:
        warnings.warn("the `average` argument is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
    try:
        return _resolve_op(op, average)
    except NotImplementedError as error:  # Adasum: past AutoGraph as it is, as Horovod's would be
        raise not_implemented(str(error)) from None


def _grad_name(name: str | None) -> str | None:
    return distinct_in_graph(f"{name}.grad") if name else None


def _check_member(process_set: ProcessSet) -> None:
    """Refuses, when the op is built, a set that does not hold this rank, naming the set. The global set
    needs no check, so ops on it can still be built before init() (a graph, the XLA refusal)."""
    if not is_global(process_set):
        try:
            runtime_for(process_set)
        except CollectiveError as error:  # not a member: the tf.errors class Horovod's op fails with
            raise as_tf_error(error) from error


def _set_rank(process_set: ProcessSet) -> int:
    """This rank's place in ``process_set`` (its rank for the global set)."""
    return runtime_for(process_set).topology.rank


def _set_size(process_set: ProcessSet) -> int:
    return runtime_for(process_set).topology.size


# ---- allreduce -------------------------------------------------------------------------------------

def _allreduce_dense(tensors: Sequence[tf.Tensor], names: Sequence[str | None], op: ReduceOp, prescale: float,
                     postscale: float, grouped: bool, process_set: ProcessSet) -> list[tf.Tensor]:
    names = list(names)

    def reduce(*arrays: np.ndarray) -> list[np.ndarray]:
        return engine_calls.allreduce(arrays, names, op, prescale, postscale, grouped, process_set)

    @tf.custom_gradient
    def forward(*xs: tf.Tensor) -> Any:
        ys = run(reduce, xs, [x.dtype for x in xs], [x.shape for x in xs])

        def backward(*dys: tf.Tensor | None) -> list[tf.Tensor]:
            # Every rank must send every member, even one whose output did not reach the loss here.
            filled = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            return _allreduce_dense(filled, [_grad_name(n) for n in names], op, prescale, postscale, grouped,
                                    process_set)
        return ys, backward

    outputs = forward(*tensors)
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _check_sparse(op: ReduceOp, prescale: float, postscale: float) -> None:
    """What Horovod's allreduce of IndexedSlices (two allgathers) cannot do raises NotImplementedError."""
    if op not in (Sum, Average):
        raise not_implemented(f"allreduce of tf.IndexedSlices supports only Sum and Average, not {op.name.capitalize()}")
    if prescale != 1.0 or postscale != 1.0:
        raise not_implemented("prescale_factor and postscale_factor are not supported with tf.IndexedSlices")


def _allreduce_sparse(slices: Sequence[tf.IndexedSlices], base: str | None, op: ReduceOp,
                      process_set: ProcessSet) -> list[tf.IndexedSlices]:
    """Horovod's allreduce of sparse gradients: every rank's rows, gathered (duplicates add up when
    applied); the values of all members in one grouped allgather, their indices in another."""
    values = grouped_allgather([s.values for s in slices], name=f"{base}.values" if base else None,
                               process_set=process_set)
    indices = grouped_allgather([s.indices for s in slices], name=f"{base}.indices" if base else None,
                                process_set=process_set)
    if op == Average:
        values = [v / tf.cast(_set_size(process_set), v.dtype) for v in values]
    return [tf.IndexedSlices(v, i, dense_shape=s.dense_shape) for v, i, s in zip(values, indices, slices)]


@not_converted
def allreduce(tensor: Any, average: bool | None = None, device_dense: str = "", device_sparse: str = "",
              compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, name: str | None = None,
              ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor | tf.IndexedSlices:
    """Returns the reduction of ``tensor`` across ranks (default Average). An IndexedSlices is gathered
    instead (values and indices of every rank; Sum or Average, no scale factors). ``device_*`` and
    ``ignore_name_scope`` are accepted for Horovod compatibility."""
    _check_member(process_set)
    reduce_op = resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(reduce_op, prescale_factor, postscale_factor)
        (reduced,) = _allreduce_sparse([tensor], op_name("allreduce_sparse", name), reduce_op, process_set)
        return reduced
    dense = as_tensor(tensor, name)
    compressed, ctx = compression.compress(dense)
    (reduced,) = _allreduce_dense([compressed], [op_name("allreduce", name)], reduce_op, prescale_factor,
                                  postscale_factor, grouped=False, process_set=process_set)
    return compression.decompress(reduced, ctx)


@not_converted
def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None, device_dense: str = "",
                      device_sparse: str = "", compression: type[Compressor] = Compression.none,
                      op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      name: str | None = None, ignore_name_scope: bool = False,
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor | tf.IndexedSlices]:
    """Reduces the tensors as one group, negotiated and fused together (one group per dtype).
    IndexedSlices members are gathered, as ``allreduce`` gathers one, in one grouped allgather."""
    _check_member(process_set)
    reduce_op = resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    base = op_name("grouped_allreduce", name)
    out: list[Any] = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(reduce_op, prescale_factor, postscale_factor)
        reduced_sparse = _allreduce_sparse([tensors[i] for i in sparse], f"{base}.sparse" if base else None, reduce_op,
                                           process_set)
        for i, reduced in zip(sparse, reduced_sparse):
            out[i] = reduced
    dense_index = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if dense_index:
        names = [f"{base}.{i}" if base else None for i in dense_index]
        dense = [as_tensor(tensors[i], n) for i, n in zip(dense_index, names)]
        compressed, contexts = zip(*[compression.compress(t) for t in dense])
        reduced = _allreduce_dense(compressed, names, reduce_op, prescale_factor, postscale_factor, grouped=True,
                                   process_set=process_set)
        for i, tensor, ctx in zip(dense_index, reduced, contexts):
            out[i] = compression.decompress(tensor, ctx)
    return out


# ---- allgather, broadcast ------------------------------------------------------------------------

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


def _allgather_dense(tensors: Sequence[tf.Tensor], names: Sequence[str | None],
                     process_set: ProcessSet) -> list[tf.Tensor]:
    names = list(names)
    for x, n in zip(tensors, names):
        if x.shape.rank == 0:
            raise invalid_argument(f"allgather {label(n)} needs a tensor with at least one dimension")

    def gather(*arrays: np.ndarray) -> list[np.ndarray]:
        return engine_calls.allgather(arrays, names, process_set)

    @tf.custom_gradient
    def forward(*xs: tf.Tensor) -> Any:
        ys = run(gather, xs, [x.dtype for x in xs], [leading_unknown(x.shape) for x in xs])

        def backward(*dys: tf.Tensor | None) -> list[tf.Tensor]:
            grad_names = [_grad_name(n) for n in names]
            filled = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            averaged = _allreduce_dense(filled, grad_names, Average, 1.0, 1.0, len(xs) > 1, process_set)
            # Every member's row count from every rank, in one allgather: row r is rank r's counts.
            rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs])[tf.newaxis]
            (all_rows,) = _allgather_dense([rows], [f"{grad_names[0]}.rows" if grad_names[0] else None],
                                           process_set)
            offsets = tf.reduce_sum(all_rows[:_set_rank(process_set)], axis=0)
            return [g[offsets[i]:offsets[i] + rows[0, i]] for i, g in enumerate(averaged)]
        return ys, backward

    outputs = forward(*tensors)
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _group(kind: str, tensors: Sequence[Any], name: str | None, process_set: ProcessSet
           ) -> tuple[list[Any], list[str | None]]:
    """A grouped call's tensors and member names, once this rank is checked to be in ``process_set``.
    An empty group names nothing: in a graph a name takes a number."""
    _check_member(process_set)
    tensors = list(tensors)
    return tensors, member_names(op_name(kind, name), len(tensors)) if tensors else []


@not_converted
def allgather(tensor: Any, name: str | None = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank order (first
    dimensions may differ). bool and 16/32/64-bit unsigned or int16 tensors travel as bits of a
    same-width dtype."""
    _check_member(process_set)
    carried, original = _as_bits(tf.convert_to_tensor(tensor))
    (gathered,) = _allgather_dense([as_tensor(carried, name)], [op_name("allgather", name)], process_set)
    return _from_bits(gathered, original)


@not_converted
def grouped_allgather(tensors: Sequence[Any], name: str | None = None,
                      ignore_name_scope: bool = False,
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Allgathers every tensor (as ``allgather``), negotiated together."""
    tensors, names = _group("grouped_allgather", tensors, name, process_set)
    if not tensors:
        return []
    carried, originals = zip(*[_as_bits(tf.convert_to_tensor(t)) for t in tensors])
    gathered = _allgather_dense([as_tensor(t, n) for t, n in zip(carried, names)], names, process_set)
    return [_from_bits(g, o) for g, o in zip(gathered, originals)]


@not_converted
def broadcast(tensor: Any, root_rank: int, name: str | None = None, ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank. bool and 16/32/64-bit unsigned or int16 tensors
    travel as bits of a same-width dtype."""
    raw = tf.convert_to_tensor(tensor)
    carried, original = _as_bits(raw)
    x = as_tensor(carried, name)
    root, set_root = check_root(root_rank, name, process_set)
    submitted = op_name("broadcast", name)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        (y,) = run(lambda a: engine_calls.broadcast([a], [submitted], set_root, process_set), [x], [x.dtype],
                   [x.shape])

        def backward(dy: tf.Tensor) -> tf.Tensor:
            averaged = allreduce(dy, op=Average, name=_grad_name(submitted), process_set=process_set)
            # Times 0, not zeros_like: a TF1 Session prunes what the fetched tensor does not depend on,
            # and the non-root ranks must still run the allreduce the root waits in.
            return averaged if rank() == root else averaged * 0
        return y, backward

    return _from_bits(forward(x), original)


def check_root(root_rank: int, name: str | None,
                process_set: ProcessSet = global_process_set) -> tuple[int, int]:
    """``root_rank`` (a global rank), checked against the ranks of ``process_set``, and its rank there."""
    try:
        root = rank_number(root_rank, "root_rank")
    except CollectiveError as error:
        raise invalid_argument(str(error)) from None
    runtime = runtime_for(process_set)
    members = runtime.members
    if members is None:
        if not 0 <= root < runtime.topology.size:
            raise invalid_argument(f"broadcast {label(name)}: root_rank {root} is outside "
                                   f"[0, {runtime.topology.size})")
        return root, root
    if root not in members:
        raise invalid_argument(f"broadcast {label(name)}: root_rank {root} is not in the process set (ranks "
                               f"{list(members)})")
    return root, members.index(root)


@not_converted
def broadcast_group(tensors: Sequence[tf.Tensor], root_rank: int, names: Sequence[str | None],
                    process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Broadcasts several tensors in one engine round trip (no gradient): for variables and state.
    ``root_rank`` is a global rank, as in ``broadcast``."""
    _check_member(process_set)
    _, set_root = check_root(root_rank, names[0] if names else None, process_set)
    carried, originals = zip(*[_as_bits(tf.convert_to_tensor(t)) for t in tensors]) if tensors else ((), ())
    dense = [as_tensor(t, n) for t, n in zip(carried, names)]
    names = list(names)
    outputs = run(lambda *arrays: engine_calls.broadcast(arrays, names, set_root, process_set), dense, [t.dtype for t in dense],
                  [t.shape for t in dense])
    return [_from_bits(t, o) for t, o in zip(outputs, originals)]


# ---- alltoall, reducescatter ---------------------------------------------------------------------

@not_converted
def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             ignore_name_scope: bool = False,
             process_set: ProcessSet = global_process_set) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
    """Sends ``splits[i]`` rows of ``tensor`` to rank i (the first dimension split evenly when None).

    Returns the received rows; with ``splits``, ``(received rows, received_splits)``, the latter an
    int32 tensor of the rows that came from each rank, as Horovod's TensorFlow alltoall does.
    """
    set_size = _set_size(process_set)
    carried, original = _as_bits(tf.convert_to_tensor(tensor))
    x = as_tensor(carried, name)
    if x.shape.rank == 0:
        raise invalid_argument(f"alltoall {label(name)} needs a tensor with at least one dimension")
    split_tensor = None if splits is None else _split_counts(splits, name)
    submitted = op_name("alltoall", name)

    def exchange(array: np.ndarray, *split_array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return engine_calls.alltoall(array, split_array[0] if split_array else None, submitted, process_set)

    @tf.custom_gradient
    def forward(x: tf.Tensor) -> Any:
        inputs = [x] if split_tensor is None else [x, split_tensor]
        y, received = run(exchange, inputs, [x.dtype, tf.int32], [leading_unknown(x.shape), [set_size]])

        def backward(dy: tf.Tensor, _unused: Any = None) -> tf.Tensor:
            returned, _ = alltoall(dy, splits=received, name=_grad_name(submitted), process_set=process_set)
            return returned
        return (y, received), backward

    output, received_splits = forward(x)
    output = _from_bits(output, original)
    return output if splits is None else (output, received_splits)


def _split_counts(splits: Any, name: str | None) -> tf.Tensor:
    """``splits`` as a flat int64 tensor; anything but integers is refused (Horovod's op takes int32)."""
    counts = tf.convert_to_tensor(splits)
    if not counts.dtype.is_integer:
        raise invalid_argument(f"alltoall {label(name)}: splits must be integers, got {counts.dtype.name}")
    return tf.reshape(tf.cast(counts, tf.int64), [-1])


def _reducescatter_dense(tensors: Sequence[tf.Tensor], names: Sequence[str | None], op: ReduceOp, prescale: float,
                         postscale: float, process_set: ProcessSet) -> list[tf.Tensor]:
    names = list(names)
    for x, n in zip(tensors, names):
        if x.shape.rank == 0:
            raise invalid_argument(f"reducescatter {label(n)} needs a tensor with at least one dimension")

    def scatter(*arrays: np.ndarray) -> list[np.ndarray]:
        return engine_calls.reducescatter(arrays, names, op, prescale, postscale, process_set)

    @tf.custom_gradient
    def forward(*xs: tf.Tensor) -> Any:
        ys = run(scatter, xs, [x.dtype for x in xs], [leading_unknown(x.shape) for x in xs])

        def backward(*dys: tf.Tensor | None) -> list[tf.Tensor]:
            if op not in (Sum, Average):
                raise invalid_argument(f"reducescatter with op={op.name.capitalize()} has no gradient; use Sum or Average")
            filled = [tf.zeros_like(y) if dy is None else dy for dy, y in zip(dys, ys)]
            if op == Sum:
                filled = [g * tf.cast(_set_size(process_set), g.dtype) for g in filled]
            return _allgather_dense(filled, [_grad_name(n) for n in names], process_set)
        return ys, backward

    outputs = forward(*tensors)
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _reducescatter_compressed(tensors: Sequence[Any], names: Sequence[str | None], compression: type[Compressor],
                              op: ReduceOp | int, prescale: float, postscale: float,
                              process_set: ProcessSet) -> list[tf.Tensor]:
    dense = [as_tensor(t, n) for t, n in zip(tensors, names)]
    compressed, contexts = zip(*[compression.compress(t) for t in dense])
    reduced = _reducescatter_dense(compressed, names, resolve_op(op, None), prescale, postscale, process_set)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]


@not_converted
def reducescatter(tensor: Any, device_dense: str = "", compression: type[Compressor] = Compression.none,
                  op: ReduceOp = Average, name: str | None = None, ignore_name_scope: bool = False,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's rows of the result (the first
    ``rows % size`` ranks get one row more)."""
    _check_member(process_set)
    (reduced,) = _reducescatter_compressed([tensor], [op_name("reducescatter", name)], compression, op,
                                           prescale_factor, postscale_factor, process_set)
    return reduced


@not_converted
def grouped_reducescatter(tensors: Sequence[Any], device_dense: str = "",
                          compression: type[Compressor] = Compression.none, op: ReduceOp = Average,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          name: str | None = None,
                          process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Reducescatters every tensor (as ``reducescatter``), negotiated together."""
    tensors, names = _group("grouped_reducescatter", tensors, name, process_set)
    if not tensors:
        return []
    return _reducescatter_compressed(tensors, names, compression, op, prescale_factor, postscale_factor, process_set)


# ---- synchronisation -----------------------------------------------------------------------------

@not_converted
def barrier(process_set: ProcessSet = global_process_set) -> tf.Operation | None:
    """Returns once every rank has called barrier() (inside a graph: once the op runs). In a TF1-style
    graph it returns the op for a ``Session`` to run; elsewhere None (a tf.function runs it in order)."""
    _check_member(process_set)

    def wait() -> list[np.ndarray]:
        engine_calls.barrier(process_set)
        return [np.zeros((), np.int32)]
    (done,) = run(wait, [], [tf.int32], [[]])
    return None if tf.executing_eagerly() or tf.inside_function() else done.op


@not_converted
def join(process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Marks this rank as out of data; until every rank has joined it contributes zeros to the
    others' allreduces. Returns the rank that joined last (an int32 scalar tensor)."""
    _check_member(process_set)
    (last,) = run(lambda: [np.asarray(engine_calls.join(process_set), dtype=np.int32)], [], [tf.int32], [[]])
    return last
