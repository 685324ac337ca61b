"""The data movement of each collective over an mpi4py communicator, once all ranks agreed on the call.

Only buffer-based (uppercase) mpi4py calls are used: they move memory without pickling and release
the GIL while MPI works. Reductions finish (Average, postscale) with the native kernels, so results
round exactly as on the native ring.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from collective import _native
from collective._native import DType
from collective.mpi.buffers import from_float32, is_half, to_float32
from collective.mpi.calls import Call
from collective.reduce_ops import ReduceOp


@functools.lru_cache(maxsize=None)
def mpi_op(op: int) -> Any:
    from mpi4py import MPI

    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVERAGE: MPI.SUM, ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX,
            ReduceOp.PRODUCT: MPI.PROD}[ReduceOp(op)]


def _scale(array: np.ndarray, code: int, factor: float) -> None:
    if factor != 1.0 and array.size:
        _native.scale_array(array.ctypes.data, array.size, code, factor)


def _finish(array: np.ndarray, code: int, op: int, size: int, postscale: float) -> None:
    """Average's division and the postscale: the native ops' own finish, so both backends round alike."""
    _native.finish_reduction(array.ctypes.data, array.size, code, op, size, postscale)


def allreduce(comm: Any, data: np.ndarray, call: Call) -> None:
    """Reduces ``data`` (flat, storage dtype) in place across ``comm``."""
    from mpi4py import MPI

    if data.size == 0:
        return
    plain = plain_op(call)
    if plain is not None:
        comm.Allreduce(MPI.IN_PLACE, data, op=plain)
        return
    _scale(data, call.dtype, call.prescale)
    if is_half(call.dtype):
        wide = to_float32(data, call.dtype)
        comm.Allreduce(MPI.IN_PLACE, wide, op=mpi_op(call.op))
        from_float32(wide, call.dtype, data)
    elif _saturates(call):
        wide = data.astype(np.int32)
        comm.Allreduce(MPI.IN_PLACE, wide, op=MPI.SUM)
        data[...] = wide.astype(data.dtype)  # wraps around, as the native kernels do
    else:
        comm.Allreduce(MPI.IN_PLACE, data, op=mpi_op(call.op))
    _finish(data, call.dtype, call.op, comm.Get_size(), call.postscale)


def plain_op(call: Call) -> Any:
    """The MPI op when an allreduce of ``call`` is exactly one in-place ``Allreduce`` (no widening, no
    scaling, no Average to finish), so callers can issue it without the general path; else None."""
    return _plain_op(call.dtype, call.op, call.prescale, call.postscale)


@functools.lru_cache(maxsize=256)
def _plain_op(dtype: int, op: int, prescale: float, postscale: float) -> Any:
    if is_half(dtype) or _sum_saturates(dtype, op) or op == ReduceOp.AVERAGE:
        return None
    if prescale != 1.0 or postscale != 1.0:
        return None
    return mpi_op(op)


def _saturates(call: Call) -> bool:
    return _sum_saturates(call.dtype, call.op)


def _sum_saturates(dtype: int, op: int) -> bool:
    """Open MPI's vectorised 8- and 16-bit MPI_SUM saturates instead of wrapping (open-mpi/ompi#8045, "wontfix");
    such sums go as int32."""
    return dtype in _NARROW_INTEGERS and op in (ReduceOp.SUM, ReduceOp.AVERAGE)


_NARROW_INTEGERS = frozenset({DType.uint8, DType.int8, DType.int16, DType.uint16})


def allgather(comm: Any, data: np.ndarray, calls: Sequence[Call]) -> tuple[np.ndarray, list[int]]:
    """Every rank's rows in rank order; ``calls[r]`` says how many rank r sends."""
    from mpi4py import MPI

    item = data.itemsize
    counts = [c.count() * item for c in calls]
    out = np.empty(sum(counts), np.uint8)
    comm.Allgatherv([data.view(np.uint8), MPI.BYTE], [out, counts, _displacements(counts), MPI.BYTE])
    rows = sum(c.shape[0] for c in calls)
    return out, [rows, *calls[0].shape[1:]]


def broadcast(comm: Any, data: np.ndarray, root: int) -> None:
    from mpi4py import MPI

    if data.size:
        comm.Bcast([data.view(np.uint8), MPI.BYTE], root=root)


def alltoall(comm: Any, data: np.ndarray, calls: Sequence[Call], rank: int) -> tuple[np.ndarray, list[int], list[int]]:
    """Sends ``splits[d]`` rows to rank d; returns (received bytes, shape, rows received from each rank)."""
    from mpi4py import MPI

    row_bytes = calls[rank].row_elements() * data.itemsize
    send_counts = [s * row_bytes for s in calls[rank].splits]
    received = [c.splits[rank] for c in calls]
    recv_counts = [r * row_bytes for r in received]
    out = np.empty(sum(recv_counts), np.uint8)
    comm.Alltoallv([data.view(np.uint8), send_counts, _displacements(send_counts), MPI.BYTE],
                   [out, recv_counts, _displacements(recv_counts), MPI.BYTE])
    return out, [sum(received), *calls[rank].shape[1:]], received


def reducescatter(comm: Any, data: np.ndarray, call: Call) -> tuple[np.ndarray, list[int]]:
    """Reduces ``data`` (left untouched) and returns this rank's rows: the first ``rows % size`` ranks
    get one more."""
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    rows = call.shape[0]
    per, extra = divmod(rows, size)
    row_elements = call.row_elements()
    counts = [(per + (1 if r < extra else 0)) * row_elements for r in range(size)]
    work = data.copy()
    _scale(work, call.dtype, call.prescale)
    half = is_half(call.dtype)
    send = to_float32(work, call.dtype) if half else work.astype(np.int32) if _saturates(call) else work
    mine = np.empty(counts[rank], send.dtype)
    if rows * row_elements:
        comm.Reduce_scatter(send, mine, recvcounts=counts, op=MPI.SUM if _saturates(call) else mpi_op(call.op))
    if half:
        narrow = np.empty(counts[rank], data.dtype)
        from_float32(mine, call.dtype, narrow)
        mine = narrow
    elif mine.dtype != data.dtype:
        mine = mine.astype(data.dtype)
    _finish(mine, call.dtype, call.op, size, call.postscale)
    return mine.view(np.uint8), [per + (1 if rank < extra else 0), *call.shape[1:]]


def _displacements(counts: Sequence[int]) -> list[int]:
    return [int(x) for x in np.cumsum([0, *counts[:-1]])]
