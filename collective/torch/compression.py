"""Gradient compression for allreduce: floating tensors travel in 16 bits and come back in their dtype
(collective.api.compression, cast the torch way)."""

from __future__ import annotations

import torch

# Compressor and NoneCompressor: Horovod's names, importable from here too.
from collective.api.compression import Compressor, NoneCompressor, framework_compression  # noqa: F401

Compression = framework_compression(__name__, lambda dtype: dtype.is_floating_point,
                                    lambda tensor, dtype: tensor.to(dtype), torch.float16, torch.bfloat16)
FP16Compressor, BF16Compressor = Compression.fp16, Compression.bf16
