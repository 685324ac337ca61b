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
from collective.process_sets import (
    ProcessSet,
    global_process_set,
    global_rank_of,
    rank_number,
    runtime_for,
    set_rank_of,
)
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


def _engine(process_set: ProcessSet) -> Any:
    """The engine of ``process_set`` (the job's for the global set), started if it was not."""
    return start_engine(runtime_for(process_set))


def _member(name: str | None, tensor: torch.Tensor, code: int) -> Member:
    if tensor.device.type != "cpu":  # the engine reads host memory; CUDA tensors go through cuda_ops
        raise InvalidArgumentError(f"{name!r}: the engine cannot take a tensor on {tensor.device}")
    return Member(name, tensor.data_ptr(), code, list(tensor.shape))


def _submit(engine: Any, kind: int, name: str | None, tensor: torch.Tensor, code: int, **options: Any) -> int:
    member = _member(name, tensor, code)
    return engine.submit(kind, name, member.tensor, dtype=code, shape=member.shape, **options)


def _submit_group(engine: Any, kind: int, works: Sequence[torch.Tensor], names: Sequence[str | None],
                  codes: Sequence[int], **options: Any) -> list[tuple[int, int]]:
    members = [_member(n, w, c) for w, n, c in zip(works, names, codes)]
    return submit_group(engine, kind, members, **options)


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
                     result: Callable[[], Any], engine: Any) -> int:
    def finish(_results: list[Any]) -> Any:
        _write_back(targets, works)
        return result()
    return register(requests, finish, (targets, works), engine=engine)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing ``tensor`` across ranks (of ``process_set``) in place; ``synchronize`` returns ``tensor``."""
    reduce_op = resolve_op(op, average)
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.allreduce_async_(tensor, name, reduce_op, prescale_factor, postscale_factor, process_set,
                                         submit_grouped_allreduce_)
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLREDUCE, name, work, code, op=reduce_op, prescale=prescale_factor,
                      postscale=postscale_factor)
    return _in_place_handle([tensor], [work], [(request, code)], lambda: tensor, engine)


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing ``tensor`` across ranks; ``synchronize`` returns a new tensor, ``tensor`` is untouched."""
    code = check_tensor(tensor, name)
    if cuda_ops.is_cuda(tensor) or not tensor.is_contiguous():
        return allreduce_async_(contiguous_clone(tensor), average, name, op, prescale_factor, postscale_factor,
                                process_set)
    # Out of place: the engine reads ``tensor`` where it is and writes only the new one (no copy first).
    source = tensor.detach()
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLREDUCE, name, output, code, op=resolve_op(op, average),
                      prescale=prescale_factor, postscale=postscale_factor, source=source.data_ptr())
    return register([(request, code)], lambda _results: output, (source, output), engine=engine)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: ReduceOp | None = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` across ranks in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def submit_grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                              process_set: ProcessSet = global_process_set) -> int:
    """One grouped allreduce with a name per tensor: the engine negotiates and fuses the group as a unit."""
    targets = list(tensors)
    if targets and cuda_ops.is_cuda(targets[0]):
        return cuda_ops.grouped_allreduce_async_(targets, names, op, prescale_factor, postscale_factor, process_set,
                                                 submit_grouped_allreduce_)
    codes = [check_tensor(t, n) for t, n in zip(targets, names)]
    works = [_writable(t) for t in targets]
    engine = _engine(process_set)
    requests = _submit_group(engine, CollectiveKind.ALLREDUCE, works, names, codes, op=op, prescale=prescale_factor,
                             postscale=postscale_factor)
    return _in_place_handle(targets, works, requests, lambda: targets, engine)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: ReduceOp | None = None, prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing every tensor in place, as one group; ``synchronize`` returns the list."""
    tensors = list(tensors)
    return submit_grouped_allreduce_(tensors, member_names(name, len(tensors)), resolve_op(op, average),
                                     prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: ReduceOp | None = None, prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0, process_set: ProcessSet = global_process_set) -> int:
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


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set) -> int:
    """Starts concatenating every rank's ``tensor`` along the first dimension (which may differ)."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.allgather_async(tensor, name, process_set, allgather_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLGATHER, name, work, code)
    dtype = tensor.dtype
    return register([(request, code)], lambda results: from_flat(*results[0], dtype), (work,), engine=engine)


def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Starts an allgather of every tensor, negotiated as one group; ``synchronize`` returns the list
    of gathered tensors."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    if _any_cuda(tensors):
        return _joined([allgather_async(t, n, process_set) for t, n in zip(tensors, names)])
    codes = [check_tensor(t, n) for t, n in zip(tensors, names)]
    works = [contiguous_input(t) for t in tensors]
    engine = _engine(process_set)
    requests = _submit_group(engine, CollectiveKind.ALLGATHER, works, names, codes)
    dtypes = [t.dtype for t in tensors]
    return register(requests, lambda results: [from_flat(*r, d) for r, d in zip(results, dtypes)], tuple(works),
                    engine=engine)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Starts overwriting ``tensor`` with ``root_rank``'s (a global rank, also with a ``process_set``, as
    in Horovod), in place; ``synchronize`` returns ``tensor``."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.broadcast_async_(tensor, rank_number(root_rank, "root_rank"), name, process_set,
                                         broadcast_async_)
    code = check_tensor(tensor, name)
    work = _writable(tensor)
    runtime = runtime_for(process_set)
    root = set_rank_of(runtime, root_rank, "root_rank")
    engine = start_engine(runtime)
    request = _submit(engine, CollectiveKind.BROADCAST, name, work, code, root=root)
    return _in_place_handle([tensor], [work], [(request, code)], lambda: tensor, engine)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Starts broadcasting ``root_rank``'s ``tensor``; ``synchronize`` returns a new tensor."""
    check_tensor(tensor, name)
    return broadcast_async_(contiguous_clone(tensor), root_rank, name, process_set)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s value, in place, and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i (even split when None).

    ``synchronize`` returns ``(output, received_splits)``, received_splits an int32 tensor, as Horovod's.
    """
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.alltoall_async(tensor, splits, name, process_set, alltoall_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    rows = [] if splits is None else split_list(splits, name)  # the engine divides evenly, as its op's rule says
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.ALLTOALL, name, work, code, splits=rows)
    dtype = tensor.dtype

    def finish(results: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        flat, shape, received = results[0]
        return from_flat(flat, shape, dtype), torch.tensor(received, dtype=torch.int32)
    return register([(request, code)], finish, (work,), engine=engine)


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: ReduceOp = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set: ProcessSet = global_process_set) -> int:
    """Starts reducing ``tensor`` across ranks; this rank gets its share of the first dimension
    (the first ``rows % size`` ranks get one row more)."""
    if cuda_ops.is_cuda(tensor):
        return cuda_ops.reducescatter_async(tensor, name, resolve_op(op, None), prescale_factor, postscale_factor,
                                            process_set, reducescatter_async)
    code = check_tensor(tensor, name)
    work = contiguous_input(tensor)
    engine = _engine(process_set)
    request = _submit(engine, CollectiveKind.REDUCESCATTER, name, work, code, op=resolve_op(op, None),
                      prescale=prescale_factor, postscale=postscale_factor)
    dtype = tensor.dtype
    return register([(request, code)], lambda results: from_flat(*results[0], dtype), (work,), engine=engine)


def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None, op: ReduceOp = Average,
                                prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                                process_set: ProcessSet = global_process_set) -> int:
    """Starts a reducescatter of every tensor, negotiated as one group; ``synchronize`` returns the
    list of this rank's shares."""
    tensors = list(tensors)
    names = member_names(name, len(tensors))
    reduce_op = resolve_op(op, None)
    if _any_cuda(tensors):
        return _joined([reducescatter_async(t, n, reduce_op, prescale_factor, postscale_factor, process_set)
                        for t, n in zip(tensors, names)])
    codes = [check_tensor(t, n) for t, n in zip(tensors, names)]
    works = [contiguous_input(t) for t in tensors]
    engine = _engine(process_set)
    requests = _submit_group(engine, CollectiveKind.REDUCESCATTER, works, names, codes, op=reduce_op,
                             prescale=prescale_factor, postscale=postscale_factor)
    dtypes = [t.dtype for t in tensors]
    return register(requests, lambda results: [from_flat(*r, d) for r, d in zip(results, dtypes)], tuple(works),
                    engine=engine)


def join(device: int = -1, process_set: ProcessSet = global_process_set) -> int:
    """Marks this rank as out of data; until every rank (of ``process_set``) has joined, it contributes
    zeros to the others' allreduces. Blocks until all have joined and returns the (global) rank that
    joined last. ``device`` is accepted for Horovod compatibility; everything here runs on the CPU."""
    runtime = runtime_for(process_set)
    return global_rank_of(runtime, start_engine(runtime).join())


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Returns once every rank (of ``process_set``) has called barrier()."""
    engine = _engine(process_set)
    engine.wait(engine.submit(CollectiveKind.BARRIER, None, None))
