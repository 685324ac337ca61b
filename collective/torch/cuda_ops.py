"""Collectives on CUDA tensors: NCCL on the current CUDA stream, or host staging when ranks share a GPU
or the collective is on a process set.

The NCCL route enqueues work on ``torch.cuda.current_stream()`` and returns; the handle's ``poll``
asks a CUDA event and ``synchronize`` waits on it, as Horovod's GPU handles do. NCCL calls are
issued in the caller's order, so (like torch.distributed) every rank must make its CUDA collectives
in the same order; the DistributedOptimizer's hooks do. Grouped allreduces (the optimizer's) are
packed into one fusion buffer on the device per dtype and reduced with one NCCL call.

Host staging copies the tensors to host memory and runs the CPU collective there (the ``cpu_*``
callables, which take the process set), then copies the result back to the tensor's device. The NCCL
communicator spans the whole job, so a process set's collectives take that route: they run on the
set's engine, whose negotiation, fusion, join and stall checks are the set's own.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

import collective
from collective._native import CollectiveKind
from collective.errors import InvalidArgumentError
from collective.nccl import Route, route_tensor
from collective.process_sets import ProcessSet, is_global
from collective.reduce_ops import ReduceOp, scale_factors
from collective.torch.cuda_context import CudaContext, cuda_context
from collective.torch.handles import poll, register, synchronize
from collective.torch.tensors import check_tensor, checked_call, label


def is_cuda(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda"


def _context_for(tensor: torch.Tensor, name: str | None = None) -> CudaContext:
    context = cuda_context(tensor.device)
    decision = route_tensor(tensor.device.type, context.decision)
    if decision.route == Route.ERROR:
        raise InvalidArgumentError(f"tensor {label(name)} on {tensor.device}: {decision.reason}")
    return context


def _nccl_context(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> CudaContext | None:
    """The NCCL context for ``tensor``'s collective, or None where it is staged through host memory: on a
    process set (checked first, since making the job's context takes every rank of the job), or where
    ranks share a GPU."""
    if not is_global(process_set):
        return None
    context = _context_for(tensor, name)
    return None if context.decision.route == Route.HOST_STAGING else context


def _through_host(tensors: Sequence[torch.Tensor], start: Callable[[list[torch.Tensor]], int],
                  finish: Callable[[list[torch.Tensor], Any], Any]) -> int:
    """Copies ``tensors`` to host memory and starts their CPU collective (``start`` returns its handle);
    synchronizing the returned handle gives ``finish(stages, the CPU result)``."""
    stages = [t.detach().to("cpu", copy=True) for t in tensors]
    inner = start(stages)
    return register([], lambda _results: finish(stages, synchronize(inner)), (stages,), ready=lambda: poll(inner))


def _copied_back(targets: Sequence[torch.Tensor]) -> Callable[[list[torch.Tensor], Any], list[torch.Tensor]]:
    """The ``finish`` of an in-place staged collective: each stage is written back into its target."""
    def finish(stages: list[torch.Tensor], _result: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            for target, stage in zip(targets, stages):
                target.copy_(stage)
        return list(targets)
    return finish


def _moved_to(device: torch.device) -> Callable[[list[torch.Tensor], Any], Any]:
    """The ``finish`` of an out-of-place staged collective: its result (a tensor, or a tuple whose first
    item is one) moves to ``device``."""
    def finish(_stages: list[torch.Tensor], result: Any) -> Any:
        if isinstance(result, tuple):
            return (result[0].to(device), *result[1:])
        return result.to(device)
    return finish


def _stream(device: torch.device) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


def _on_stream(device: torch.device, finish: Callable[[], Any], keep_alive: tuple[Any, ...]) -> int:
    """A handle for work queued on the current stream: ready when a CUDA event recorded after it is."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))

    def done(_results: list[Any]) -> Any:
        event.synchronize()
        return finish()
    return register([], done, keep_alive, ready=event.query)


def _scale(buffer: torch.Tensor, factor: float) -> None:
    """buffer *= factor as the native kernels (and Horovod) do: integers truncate toward zero, then saturate."""
    if factor == 1.0:
        return
    if buffer.is_floating_point():
        buffer.mul_(factor)
        return
    info = torch.iinfo(buffer.dtype)
    buffer.copy_(torch.trunc(buffer.double() * factor).clamp_(info.min, info.max))


def _finish(buffer: torch.Tensor, op: ReduceOp, postscale: float) -> None:
    """Average and the postscale as the native finish_reduction does: an integer Average with a postscale
    folds 1/size into it and truncates once (Horovod's rule); without one it divides exactly."""
    if op == ReduceOp.AVERAGE:
        if buffer.is_floating_point() or postscale != 1.0:
            postscale /= collective.size()
        else:
            buffer.copy_(torch.div(buffer, collective.size(), rounding_mode="trunc"))
    _scale(buffer, postscale)


def _reduce(context: CudaContext, buffer: torch.Tensor, code: int, op: ReduceOp, prescale: float,
            postscale: float) -> None:
    """Allreduces a contiguous device buffer in place, with Average and the scale factors finished on the GPU."""
    _scale(buffer, prescale)
    context.comm.allreduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), code, op,
                           _stream(buffer.device))
    _finish(buffer, op, postscale)


