"""Collectives on numpy arrays, with Horovod's argument names.

Out-of-place functions return new arrays; the ``_`` variants work in place. Arrays are handed to
the native core through the buffer protocol, without a copy when they are already C-contiguous.

Every call takes one path: ``run`` on the runtime's collectives, the engine once it is started, else
the communicator. Both take the same call and return the same result, so a direct call is an engine
request submitted and waited on in one step, without the engine's thread and cycle. A ``process_set``
call runs the same way on that set's own runtime (collective/process_sets.py).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from collective._native import CollectiveKind
from collective.dtypes import as_buffer, dtype_code, split_counts
from collective.engine import wait_all
from collective.errors import InvalidArgumentError
from collective.grouped import Member, member_names, submit_group
from collective.reduce_ops import ReduceOp, Sum, resolve_op, scale_factors
from collective.process_sets import ProcessSet, global_process_set, runtime_for, set_rank_of

# Bound once: looking a member up on its enum class costs about 150 ns, a tenth of a small call.
_ALLREDUCE, _ALLGATHER, _BROADCAST = CollectiveKind.ALLREDUCE, CollectiveKind.ALLGATHER, CollectiveKind.BROADCAST


def _as_array(tensor: np.ndarray | Sequence, name: str) -> np.ndarray:
    array = tensor if type(tensor) is np.ndarray else np.asarray(tensor)
    if array.dtype == object:
        raise InvalidArgumentError(f"tensor {name!r} is not numeric")
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _in_place_target(tensor: np.ndarray, what: str) -> np.ndarray:
    """The contiguous array the native call writes into; the caller copies back if it is not `tensor`."""
    if not isinstance(tensor, np.ndarray):
        raise InvalidArgumentError(f"{what} works in place and needs a numpy array, got {type(tensor).__name__}")
    if not tensor.flags.writeable:
        raise InvalidArgumentError(f"{what} works in place but the array is read-only")
    return tensor if tensor.flags.c_contiguous else np.ascontiguousarray(tensor)


def _result(flat: np.ndarray, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    return flat.view(dtype).reshape(tuple(shape))


def allreduce_(tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: ReduceOp | None = None,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Reduces ``tensor`` across all ranks in place and returns it. ``op`` defaults to Average."""
    name = name or ""
    prescale_factor, postscale_factor = scale_factors(prescale_factor, postscale_factor)
    work = _in_place_target(tensor, "allreduce_")
    code = dtype_code(work.dtype, name)
    op_code = op if type(op) is ReduceOp and average is None else resolve_op(op, average)
    runtime_for(process_set).collectives.run(_ALLREDUCE, name, as_buffer(work, code), code, None, op_code, -1, prescale_factor,
                       postscale_factor)
    if work is not tensor:
        tensor[...] = work
    return tensor


