"""Tensor collectives on the background engine: the asynchronous functions and the in-place ones.

CPU tensors are handed to the engine by address (``data_ptr``), so contiguous inputs are never
copied. Out-of-place functions reduce into a fresh clone; in-place functions on a non-contiguous
tensor work on a contiguous copy and write it back when the handle is synchronized.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch

from collective._native import CollectiveKind
from collective.errors import InvalidArgumentError
from collective.grouped import Member, member_names, submit_group
from collective.reduce_ops import Average, ReduceOp, resolve_op as _resolve_op
from collective.runtime import start_engine
from collective.torch import cuda_ops
from collective.torch.handles import poll, register, synchronize
from collective.torch.tensors import (
    check_tensor,
    contiguous_clone,
    contiguous_input,
    from_flat,
    split_list,
)

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


def _member(name: str | None, tensor: torch.Tensor, code: int) -> Member:
    if tensor.device.type != "cpu":  # the engine reads host memory; CUDA tensors go through cuda_ops
        raise InvalidArgumentError(f"{name!r}: the engine cannot take a tensor on {tensor.device}")
    return Member(name, tensor.data_ptr(), code, list(tensor.shape))


def _submit(kind: int, name: str | None, tensor: torch.Tensor, code: int, **options: Any) -> int:
    member = _member(name, tensor, code)
    return start_engine().submit(kind, name, member.tensor, dtype=code, shape=member.shape, **options)


def _submit_group(kind: int, works: Sequence[torch.Tensor], names: Sequence[str | None], codes: Sequence[int],
                  **options: Any) -> list[tuple[int, int]]:
    members = [_member(n, w, c) for w, n, c in zip(works, names, codes)]
    return submit_group(start_engine(), kind, members, **options)


def _any_cuda(tensors: Sequence[torch.Tensor]) -> bool:
    return any(cuda_ops.is_cuda(t) for t in tensors)


def _joined(handles: list[int]) -> int:
    """One handle over several (CUDA members, each on its own route); ``synchronize`` returns their list."""
    return register([], lambda _results: [synchronize(h) for h in handles], (),
                    ready=lambda: all(poll(h) for h in handles))


def _writable(tensor: torch.Tensor) -> torch.Tensor:
    """The memory an in-place op may write: the tensor's own, or a contiguous copy to write back."""
    return tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()


