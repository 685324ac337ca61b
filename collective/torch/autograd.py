"""The out-of-place collectives as autograd functions, with the gradients Horovod gives them.

Backward passes run collectives too, so every rank must call backward through the same ops in the
same order (which it does when all ranks run the same model).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from collective.errors import InvalidArgumentError
from collective.reduce_ops import Average, ReduceOp, Sum
from collective.runtime import rank, size
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


class _Allreduce(torch.autograd.Function):
    """The gradient is the same reduction applied to the incoming gradients."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float,
                postscale: float) -> torch.Tensor:
        ctx.reduction = (op, prescale, postscale)
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale,
                                           postscale_factor=postscale))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, prescale, postscale = ctx.reduction
        return allreduce(grad, op=op, prescale_factor=prescale, postscale_factor=postscale), None, None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.reduction = (op, prescale, postscale)
        ctx.likes = [(t.shape, t.dtype) for t in tensors]
        return tuple(synchronize(grouped_allreduce_async(tensors, name=name, op=op, prescale_factor=prescale,
                                                         postscale_factor=postscale)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        op, prescale, postscale = ctx.reduction
        reduced = grouped_allreduce(_zeros_for_missing(grads, ctx.likes), op=op, prescale_factor=prescale, postscale_factor=postscale)
        return (None, None, None, None, *reduced)


def _zeros_for_missing(grads: Sequence[torch.Tensor | None], likes: Sequence[tuple[torch.Size, torch.dtype]]
                       ) -> list[torch.Tensor]:
    """Every rank must send every member of a group, even for outputs that did not reach the loss here."""
    return [torch.zeros(shape, dtype=dtype) if g is None else g for g, (shape, dtype) in zip(grads, likes)]


class _Allgather(torch.autograd.Function):
    """Each rank's gradient is its own rows of the averaged output gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None) -> torch.Tensor:
        ctx.rows = tensor.shape[0] if tensor.dim() else 0  # a 0-d tensor is rejected by the engine below
        return synchronize(allgather_async(tensor, name=name))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = allreduce(grad, op=Average)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64))
        offset = int(rows[:rank()].sum())
        return reduced.narrow(0, offset, ctx.rows), None


class _GroupedAllgather(torch.autograd.Function):
    """Each member's gradient as _Allgather's, with one grouped allreduce and one allgather of row counts."""

    @staticmethod
    def forward(ctx: Any, name: str | None, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.rows = [t.shape[0] if t.dim() else 0 for t in tensors]
        outputs = tuple(synchronize(grouped_allgather_async(tensors, name=name)))
        ctx.likes = [(o.shape, o.dtype) for o in outputs]
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        reduced = grouped_allreduce(_zeros_for_missing(grads, ctx.likes), op=Average)
        rows = allgather(torch.tensor([ctx.rows], dtype=torch.int64))  # (size, members)
        offsets = rows[:rank()].sum(0).tolist()
        return (None, *[r.narrow(0, int(offset), n) for r, offset, n in zip(reduced, offsets, ctx.rows)])


class _Broadcast(torch.autograd.Function):
    """Only the root's input reaches the output, so only the root gets the (averaged) gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None) -> torch.Tensor:
        ctx.root_rank = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name=name))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = allreduce(grad, op=Average)
        if rank() != ctx.root_rank:
            reduced = torch.zeros_like(reduced)
        return reduced, None, None


class _Alltoall(torch.autograd.Function):
    """The gradient travels back the way the rows came: an alltoall with the received splits."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None) -> Any:
        output, received = synchronize(alltoall_async(tensor, splits=splits, name=name))
        ctx.received = received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_unused: Any) -> tuple[Any, ...]:
        returned, _ = alltoall(grad, splits=ctx.received)
        return returned, None, None


class _Reducescatter(torch.autograd.Function):
    """Horovod's gradient, not the exact one: every rank's input gets all ranks' output gradients,
    multiplied by the number of ranks for Sum and left undivided for Average (the exact gradient of
    a Sum is the gathered gradient itself, of an Average that divided by size). Scripts ported from
    Horovod train with the learning rates they were tuned for."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: ReduceOp, prescale: float,
                postscale: float) -> torch.Tensor:
        ctx.reduction = (op, prescale, postscale)
        return synchronize(reducescatter_async(tensor, name=name, op=op, prescale_factor=prescale,
                                               postscale_factor=postscale))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        scale = _reducescatter_gradient_scale(*ctx.reduction)
        gathered = allgather(grad)
        return (gathered * scale if scale != 1 else gathered), None, None, None, None


class _GroupedReducescatter(torch.autograd.Function):
    """Each member's gradient as _Reducescatter's (Horovod's), with one grouped allgather."""

    @staticmethod
    def forward(ctx: Any, name: str | None, op: ReduceOp, prescale: float, postscale: float,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.reduction = (op, prescale, postscale)
        outputs = tuple(synchronize(grouped_reducescatter_async(tensors, name=name, op=op, prescale_factor=prescale,
                                                                postscale_factor=postscale)))
        ctx.likes = [(o.shape, o.dtype) for o in outputs]
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        scale = _reducescatter_gradient_scale(*ctx.reduction)
        gathered = grouped_allgather(_zeros_for_missing(grads, ctx.likes))
        return (None, None, None, None, *[g * scale if scale != 1 else g for g in gathered])


def _reducescatter_gradient_scale(op: ReduceOp, prescale: float, postscale: float) -> float:
    if op not in (Sum, Average):
        raise InvalidArgumentError(f"reducescatter with op={op.name} has no gradient; use Sum or Average")
    return prescale * postscale * (size() if op == Sum else 1)


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Returns the reduction of ``tensor`` across ranks (default Average); differentiable."""
    reduce_op = resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, reduce_op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors: Sequence[torch.Tensor], average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: ReduceOp | None = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reduces the tensors as one group (negotiated and fused together); differentiable."""
    reduce_op = resolve_op(op, average)
    compressed, contexts = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedAllreduce.apply(name, reduce_op, prescale_factor, postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]


def allgather(tensor: torch.Tensor, name: str | None = None) -> torch.Tensor:
    """Concatenates every rank's ``tensor`` along the first dimension, in rank order; differentiable."""
    return _Allgather.apply(tensor, name)


def grouped_allgather(tensors: Sequence[torch.Tensor], name: str | None = None) -> list[torch.Tensor]:
    """Allgathers every tensor, negotiated as one group, and returns the list; differentiable."""
    return list(_GroupedAllgather.apply(name, *tensors))


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None) -> torch.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank; differentiable."""
    return _Broadcast.apply(tensor, root_rank, name)


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None) -> Any:
    """Sends ``splits[i]`` rows to rank i. Returns the gathered rows, or ``(rows, received_splits)``
    when ``splits`` is given, as Horovod does; differentiable."""
    return _Alltoall.apply(tensor, splits, name)


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                  op: ReduceOp = Average, prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduces ``tensor`` across ranks and returns this rank's rows of the result; differentiable."""
    reduce_op = resolve_op(op, None)
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, reduce_op, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: ReduceOp = Average,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """Reducescatters every tensor, negotiated as one group, and returns this rank's shares; differentiable."""
    reduce_op = resolve_op(op, None)
    compressed, contexts = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedReducescatter.apply(name, reduce_op, prescale_factor, postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, contexts)]
