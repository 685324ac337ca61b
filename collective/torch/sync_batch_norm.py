"""``SyncBatchNorm``: batch normalisation over the batch of all ranks together.

In training, every rank normalises with the mean and variance of the combined batch, and the input
gradient accounts for every rank's samples, so N ranks with batch B behave like one process with
batch N*B. Weight and bias gradients stay local sums; the optimizer averages them like any other.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from collective.reduce_ops import Sum
from collective.runtime import size
from collective.torch.ops import allgather_async, allreduce_async, synchronize


def _channel_shape(x: torch.Tensor) -> list[int]:
    """Shape that broadcasts a per-channel vector against an (N, C, ...) input."""
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _reduced_dims(x: torch.Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float,
                momentum: float) -> torch.Tensor:
        # Statistics in at least float32, as torch does for half inputs.
        stat_dtype = torch.promote_types(x.dtype, torch.float32)
        xs = x.to(stat_dtype)
        channels, dims, shape = x.shape[1], _reduced_dims(x), _channel_shape(x)
        count = x.numel() // channels
        if count:
            local_mean = xs.mean(dims)
            local_m2 = ((xs - local_mean.view(shape)) ** 2).sum(dims)
        else:
            local_mean = local_m2 = torch.zeros(channels, dtype=stat_dtype)
        # Each rank's (count, mean, sum of squared deviations), merged with Chan's formula: exact
        # for uneven batches and free of the cancellation in sum(x^2) - n*mean^2.
        local = torch.cat([torch.tensor([float(count)], dtype=stat_dtype), local_mean, local_m2]).unsqueeze(0)
        stats = synchronize(allgather_async(local))
        counts, means, m2s = stats[:, :1], stats[:, 1:1 + channels], stats[:, 1 + channels:]
        total = float(counts.sum())
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got {int(total)} over all ranks")
        mean = (counts * means).sum(0) / total
        m2 = (m2s + counts * (means - mean) ** 2).sum(0)
        invstd = torch.rsqrt(m2 / total + eps)
        with torch.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_((m2 / (total - 1)).to(running_var.dtype), alpha=momentum)
        y = (xs - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.to(stat_dtype).view(shape)
        if bias is not None:
            y = y + bias.to(stat_dtype).view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total = total
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, mean, invstd = ctx.saved_tensors
        stat_dtype = mean.dtype
        channels, dims, shape = x.shape[1], _reduced_dims(x), _channel_shape(x)
        dy = grad.to(stat_dtype)
        x_hat = (x.to(stat_dtype) - mean.view(shape)) * invstd.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * x_hat).sum(dims)
        param_dtype = x.dtype if weight is None else weight.dtype
        grad_weight = sum_dy_xhat.to(param_dtype) if ctx.needs_input_grad[1] else None
        grad_bias = sum_dy.to(param_dtype) if ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            # The normalisation couples every sample of every rank, so the input gradient needs the
            # two per-channel sums over the combined batch.
            both = synchronize(allreduce_async(torch.cat([sum_dy, sum_dy_xhat]), op=Sum))
            mean_dy = (both[:channels] / ctx.total).view(shape)
            mean_dy_xhat = (both[channels:] / ctx.total).view(shape)
            scale = invstd.view(shape) if weight is None else invstd.view(shape) * weight.to(stat_dtype).view(shape)
            grad_input = ((dy - mean_dy - x_hat * mean_dy_xhat) * scale).to(x.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm1d/2d/3d`` that normalises over every rank's batch in training.

    Evaluation, and training on a single rank, use the ordinary batch norm.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        # Momentum and running-statistics handling exactly as torch's _BatchNorm.forward.
        average_factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            average_factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        running_mean = self.running_mean if track else None
        running_var = self.running_var if track else None
        if not use_batch_stats or size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias, use_batch_stats,
                                average_factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean, running_var, self.eps,
                                            average_factor)
