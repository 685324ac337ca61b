"""Gradient compression for allreduce: floating tensors travel in 16 bits and come back in their dtype
(collective.api.compression, cast the TensorFlow way)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from collective.api.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401  (Horovod's names here)


class _TensorFlowCast(CastCompressor):
    @staticmethod
    def is_floating(dtype: tf.DType) -> bool:
        return dtype.is_floating

    @staticmethod
    def cast(tensor: tf.Tensor, dtype: Any) -> tf.Tensor:
        return tf.cast(tensor, dtype)


class FP16Compressor(_TensorFlowCast):
    """Halves the bytes on the wire; values beyond float16's range (65504) overflow."""

    wire_dtype = tf.float16


class BF16Compressor(_TensorFlowCast):
    """Halves the bytes on the wire with float32's range but only 8 bits of mantissa."""

    wire_dtype = tf.bfloat16


class Compression:
    """The choices for ``compression=``, named as in Horovod (``bf16`` is an addition)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