def _write_back(targets: Sequence[torch.Tensor], works: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for target, work in zip(targets, works):
            if work.data_ptr() != target.data_ptr():  # a contiguous copy stood in for the target
                target.copy_(work)


def _in_place_handle(targets: list[torch.Tensor], works: list[torch.Tensor], requests: list[tuple[int, int]],
                     result: Callable[[], Any]) -> int:
    def finish(_results: list[Any]) -> Any:
        _write_back(targets, works)
        return result()
    return register(requests, finish, (targets, works))


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts reducing ``tensor`` across ranks in place; ``synchronize`` returns ``tensor``."""
    reduce_op = resolve_op(op, average)
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.allreduce_async_(tensor, name, reduce_op, prescale_factor, postscale_factor,
                                         submit_grouped_allreduce_)
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    request = _submit(CollectiveKind.ALLREDUCE, name, work, code, op=reduce_op, prescale=prescale_factor,
                      postscale=postscale_factor)
    return _in_place_handle([tensor], [work], [(request, code)], lambda: tensor)


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts reducing ``tensor`` across ranks; ``synchronize`` returns a new tensor, ``tensor`` is untouched."""
    check_tensor(tensor, name)
    return allreduce_async_(contiguous_clone(tensor), average, name, op, prescale_factor, postscale_factor)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` across ranks in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def submit_grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                              prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """One grouped allreduce with a name per tensor: the engine negotiates and fuses the group as a unit."""
    targets = list(tensors)
    if targets and cuda_ops.is_cuda(targets[0]):
        return cuda_ops.grouped_allreduce_async_(targets, names, op, prescale_factor, postscale_factor,
                                                 submit_grouped_allreduce_)
    codes = [check_tensor(t, n) for t, n in zip(targets, names)]
    works = [_writable(t) for t in targets]
    requests = _submit_group(CollectiveKind.ALLREDUCE, works, names, codes, op=op, prescale=prescale_factor,
                             postscale=postscale_factor)
    return _in_place_handle(targets, works, requests, lambda: targets)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: ReduceOp | None = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0) -> int:
    """Starts reducing every tensor in place, as one group; ``synchronize`` returns the list."""
    tensors = list(tensors)
    return submit_grouped_allreduce_(tensors, member_names(name, len(tensors)), resolve_op(op, average),
                                     prescale_factor, postscale_factor)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: ReduceOp | None = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0) -> int:
    """Starts reducing every tensor as one group; ``synchronize`` returns a list of new tensors."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    for tensor, member in zip(tensors, names):
        check_tensor(tensor, member)
    return submit_grouped_allreduce_([contiguous_clone(t) for t in tensors], names, resolve_op(op, average),
                                     prescale_factor, postscale_factor)


def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                       op: ReduceOp | None = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reduces every tensor in place, as one group, and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor))


def allgather_async(tensor: torch.Tensor, name: str | None = None) -> int:
    """Starts concatenating every rank's ``tensor`` along the first dimension (which may differ)."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.allgather_async(tensor, name, allgather_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    request = _submit(CollectiveKind.ALLGATHER, name, work, code)
    dtype = tensor.dtype
    return register([(request, code)], lambda results: from_flat(*results[0], dtype), (work,))


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None) -> int:
    """Starts an allgather of every tensor, negotiated as one group; ``synchronize`` returns the list
    of gathered tensors."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    if _any_cuda(tensors):
        return _joined([allgather_async(t, n) for t, n in zip(tensors, names)])
    codes = [check_tensor(t, n) for t, n in zip(tensors, names)]
    works = [contiguous_input(t) for t in tensors]
    requests = _submit_group(CollectiveKind.ALLGATHER, works, names, codes)
    dtypes = [t.dtype for t in tensors]
    return register(requests, lambda results: [from_flat(*r, d) for r, d in zip(results, dtypes)], tuple(works))


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None) -> int:
    """Starts overwriting ``tensor`` with ``root_rank``'s, in place; ``synchronize`` returns ``tensor``."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.broadcast_async_(tensor, int(root_rank), name, broadcast_async_)
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    request = _submit(CollectiveKind.BROADCAST, name, work, code, root=int(root_rank))
    return _in_place_handle([tensor], [work], [(request, code)], lambda: tensor)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None) -> int:
    """Starts broadcasting ``root_rank``'s ``tensor``; ``synchronize`` returns a new tensor."""
    check_tensor(tensor, name)
    return broadcast_async_(contiguous_clone(tensor), root_rank, name)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s value, in place, and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None) -> int:
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i (even split when None).

    ``synchronize`` returns ``(output, received_splits)``, received_splits an int32 tensor, as Horovod's.
    """
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.alltoall_async(tensor, splits, name, alltoall_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    rows = [] if splits is None else split_list(splits, name)  # the engine divides evenly, as its op's rule says
    request = _submit(CollectiveKind.ALLTOALL, name, work, code, splits=rows)
    dtype = tensor.dtype

    def finish(results: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        flat, shape, received = results[0]
        return from_flat(flat, shape, dtype), torch.tensor(received, dtype=torch.int32)
    return register([(request, code)], finish, (work,))


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: ReduceOp = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts reducing ``tensor`` across ranks; this rank gets its share of the first dimension
    (the first ``rows % size`` ranks get one row more)."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.reducescatter_async(tensor, name, resolve_op(op, None), prescale_factor, postscale_factor,
                                            reducescatter_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    request = _submit(CollectiveKind.REDUCESCATTER, name, work, code, op=resolve_op(op, None), prescale=prescale_factor,
                      postscale=postscale_factor)
    dtype = tensor.dtype
    return register([(request, code)], lambda results: from_flat(*results[0], dtype), (work,))


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None, op: ReduceOp = Average,
                                prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Starts a reducescatter of every tensor, negotiated as one group; ``synchronize`` returns the
    list of this rank's shares."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    reduce_op = resolve_op(op, None)
    if _any_cuda(tensors):
        return _joined([reducescatter_async(t, n, reduce_op, prescale_factor, postscale_factor)
                        for t, n in zip(tensors, names)])
    codes = [check_tensor(t, n) for t, n in zip(tensors, names)]
    works = [contiguous_input(t) for t in tensors]
    requests = _submit_group(CollectiveKind.REDUCESCATTER, works, names, codes, op=reduce_op,
                             prescale=prescale_factor, postscale=postscale_factor)
    dtypes = [t.dtype for t in tensors]
    return register(requests, lambda results: [from_flat(*r, d) for r, d in zip(results, dtypes)], tuple(works))


def join(device: int = -1) -> int:
    """Marks this rank as out of data; until every rank has joined, it contributes zeros to the
    others' allreduces. Blocks until all have joined and returns the rank that joined last.
    ``device`` is accepted for Horovod compatibility; everything here runs on the CPU."""
    return start_engine().join()


def barrier() -> None:
    """Returns once every rank has called barrier()."""
    engine = start_engine()
    engine.wait(engine.submit(CollectiveKind.BARRIER, None, None))
