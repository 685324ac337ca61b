"""The out-of-place collectives as autograd functions, with the gradients Horovod gives them.

Backward passes run collectives too, so every rank must call backward through the same ops in the
same order (which it does when all ranks run the same model).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from collective.errors import InvalidArgumentError
from collective.reduce_ops import Average, ReduceOp, Sum
from collective.process_sets import ProcessSet, global_process_set, runtime_for
from collective.torch.compression import Compression, Compressor
from collective.torch.ops import (
    allgather_async,
    allreduce_async,
    alltoall_async,
    broadcast_async,
    grouped_allgather_async,
    grouped_allreduce_async,
    grouped_reducescatter_async,
    reducescatter_async,
    resolve_op,
    synchronize,
)


def _reduce_forward(ctx: Any, start: Callable[..., Any], tensors: Any, name: str | None, op: ReduceOp,
                    prescale: float, postscale: float, process_set: ProcessSet) -> Any:
    """A reduction's forward: ``start``'s result, with how it reduced kept for the backward."""
    ctx.reduction = (op, prescale, postscale)
    ctx.process_set = process_set
    return synchronize(start(tensors, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale,
                             process_set=process_set))


def _single_reduction(start: Callable[..., Any]) -> staticmethod:
    """The ``forward`` of a one-tensor reduction Function: ``start``'s result, as ``_reduce_forward``."""
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float,
                postscale: float, process_set: ProcessSet) -> torch.Tensor:
        return _reduce_forward(ctx, start, tensor, name, op, prescale, postscale, process_set)
    return staticmethod(forward)


class _Allreduce(torch.autograd.Function):
    """The gradient is the same reduction applied to the incoming gradients."""

    forward = _single_reduction(allreduce_async)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, prescale, postscale = ctx.reduction
        return (allreduce(grad, op=op, prescale_factor=prescale, postscale_factor=postscale,
                          process_set=ctx.process_set), None, None, None, None, None)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                process_set: ProcessSet, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.likes = [(t.shape, t.dtype) for t in tensors]
        return tuple(_reduce_forward(ctx, grouped_allreduce_async, tensors, name, op, prescale, postscale, process_set))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        op, prescale, postscale = ctx.reduction
        reduced = grouped_allreduce(_zeros_for_missing(grads, ctx.likes), op=op, prescale_factor=prescale,
                                    postscale_factor=postscale, process_set=ctx.process_set)
        return (None, None, None, None, None, *reduced)


def _zeros_for_missing(grads: Sequence[torch.Tensor | None], likes: Sequence[tuple[torch.Size, torch.dtype]]
                       ) -> list[torch.Tensor]:
    """Every rank must send every member of a group, even for outputs that did not reach the loss here."""
    return [torch.zeros(shape, dtype=dtype) if g is None else g for g, (shape, dtype) in zip(grads, likes)]


class _Allgather(torch.autograd.Function):
    """Each rank's gradient is its own rows of the averaged output gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, process_set: ProcessSet) -> torch.Tensor:
        ctx.rows = tensor.shape[0] if tensor.dim() else 0  # a 0-d tensor is rejected by the engine below
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set)
        offset = int(rows[:_rank_in(ctx.process_set)].sum())
        return reduced.narrow(0, offset, ctx.rows), None, None


class _GroupedAllgather(torch.autograd.Function):
    """Each member's gradient as _Allgather's, with one grouped allreduce and one allgather of row counts."""

    @staticmethod
    def forward(ctx: Any, name: str | None, process_set: ProcessSet, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.rows = [t.shape[0] if t.dim() else 0 for t in tensors]
        ctx.process_set = process_set
        outputs = tuple(synchronize(grouped_allgather_async(tensors, name=name, process_set=process_set)))
        ctx.likes = [(o.shape, o.dtype) for o in outputs]
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        reduced = grouped_allreduce(_zeros_for_missing(grads, ctx.likes), op=Average, process_set=ctx.process_set)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set)  # (size, members)
        offsets = rows[:_rank_in(ctx.process_set)].sum(0).tolist()
        return (None, None, *[r.narrow(0, int(offset), n) for r, offset, n in zip(reduced, offsets, ctx.rows)])


class _Broadcast(torch.autograd.Function):
    """Only the root's input reaches the output, so only the root gets the (averaged) gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        if runtime_for(None).topology.rank != ctx.root_rank:  # root_rank is a global rank
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