def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                             prescale: float, postscale: float, process_set: ProcessSet,
                             cpu_grouped: Callable[..., int]) -> int:
    """In place; ``cpu_grouped`` is the engine's grouped allreduce, for host staging."""
    prescale, postscale = scale_factors(prescale, postscale)
    targets = list(tensors)
    codes = [check_tensor(t, n) for t, n in zip(targets, names)]
    context = _nccl_context(targets[0], names[0], process_set)
    if context is None:
        return _through_host(targets, lambda stages: cpu_grouped(stages, names, op, prescale, postscale,
                                                                 process_set=process_set),
                             _copied_back(targets))
    buffers = []
    with torch.no_grad():
        for code in dict.fromkeys(codes):
            members = [t for t, c in zip(targets, codes) if c == code]
            for member in members:
                if member.device != context.device:
                    raise InvalidArgumentError(f"grouped allreduce mixes {member.device} and {context.device}")
            if len(members) == 1 and members[0].is_contiguous():
                # A lone contiguous tensor reduces in place: no fusion buffer, no copies.
                _reduce(context, members[0].detach().view(-1), code, op, prescale, postscale)
                continue
            # The fusion buffer on the device: one NCCL call per dtype, whatever the number of tensors.
            fused = torch.cat([m.detach().reshape(-1) for m in members])
            _reduce(context, fused, code, op, prescale, postscale)
            offset = 0
            for member in members:
                member.copy_(fused[offset:offset + member.numel()].view_as(member))
                offset += member.numel()
            buffers.append(fused)
    return _on_stream(context.device, lambda: targets, (targets, buffers))


def allreduce_async_(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                     process_set: ProcessSet, cpu_grouped: Callable[..., int]) -> int:
    """In place; ``synchronize`` returns ``tensor``."""
    handle = grouped_allreduce_async_([tensor], [name], op, prescale, postscale, process_set, cpu_grouped)
    return register([], lambda _r: synchronize(handle)[0], (tensor,), ready=lambda: poll(handle))


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: ProcessSet,
                     cpu_broadcast: Callable[..., int]) -> int:
    """In place; ``root_rank`` is a global rank, also on a process set."""
    code = check_tensor(tensor, name)
    context = _nccl_context(tensor, name, process_set)
    if context is None:
        copy_back = _copied_back([tensor])
        return _through_host([tensor],
                             lambda stages: cpu_broadcast(stages[0], root_rank, name, process_set=process_set),
                             lambda stages, result: copy_back(stages, result)[0])
    checked_call(CollectiveKind.BROADCAST, tensor, name, root=int(root_rank))
    work = tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()
    context.comm.broadcast(work.data_ptr(), work.data_ptr(), work.numel(), code, int(root_rank), _stream(work.device))
    if work.data_ptr() != tensor.data_ptr():
        with torch.no_grad():
            tensor.copy_(work)
    return _on_stream(context.device, lambda: tensor, (tensor, work))


def _rows_everywhere(rows: int, name: str | None) -> list[int]:
    """Every rank's first dimension, through the job's (CPU) communicator."""
    gathered = collective.allgather(np.array([rows], np.int64), name=f"{name}.rows" if name else None)
    return [int(r) for r in gathered]


