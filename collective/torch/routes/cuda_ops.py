"""The NCCL route: collectives on CUDA tensors, enqueued on ``torch.cuda.current_stream()``.

Each function enqueues its work and returns an ``event_work``: ``poll`` asks a CUDA event recorded after
the work and ``synchronize`` waits on it, as Horovod's GPU handles do. NCCL calls are issued in the
caller's order, so (like torch.distributed) every rank must make its CUDA collectives in the same order;
the DistributedOptimizer's hooks do. Grouped allreduces (the optimizer's) are packed into one fusion
buffer on the device per dtype and reduced with one NCCL call. ``route`` says whether a tensor takes this
route or is staged through host memory (``collective.torch.routes.staged``): the NCCL communicator spans the
whole job, so a process set's collectives, and ranks that share a GPU, are staged.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

import collective
from collective._native import CollectiveKind
from collective.errors import InvalidArgumentError
from collective.nccl import Route, route_tensor
from collective.process_sets import ProcessSet, is_global, rank_number
from collective.reduce_ops import ReduceOp, scale_factors
from collective.torch.routes.cuda_context import CudaContext, cuda_context
from collective.torch.routes.handles import Work, event_work
from collective.torch.tensors import check_tensor, checked_call, label


def is_cuda(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda"


def _context_for(tensor: torch.Tensor, name: str | None = None) -> CudaContext:
    context = cuda_context(tensor.device)
    decision = route_tensor(tensor.device.type, context.decision)
    if decision.route == Route.ERROR:
        raise InvalidArgumentError(f"tensor {label(name)} on {tensor.device}: {decision.reason}")
    return context


def takes_nccl(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> bool:
    """Whether ``tensor``'s collective runs on NCCL rather than staged through host memory: not on a
    process set (checked first, since making the job's context takes every rank of the job), nor where
    ranks share a GPU."""
    return is_global(process_set) and _context_for(tensor, name).decision.route != Route.HOST_STAGING


def _stream(device: torch.device) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


def _on_stream(device: torch.device, result: Any, keep_alive: tuple[Any, ...]) -> Work:
    """A handle for work queued on the current stream: ready when a CUDA event recorded after it is."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event_work(event, lambda _done: result, keep_alive)


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


def _reduce_group(context: CudaContext, targets: list[torch.Tensor], codes: list[int], op: ReduceOp,
                  prescale: float, postscale: float) -> list[torch.Tensor]:
    """Allreduces ``targets`` in place, one NCCL call per dtype; returns the fusion buffers in use."""
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
    return buffers


def grouped_allreduce_(tensors: Sequence[torch.Tensor], names: Sequence[str | None], op: ReduceOp,
                       prescale: float, postscale: float, process_set: ProcessSet) -> Work:
    """In place; the result is the list of tensors."""
    prescale, postscale = scale_factors(prescale, postscale)
    targets = list(tensors)
    codes = [check_tensor(t, n) for t, n in zip(targets, names)]
    context = _context_for(targets[0], names[0])
    buffers = _reduce_group(context, targets, codes, op, prescale, postscale)
    return _on_stream(context.device, targets, (targets, buffers))


def allreduce_(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
               process_set: ProcessSet) -> Work:
    """In place; the result is ``tensor``."""
    prescale, postscale = scale_factors(prescale, postscale)
    code = check_tensor(tensor, name)
    context = _context_for(tensor, name)
    buffers = _reduce_group(context, [tensor], [code], op, prescale, postscale)
    return _on_stream(context.device, tensor, (tensor, buffers))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: ProcessSet) -> Work:
    """In place; ``root_rank`` is a global rank."""
    root_rank = rank_number(root_rank, "root_rank")
    code = check_tensor(tensor, name)
    context = _context_for(tensor, name)
    checked_call(CollectiveKind.BROADCAST, tensor, name, root=int(root_rank))
    work = tensor.detach() if tensor.is_contiguous() else tensor.detach().contiguous()
    context.comm.broadcast(work.data_ptr(), work.data_ptr(), work.numel(), code, int(root_rank), _stream(work.device))
    if work.data_ptr() != tensor.data_ptr():
        with torch.no_grad():
            tensor.copy_(work)
    return _on_stream(context.device, tensor, (tensor, work))


def _rows_everywhere(rows: int, name: str | None) -> list[int]:
    """Every rank's first dimension, through the job's (CPU) communicator."""
    gathered = collective.allgather(np.array([rows], np.int64), name=f"{name}.rows" if name else None)
    return [int(r) for r in gathered]


def allgather(tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> Work:
    code = check_tensor(tensor, name)
    context = _context_for(tensor, name)
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
    return _on_stream(context.device, out, (work, out))


def alltoall(tensor: torch.Tensor, splits: Any, name: str | None, process_set: ProcessSet) -> Work:
    code = check_tensor(tensor, name)
    context = _context_for(tensor, name)
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
    return _on_stream(context.device, (out, received_splits), (work, out))


def reducescatter(tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                  process_set: ProcessSet) -> Work:
    code = check_tensor(tensor, name)
    context = _context_for(tensor, name)
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
    return _on_stream(context.device, out, (work, out))
