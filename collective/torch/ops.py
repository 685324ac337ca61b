"""Horovod's tensor collectives: the asynchronous functions, the in-place ones, and their routes.

This module reads Horovod's arguments (``average=``, names, a global ``root_rank``) and picks the route
that moves the tensors: ``engine_ops`` for host tensors, ``cuda_ops`` (NCCL on the current stream) for
CUDA tensors, or ``staged`` (through host memory onto the engine) for CUDA tensors that NCCL cannot
serve. Every route returns the same handle type (``collective.torch.routes.handles.Work``), so ``poll``,
``synchronize`` and the optimizer never ask which route ran.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any, Sequence

import torch

from collective.grouped import member_names
from collective.reduce_ops import Average, ReduceOp, resolve_op as _resolve_op
from collective.process_sets import ProcessSet, global_process_set, global_rank_of, runtime_for
from collective.torch.routes import cuda_ops, engine_ops, staged
from collective.torch.routes.handles import Work, chained_work, poll, synchronize
from collective.torch.tensors import check_tensor, contiguous_clone

__all__ = [
    "allgather_async", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall_async", "barrier",
    "broadcast_", "broadcast_async", "broadcast_async_", "grouped_allgather_async", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter_async", "join", "poll",
    "reducescatter_async", "resolve_op", "synchronize",
]


def resolve_op(op: ReduceOp | int | None, average: bool | None) -> ReduceOp:
    """``op`` as Horovod reads it: the deprecated ``average=`` still works, with a warning."""
    if average is not None:
        warnings.warn("the `average` argument is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
    return _resolve_op(op, average)


def _route(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> ModuleType:
    """The module that moves ``tensor``'s collective; each has the same functions and signatures."""
    if not cuda_ops.is_cuda(tensor):
        return engine_ops
    check_tensor(tensor, name)  # a refused tensor fails here, before the route check makes the job's CUDA context
    return cuda_ops if cuda_ops.takes_nccl(tensor, name, process_set) else staged


def _joined(handles: list[Work]) -> Work:
    """One handle over several (CUDA members, each on its own route); its result is their list."""
    return chained_work(handles, list)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing ``tensor`` across ranks (of ``process_set``) in place; ``synchronize`` returns ``tensor``."""
    reduce_op = resolve_op(op, average)
    return _route(tensor, name, process_set).allreduce_(tensor, name, reduce_op, prescale_factor, postscale_factor,
                                                        process_set)


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing ``tensor`` across ranks; ``synchronize`` returns a new tensor, ``tensor`` is untouched."""
    check_tensor(tensor, name)
    if cuda_ops.is_cuda(tensor) or not tensor.is_contiguous():
        return allreduce_async_(contiguous_clone(tensor), average, name, op, prescale_factor, postscale_factor,
                                process_set)
    return engine_ops.allreduce(tensor, name, resolve_op(op, average), prescale_factor, postscale_factor,
                                process_set)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` across ranks in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def submit_grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                              process_set: ProcessSet = global_process_set) -> Work:
    """One grouped allreduce with a name per tensor: the engine negotiates and fuses the group as a unit."""
    targets = list(tensors)
    if not targets or not cuda_ops.is_cuda(targets[0]):
        return engine_ops.grouped_allreduce_(targets, names, op, prescale_factor, postscale_factor, process_set)
    for tensor, member in zip(targets, names):  # every member is checked before the route check (collective)
        check_tensor(tensor, member)
    route = _route(targets[0], names[0], process_set)
    return route.grouped_allreduce_(targets, names, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: ReduceOp | None = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing every tensor in place, as one group; ``synchronize`` returns the list."""
    tensors = list(tensors)
    return submit_grouped_allreduce_(tensors, member_names(name, len(tensors)), resolve_op(op, average),
                                     prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: ReduceOp | None = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing every tensor as one group; ``synchronize`` returns a list of new tensors."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    for tensor, member in zip(tensors, names):
        check_tensor(tensor, member)
    return submit_grouped_allreduce_([contiguous_clone(t) for t in tensors], names, resolve_op(op, average),
                                     prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                       op: ReduceOp | None = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Reduces every tensor in place, as one group, and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set) -> Work:
    """Starts concatenating every rank's ``tensor`` along the first dimension (which may differ)."""
    return _route(tensor, name, process_set).allgather(tensor, name, process_set)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> Work:
    """Starts an allgather of every tensor, negotiated as one group; ``synchronize`` returns the list
    of gathered tensors."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    if any(cuda_ops.is_cuda(t) for t in tensors):
        return _joined([allgather_async(t, n, process_set) for t, n in zip(tensors, names)])
    return engine_ops.grouped_allgather(tensors, names, process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Work:
    """Starts overwriting ``tensor`` with ``root_rank``'s (a global rank, also with a ``process_set``, as
    in Horovod), in place; ``synchronize`` returns ``tensor``."""
    return _route(tensor, name, process_set).broadcast_(tensor, root_rank, name, process_set)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> Work:
    """Starts broadcasting ``root_rank``'s ``tensor``; ``synchronize`` returns a new tensor."""
    check_tensor(tensor, name)
    return broadcast_async_(contiguous_clone(tensor), root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s value, in place, and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> Work:
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i (even split when None).

    ``synchronize`` returns ``(output, received_splits)``, received_splits an int32 tensor, as Horovod's.
    """
    return _route(tensor, name, process_set).alltoall(tensor, splits, name, process_set)


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: ReduceOp = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set: ProcessSet = global_process_set) -> Work:
    """Starts reducing ``tensor`` across ranks; this rank gets its share of the first dimension
    (the first ``rows % size`` ranks get one row more)."""
    return _route(tensor, name, process_set).reducescatter(tensor, name, resolve_op(op, None), prescale_factor,
                                                           postscale_factor, process_set)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None, op: ReduceOp = Average,
                                prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                                process_set: ProcessSet = global_process_set) -> Work:
    """Starts a reducescatter of every tensor, negotiated as one group; ``synchronize`` returns the
    list of this rank's shares."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    reduce_op = resolve_op(op, None)
    if any(cuda_ops.is_cuda(t) for t in tensors):
        return _joined([reducescatter_async(t, n, reduce_op, prescale_factor, postscale_factor, process_set)
                        for t, n in zip(tensors, names)])
    return engine_ops.grouped_reducescatter(tensors, names, reduce_op, prescale_factor, postscale_factor, process_set)


def join(device: int = -1, process_set: ProcessSet = global_process_set) -> int:
    """Marks this rank as out of data; until every rank (of ``process_set``) has joined, it contributes
    zeros to the others' allreduces. Blocks until all have joined and returns the (global) rank that
    joined last. ``device`` is accepted for Horovod compatibility; everything here runs on the CPU."""
    return global_rank_of(runtime_for(process_set), engine_ops.join(process_set))


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank (of ``process_set``) has called barrier()."""
    engine_ops.barrier(process_set)