def allgather_async(tensor: torch.Tensor, name: str | None, process_set: ProcessSet,
                    cpu_allgather: Callable[..., int]) -> int:
    code = check_tensor(tensor, name)
    context = _nccl_context(tensor, name, process_set)
    if context is None:  # the engine checks the call against the set's ranks
        return _through_host([tensor], lambda stages: cpu_allgather(stages[0], name, process_set=process_set),
                             _moved_to(tensor.device))
    checked_call(CollectiveKind.ALLGATHER, tensor, name)
    work = tensor.detach().contiguous()
    rows = _rows_everywhere(work.shape[0], name)
    row_elements = work[0].numel() if work.shape[0] else int(np.prod(work.shape[1:], dtype=np.int64))
    out = torch.empty((sum(rows), *work.shape[1:]), dtype=work.dtype, device=work.device)
    stream = _stream(work.device)
    if len(set(rows)) == 1:
        context.comm.allgather(work.data_ptr(), out.data_ptr(), work.numel(), code, stream)
    else:
        counts = [r * row_elements for r in rows]
        offsets = [int(x) for x in np.cumsum([0, *counts[:-1]])]
        size = collective.size()
        context.comm.exchange(work.data_ptr(), [work.numel()] * size, [0] * size, out.data_ptr(), counts, offsets,
                              code, stream)
    return _on_stream(context.device, lambda: out, (work, out))


def alltoall_async(tensor: torch.Tensor, splits: Any, name: str | None, process_set: ProcessSet,
                   cpu_alltoall: Callable[..., int]) -> int:
    code = check_tensor(tensor, name)
    context = _nccl_context(tensor, name, process_set)
    if context is None:
        return _through_host([tensor], lambda stages: cpu_alltoall(stages[0], splits, name, process_set=process_set),
                             _moved_to(tensor.device))
    work = tensor.detach().contiguous()
    send_rows = checked_call(CollectiveKind.ALLTOALL, work, name, splits=splits)
    received = [int(r) for r in collective.alltoall(np.array(send_rows, np.int64),
                                                    name=f"{name}.splits" if name else None)]
    row_elements = int(np.prod(work.shape[1:], dtype=np.int64))
    send_counts = [s * row_elements for s in send_rows]
    recv_counts = [r * row_elements for r in received]
    out = torch.empty((sum(received), *work.shape[1:]), dtype=work.dtype, device=work.device)
    context.comm.exchange(work.data_ptr(), send_counts, [int(x) for x in np.cumsum([0, *send_counts[:-1]])],
                          out.data_ptr(), recv_counts, [int(x) for x in np.cumsum([0, *recv_counts[:-1]])],
                          code, _stream(work.device))
    received_splits = torch.tensor(received, dtype=torch.int32)
    return _on_stream(context.device, lambda: (out, received_splits), (work, out))


def reducescatter_async(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                        process_set: ProcessSet, cpu_reducescatter: Callable[..., int]) -> int:
    code = check_tensor(tensor, name)
    context = _nccl_context(tensor, name, process_set)
    if context is None:  # the engine checks the call against the set's ranks
        return _through_host([tensor], lambda stages: cpu_reducescatter(stages[0], name, op, prescale, postscale,
                                                                        process_set=process_set),
                             _moved_to(tensor.device))
    checked_call(CollectiveKind.REDUCESCATTER, tensor, name)
    size, rank = collective.size(), collective.rank()
    rows = tensor.shape[0]
    per, extra = divmod(rows, size)
    start = rank * per + min(rank, extra)
    mine = per + (1 if rank < extra else 0)
    work = tensor.detach().contiguous().clone()
    with torch.no_grad():
        if extra == 0:
            _scale(work, prescale)
            out = torch.empty((mine, *work.shape[1:]), dtype=work.dtype, device=work.device)
            context.comm.reducescatter(work.data_ptr(), out.data_ptr(), out.numel(), code, op,
                                       _stream(work.device))
            _finish(out, op, postscale)
        else:
            # NCCL's reduce-scatter needs equal shares; uneven rows reduce whole and keep this rank's.
            _reduce(context, work.view(-1), code, op, prescale, postscale)
            out = work[start:start + mine].clone()
    return _on_stream(context.device, lambda: out, (work, out))
