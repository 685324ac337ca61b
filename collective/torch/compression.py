"""Gradient compression for allreduce: floating tensors travel in 16 bits and come back in their dtype
(collective.api.compression, cast the torch way)."""

from __future__ import annotations

from typing import Any

import torch

from collective.api.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401  (Horovod's names here)


class _TorchCast(CastCompressor):
    @staticmethod
    def is_floating(dtype: torch.dtype) -> bool:
        return dtype.is_floating_point

    @staticmethod
    def cast(tensor: torch.Tensor, dtype: Any) -> torch.Tensor:
        return tensor.to(dtype)


class FP16Compressor(_TorchCast):
    """Halves the bytes on the wire; gradients beyond float16's range (65504) overflow, so
    ``gradient_predivide_factor`` or loss scaling may be needed."""

    wire_dtype = torch.float16


class BF16Compressor(_TorchCast):
    """Halves the bytes on the wire with float32's range but only 8 bits of mantissa."""

    wire_dtype = torch.bfloat16


class Compression:
    """The choices for ``compression=``, named as in Horovod (``bf16`` is an addition)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