def allreduce(tensor: np.ndarray, average: bool | None = None, name: str | None = None, op: ReduceOp | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Returns the reduction of ``tensor`` across all ranks. ``op`` defaults to Average."""
    out = np.array(tensor, copy=True, order="C")
    return allreduce_(out, average, name, op, prescale_factor, postscale_factor, process_set)


def allgather(tensor: np.ndarray, name: str | None = None, process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank order.

    First dimensions may differ between ranks; the other dimensions must agree.
    """
    name = name or ""
    array = _as_array(tensor, name)
    code = dtype_code(array.dtype, name)
    flat, out_shape = runtime_for(process_set).collectives.run(_ALLGATHER, name, as_buffer(array, code), code)
    return _result(flat, out_shape, array.dtype)


def broadcast_(tensor: np.ndarray, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Overwrites ``tensor`` on every rank with ``root_rank``'s value, in place. ``root_rank`` is a
    global rank, also with a ``process_set``, as in Horovod."""
    name = name or ""
    runtime = runtime_for(process_set)
    root = set_rank_of(runtime, root_rank, "root_rank")
    work = _in_place_target(tensor, "broadcast_")
    code = dtype_code(work.dtype, name)
    runtime.collectives.run(_BROADCAST, name, as_buffer(work, code), code, None, Sum, root)
    if work is not tensor:
        tensor[...] = work
    return tensor


def broadcast(tensor: np.ndarray, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Returns ``root_rank``'s ``tensor`` on every rank."""
    out = np.array(tensor, copy=True, order="C")
    return broadcast_(out, root_rank, name, process_set)


def alltoall(
    tensor: np.ndarray, splits: Sequence[int] | np.ndarray | None = None, name: str | None = None,
    process_set: ProcessSet = global_process_set
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Sends slice i of ``tensor``'s first dimension to rank i and gathers what every rank sent here.

    Without ``splits`` the first dimension is divided evenly and the output is returned. With
    ``splits`` (rows per destination rank), returns ``(output, received_splits)`` as Horovod does.
    """
    name = name or ""
    array = _as_array(tensor, name)
    code = dtype_code(array.dtype, name)
    split_list = [] if splits is None else split_counts(splits, repr(name))
    flat, out_shape, received = runtime_for(process_set).collectives.run(
        CollectiveKind.ALLTOALL, name, as_buffer(array, code), code, None, Sum, -1, 1.0, 1.0, split_list)
    output = _result(flat, out_shape, array.dtype)
    if splits is None:
        return output
    return output, np.asarray(received, dtype=np.int64)


def reducescatter(tensor: np.ndarray, op: ReduceOp | None = None, name: str | None = None,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Reduces ``tensor`` across ranks and returns this rank's share of the first dimension.

    Rank r gets rows [offset_r, offset_r + n_r), where the first ``rows % size`` ranks get one extra row.
    """
    name = name or ""
    prescale_factor, postscale_factor = scale_factors(prescale_factor, postscale_factor)
    array = _as_array(tensor, name)
    code = dtype_code(array.dtype, name)
    flat, out_shape = runtime_for(process_set).collectives.run(CollectiveKind.REDUCESCATTER, name, as_buffer(array, code), code, None,
                                         resolve_op(op, None), -1, prescale_factor, postscale_factor)
    return _result(flat, out_shape, array.dtype)


def _run_group(kind: CollectiveKind, tensors: Sequence[np.ndarray | Sequence], name: str | None,
               process_set: ProcessSet, op: ReduceOp = Sum, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0) -> list[np.ndarray]:
    prescale_factor, postscale_factor = scale_factors(prescale_factor, postscale_factor)
    names = member_names(name, len(tensors))
    arrays = [_as_array(t, n or "") for t, n in zip(tensors, names)]
    codes = [dtype_code(a.dtype, n or "") for a, n in zip(arrays, names)]
    runtime = runtime_for(process_set)
    engine = runtime.engine
    if engine is None:
        # Direct calls complete one at a time in the same order everywhere, so the members need no
        # negotiation as a unit: the group is only the engine's concern.
        results = [runtime.collectives.run(kind, n or "", as_buffer(a, c), c, None, op, -1, prescale_factor,
                                             postscale_factor) for a, n, c in zip(arrays, names, codes)]
    else:
        members = [Member(n, as_buffer(a, c), c) for a, n, c in zip(arrays, names, codes)]
        results = wait_all(engine, submit_group(engine, kind, members, op=op, prescale=prescale_factor,
                                                postscale=postscale_factor))
    return [_result(flat, shape, a.dtype) for (flat, shape), a in zip(results, arrays)]


def grouped_allgather(tensors: Sequence[np.ndarray | Sequence], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """Allgathers every array as one group (see ``allgather``); members are named ``name.0``, ``name.1``..."""
    return _run_group(CollectiveKind.ALLGATHER, tensors, name, process_set)


def grouped_reducescatter(tensors: Sequence[np.ndarray | Sequence], op: ReduceOp | None = None,
                          name: str | None = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0,
                          process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """Reducescatters every array as one group (see ``reducescatter``) and returns this rank's shares."""
    return _run_group(CollectiveKind.REDUCESCATTER, tensors, name, process_set, resolve_op(op, None),
                      prescale_factor, postscale_factor)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank (of ``process_set``) has called barrier()."""
    runtime_for(process_set).collectives.run(CollectiveKind.BARRIER, "", None)
