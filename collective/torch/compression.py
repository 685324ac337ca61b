"""Gradient compression for allreduce: floating tensors travel in 16 bits and come back in their dtype."""

from __future__ import annotations

from typing import Any

import torch


class Compressor:
    """Interface: ``compress`` returns the tensor to send and a context; ``decompress`` undoes it."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor


class _CastCompressor(Compressor):
    """Casts floating tensors to ``wire_dtype``; integer tensors pass unchanged."""

    wire_dtype: torch.dtype

    @classmethod
    def compress(cls, tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Halves the bytes on the wire; gradients beyond float16's range (65504) overflow, so
    ``gradient_predivide_factor`` or loss scaling may be needed."""

    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Halves the bytes on the wire with float32's range but only 8 bits of mantissa."""

    wire_dtype = torch.bfloat16


class Compression:
    """The choices for ``compression=``, named as in Horovod (``bf16`` is an addition)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
