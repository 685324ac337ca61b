"""Rank: gradient compression for allreduce, framework-neutral: floating tensors travel in a narrower dtype and
come back in their own. ``collective.torch.compression`` and ``collective.tensorflow.compression`` supply only
how their tensors are cast."""

from __future__ import annotations

from typing import Any, Callable


class Compressor:
    """Interface: ``compress`` returns the tensor to send and a context; ``decompress`` undoes it."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor: Any) -> tuple[Any, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: Any, ctx: Any) -> Any:
        return tensor


class CastCompressor(Compressor):
    """Casts floating tensors to ``wire_dtype``; integer tensors pass unchanged. A framework subclass says what
    a floating dtype is and how its tensors are cast."""

    wire_dtype: Any

    @staticmethod
    def is_floating(dtype: Any) -> bool:
        raise NotImplementedError

    @staticmethod
    def cast(tensor: Any, dtype: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor: Any) -> tuple[Any, Any]:
        if cls.is_floating(tensor.dtype) and tensor.dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor: Any, ctx: Any) -> Any:
        return tensor if ctx is None else cls.cast(tensor, ctx)


class CompressionChoices:
    """The choices for ``compression=``, named as in Horovod (``bf16`` is an addition): a framework's
    ``Compression`` adds its own ``fp16`` and ``bf16`` compressors to ``none``."""

    none = NoneCompressor


def framework_compression(module: str, is_floating: Callable[[Any], bool], cast: Callable[[Any, Any], Any],
                          float16: Any, bfloat16: Any) -> type[CompressionChoices]:
    """A framework's ``Compression``: ``none``, ``fp16`` and ``bf16``, whose compressors say with
    ``is_floating(dtype)`` which tensors they narrow and cast them with ``cast(tensor, dtype)``. ``module``
    names where the framework's classes are importable from (pickling finds them there)."""
    rule = {"is_floating": staticmethod(is_floating), "cast": staticmethod(cast), "__module__": module}
    fp16 = type("FP16Compressor", (CastCompressor,), {
        **rule, "wire_dtype": float16,
        "__doc__": "Halves the bytes on the wire; values beyond float16's range (65504) overflow, so "
                   "``gradient_predivide_factor`` or loss scaling may be needed."})
    bf16 = type("BF16Compressor", (CastCompressor,), {
        **rule, "wire_dtype": bfloat16,
        "__doc__": "Halves the bytes on the wire with float32's range but only 8 bits of mantissa."})
    return type("Compression", (CompressionChoices,), {"fp16": fp16, "bf16": bf16, "__module__": module,
                                                       "__doc__": "Horovod's ``hvd.Compression``."})
