"""Gradient compression for allreduce: floating tensors travel in 16 bits and come back in their dtype."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class Compressor:
    """Interface: ``compress`` returns the tensor to send and a context; ``decompress`` undoes it."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        return tensor


class _CastCompressor(Compressor):
    """Casts floating tensors to ``wire_dtype``; integer tensors pass unchanged."""

    wire_dtype: tf.DType

    @classmethod
    def compress(cls, tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        if tensor.dtype.is_floating and tensor.dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        return tensor if ctx is None else tf.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Halves the bytes on the wire; values beyond float16's range (65504) overflow."""

    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Halves the bytes on the wire with float32's range but only 8 bits of mantissa."""

    wire_dtype = tf.bfloat16


class Compression:
    """The choices for ``compression=``, named as in Horovod (``bf16`` is an addition)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