class _Alltoall(torch.autograd.Function):
    """The gradient travels back the way the rows came: an alltoall with the received splits."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None, process_set: ProcessSet) -> Any:
        output, received = synchronize(alltoall_async(tensor, splits=splits, name=name, process_set=process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_unused: Any) -> tuple[Any, ...]:
        returned, _ = alltoall(grad, splits=ctx.received, process_set=ctx.process_set)
        return returned, None, None, None


class _Reducescatter(torch.autograd.Function):
    """Horovod's gradient, not the exact one: every rank's input gets all ranks' output gradients,
    multiplied by the number of ranks for Sum and left undivided for Average (the exact gradient of
    a Sum is the gathered gradient itself, of an Average that divided by size). Scripts ported from
    Horovod train with the learning rates they were tuned for."""

    forward = _single_reduction(reducescatter_async)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        scale = _reducescatter_gradient_scale(*ctx.reduction, ctx.process_set)
        gathered = allgather(grad, process_set=ctx.process_set)
        return (gathered * scale if scale != 1 else gathered), None, None, None, None, None


class _GroupedReducescatter(torch.autograd.Function):
    """Each member's gradient as _Reducescatter's (Horovod's), with one grouped allgather."""

    @staticmethod
    def forward(ctx: Any, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                process_set: ProcessSet, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = tuple(_reduce_forward(ctx, grouped_reducescatter_async, tensors, name, op, prescale, postscale,
                                        process_set))
        ctx.likes = [(o.shape, o.dtype) for o in outputs]
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        scale = _reducescatter_gradient_scale(*ctx.reduction, ctx.process_set)
        gathered = grouped_allgather(_zeros_for_missing(grads, ctx.likes), process_set=ctx.process_set)
        return (None, None, None, None, None, *[g * scale if scale != 1 else g for g in gathered])


def _rank_in(process_set: ProcessSet) -> int:
    return runtime_for(process_set).topology.rank


def _reducescatter_gradient_scale(op: ReduceOp, prescale: float, postscale: float, process_set: ProcessSet) -> float:
    if op not in (Sum, Average):
        raise InvalidArgumentError(f"reducescatter with op={op.name} has no gradient; use Sum or Average")
    return prescale * postscale * (runtime_for(process_set).topology.size if op == Sum else 1)


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns the reduction of ``tensor`` across ranks (of ``process_set``; default Average); differentiable."""
    reduce_op = resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, reduce_op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Reduces the tensors as one group (negotiated and fused together); differentiable."""
    reduce_op = resolve_op(op, average)
    compressed, contexts = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedAllreduce.apply(name, reduce_op, prescale_factor, postscale_factor, process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: ProcessSet = global_process_set
              ) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank order; differentiable."""
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather(tensors: Sequence[torch.Tensor], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Allgathers every tensor, negotiated as one group, and returns the list; differentiable."""
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank (``root_rank`` is global, also with a
    ``process_set``); differentiable."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """Sends ``splits[i]`` rows to rank i. Returns the gathered rows, or ``(rows, received_splits)``
    when ``splits`` is given, as Horovod does; differentiable."""
    return _Alltoall.apply(tensor, splits, name, process_set)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                  op: ReduceOp = Average, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's rows of the result; differentiable."""
    reduce_op = resolve_op(op, None)
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, reduce_op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: ReduceOp = Average,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """Reducescatters every tensor, negotiated as one group, and returns this rank's shares; differentiable."""
    reduce_op = resolve_op(op, None)
    compressed, contexts = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedReducescatter.apply(name, reduce_op, prescale_factor, postscale_factor, process_set,
                                          *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]
